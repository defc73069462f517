#!/bin/sh
# Reverse tunnel, forward mode: the gateway proxies the tunnel WebSocket to
# an in-sandbox tunnel server, here "akgateway tunnel-server" running in
# the sandbox's network namespace (Port A 0.0.0.0:8765, Port B
# 127.0.0.1:8766), as AKernel's in-sandbox server runs.  A scripted tunnel
# client attaches through the gateway; code in the namespace calls Port B.
# Also: the standalone server accepts the WebSocket on any path, checks
# --token (401/403), answers 503 without a client, refuses a replaced
# session's return (4409), and stops on SIGTERM.
. "$(dirname "$0")/lib.sh"

$PY -c 'import websockets' 2>/dev/null || fail "python3-websockets is needed ($PY)"

NS="akgw-tfwd-$$"
netns_add "$NS"

GW=$(free_port)
MOCK="$TOP/tests/regress/sandbox_mock_client.py"
nsc() { ip netns exec "$NS" curl -sS --max-time 60 "$@"; }

start_mock() {
	name=$1; shift
	spawn "mock_$name" $PY "$MOCK" --name "$name" --log "$T/$name.jsonl" "$@"
	MOCK_PID=$LAST_PID
}

spawn tsrv ip netns exec "$NS" "$AKGW" tunnel-server --ws 0.0.0.0:8765 \
	--listen 127.0.0.1:8766 --client-wait 1s --http-timeout 5s -v
TSRV=$LAST_PID
spawn tsrv_tok ip netns exec "$NS" "$AKGW" tunnel-server --ws 0.0.0.0:8865 \
	--listen 127.0.0.1:8866 --token secret-token-123 --client-wait 0s
TSRV_TOK=$LAST_PID
wait_port_ns 8765
wait_port_ns 8766
wait_port_ns 8865

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
sandboxes:
  - id: fwd
    netns: /run/netns/$NS
    tunnel:
      listen_port: 8766
      mode: forward
EOF

# No client yet: the in-sandbox server answers 503 after --client-wait.
out=$(nsc -i http://127.0.0.1:8766/hello)
assert_contains "no client" "HTTP/1.1 503" "$out"
assert_contains "no client: code" '"code":"tunnel_not_connected"' "$out"
ok "tunnel-server: 503 tunnel_not_connected without a client"

# The client attaches through the gateway (forward mode).
start_mock F --url "ws://127.0.0.1:$GW/tunnel/fwd"
wait_log "$T/F.jsonl" '"event": "connected"'
out=$(nsc -i http://127.0.0.1:8766/hello)
assert_contains "forward: fast path" "HTTP/1.1 200" "$out"
assert_contains "forward: body" "pong" "$out"
wait_log "$T/tsrv.log" 'tunnel-server: '
wait_log "$T/tsrv.log" 'negotiated V2'
ok "forward mode: the gateway proxies the tunnel WebSocket to the in-sandbox server"

head -c 10485760 /dev/urandom >"$T/up.bin"
want=$(sha256sum "$T/up.bin" | cut -c1-64)
out=$(nsc -X POST --data-binary "@$T/up.bin" http://127.0.0.1:8766/sha256)
assert_contains "forward: 10 MiB upload" "\"sha256\": \"$want\"" "$out"
want=$($PY "$MOCK" pattern 10485760 | sha256sum | cut -c1-64)
got=$(nsc "http://127.0.0.1:8766/bytes?n=10485760" | sha256sum | cut -c1-64)
assert_eq "forward: 10 MiB download" "$want" "$got"
got=$(nsc "http://127.0.0.1:8766/bytes?n=10485760&drop=4000000" | sha256sum | cut -c1-64)
assert_eq "forward: download resumed after a dropped link" "$want" "$got"
out=$(nsc -i "http://127.0.0.1:8766/error?msg=no%20route%20to%20target")
assert_contains "forward: client error" "HTTP/1.1 502" "$out"
assert_contains "forward: client error message" "no route to target" "$out"
out=$(ip netns exec "$NS" timeout 30 $PY "$TOP/tests/regress/ws_echo.py" client "ws://127.0.0.1:8766/echo" --count 3 --size 100000) ||
	fail "forward: WebSocket echo: $out"
assert_eq "forward: WebSocket echo" "ok 3" "$out"
ok "forward mode: 10 MiB both ways, resume, errors and WebSockets through the in-sandbox server"

# The in-sandbox server keeps the newest client too: F's session, replaced
# by H, dials again through the gateway and is refused with 4409; H keeps
# the tunnel (issue 16 §6).
start_mock H --url "ws://127.0.0.1:$GW/tunnel/fwd"
wait_log "$T/F.jsonl" '"code": 1012'
wait_log "$T/F.jsonl" '"code": 4409'
assert_contains "forward: refused return" '"reason": "tunnel_session_replaced: ' \
	"$(grep '"code": 4409' "$T/F.jsonl" | head -1)"
assert_eq "forward: the newer client keeps the tunnel" "H" "$(nsc http://127.0.0.1:8766/whoami)"
grep -q 'tunnel_refused .*code=tunnel_session_replaced' "$T/tsrv.log" ||
	fail "the tunnel server did not log the refusal"
ok "forward mode: a replaced session dialling again is refused (4409), the newer client stays"

# The standalone server: any path, and its token.
spawn mock_direct ip netns exec "$NS" $PY "$MOCK" --name D --log "$T/D.jsonl" \
	--url "ws://127.0.0.1:8865/any/path?x=1" --once
wait "$LAST_PID"
grep -q '"status": 401' "$T/D.jsonl" || fail "tunnel-server --token: no token should be 401"
spawn mock_direct2 ip netns exec "$NS" $PY "$MOCK" --name E --log "$T/E.jsonl" \
	--url "ws://127.0.0.1:8865/" --token nope --once
wait "$LAST_PID"
grep -q '"status": 403' "$T/E.jsonl" || fail "tunnel-server --token: a wrong token should be 403"
spawn mock_direct3 ip netns exec "$NS" $PY "$MOCK" --name G --log "$T/G.jsonl" \
	--url "ws://127.0.0.1:8865/some/where" --token secret-token-123
wait_log "$T/G.jsonl" '"event": "connected"'
out=$(nsc http://127.0.0.1:8866/whoami)
assert_eq "tunnel-server with a token, any path" "G" "$out"
ok "tunnel-server: the WebSocket on any path; --token gives 401 without, 403 wrong"

# SIGTERM stops it cleanly.
kill "$TSRV_TOK"
i=0
while kill -0 "$TSRV_TOK" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
kill -0 "$TSRV_TOK" 2>/dev/null && fail "tunnel-server did not stop on SIGTERM"
grep -q 'stopping' "$T/tsrv_tok.log" || fail "tunnel-server did not log its stop"
grep -q 'AddressSanitizer\|LeakSanitizer\|runtime error' "$T/tsrv_tok.log" && fail "sanitizer report from tunnel-server"
ok "tunnel-server stops on SIGTERM"
ok "tunnel_gw_forward"
