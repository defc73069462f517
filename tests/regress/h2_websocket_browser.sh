#!/bin/sh
# RFC 8441 in headless Chromium: a page served over HTTPS through a port
# URL (the gateway's TLS listener, h2 by ALPN) opens a WebSocket to its
# own sandbox port, wss:// through a port URL, and gets its echo.  The
# browser carries it on the page's HTTP/2 connection as an extended
# CONNECT (the gateway's SETTINGS enable it): the gateway's access line
# for the WebSocket says method=CONNECT proto=h2, and the application saw
# an HTTP/1.1 upgrade.  Host form and path form.
. "$(dirname "$0")/lib.sh"

command -v chromium >/dev/null 2>&1 || fail "chromium is needed (Debian package chromium; make deps)"
[ -f "$CERTS/ca.crt" ] || fail "no development certificates in $CERTS (make certs)"

GW=$(free_port)
GWS=$(free_port)
APP=$(free_port)

spawn app $PY "$TOP/tests/regress/browser_app.py" "$APP" local --log "$T/app.jsonl"
wait_port "$APP"

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
  - address: 127.0.0.1:$GWS
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key
domains: [gw.localhost]
sandboxes:
  - id: local
    address: 127.0.0.1
    ports:
      - {port: $APP, access: public}
EOF
wait_port "$GWS"

HOST="https://$APP-local.gw.localhost:$GWS"
PATHF="https://gw.localhost:$GWS/local/$APP"
# JS: open a WebSocket, send one message, report the answer or the close.
ws_js() {
	echo "new Promise(res => { const w = new WebSocket('$1'); w.onopen = () => w.send('$2'); w.onmessage = e => { res('message ' + e.data); w.close(); }; w.onclose = e => res('closed ' + e.code); setTimeout(() => res('timeout'), 8000); })"
}
proto_js="performance.getEntriesByType('navigation')[0].nextHopProtocol"

out=$(timeout 60 $PY "$TOP/tests/regress/chromium.py" \
	--step "open $HOST/" \
	--step "eval $proto_js" \
	--step "eval $(ws_js "wss://$APP-local.gw.localhost:$GWS/ws" "host form")" \
	--step "open $PATHF/" \
	--step "eval $proto_js" \
	--step "eval $(ws_js "wss://gw.localhost:$GWS/local/$APP/ws" "path form")" \
	2>"$T/chromium.log") || fail "chromium.py failed: $(tail -n 5 "$T/chromium.log")"
printf '%s\n' "$out" >"$T/steps.jsonl"
step() { sed -n "$1p" "$T/steps.jsonl"; }

assert_contains "the page (host form)" '"text": "sandbox local"' "$(step 1)"
assert_contains "the page came over h2" '"value": "h2"' "$(step 2)"
assert_contains "the WebSocket's echo (host form)" '"value": "message local:host form"' "$(step 3)"
assert_contains "the page (path form)" '"text": "sandbox local"' "$(step 4)"
assert_contains "the path-form page came over h2" '"value": "h2"' "$(step 5)"
assert_contains "the WebSocket's echo (path form)" '"value": "message local:path form"' "$(step 6)"
ok "a page over HTTPS opens a WebSocket through a port URL and gets its echo"

wait_log "$T/gateway.log" "method=CONNECT path=/ws status=200 .*proto=h2"
wait_log "$T/gateway.log" "method=CONNECT path=/local/$APP/ws status=200 .*proto=h2"
if grep -q "path=[^ ]*/ws status=101" "$T/gateway.log"; then
	fail "a WebSocket went over HTTP/1.1: $(grep 'path=[^ ]*/ws status=101' "$T/gateway.log")"
fi
grep "access .*method=CONNECT" "$T/gateway.log"
n=$(grep -c '"path": "/ws".*"upgrade": "websocket"' "$T/app.jsonl")
assert_eq "HTTP/1.1 upgrades at the application" "2" "$n"
ok "the browser's WebSockets went over HTTP/2 (extended CONNECT); the application saw HTTP/1.1 upgrades"
stop "$GW_PID" # a sanitizer build reports leaks as it exits
if grep -E "Sanitizer|runtime error" "$T/gateway.log"; then
	fail "the sanitizer reported on the gateway"
fi
