"""Slowloris load for the memory tests: many connections, each holding a
request head it never finishes.

  slowloris.py PORT N
      opens N connections to 127.0.0.1:PORT, sends each the start of a
      request head, prints "ready N", then holds them until a line (or the
      end) on stdin, closes them all and prints "closed"
"""
import socket
import sys
import time

HEAD = (b"GET /sbx/1/ HTTP/1.1\r\nHost: localhost\r\nUser-Agent: slowloris\r\n"
        b"X-Pad: " + b"p" * 200)


def main():
    port, n = int(sys.argv[1]), int(sys.argv[2])
    socks = []
    deadline = time.monotonic() + 60
    for _ in range(n):
        if time.monotonic() > deadline:
            raise SystemExit("FAIL: connecting took over 60 s")
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(HEAD)
        socks.append(s)
    print("ready %d" % len(socks), flush=True)
    sys.stdin.readline()
    for s in socks:
        s.close()
    print("closed", flush=True)


if __name__ == "__main__":
    main()
