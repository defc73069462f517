#!/bin/sh
# Issue 18, section 2: a backend's chunked trailer fields reach an HTTP/1.1
# client with the last chunk (the decoder used to validate and discard
# them, so gRPC's grpc-status never arrived), byte for byte; the fields a
# trailer must never carry (content-length, Host, Transfer-Encoding) do
# not; the connection stays usable after them; an HTTP/1.0 client gets the
# body alone, close-delimited.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
UP=$(free_port)
spawn raw $PY "$TOP/tests/regress/raw_backend.py" --port "$UP" --log "$T/up.jsonl"
wait_port "$UP"
spawn_gateway "$GW" <<EOF2
listen:
  - address: 127.0.0.1:$GW
domains: [localhost]
log:
  level: info
sandboxes:
  - id: local
    address: 127.0.0.1
    ports:
      - port: $UP
EOF2

# Two answers on one keep-alive connection, small and over several reads:
# the body checked against the pattern, the trailer section byte for byte.
$PY - "$GW" "$UP" <<'PYEOF' || fail "trailers: see above"
import hashlib, socket, sys, time

gw, up = int(sys.argv[1]), int(sys.argv[2])
host = "%d-local.localhost" % up


def pattern(n):
    return bytes((i * 7 + 3) % 251 for i in range(n))


class Reader:
    def __init__(self, s):
        self.s, self.buf = s, b""
        self.end = time.monotonic() + 10

    def more(self):
        if time.monotonic() > self.end:
            sys.exit("timed out; have %r" % self.buf[-200:])
        d = self.s.recv(65536)
        if not d:
            sys.exit("closed early; have %r" % self.buf[-200:])
        self.buf += d

    def until(self, sep):
        while sep not in self.buf:
            self.more()
        i = self.buf.index(sep) + len(sep)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def take(self, n):
        while len(self.buf) < n:
            self.more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def trailer_section(r):
    # After "0\r\n": fields, then an empty line.
    out = b""
    while True:
        line = r.until(b"\r\n")
        out += line
        if line == b"\r\n":
            return out


s = socket.create_connection(("127.0.0.1", gw), timeout=10)
r = Reader(s)
for n in (11, 100000):
    s.sendall(b"GET /trailers?n=%d HTTP/1.1\r\nHost: %s\r\n\r\n"
              % (n, host.encode()))
    head = r.until(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200 "):
        sys.exit("status: %r" % head)
    low = head.lower()
    if b"transfer-encoding: chunked\r\n" not in low:
        sys.exit("not chunked to the client: %r" % head)
    if b"content-length" in low:
        sys.exit("a Content-Length with chunked: %r" % head)
    body = b""
    while True:
        size = int(r.until(b"\r\n")[:-2], 16)
        if size == 0:
            break
        body += r.take(size)
        if r.take(2) != b"\r\n":
            sys.exit("chunk data not followed by CRLF")
    tr = trailer_section(r)
    want = pattern(n)
    if body != want:
        sys.exit("body of %d bytes differs (got %d)" % (n, len(body)))
    exp = (b"grpc-status: 0\r\nx-checksum: sha256=" +
           hashlib.sha256(want).hexdigest().encode() + b"\r\n\r\n")
    if tr != exp:
        sys.exit("trailer section for n=%d: %r, expected %r" % (n, tr, exp))
    print("ok: n=%d body sha256 matches, trailers %r" % (n, tr))
s.close()

# HTTP/1.0: close-delimited, no trailer bytes in the body.
s = socket.create_connection(("127.0.0.1", gw), timeout=10)
s.sendall(b"GET /trailers?n=5000 HTTP/1.0\r\nHost: %s\r\n\r\n" % host.encode())
out = b""
end = time.monotonic() + 10
while time.monotonic() < end:
    d = s.recv(65536)
    if not d:
        break
    out += d
head, _, body = out.partition(b"\r\n\r\n")
if b"chunked" in head.lower() or body != pattern(5000):
    sys.exit("HTTP/1.0 answer: %r ... %r" % (head, body[-100:]))
print("ok: HTTP/1.0 gets the body alone")
PYEOF
ok "backend trailers reach the client; forbidden ones do not"
