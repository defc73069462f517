#!/bin/sh
# WebSocket through the gateway: echo byte for byte over the host form and
# the path form, plain and TLS (wss); the upgrade reaches the upstream with
# Upgrade: websocket, Connection: Upgrade and X-Forwarded-*; an idle
# upgraded connection is closed after timeouts.websocket_idle while a busy
# one stays open; a non-websocket Upgrade (h2c) is not forwarded.
. "$(dirname "$0")/lib.sh"

$PY -c 'import websockets' 2>/dev/null || fail "python3-websockets is needed ($PY)"

GW=$(free_port)
GWS=$(free_port)
GW2=$(free_port)
WS=$(free_port)
ECHO=$(free_port)
UP="$T/upstream.jsonl"
WSLOG="$T/wsserver.log"

spawn wsserver $PY "$TOP/tests/regress/ws_echo.py" server "$WS"
spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" --log "$UP"
wait_port "$WS"
wait_port "$ECHO"

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
  - address: 127.0.0.1:$GWS
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key
domains: [localhost, gw.localhost]
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $WS
      - port: $ECHO
EOF
wait_port "$GWS"

# A second gateway with a short idle time for upgraded connections.
cat >"$T/gateway2.yaml" <<EOF
listen:
  - address: 127.0.0.1:$GW2
timeouts:
  websocket_idle: 1s
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $WS
EOF
spawn gateway2 "$AKGW" -c "$T/gateway2.yaml"
GW2_PID=$LAST_PID
wait_port "$GW2"

# ws_client URL [ARGS]: the echo client; fails unless every echo matched.
ws_client() {
	url=$1; shift
	out=$(timeout 60 $PY "$TOP/tests/regress/ws_echo.py" client "$url" "$@" 2>&1)
	case "$out" in
	"ok "*) ;;
	*) fail "websocket echo through $url $*: $out" ;;
	esac
}

# The field $1 of the last handshake the upstream WebSocket server saw.
ws_header() {
	grep '^{' "$WSLOG" | tail -n 1 | $PY -c '
import json, sys
r = json.loads(sys.stdin.read())
for k, v in r["headers"]:
    if k.lower() == sys.argv[1].lower():
        print(v)' "$1"
}
ws_path() {
	grep '^{' "$WSLOG" | tail -n 1 | $PY -c 'import json, sys; print(json.loads(sys.stdin.read())["path"])'
}

# check_handshake WHAT PROTO PREFIX: the upstream saw a proper upgrade.
check_handshake() {
	assert_eq "$1: upstream path" "/chat?room=1" "$(ws_path)"
	assert_eq "$1: Upgrade" "websocket" "$(ws_header Upgrade)"
	assert_eq "$1: Connection" "Upgrade" "$(ws_header Connection)"
	assert_eq "$1: Sec-WebSocket-Version" "13" "$(ws_header Sec-WebSocket-Version)"
	[ -n "$(ws_header Sec-WebSocket-Key)" ] || fail "$1: no Sec-WebSocket-Key upstream"
	assert_eq "$1: X-Forwarded-For" "127.0.0.1" "$(ws_header X-Forwarded-For)"
	assert_eq "$1: X-Forwarded-Proto" "$2" "$(ws_header X-Forwarded-Proto)"
	[ -n "$(ws_header X-Forwarded-Host)" ] || fail "$1: no X-Forwarded-Host upstream"
	assert_eq "$1: X-Forwarded-Prefix" "$3" "$(ws_header X-Forwarded-Prefix)"
	[ -n "$(ws_header X-Request-Id)" ] || fail "$1: no X-Request-Id upstream"
}

# --- Echo, host form and path form, plain and TLS ------------------------------
for url in "ws://$WS-sbx.localhost:$GW/chat?room=1" \
	"ws://127.0.0.1:$GW/sbx/$WS/chat?room=1" \
	"wss://$WS-sbx.gw.localhost:$GWS/chat?room=1" \
	"wss://127.0.0.1:$GWS/sbx/$WS/chat?room=1"; do
	ws_client "$url" --cafile "$CERTS/ca.crt" --count 200 --size 64
	ws_client "$url" --cafile "$CERTS/ca.crt" --count 20 --size 65536
	case "$url" in
	wss:*) proto=https ;;
	*) proto=http ;;
	esac
	case "$url" in
	*"/sbx/$WS/"*) prefix="/sbx/$WS" ;;
	*) prefix="" ;;
	esac
	check_handshake "$url" "$proto" "$prefix"
done
assert_eq "X-Forwarded-Host, TLS path form" "127.0.0.1:$GWS" "$(ws_header X-Forwarded-Host)"
ok "WebSocket echo (64 B x200, 64 KiB x20) over ws and wss, host and path form"

# One large message each way, bigger than every relay buffer.
ws_client "ws://$WS-sbx.localhost:$GW/chat?room=1" --count 2 --size 4194304
ok "4 MiB WebSocket messages"

# The gateway logs one access line per WebSocket with its status.
wait_log "$T/gateway.log" 'path=[^ ]*/chat status=101 sandbox=sbx'
ok "WebSocket access lines"

