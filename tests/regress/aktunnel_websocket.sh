#!/bin/sh
# Application WebSockets through aktunnel (tunnel-protocol.md §4.10, §9.8)
# against the scripted sandbox and ws_echo.py: the handshake path, Origin,
# subprotocol and headers reach the target (scenario 33), text and binary
# echoes (envelopes reassembled both ways, 15; base64 in V1 and V2; empty
# messages), ws_close both ways, duplicate ids, the message limit (16),
# channels dropped on reconnect, a refused upgrade, and wss:// with the
# development CA.
. "$(dirname "$0")/lib.sh"

[ -x "$AKTUN" ] || fail "$AKTUN is not built"
[ -f "$CERTS/ca.crt" ] || fail "no test certificates in $CERTS (make certs)"
MOCK="$TOP/tests/regress/tunnel_mock.py"
$PY -c 'import websockets' || fail "python3-websockets is missing"

WS=$(free_port)
WSS=$(free_port)
spawn ws $PY "$TOP/tests/regress/ws_echo.py" server "$WS"
spawn wss $PY "$TOP/tests/regress/ws_echo.py" server "$WSS" \
    --certfile "$CERTS/server.crt" --keyfile "$CERTS/server.key"
BE=$(free_port)
spawn backend $PY "$TOP/tests/regress/backend.py" --port "$BE" --log "$T/up.jsonl"
wait_port "$WS"
wait_port "$WSS"
wait_port "$BE"

run_case() {
	name=$1 script=$2; shift 2
	MP=$(free_port)
	printf '%s\n' "$script" >"$T/$name.script"
	spawn "$name" $PY "$MOCK" --port "$MP" --script "$T/$name.script"
	mock=$LAST_PID
	wait_port "$MP"
	spawn "$name-tun" "$AKTUN" --gateway "127.0.0.1:$MP" --sandbox sbx1 -v "$@"
	tun=$LAST_PID
	wait "$mock" || fail "mock $name failed: $(grep 'mock:' "$T/$name.log")"
	kill -TERM "$tun"
	wait "$tun"
	assert_eq "aktunnel exit status ($name)" 0 "$?"
}

C1=c1c1c1c1-0000-4000-8000-000000000001
C2=c1c1c1c1-0000-4000-8000-000000000002
C3=c1c1c1c1-0000-4000-8000-000000000003
C4=c1c1c1c1-0000-4000-8000-000000000004

# 1. V2: handshake, echoes of every kind, close, duplicates, reconnect,
# the negotiated message limit.
run_case v2 "accept
wsconnect $C1 /chat?room=one h=Origin:http://sandbox.example h=Sec-WebSocket-Protocol:chat.v1 h=X-Test:yes h=Host:ignored h=Sec-WebSocket-Key:ignored
wsecho $C1 text=hello
wsecho $C1 size=100000
wsecho $C1 size=200000 chunk=1000
wsecho $C1 size=3 b64
wsecho $C1 size=0
wsclose $C1 1000 done
wsconnect $C1 /again expect=error grep=duplicate\\ WebSocket\\ channel\\ id
wsconnect $C2 /x
hello max_ws_message_size=1
drop
accept
wsconnect $C2 /x expect=error grep=duplicate
wsconnect $C3 /y
wsecho $C3 text=x
wsecho $C3 size=1
send {\"type\":\"ws_message\",\"id\":\"$C3\",\"data\":\"AAE=\",\"binary\":true}
expect error $C3 5
pings 1 30" --target "http://127.0.0.1:$WS/base" --ping-interval 0.2
hs=$(grep '"path": "/base/chat?room=one"' "$T/ws.log") ||
    fail "no handshake for /base/chat?room=one at the target"
assert_contains "Origin" '["Origin", "http://sandbox.example"]' "$hs"
assert_contains "subprotocol" '["Sec-WebSocket-Protocol", "chat.v1"]' "$hs"
assert_contains "X-Test" '["X-Test", "yes"]' "$hs"
assert_contains "Host is the target" "[\"Host\", \"127.0.0.1:$WS\"]" "$hs"
case "$hs" in *ignored*) fail "a handshake header was forwarded: $hs" ;; esac
r=$(grep '"event": "wsecho"' "$T/v2.log" | sed -n 2p)
assert_contains "100000 bytes back as 65536 + 34464" '"pieces": [65536, 34464]' "$r"
assert_contains "limit error" "WebSocket binary message exceeds tunnel limit" "$(cat "$T/v2.log")"
ok "WebSocket V2: handshake headers, text/binary/base64/empty echoes, close, limits, reconnect"

# 2. V1 (no hello from the sandbox): binary travels as base64.
run_case v1 "hello off
accept
wsconnect $C1 /v1
wsecho $C1 size=1000 b64
wsecho $C1 text=hi
wsclose $C1 4000 bye" --target "http://127.0.0.1:$WS"
assert_contains "V1 binary as base64" '"pieces": ["b64"]' "$(cat "$T/v1.log")"
ok "WebSocket V1: base64 binary, text, close code 4000"

# 3. wss:// with the development CA; a plain HTTP server refuses the upgrade.
run_case tls "accept
wsconnect $C1 /secure
wsecho $C1 size=70000
wsclose $C1 1000" --target "https://localhost:$WSS" --target-ca-file "$CERTS/ca.crt"
run_case refused "accept
wsconnect $C4 /nows expect=error grep=refused\\ the\\ WebSocket\\ upgrade" \
    --target "http://127.0.0.1:$BE"
ok "wss:// verified; a refused upgrade is an error for the channel"
