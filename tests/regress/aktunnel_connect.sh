#!/bin/sh
# aktunnel's connection to the gateway against the scripted sandbox
# (tunnel_mock.py): the upgrade with X-Auth over verified wss, 404s retried
# quietly with warnings at the 5th and 10th (scenarios 27, 28), a 403
# rejection (29), the hello with a stable session, JSON pings at the
# configured interval (22), a heartbeat timeout and the resume (23), an
# unverifiable gateway, the token and route rules, the backoff after
# refused connections, and SIGINT/SIGTERM stopping with exit 0.
. "$(dirname "$0")/lib.sh"

[ -x "$AKTUN" ] || fail "$AKTUN is not built"
[ -f "$CERTS/ca.crt" ] || fail "no test certificates in $CERTS (make certs)"
MOCK="$TOP/tests/regress/tunnel_mock.py"
$PY -c 'import websockets' || fail "python3-websockets is missing"

# start_mock NAME SCRIPT [MOCK ARGS]: the mock on a new port $MP.
start_mock() {
	name=$1 script=$2; shift 2
	MP=$(free_port)
	printf '%s\n' "$script" >"$T/$name.script"
	spawn "$name" $PY "$MOCK" --port "$MP" --script "$T/$name.script" "$@"
	MOCK_PID=$LAST_PID
	wait_port "$MP"
}

# wait_mock NAME: the script must end well.
wait_mock() {
	wait "$MOCK_PID"
	rc=$?
	[ "$rc" = 0 ] || fail "mock $1 failed (exit $rc): $(grep 'mock:' "$T/$1.log")"
}

# stop_tun PID SIGNAL: aktunnel must stop with exit 0 within 5 s.
stop_tun() {
	kill -"$2" "$1"
	i=0
	while kill -0 "$1" 2>/dev/null && [ $i -lt 50 ]; do
		sleep 0.1; i=$((i + 1))
	done
	kill -0 "$1" 2>/dev/null && fail "aktunnel still running after SIG$2"
	wait "$1"
	rc=$?
	assert_eq "aktunnel exit status after SIG$2" 0 "$rc"
}

# wait_log FILE TEXT: until FILE holds TEXT (10 s at most).
wait_log() {
	i=0
	while ! grep -q -- "$2" "$1" 2>/dev/null; do
		[ $i -lt 200 ] || fail "'$2' never appeared in $1"
		sleep 0.05; i=$((i + 1))
	done
}

TARGET=http://127.0.0.1:$(free_port)

# 1. wss: ten 404s, a 403, then the WebSocket; X-Auth and the route; pings
# every 0.2 s; a pong that never comes closes the connection, and the next
# one carries the same session (the mock checks it).
start_mock m1 "reject 404 10
reject 403
accept
header X-Auth tok-5ecret
path /tunnel/sbx1
pings 6 10
nopong
closed 5
accept
pings 2 5" --tls "$CERTS/server.crt" "$CERTS/server.key"
spawn tun1 "$AKTUN" --gateway "wss://localhost:$MP" --sandbox sbx1 \
    --target "$TARGET" --ca-file "$CERTS/ca.crt" --token tok-5ecret \
    --ping-interval 0.2 --ping-timeout 0.5
TUN=$LAST_PID
wait_mock m1
wait_log "$T/tun1.log" "HTTP 404, 10 in a row"
wait_log "$T/tun1.log" "HTTP 403 Forbidden: the gateway refused the token"
log=$(cat "$T/tun1.log")
n=$(grep -c "warn  tunnel route unavailable (HTTP 404" "$T/tun1.log")
assert_eq "404 warnings in ten attempts" 2 "$n"
n=$(grep -c "tunnel route unavailable (HTTP 404" "$T/tun1.log")
assert_eq "404 lines in ten attempts (the 1st at info)" 3 "$n"
assert_contains "5th 404 warned" "warn  tunnel route unavailable (HTTP 404, 5 in a row)" "$log"
assert_contains "10th 404 warned" "warn  tunnel route unavailable (HTTP 404, 10 in a row)" "$log"
assert_contains "403 warned" "tunnel handshake rejected: HTTP 403 Forbidden: the gateway refused the token from --token: check that it is valid and allowed to open the tunnel of sandbox sbx1; retrying in 1 s (refusal 1 of 5 before aktunnel exits)" "$log"
assert_contains "ready line" "tunnel sbx1 ready: sandbox http://127.0.0.1:8766 -> $TARGET" "$log"
assert_contains "heartbeat timeout" "tunnel connection lost: heartbeat timeout: no pong within 0.5 s" "$log"
# Twelve attempts, two connections; this sandbox's hello says nothing
# about the session, and neither does the line.
grep -q "^[^ ]* info  tunnel sbx1 reconnected (connection 2)$" "$T/tun1.log" ||
    fail "no 'reconnected (connection 2)' line: $log"
