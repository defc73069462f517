"""A raw HTTP/1.1 backend for the end-to-end tests: it writes exact bytes,
which http.server would tidy up, and records each request head it reads,
byte for byte, as one JSON line {"head": ...} in --log.

One request per connection; every answer closes the connection.

  /noreason      "HTTP/1.1 200" with no reason phrase, body "ok"
  /interim       103 Early Hints with a Link field (and hop-by-hop fields),
                 102 Processing, then 200 "ok"
  /flood         103 responses, as fast as the socket takes them, until
                 ?n= of them were written (default 1000000) or ?s= seconds
                 passed (default 20); then a 200
  /head          200 whose body is the request head as received
  /body          reads a chunked or Content-Length body, answers its length
  /fields        302 with Location ?loc=, Content-Location ?cloc= and
                 Set-Cookie ?cookie= (each when given), body "ok"
  /trailers      200, chunked: ?n= bytes (default 11) of a pattern in
                 chunks of at most 4096, then trailer fields grpc-status: 0
                 and x-checksum: sha256=<hex of the body>, and the
                 forbidden content-length: 99, Host: evil and
                 Transfer-Encoding: chunked
  /badaccept     101 accepting a WebSocket with a Sec-WebSocket-Accept
                 that matches no key of ours (RFC 6455's example)
  anything else: 200 "ok"

  raw_backend.py --port N --log FILE [--ready FILE]
"""
import argparse
import hashlib
import json
import socket
import sys
import threading
import time
import urllib.parse

LOCK = threading.Lock()


def read_head(conn):
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = conn.recv(65536)
        if not d:
            return None, b""
        buf += d
        if len(buf) > 1 << 20:
            return None, b""
    head, rest = buf.split(b"\r\n\r\n", 1)
    return head + b"\r\n\r\n", rest


def read_body(conn, head, rest):
    """The body of a request, by Content-Length or chunked."""
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        data, buf = b"", rest
        while True:
            while b"\r\n" not in buf:
                d = conn.recv(65536)
                if not d:
                    return data
                buf += d
            line, buf = buf.split(b"\r\n", 1)
            size = int(line.split(b";")[0], 16)
            while len(buf) < size + 2:
                d = conn.recv(65536)
                if not d:
                    return data
                buf += d
            data += buf[:size]
            buf = buf[size + 2:]
            if size == 0:
                return data
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":", 1)[1])
            data = rest
            while len(data) < n:
                d = conn.recv(65536)
                if not d:
                    break
                data += d
            return data
    return b""


def answer(body, status=b"200 OK", extra=b""):
    return (b"HTTP/1.1 " + status + b"\r\nContent-Length: " +
            str(len(body)).encode() + b"\r\nConnection: close\r\n" + extra +
            b"\r\n" + body)


def serve(conn, logpath):
    try:
        head, rest = read_head(conn)
        if head is None:
            return
        with LOCK, open(logpath, "a") as f:
            f.write(json.dumps({"head": head.decode("latin-1")}) + "\n")
        target = head.split(b" ", 2)[1].decode("latin-1")
        u = urllib.parse.urlsplit(target)
        q = urllib.parse.parse_qs(u.query)
        path = u.path
        if path == "/noreason":
            conn.sendall(b"HTTP/1.1 200\r\nContent-Length: 2\r\n"
                         b"Connection: close\r\n\r\nok")
        elif path == "/interim":
            conn.sendall(b"HTTP/1.1 103 Early Hints\r\n"
                         b"Link: </style.css>; rel=preload; as=style\r\n"
                         b"Connection: X-Hop\r\nX-Hop: 1\r\n"
                         b"Keep-Alive: timeout=5\r\n\r\n"
                         b"HTTP/1.1 102 Processing\r\n\r\n")
            conn.sendall(answer(b"ok"))
        elif path == "/flood":
            n = int(q.get("n", ["1000000"])[0])
            end = time.monotonic() + float(q.get("s", ["20"])[0])
            msg = (b"HTTP/1.1 103 Early Hints\r\n"
                   b"Link: </a.css>; rel=preload\r\n\r\n")
            conn.settimeout(1)
            sent = 0
            while sent < n and time.monotonic() < end:
                try:
                    conn.sendall(msg * 64)
                except socket.timeout:
                    continue
                except OSError:
                    return
                sent += 64
            conn.settimeout(5)
            conn.sendall(answer(b"done"))
        elif path == "/head":
            conn.sendall(answer(head, extra=b"Content-Type: text/plain\r\n"))
        elif path == "/fields":
            extra = b""
            for key, name in (("loc", b"Location"), ("cloc", b"Content-Location"),
                              ("cookie", b"Set-Cookie")):
                for v in q.get(key, []):
                    extra += name + b": " + v.encode("latin-1") + b"\r\n"
            conn.sendall(answer(b"ok", status=b"302 Found", extra=extra))
        elif path == "/trailers":
            n = int(q.get("n", ["11"])[0])
            body = bytes((i * 7 + 3) % 251 for i in range(n))
            out = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                   b"Trailer: grpc-status, x-checksum\r\n"
                   b"Connection: close\r\n\r\n")
            for i in range(0, n, 4096):
                piece = body[i:i + 4096]
                out += b"%x\r\n" % len(piece) + piece + b"\r\n"
            out += (b"0\r\ngrpc-status: 0\r\n"
                    b"x-checksum: sha256=" +
                    hashlib.sha256(body).hexdigest().encode() + b"\r\n"
                    b"content-length: 99\r\nHost: evil\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n")
            conn.sendall(out)
        elif path == "/body":
            data = read_body(conn, head, rest)
            conn.sendall(answer(str(len(data)).encode()))
        elif path == "/badaccept":
            conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\n"
                         b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                         b"Sec-WebSocket-Accept: "
                         b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
        else:
            conn.sendall(answer(b"ok"))
    except OSError:
        pass
    finally:
        try:
            conn.close()
        except OSError:
            pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log", required=True)
    args = ap.parse_args()
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", args.port))
    s.listen(128)
    open(args.log, "a").close()
    while True:
        conn, _ = s.accept()
        threading.Thread(target=serve, args=(conn, args.log),
                         daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
