#!/bin/sh
# Socket activation, as systemd does it: the listening sockets are made
# before the gateway runs and passed as LISTEN_FDS (from descriptor 3, with
# LISTEN_PID naming the gateway).  The gateway takes them by address for
# listen: and admin:, binds nothing itself for them, and answers a
# connection that queued on the socket before it started.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
ADM=$(free_port)
ECHO=$(free_port)

spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" --log "$T/upstream.jsonl"
wait_port "$ECHO"
cat >"$T/gateway.yaml" <<YAML
listen:
  - address: 127.0.0.1:$GW
admin:
  address: 127.0.0.1:$ADM
domains: [localhost]
workers: 1
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $ECHO
YAML

# The "service manager": bind both, wait for the go file, then exec the
# gateway in this same process (LISTEN_PID is its pid) with them as 3, 4.
spawn gateway $PY -c '
import os, socket, sys, time
gw, adm, go, akgw, conf = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
socks = []
for port in (gw, adm):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(128)
    socks.append(s)
print("bound", flush=True)
deadline = time.monotonic() + 20
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.02)
fds = [os.dup(s.fileno()) for s in socks]  # out of the way of 3, 4
for i, fd in enumerate(fds):
    os.dup2(fd, 3 + i)
    os.set_inheritable(3 + i, True)
os.environ["LISTEN_FDS"] = "2"
os.environ["LISTEN_PID"] = str(os.getpid())
os.execv(akgw, [akgw, "-c", conf])
' "$GW" "$ADM" "$T/go" "$AKGW" "$T/gateway.yaml"
GW_PID=$LAST_PID
wait_log "$T/gateway.log" '^bound'

# A request sent before the gateway runs: it waits in the socket's queue.
curl -sS --max-time 20 -o "$T/early.body" -w '%{http_code}' \
    "http://127.0.0.1:$GW/sbx/$ECHO/early" >"$T/early.code" 2>"$T/early.err" &
EARLY=$!
i=0
while ! ss -Htn state established "( dport = :$GW )" | grep -q . && [ $i -lt 100 ]; do
	sleep 0.05; i=$((i + 1))
done
touch "$T/go"
wait "$EARLY" || fail "the early request failed: $(cat "$T/early.err")"
assert_eq "request queued before the gateway started" 200 "$(cat "$T/early.code")"
grep -q '"path": "/early"' "$T/upstream.jsonl" || grep -q '"/early"' "$T/upstream.jsonl" ||
	fail "the early request did not reach the backend: $(cat "$T/upstream.jsonl")"
wait_log "$T/gateway.log" "listening on 127.0.0.1:$GW (inherited)"
grep -q "cannot listen" "$T/gateway.log" && fail "the gateway tried to bind: $(grep 'cannot listen' "$T/gateway.log")"
ok "LISTEN_FDS: the public socket is taken, and a request queued before the start is answered"

out=$(curl -sS --max-time 10 "http://127.0.0.1:$ADM/readyz")
assert_eq "admin API on the passed socket" '{"status":"ready"}' "$out"
code=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$GW/sbx/$ECHO/again")
assert_eq "a second request" 200 "$code"
[ -e "/proc/$GW_PID/fd/3" ] || fail "descriptor 3 is not open in the gateway"
ok "LISTEN_FDS: the admin socket is taken too"
