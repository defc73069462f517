#!/bin/sh
# The reverse tunnel's recovery with the real programs (issue 4): the
# sandbox is a network namespace this test makes, akgateway terminates the
# tunnel, aktunnel runs on the host.
# - a request made before any client attached succeeds once one does;
# - Port B lives in the sandbox only: the host's loopback does not have it;
# - aktunnel killed (SIGKILL) mid-request and started again: the GET waiting
#   for its answer is sent again to the new client and completes;
# - aktunnel stopped (SIGSTOP): the gateway drops it after silence_timeout
#   (4 s here, aktunnel pinging every 1 s), and after SIGCONT it resumes and
#   serves again;
# - a second aktunnel takes over: requests reach its target, and the first
#   one says so and exits 3 instead of taking the tunnel back;
# - wrong hostname on an HTTPS target: 502 with the reason;
# - forward mode through "akgateway tunnel-server" in the namespace.
. "$(dirname "$0")/lib.sh"

NS="akgw-rec-$$"
netns_add "$NS"
nsc() { ip netns exec "$NS" curl -sS --max-time 60 "$@"; }

GW=$(free_port)
TARGET=$(free_port)
TARGET2=$(free_port)
TLSTARGET=$(free_port)
PB=$(free_port) # Port B: free on the host's loopback, so a refusal there is ours
TOKEN=tunnel-token-0123456789abcdef

spawn target $PY "$TOP/tests/regress/backend.py" --port "$TARGET" --log "$T/target.jsonl"
spawn target2 $PY "$TOP/tests/regress/backend.py" --port "$TARGET2" --log "$T/target2.jsonl"
# An HTTPS target whose certificate names other.localhost only.
spawn tlstarget $PY "$TOP/tests/regress/backend.py" --port "$TLSTARGET" \
	--log "$T/tls.jsonl" --tls "$CERTS/other.crt" "$CERTS/other.key"
wait_port "$TARGET"
wait_port "$TARGET2"
wait_port "$TLSTARGET"

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
sandboxes:
  - id: rec
    netns: /run/netns/$NS
    tunnel:
      listen_port: $PB
      token: $TOKEN
      client_wait: 20s
      silence_timeout: 4s
  - id: tls
    netns: /run/netns/$NS
    tunnel:
      listen_port: 7766
      token: $TOKEN
  - id: fwd
    netns: /run/netns/$NS
    tunnel:
      listen_port: 8766
      mode: forward
      token: $TOKEN
EOF

aktun() {
	name=$1; shift
	spawn "$name" "$AKTUN" --gateway "127.0.0.1:$GW" --token "$TOKEN" \
		--allow-plaintext-token "$@"
}

# Before any client: the request waits (client_wait), then succeeds.
wait_port_ns "$PB"
nsc -o "$T/early.out" -w '%{http_code}' "http://127.0.0.1:$PB/echo" >"$T/early.code" &
early=$!
sleep 1
kill -0 "$early" 2>/dev/null || fail "the request before any client did not wait"
aktun tunA --sandbox rec --listen-port "$PB" --target "http://127.0.0.1:$TARGET" --ping-interval 1
A=$LAST_PID
wait "$early"
assert_eq "request before any client: status" "200" "$(cat "$T/early.code")"
assert_contains "request before any client: body" '"path": "/echo"' "$(cat "$T/early.out")"
wait_log "$T/tunA.log" "tunnel rec ready: sandbox http://127.0.0.1:$PB -> http://127.0.0.1:$TARGET"
ok "a request made before any client attached succeeds once one does"

# Port B is inside the sandbox only.
if curl -sS --max-time 5 "http://127.0.0.1:$PB/echo" >"$T/host.out" 2>&1; then
	fail "Port B answered on the host's loopback: $(cat "$T/host.out")"
fi
assert_contains "host loopback refused" "Failed to connect" "$(cat "$T/host.out")"
ok "the tunnel listener is not reachable from the host's loopback"

# SIGKILL mid-request: the GET goes again to the restarted client.
nsc -o "$T/kill.out" -w '%{http_code}' "http://127.0.0.1:$PB/slow?ms=2000" >"$T/kill.code" &
req=$!
sleep 0.7
kill -KILL "$A"
wait "$A" 2>/dev/null
aktun tunA2 --sandbox rec --listen-port "$PB" --target "http://127.0.0.1:$TARGET" --ping-interval 1
A=$LAST_PID
wait "$req"
assert_eq "request across a SIGKILL: status" "200" "$(cat "$T/kill.code")"
assert_eq "request across a SIGKILL: body" "slow" "$(cat "$T/kill.out")"
wait_log "$T/gateway.log" "replayed 1 pending request (idempotent, to the new client session)"
ok "aktunnel killed mid-request and restarted: the GET completes"

