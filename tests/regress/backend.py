"""A test backend for the end-to-end tests.

Serves HTTP/1.1 (HTTPS with --tls CERT KEY) with keep-alive on 127.0.0.1
and records every request it receives (method, path, headers) as one JSON
line in --log, so a test can check what reached the upstream and that
refused requests never did.

  /echo        JSON: method, path, headers, body length and sha256
  /chunked     a chunked response of --n parts ("part 0\n" ...)
  /eof         a response without framing, ended by closing
  /status/N    an empty response with status N
  /connection  JSON: the client port of this TCP connection
  /sink        like /echo's length and sha256, hashed while streaming, so a
               huge upload is never held in memory; ?wait= ms before the
               first byte is read (0)
  /sse         a text/event-stream of ?n= events (3) ?delay= s apart (1),
               chunked, or ended by closing with ?eof=1
  /cookies     two Set-Cookie fields
  /slow        the answer after ?ms= milliseconds (1000)
  /drip        the head and a first chunk at once, the end after ?ms= (1000)
  /switch      101 Switching Protocols whatever was asked, then close
  /hop         a response with hop-by-hop fields (Connection: X-Hop, X-Hop,
               Keep-Alive, Proxy-Authenticate) next to X-End: 1
  anything else: 200 "ok"
"""
import argparse
import hashlib
import json
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body are separate writes: without TCP_NODELAY the
    # body waits for the gateway's delayed ACK, 40 ms a response.
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):
        pass

    def record(self, body_len):
        with LOCK, open(self.server.logpath, "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path,
                                "headers": [[k, v] for k, v in self.headers.items()],
                                "body_len": body_len,
                                "peer_port": self.client_address[1]}) + "\n")

    def read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if te.lower() == "chunked":
            data = b""
            while True:
                line = self.rfile.readline()
                size = int(line.split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length", "0") or 0)
        return self.rfile.read(n) if n else b""

    def send_body(self, status, body, ctype="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def query(self, name, default):
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        return q.get(name, [default])[0]

    def sink(self):
        """Hash the body as it arrives; never hold more than 64 KiB."""
        time.sleep(int(self.query("wait", "0")) / 1000.0)
        h = hashlib.sha256()
        total = 0
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                while size > 0:
                    b = self.rfile.read(min(size, 65536))
                    if not b:
                        raise ConnectionError("body cut short")
                    h.update(b)
                    total += len(b)
                    size -= len(b)
                self.rfile.readline()
        else:
            left = int(self.headers.get("Content-Length", "0") or 0)
            while left > 0:
                b = self.rfile.read(min(left, 65536))
                if not b:
                    raise ConnectionError("body cut short")
                h.update(b)
                total += len(b)
                left -= len(b)
        self.record(total)
        out = {"body_len": total, "body_sha256": h.hexdigest()}
        self.send_body(200, json.dumps(out).encode())

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def handle_extra(self, path):
        """The endpoints added for the port-URL tests; False if none."""
        if path == "/sse":
            n = int(self.query("n", "3"))
            delay = float(self.query("delay", "1"))
            eof = self.query("eof", "0") == "1"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            if eof:
                self.send_header("Connection", "close")
                self.close_connection = True
            else:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(n):
                if i > 0:
                    time.sleep(delay)
                ev = ("id: %d\ndata: event %d\n\n" % (i, i)).encode()
                if eof:
                    self.wfile.write(ev)
                else:
                    self.chunk(ev)
                self.wfile.flush()
            if not eof:
                self.wfile.write(b"0\r\n\r\n")
        elif path == "/cookies":
            self.send_response(200)
            self.send_header("Set-Cookie", "a=1; Path=/")
            self.send_header("Set-Cookie", "b=2; Path=/; HttpOnly")
            self.send_header("Content-Length", "3")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(b"ok\n")
        elif path == "/slow":
            time.sleep(int(self.query("ms", "1000")) / 1000.0)
            self.send_body(200, b"slow\n", "text/plain")
        elif path == "/drip":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.chunk(b"first\n")
            self.wfile.flush()
            time.sleep(int(self.query("ms", "1000")) / 1000.0)
            self.chunk(b"last\n")
            self.wfile.write(b"0\r\n\r\n")
        elif path == "/hop":
            self.send_response(200)
            self.send_header("Connection", "X-Hop")
            self.send_header("X-Hop", "1")
            self.send_header("Keep-Alive", "timeout=5")
            self.send_header("Proxy-Authenticate", "Basic")
            self.send_header("X-End", "1")
            self.send_header("Content-Length", "3")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(b"ok\n")
        elif path == "/switch":
            self.send_response(101)
            self.send_header("Connection", "Upgrade")
            self.send_header("Upgrade", "h2c")
            self.end_headers()
            self.close_connection = True
        else:
            return False
        return True

    def handle_any(self):
        if self.path.split("?")[0] == "/sink":
            self.sink()
            return
        body = self.read_body()
        self.record(len(body))
        path = self.path.split("?")[0]
        if path == "/echo":
            out = {"method": self.command, "path": self.path,
                   "headers": [[k, v] for k, v in self.headers.items()],
                   "body_len": len(body),
                   "body_sha256": hashlib.sha256(body).hexdigest()}
            self.send_body(200, json.dumps(out).encode())
        elif path == "/chunked":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(self.server.nparts):
                part = ("part %d\n" % i).encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        elif path == "/eof":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"until close\n")
            self.close_connection = True
        elif path.startswith("/status/"):
            code = int(path[len("/status/"):])
            self.send_response(code)
            if code not in (204, 304):
                self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/connection":
            self.send_body(200, json.dumps({"port": self.client_address[1]}).encode())
        elif self.handle_extra(path):
            pass
        else:
            self.send_body(200, b"ok\n", "text/plain")

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = handle_any


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"),
                    help="serve HTTPS with this certificate and key")
    a = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    srv.logpath = a.log
    srv.nparts = a.n
    if a.tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls[0], a.tls[1])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    open(a.log, "w").close()
    print("ready", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
