#!/bin/sh
# Five binary upgrades in a row (SIGUSR2) under load: keep-alive HTTP
# clients through a port URL, tunnel requests from code in a sandbox
# namespace to Port B (the real aktunnel carrying them to a target on the
# host), and WebSockets (ws:// and wss://) open on the first process.  Each upgrade starts the
# new process with the listening sockets inherited (two workers: both
# SO_REUSEPORT sockets of the port, the admin socket, Port B in the
# namespace); the old one drains.  Nothing may fail or be lost: 0 failed
# HTTP requests, every tunnel request reaching the target exactly once and
# answered, the tunnel back on the new process within 2 s, and the
# WebSocket kept by the old process until its drain deadline, then closed
# with 1001.
. "$(dirname "$0")/lib.sh"

$PY -c 'import websockets' 2>/dev/null || fail "python3-websockets is needed ($PY)"
NS="akgw-upg-$$"
netns_add "$NS"

GW=$(free_port)
GWS=$(free_port)
ADM=$(free_port)
ECHO=$(free_port)
TARGET=$(free_port)
WSP=$(free_port)
LOAD="$TOP/tests/regress/upgrade_load.py"

spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" --log "$T/backend.jsonl"
spawn target $PY "$TOP/tests/regress/backend.py" --port "$TARGET" --log "$T/target.jsonl"
spawn ws $PY "$TOP/tests/regress/ws_echo.py" server "$WSP"
wait_port "$ECHO"
wait_port "$TARGET"
wait_port "$WSP"

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
  - address: 127.0.0.1:$GWS
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key
admin:
  address: 127.0.0.1:$ADM
domains: [localhost]
workers: 2
timeouts:
  drain: 3s
sandboxes:
  - id: web
    address: 127.0.0.1
    ports:
      - port: $ECHO
      - port: $WSP
  - id: dev
    netns: /run/netns/$NS
    tunnel:
      listen_port: 8766
      client_wait: 10s
EOF
wait_port "$ADM"
wait_port_ns 8766
spawn tun "$AKTUN" --gateway "http://127.0.0.1:$GW" --sandbox dev \
	--target "http://127.0.0.1:$TARGET" --ping-interval 1 --ping-timeout 2
wait_log "$T/tun.log" 'tunnel dev ready'