# SIGSTOP: dropped as silent after 4 s (plus the tick); SIGCONT: back.
wait_log "$T/tunA2.log" "ready"
kill -STOP "$A"
start=$(date +%s)
i=0
while ! grep -q "tunnel rec:.*no frame from the client for 4000ms" "$T/gateway.log" && [ $i -lt 150 ]; do
	sleep 0.1; i=$((i + 1))
done
secs=$(($(date +%s) - start))
grep -q "tunnel rec:.*no frame from the client for 4000ms" "$T/gateway.log" ||
	fail "a stopped aktunnel was not dropped within 15 s"
[ "$secs" -le 7 ] || fail "a stopped aktunnel was dropped after ${secs}s, not 4s"
nsc -o "$T/stop.out" -w '%{http_code}' "http://127.0.0.1:$PB/echo" >"$T/stop.code" &
req=$!
sleep 0.5
kill -CONT "$A"
wait "$req"
assert_eq "request while stopped, answered after SIGCONT" "200" "$(cat "$T/stop.code")"
out=$(nsc "http://127.0.0.1:$PB/echo")
assert_contains "after SIGCONT" '"path": "/echo"' "$out"
ok "a stopped aktunnel is dropped after ${secs}s and serves again after SIGCONT"

# A second client takes over; the first exits 3 and stays out.
aktun tunB --sandbox rec --listen-port "$PB" --target "http://127.0.0.1:$TARGET2"
B=$LAST_PID
i=0
while kill -0 "$A" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
kill -0 "$A" 2>/dev/null && fail "the replaced aktunnel did not exit"
wait "$A"
assert_eq "replaced aktunnel exit status" "3" "$?"
assert_contains "replaced aktunnel says why" "another client took over the tunnel of sandbox rec" "$(cat "$T/tunA2.log")"
n2=$(wc -l <"$T/target2.jsonl")
out=$(nsc "http://127.0.0.1:$PB/echo")
assert_contains "after the takeover" '"path": "/echo"' "$out"
assert_eq "the new client's target got it" "$((n2 + 1))" "$(wc -l <"$T/target2.jsonl" | tr -d ' ')"
sleep 1.5
out=$(nsc "http://127.0.0.1:$PB/echo")
assert_eq "still the new client's target" "$((n2 + 2))" "$(wc -l <"$T/target2.jsonl" | tr -d ' ')"
kill -0 "$B" 2>/dev/null || fail "the new aktunnel exited"
ok "a second aktunnel takes over; the first exits 3"

# An HTTPS target whose certificate does not name the host: 502, the reason.
touch "$T/tls.jsonl"
n=$(wc -l <"$T/tls.jsonl")
aktun tunTLS --sandbox tls --listen-port 7766 --target "https://localhost:$TLSTARGET" \
	--target-ca-file "$CERTS/ca.crt"
wait_port_ns 7766
out=$(nsc -i http://127.0.0.1:7766/echo)
assert_contains "wrong hostname: status" "HTTP/1.1 502" "$out"
assert_contains "wrong hostname: reason" "hostname mismatch" "$out"
assert_eq "nothing reached the target" "$n" "$(wc -l <"$T/tls.jsonl")"
grep -q "hostname mismatch" "$T/tunTLS.log" || fail "aktunnel did not log the hostname mismatch"
ok "an HTTPS target with the wrong hostname gives 502 with the reason"

# Forward mode: the gateway relays the tunnel WebSocket to the in-sandbox
# server (akgateway tunnel-server), which owns Port B.
spawn tsrv ip netns exec "$NS" "$AKGW" tunnel-server --ws 0.0.0.0:8765 \
	--listen 127.0.0.1:8766 --token "$TOKEN" --client-wait 10s
wait_port_ns 8765
aktun tunF --sandbox fwd --target "http://127.0.0.1:$TARGET"
head -c 3000000 /dev/urandom >"$T/up.bin"
want=$(sha256sum <"$T/up.bin" | cut -d' ' -f1)
out=$(nsc --data-binary "@$T/up.bin" http://127.0.0.1:8766/sink)
assert_contains "forward mode upload" "$want" "$out"
out=$(nsc http://127.0.0.1:8766/echo)
assert_contains "forward mode" '"path": "/echo"' "$out"
ok "forward mode through akgateway tunnel-server in the sandbox"

if grep -q "$TOKEN" "$T/target.jsonl" "$T/target2.jsonl" "$T/gateway.log"; then
	fail "the token reached a target or the log"
fi
stop "$GW_PID"
grep -q 'AddressSanitizer\|LeakSanitizer\|runtime error' "$T/gateway.log" "$T"/tun*.log &&
	fail "sanitizer report"
ok "tunnel_e2e_recovery"
