#!/bin/sh
# Small responses to a TLS client are written at once, head and body as one
# record (proxy.c, proxy_write_small_tls).  A client that pipelines 3000
# requests (19 MB of answers) and reads nothing for 2 s fills the socket, so
# those writes meet a full socket and must be finished by libevent later,
# front first: every answer must then arrive whole and in order.  A plain client does the same
# as a control, and the gateway's memory stays bounded meanwhile.
. "$(dirname "$0")/lib.sh"

[ -f "$CERTS/ca.crt" ] || fail "no development certificates in $CERTS (make certs)"

GW=$(free_port)
GWS=$(free_port)
ECHO=$(free_port)
N=3000

# Under AddressSanitizer freed memory sits in a quarantine (256 MiB by
# default) that would read as growth; keep it small so RSS means something.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=1"
export ASAN_OPTIONS

spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" --log "$T/upstream.jsonl"
wait_port "$ECHO"

spawn_gateway "$GWS" <<EOF
workers: 1
listen:
  - address: 127.0.0.1:$GW
  - address: 127.0.0.1:$GWS
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $ECHO
EOF
wait_port "$GW"

# pipeline.py PORT TLS N ECHO [CA]: N pipelined GETs of /echo?i=K, nothing
# read for 2 s, then every answer parsed: prints "ok N" or what went wrong.
# One thread, non-blocking: an ssl.SSLSocket written from one thread and
# read from another is one OpenSSL object used from two threads at once,
# which OpenSSL does not allow.  The two-thread client this replaces saw
# the stream end early in about one TLS run in four, with the same gateway
# logging every answer as sent and no error (at 71d25fc and after), and
# five runs in eight through HAProxy 2.6 ended the same way; the plain
# run, the same code on a plain socket, never failed.
cat >"$T/pipeline.py" <<'PYEOF'
import json, select, socket, ssl, sys, time
port, tls, n, echo = int(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4]
s = socket.create_connection(("127.0.0.1", port), timeout=30)
if tls:
    ctx = ssl.create_default_context(cafile=sys.argv[5])
    s = ctx.wrap_socket(s, server_hostname="localhost")
s.setblocking(False)
pad = b"a" * 6000
req = b"".join(b"GET /sbx/%s/echo?i=%d HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n"
               % (echo.encode(), i, pad) for i in range(n))
AGAIN = (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError)
sent, buf, i = 0, bytearray(), 0
start = time.monotonic()


def parse():
    global buf, i
    while i < n:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(buf[:end]).split(b"\r\n")
        if not head[0].startswith(b"HTTP/1.1 200 "):
            print("answer %d: status line %r" % (i, head[0][:80]))
            sys.exit(0)
        length = None
        for h in head[1:]:
            k, _, v = h.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
        if length is None:
            print("answer %d: no Content-Length" % i)
            sys.exit(0)
        if len(buf) < end + 4 + length:
            return
        body = json.loads(bytes(buf[end + 4:end + 4 + length]))
        if body["path"] != "/echo?i=%d" % i:
            print("answer %d: for %s" % (i, body["path"]))
            sys.exit(0)
        del buf[:end + 4 + length]
        i += 1


while i < n:
    if time.monotonic() - start > 100:
        print("timed out after %d answers" % i)
        sys.exit(0)
    reading = time.monotonic() - start >= 2
    writing = sent < len(req)
    select.select([s] if reading else [], [s] if writing else [], [], 0.1)
    if writing:
        try:
            sent += s.send(req[sent:sent + 65536])
        except AGAIN:
            pass
    if reading:
        while True:
            try:
                d = s.recv(65536)
            except AGAIN:
                break
            if not d:
                print("answer %d: the connection closed" % i)
                sys.exit(0)
            buf += d
        parse()
print("ok %d" % n)
PYEOF

rss() { sed -n 's/^VmRSS:[^0-9]*\([0-9]*\) kB/\1/p' "/proc/$GW_PID/status"; }
base=$(rss)

out=$(timeout 120 $PY "$T/pipeline.py" "$GWS" 1 $N "$ECHO" "$CERTS/ca.crt" 2>&1)
assert_eq "TLS pipelined answers" "ok $N" "$out"
ok "$N pipelined answers over TLS after a full socket, whole and in order"

out=$(timeout 120 $PY "$T/pipeline.py" "$GW" 0 $N "$ECHO" 2>&1)
assert_eq "plain pipelined answers" "ok $N" "$out"
ok "$N pipelined answers over plain HTTP, whole and in order"

grow=$(($(rss) - base))
[ $grow -lt 16384 ] || fail "gateway RSS grew by $grow KiB for pipelined clients"
kill -0 "$GW_PID" 2>/dev/null || fail "the gateway died"
ok "gateway RSS grew by $grow KiB"