case "$log" in *tok-5ecret*) fail "the log shows the token" ;; esac
gaps=$(grep '"event": "pings"' "$T/m1.log" | head -n 1)
$PY - "$gaps" <<'EOF' || fail "ping gaps not about 0.2 s: $gaps"
import json, sys
g = json.loads(sys.argv[1])["gaps"]
sys.exit(0 if len(g) >= 5 and all(0.15 <= x <= 0.5 for x in g) else 1)
EOF
stop_tun "$TUN" INT
assert_contains "stop logged" "received SIGINT, stopping" "$(cat "$T/tun1.log")"
assert_contains "summary" "aktunnel stopped: 0 requests" "$(cat "$T/tun1.log")"
ok "404s quiet then warned, 403 warned, X-Auth over wss, pings, heartbeat timeout, resume, SIGINT"

# 2. The gateway's certificate is not trusted: a clear reason, no connection.
start_mock m2 "sleep 3" --tls "$CERTS/server.crt" "$CERTS/server.key"
spawn tun2 "$AKTUN" --gateway "wss://localhost:$MP" --sandbox sbx1 \
    --target "$TARGET"
TUN=$LAST_PID
wait_log "$T/tun2.log" "TLS certificate verification of localhost:$MP failed: unable to get local issuer certificate"
stop_tun "$TUN" TERM
wait_mock m2
grep -q '"event": "accept"' "$T/m2.log" && fail "an unverified gateway was used"
ok "an untrusted gateway certificate is refused with the reason"

# 3. Plain ws: no token means no X-Auth; the token with
# --allow-plaintext-token; the query fallback; --listen-port picks the route.
start_mock m3 "accept
noheader X-Auth
header X-AK-Tunnel-Session
path /tunnel/sbx1"
spawn tun3 "$AKTUN" --gateway "127.0.0.1:$MP" --sandbox sbx1 --target "$TARGET"
TUN=$LAST_PID
wait_mock m3
stop_tun "$TUN" TERM
start_mock m4 "accept
header X-Auth a/b+c
path /tunnel/sbx-at-1/9000?token=a%2Fb%2Bc"
spawn tun4 env YR_TUNNEL_TOKEN_QUERY_FALLBACK=1 "$AKTUN" \
    --gateway "ws://127.0.0.1:$MP" --sandbox sbx@1 --target "$TARGET" \
    --token a/b+c --allow-plaintext-token --listen-port 9001
TUN=$LAST_PID
wait_mock m4
stop_tun "$TUN" TERM
ok "token only when given, query fallback, route for another listen port"

# 4. Nothing listens: network failures back off 1 s, 2 s, ... and warn on
# the first only.
P=$(free_port)
spawn tun5 "$AKTUN" --gateway "127.0.0.1:$P" --sandbox sbx1 --target "$TARGET"
TUN=$LAST_PID
wait_log "$T/tun5.log" "retrying in 3[. ]"
stop_tun "$TUN" TERM
log=$(cat "$T/tun5.log")
# The delay shown is the one used: 1 s plus up to 25 % jitter, in ms.
grep -Eq "warn  cannot connect to the gateway: 127.0.0.1:$P: Connection refused; retrying in 1(\.[0-9]{3})? s \(attempt 2\)$" "$T/tun5.log" ||
    fail "first failure: $log"
grep -Eq "info  cannot connect to the gateway: 127.0.0.1:$P: Connection refused; retrying in 2(\.[0-9]{3})? s \(attempt 3\)$" "$T/tun5.log" ||
    fail "second failure: $log"
ok "refused connections back off 1 s, 2 s, 3 s"

# 5. The gateway refuses a replaced session (4409, issue 16 §6): aktunnel
# says so and exits 3 instead of dialling again; another private close
# code is an ordinary lost connection, dialled again.
start_mock m6 "accept
close 4409 tunnel_session_replaced: A newer client took over this tunnel while this one was away.
sleep 1.5"
spawn tun6 "$AKTUN" --gateway "127.0.0.1:$MP" --sandbox sbx1 --target "$TARGET"
TUN=$LAST_PID
i=0
while kill -0 "$TUN" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
kill -0 "$TUN" 2>/dev/null && fail "aktunnel still running after close 4409"
wait "$TUN"
assert_eq "aktunnel exit status after close 4409" 3 "$?"
assert_contains "4409 explained" "error a newer client took over the tunnel of sandbox sbx1 while this one was disconnected: the gateway refused this client's session (close 4409 tunnel_session_replaced: A newer client took over this tunnel while this one was away.); exiting" "$(cat "$T/tun6.log")"
wait_mock m6
grep -c '"event": "accept"' "$T/m6.log" | grep -qx 1 || fail "aktunnel dialled again after 4409"
start_mock m7 "accept
close 4000 something else
accept"
spawn tun7 "$AKTUN" --gateway "127.0.0.1:$MP" --sandbox sbx1 --target "$TARGET"
TUN=$LAST_PID
wait_mock m7
kill -0 "$TUN" 2>/dev/null || fail "aktunnel exited after close 4000"
stop_tun "$TUN" TERM
ok "close 4409 tunnel_session_replaced: exit 3 with the reason; close 4000: dialled again"