# metric NAME: its value on whichever process holds the admin socket.
metric() {
	curl -sS --max-time 5 "http://127.0.0.1:$ADM/metrics" 2>/dev/null |
		awk -v m="$1" '$1 == m { print $2 }'
}
i=0
while [ "$(metric akgw_tunnel_sessions)" != 1 ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
assert_eq "tunnel session before the upgrades" 1 "$(metric akgw_tunnel_sessions)"

# The load, until $T/stop exists (300 s at most in any case).
spawn load_http $PY "$LOAD" http "http://127.0.0.1:$GW/web/$ECHO/echo" \
	--threads 4 --check-id --stop "$T/stop" --out "$T/http.json"
LOAD_HTTP=$LAST_PID
spawn load_tun ip netns exec "$NS" $PY "$LOAD" http "http://127.0.0.1:8766/echo" \
	--threads 2 --check-id --pause 0.01 --stop "$T/stop" --out "$T/tun.json"
LOAD_TUN=$LAST_PID
spawn load_ws $PY "$LOAD" ws "ws://127.0.0.1:$GW/web/$WSP/" --stop "$T/stop" --out "$T/ws.json"
LOAD_WS=$LAST_PID
spawn load_wss $PY "$LOAD" ws "wss://localhost:$GWS/web/$WSP/" --cafile "$CERTS/ca.crt" \
	--stop "$T/stop" --out "$T/wss.json"
LOAD_WSS=$LAST_PID
wait_log "$T/load_ws.log" '^open'
wait_log "$T/load_wss.log" '^open'
# Traffic flows before the first upgrade.
i=0
while [ "$(grep -c '"path": "/echo' "$T/target.jsonl" 2>/dev/null || echo 0)" -lt 20 ] && [ $i -lt 200 ]; do
	sleep 0.05; i=$((i + 1))
done

for k in 1 2 3 4 5; do
	old=$GW_PID
	kill -USR2 "$old"
	i=0
	while [ "$(grep -c 'upgrade: started process' "$T/gateway.log")" -lt $k ] && [ $i -lt 200 ]; do
		sleep 0.05; i=$((i + 1))
	done
	new=$(sed -n 's/.*upgrade: started process \([0-9]*\).*/\1/p' "$T/gateway.log" | sed -n "${k}p")
	[ -n "$new" ] || fail "upgrade $k: no new process"
	PIDS="$PIDS $new"
	i=0
	while ! grep -q "upgrade: the new process $new serves" "$T/gateway.log" && [ $i -lt 200 ]; do
		sleep 0.05; i=$((i + 1))
	done
	grep -q "upgrade: the new process $new serves" "$T/gateway.log" ||
		fail "upgrade $k: process $new never served"
	served=$(date +%s%N)
	# The tunnel is back on the new process (which alone holds the admin
	# socket now) within 2 s of the hand-over.
	i=0
	while [ "$(metric akgw_tunnel_sessions)" != 1 ] && [ $i -lt 150 ]; do sleep 0.02; i=$((i + 1)); done
	back=$(( ($(date +%s%N) - served) / 1000000 ))
	[ "$(metric akgw_tunnel_sessions)" = 1 ] || fail "upgrade $k: no tunnel session on the new process ${back}ms after the hand-over"
	[ "$back" -le 2000 ] || fail "upgrade $k: the tunnel took ${back}ms to come back"
	i=0
	while kill -0 "$old" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
	kill -0 "$old" 2>/dev/null && fail "upgrade $k: the old process $old is still running 10 s after the hand-over"
	echo "upgrade $k: old $old -> new $new, the tunnel back ${back}ms after the hand-over"
	GW_PID=$new
	# The WebSockets on the first process ended with it.
	if [ $k = 1 ]; then
		[ -s "$T/ws.json" ] && [ -s "$T/wss.json" ] ||
			fail "a WebSocket of the first process is still open after it left"
	fi
done
touch "$T/stop"
for p in $LOAD_HTTP $LOAD_TUN $LOAD_WS $LOAD_WSS; do
	i=0
	while kill -0 "$p" 2>/dev/null && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
done

# The results.
$PY - "$T" "$ECHO" <<'PYEOF' || fail "the load saw failures (above)"
import collections, json, sys
t = sys.argv[1]
bad = False
for name in ("http", "tun"):
    r = json.load(open("%s/%s.json" % (t, name)))
    print("%s: %d ok, %d failed, %d retried on a closed keep-alive" %
          (name, r["ok"], r["failed"], r["retried"]))
    if r["failed"] or r["ok"] < 50:
        print("  errors:", r["errors"])
        bad = True
# Every tunnel request reached the target exactly once.
seen = collections.Counter()
for line in open("%s/target.jsonl" % t):
    path = json.loads(line).get("path", "")
    if "id=" in path:
        seen[path.split("id=", 1)[1]] += 1
tun = json.load(open("%s/tun.json" % t))
dups = [i for i, n in seen.items() if n > 1]
lost = [i for i in tun["ids"] if seen[i] == 0]
print("tunnel: %d ids sent, %d at the target, %d duplicated, %d lost" %
      (len(tun["ids"]), len(seen), len(dups), len(lost)))
if dups or lost:
    print("  duplicated:", dups[:5], "lost:", lost[:5])
    bad = True
for name, want in (("ws", (1001, 1006)), ("wss", (1001,))):
    ws = json.load(open("%s/%s.json" % (t, name)))
    print("%s: %d echoes, %d failed, closed %s" %
          (name, ws["ok"], ws["failed"], ws["close"]))
    if ws["failed"] or not ws["close"] or ws["close"][0] not in want:
        bad = True
sys.exit(1 if bad else 0)
PYEOF
ok "five upgrades under load: no HTTP request failed, every tunnel request answered once, the wss:// WebSocket closed 1001"

# The WebSockets lived until the first process's drain deadline (3 s).
first=$(grep -m1 'upgrade: the new process [0-9]* serves' "$T/gateway.log" | cut -c1-23)
for name in ws wss; do
	$PY - "$T/$name.json" "$first" <<'PYEOF' || fail "the $name WebSocket was not kept until the drain deadline"
import datetime, json, sys
ws = json.load(open(sys.argv[1]))
t0 = datetime.datetime.strptime(sys.argv[2], "%Y-%m-%dT%H:%M:%S.%f").replace(
    tzinfo=datetime.timezone.utc).timestamp()
held = ws["at"] - t0
print("%s closed %.2f s after the hand-over" % (sys.argv[1], held))
sys.exit(0 if 2.5 <= held <= 8 else 1)
PYEOF
done
ok "the WebSockets stayed on the old process until its drain deadline"

# An upgrade whose new process cannot start (a broken file): the running
# one says why and goes on serving, and the next upgrade works.
cp "$T/gateway.yaml" "$T/gateway.yaml.good"
printf 'bogus_key: 1\n' >>"$T/gateway.yaml"
kill -USR2 "$GW_PID"
wait_log "$T/gateway.log" "upgrade: the new process [0-9]* exited with status 1 before it was ready; this one goes on serving"
grep -q "gateway.yaml:[0-9]*:[0-9]*: unknown key 'bogus_key'" "$T/gateway.log" ||
	fail "the failed process did not say what is wrong with the file"
kill -0 "$GW_PID" 2>/dev/null || fail "the running process left after a failed upgrade"
code=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$GW/web/$ECHO/echo")
assert_eq "served after a failed upgrade" 200 "$code"
cp "$T/gateway.yaml.good" "$T/gateway.yaml"
old=$GW_PID
kill -USR2 "$old"
i=0
while kill -0 "$old" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
kill -0 "$old" 2>/dev/null && fail "the upgrade after a failed one did not hand over"
new=$(sed -n 's/.*upgrade: started process \([0-9]*\).*/\1/p' "$T/gateway.log" | tail -n 1)
PIDS="$PIDS $new"
code=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$GW/web/$ECHO/echo")
assert_eq "served after the next upgrade" 200 "$code"
ok "a failed upgrade leaves the running process serving, and the next one works"