# --- Idle timeout for upgraded connections ---------------------------------------
# Prints "closed SECONDS" when the gateway closes an idle WebSocket, or
# "alive N" after sending a message every 300 ms for 3 s.
ws_idle() {
	$PY - "$1" "$2" <<'PYEOF'
import asyncio, sys, time
import websockets
async def main(url, mode):
    async with websockets.connect(url, ping_interval=None, close_timeout=1,
                                  open_timeout=10) as ws:
        t0 = time.monotonic()
        if mode == "idle":
            try:
                await asyncio.wait_for(ws.recv(), 10)
                print("unexpected message")
            except websockets.ConnectionClosed:
                print("closed %.2f" % (time.monotonic() - t0))
            except asyncio.TimeoutError:
                print("still open after 10s")
            return
        n = 0
        try:
            while time.monotonic() - t0 < 3.0:
                await ws.send("tick %d" % n)
                got = await asyncio.wait_for(ws.recv(), 2)
                if got != "tick %d" % n:
                    print("mismatch at %d" % n)
                    return
                n += 1
                await asyncio.sleep(0.3)
        except (websockets.ConnectionClosed, asyncio.TimeoutError) as e:
            print("closed after %d messages at %.2f: %r" % (n, time.monotonic() - t0, e))
            return
        print("alive %d" % n)
asyncio.run(main(sys.argv[1], sys.argv[2]))
PYEOF
}
out=$(ws_idle "ws://127.0.0.1:$GW2/sbx/$WS/idle" idle)
case "$out" in
"closed "*) ;;
*) fail "idle WebSocket with websocket_idle 1s: $out" ;;
esac
t=${out#closed }
$PY -c "import sys; sys.exit(0 if 0.8 <= float('$t') <= 3.0 else 1)" ||
	fail "idle WebSocket closed after ${t}s, want 1s (at most 3s)"
out=$(ws_idle "ws://127.0.0.1:$GW2/sbx/$WS/busy" busy)
case "$out" in
"alive "*) ;;
*) fail "busy WebSocket with websocket_idle 1s: $out" ;;
esac
kill -0 "$GW2_PID" 2>/dev/null || fail "the second gateway died"
ok "websocket_idle closes an idle WebSocket after ${t}s; a busy one stays open"

# The default idle time is long: the same idle wait on the first gateway
# leaves the WebSocket open.
out=$($PY - "ws://127.0.0.1:$GW/sbx/$WS/idle" <<'PYEOF'
import asyncio, sys
import websockets
async def main(url):
    async with websockets.connect(url, ping_interval=None, open_timeout=10) as ws:
        try:
            await asyncio.wait_for(ws.recv(), 2.5)
        except asyncio.TimeoutError:
            await ws.send("still here")
            print("open", await asyncio.wait_for(ws.recv(), 2))
        except websockets.ConnectionClosed:
            print("closed")
asyncio.run(main(sys.argv[1]))
PYEOF
)
assert_eq "an idle WebSocket with the default websocket_idle" "open still here" "$out"
ok "default websocket_idle keeps an idle WebSocket open"

# --- A non-websocket Upgrade is not forwarded ----------------------------------
: >"$UP"
out=$(curl -sS --max-time 20 --http2 -w '\n%{http_code} %{http_version}' \
	"http://$ECHO-sbx.localhost:$GW/echo") || fail "h2c upgrade request failed"
assert_eq "h2c upgrade request answered over HTTP/1.1" "200 1.1" "$(printf '%s' "$out" | tail -n 1)"
assert_contains "h2c request reached the upstream" '"path": "/echo"' "$out"
hdrs=$(tail -n 1 "$UP")
case "$hdrs" in
*'"Upgrade"'* | *'"HTTP2-Settings"'* | *'"Connection"'*)
	fail "h2c upgrade fields reached the upstream: $hdrs" ;;
esac
# An upstream that switches protocols without being asked is refused.
out=$(curl -sS --max-time 20 -i "http://$ECHO-sbx.localhost:$GW/switch") ||
	fail "request to an upstream answering 101 failed"
assert_contains "unrequested 101" "HTTP/1.1 502" "$out"
assert_contains "unrequested 101 code" "X-Gateway-Error: bad_upstream_response" "$out"
out=$(curl -sS --max-time 20 --http2 -i "http://$ECHO-sbx.localhost:$GW/switch") ||
	fail "h2c request to an upstream answering 101 failed"
assert_contains "101 to an h2c upgrade" "HTTP/1.1 502" "$out"
# A websocket Upgrade on a POST is not a WebSocket either.
out=$(curl -sS --max-time 20 -X POST -d x -H 'Connection: Upgrade' -H 'Upgrade: websocket' \
	"http://$ECHO-sbx.localhost:$GW/echo") || fail "POST with Upgrade: websocket failed"
case "$(tail -n 1 "$UP")" in
*'"Upgrade"'*) fail "Upgrade forwarded on a POST: $(tail -n 1 "$UP")" ;;
esac
kill -0 "$GW_PID" 2>/dev/null || fail "the gateway died"
ok "non-websocket upgrades (h2c, POST) are not forwarded as upgrades"
