#!/bin/sh
# Issue 16, section 2: one GET to an upstream that answers after 4 s,
# followed at once by 80 KB of pipelined GETs.  The pipelined bytes fill
# the input to its high watermark while nothing can consume them, and the
# gateway used to run its read callback on every loop pass: a worker at
# 100 % CPU for the whole wait.  Every HTTP/1 loop now stops reading while
# it cannot consume: the gateway's CPU ticks over the wait stay near zero,
# and every pipelined request is answered, in order, once the first is.
# The same for the tunnel's Port B (terminate mode, listener at an
# address) through aktunnel to the same slow target.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
GWS=$(free_port)
UP=$(free_port)
LP=$(free_port)
spawn backend $PY "$TOP/tests/regress/backend.py" --port "$UP" --log "$T/up.jsonl"
wait_port "$UP"
spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
  - address: 127.0.0.1:$GWS
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key
domains: [localhost]
workers: 1
timeouts:
  idle: 30s
sandboxes:
  - id: local
    address: 127.0.0.1
    ports:
      - port: $UP
    tunnel:
      listen_port: $LP
EOF
spawn aktunnel "$AKTUN" --gateway "127.0.0.1:$GW" --sandbox local \
	--target "http://127.0.0.1:$UP"
wait_port "$LP"
wait_log "$T/aktunnel.log" 'connected\|negotiated\|ready'

# CPU ticks (user + system) the gateway has used so far.
ticks() { awk '{ print $14 + $15 }' "/proc/$GW_PID/stat"; }

# Send a slow GET and 80 KB of pipelined GETs to port $1 with Host $2,
# measure the gateway's ticks over 3 s of the wait, then read every answer;
# over TLS when $3 is "tls".
pipelined() {
	$PY - "$1" "$2" "$GW_PID" "${3:-plain}" "$CERTS/ca.crt" <<'PYEOF'
import socket, ssl, sys, time
port, host, pid = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def ticks():
    f = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])
s = socket.create_connection(("127.0.0.1", port), timeout=30)
if sys.argv[4] == "tls":
    ctx = ssl.create_default_context(cafile=sys.argv[5])
    ctx.check_hostname = False
    s = ctx.wrap_socket(s, server_hostname="localhost")
one = ("GET /echo HTTP/1.1\r\nHost: %s\r\nX-Pad: %s\r\n\r\n" % (host, "p" * 200)).encode()
n = 80 * 1024 // len(one) + 1
s.sendall(("GET /slow?ms=4000 HTTP/1.1\r\nHost: %s\r\n\r\n" % host).encode() + one * n)
time.sleep(0.5)
t0 = ticks()
time.sleep(3)
spent = ticks() - t0
data = b""
s.settimeout(30)
while data.count(b"HTTP/1.1 200") < n + 1:
    d = s.recv(1 << 16)
    if not d:
        break
    data += d
print(spent, n + 1, data.count(b"HTTP/1.1 200"))
PYEOF
}

set -- $(pipelined "$GW" "$UP-local.localhost")
echo "port URL: $1 ticks over 3 s of waiting; $3 of $2 answers"
[ "$1" -le 30 ] || fail "the gateway spent $1 CPU ticks in 3 s waiting on a slow upstream with pipelined input"
assert_eq "every pipelined request answered" "$2" "$3"
ok "port URL: no spin while pipelined input waits ($1 ticks)"

set -- $(pipelined "$GWS" "$UP-local.localhost" tls)
echo "port URL over TLS: $1 ticks over 3 s of waiting; $3 of $2 answers"
[ "$1" -le 30 ] || fail "the gateway spent $1 CPU ticks in 3 s waiting on a slow upstream with pipelined TLS input"
assert_eq "every pipelined TLS request answered" "$2" "$3"
ok "port URL over TLS: no spin while pipelined input waits ($1 ticks)"

set -- $(pipelined "$LP" "127.0.0.1:$LP")
echo "tunnel Port B: $1 ticks over 3 s of waiting; $3 of $2 answers"
[ "$1" -le 30 ] || fail "the gateway spent $1 CPU ticks in 3 s on Port B with pipelined input"
assert_eq "every pipelined tunnel request answered" "$2" "$3"
ok "tunnel Port B: no spin while pipelined input waits ($1 ticks)"
