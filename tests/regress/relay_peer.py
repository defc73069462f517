"""Both ends of an upgraded connection, for the relay's half-close tests.

  relay_peer.py server PORT
      an upstream on 127.0.0.1:PORT that answers any request with 101 and
      then, by the request's path:
        /up     reads to the end, then sends "after-eof:N" (N: the bytes
                it read) and closes
        /down   sends "bye", shuts its write side, reads to the end, logs
                what it read, and closes
        /stall  never reads again and never closes (a sandbox app that
                stopped reading); its receive buffer is small
      each event is a JSON line on stdout
  relay_peer.py client PORT PREFIX MODE [--tls CAFILE] [--bytes N]
      connects to the gateway on 127.0.0.1:PORT (TLS when --tls, for the
      name localhost), asks for PREFIX/MODE (PREFIX: /{sandbox}/{port}),
      and:
        up      sends "hello", ends its stream (a TCP FIN, under TLS too),
                reads to the end and prints what came after the 101
        down    reads to the end ("bye"), then sends "reply" and ends its
                stream, and waits for the gateway to close
        stall   sends N bytes, ends its stream and prints "sent N"
      prints "ok ..." on success; any failure exits 1
"""
import json
import socket
import ssl
import sys
import threading
import time

HEAD_END = b"\r\n\r\n"
DEADLINE = 20.0


def log(**kw):
    print(json.dumps(kw), flush=True)


def read_head(s):
    buf = b""
    while HEAD_END not in buf:
        b = s.recv(4096)
        if not b:
            return None, b""
        buf += b
    head, rest = buf.split(HEAD_END, 1)
    return head.decode("latin-1"), rest


def serve_one(s):
    head, rest = read_head(s)
    if head is None:
        s.close()
        return
    path = head.split(" ")[1]
    s.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
              b"Connection: Upgrade\r\n\r\n")
    log(event="upgraded", path=path)
    if path.endswith("/stall"):
        # Never read, never close: the gateway must give up on us.
        while True:
            time.sleep(3600)
    if path.endswith("/up"):
        got = rest
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
        log(event="eof", path=path, read=got.decode("latin-1"))
        s.sendall(b"after-eof:%d" % len(got))
        s.close()
        return
    if path.endswith("/down"):
        s.sendall(b"bye")
        s.shutdown(socket.SHUT_WR)
        got = rest
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
        log(event="eof", path=path, read=got.decode("latin-1"))
        s.close()
        return
    s.close()


def server(port):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Inherited by accepted sockets: a stalled reader holds little.
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    ls.bind(("127.0.0.1", port))
    ls.listen(64)
    log(event="ready")
    while True:
        s, _ = ls.accept()
        threading.Thread(target=serve_one, args=(s,), daemon=True).start()


class Conn:
    """A plain or TLS client over a socket, TLS through memory BIOs so the
    test decides when the TCP stream ends."""

    def __init__(self, port, cafile, host):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.tls = None
        if cafile:
            ctx = ssl.create_default_context(cafile=cafile)
            self.inb, self.outb = ssl.MemoryBIO(), ssl.MemoryBIO()
            self.tls = ctx.wrap_bio(self.inb, self.outb,
                                    server_hostname=host.split(":")[0])
            while True:
                try:
                    self.tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    self.flush()
                    b = self.sock.recv(65536)
                    if not b:
                        raise SystemExit("FAIL: EOF in the TLS handshake")
                    self.inb.write(b)
            self.flush()
        self.close_notify = False

    def flush(self):
        if self.tls is not None:
            b = self.outb.read()
            if b:
                self.sock.sendall(b)

    def send(self, data):
        if self.tls is None:
            self.sock.sendall(data)
            return
        self.tls.write(data)
        self.flush()

    def recv(self):
        """Bytes, or b"" at the end (a FIN, or close_notify on TLS)."""
        if self.tls is None:
            return self.sock.recv(65536)
        while True:
            try:
                b = self.tls.read(65536)
                if not b:
                    self.close_notify = True
                return b
            except ssl.SSLWantReadError:
                b = self.sock.recv(65536)
                if not b:
                    return b""
                self.inb.write(b)
            except ssl.SSLZeroReturnError:
                self.close_notify = True
                return b""

    def end(self):
        self.sock.shutdown(socket.SHUT_WR)


def read_to_end(c):
    got = b""
    while True:
        b = c.recv()
        if not b:
            return got
        got += b


def client(port, prefix, mode, cafile, nbytes):
    host = "localhost"
    c = Conn(port, cafile, host)
    c.send(("GET %s/%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
            % (prefix, mode, host)).encode())
    buf = b""
    while HEAD_END not in buf:
        b = c.recv()
        if not b:
            raise SystemExit("FAIL: no 101 head: %r" % buf)
        buf += b
    head, rest = buf.split(HEAD_END, 1)
    if not head.startswith(b"HTTP/1.1 101"):
        raise SystemExit("FAIL: not a 101: %r" % head)
    c.sock.settimeout(DEADLINE)
    if mode == "up":
        c.send(b"hello")
        c.end()
        got = rest + read_to_end(c)
        print("ok got %s" % got.decode("latin-1"))
    elif mode == "down":
        got = rest + read_to_end(c)
        c.send(b"reply")
        c.end()
        # The gateway closes once both directions have ended.
        while c.sock.recv(65536):
            pass
        print("ok got %s%s" % (got.decode("latin-1"),
                               " close_notify" if c.close_notify else ""))
    elif mode == "stall":
        c.send(b"x" * nbytes)
        c.end()
        print("ok sent %d" % nbytes)
        sys.stdout.flush()
        # Stay connected; the test decides when this ends.
        time.sleep(DEADLINE)


def main():
    a = sys.argv[1:]
    if a[0] == "server":
        server(int(a[1]))
        return
    cafile, nbytes = None, 0
    if "--tls" in a:
        cafile = a[a.index("--tls") + 1]
    if "--bytes" in a:
        nbytes = int(a[a.index("--bytes") + 1])
    client(int(a[1]), a[2], a[3], cafile, nbytes)


if __name__ == "__main__":
    main()
