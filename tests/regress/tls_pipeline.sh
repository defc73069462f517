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

# pipeline.py PORT TLS N ECHO: N pipelined GETs of /echo?i=K, nothing read
# for 2 s, then every answer parsed: prints "ok N" or what went wrong.
cat >"$T/pipeline.py" <<'PYEOF'
import json, socket, ssl, sys, threading, time
port, tls, n, echo = int(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4]
s = socket.create_connection(("127.0.0.1", port), timeout=30)
if tls:
    ctx = ssl.create_default_context(cafile=sys.argv[5])
    s = ctx.wrap_socket(s, server_hostname="localhost")
# Each answer echoes the 6000-byte X-Pad: about 6.4 KiB, 19 MB in all.
pad = b"a" * 6000
req = b"".join(b"GET /sbx/%s/echo?i=%d HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n"
               % (echo.encode(), i, pad) for i in range(n))
# The gateway stops reading while its answers wait: send from a thread.
threading.Thread(target=s.sendall, args=(req,), daemon=True).start()
time.sleep(2)
f = s.makefile("rb")
for i in range(n):
    line = f.readline()
    if not line.startswith(b"HTTP/1.1 200 "):
        print("answer %d: status line %r" % (i, line[:80]))
        sys.exit(0)
    length = None
    while True:
        h = f.readline()
        if h in (b"\r\n", b""):
            break
        k, _, v = h.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    body = json.loads(f.read(length))
    if body["path"] != "/echo?i=%d" % i:
        print("answer %d: for %s" % (i, body["path"]))
        sys.exit(0)
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
