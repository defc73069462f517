#!/bin/sh
# Issue 16.1 in headless Chromium: a page of one sandbox must never use
# another sandbox's private-port credential.  The two attacks, replayed:
# a page of 8001-other under the shared parent domain gw.localhost (one
# site with 8100-local) opens a credentialed fetch and a WebSocket to
# 8100-local over HTTPS; a path-form page /other/8001/ does the same to
# /local/8100/.  Both are refused and never reach the application, while
# the sandbox's own page, its credentialed fetch and its own WebSocket keep
# working, also when the page was opened from a link on another site.
. "$(dirname "$0")/lib.sh"

command -v chromium >/dev/null 2>&1 || fail "chromium is needed (Debian package chromium; make deps)"

GW=$(free_port)
GWS=$(free_port)
APP=$(free_port)
OTHER=$(free_port)
SECRET=0123456789abcdef0123456789abcdef

spawn app $PY "$TOP/tests/regress/browser_app.py" "$APP" local --log "$T/app.jsonl"
spawn other $PY "$TOP/tests/regress/browser_app.py" "$OTHER" other --log "$T/other.jsonl"
wait_port "$APP"
wait_port "$OTHER"

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
  - address: 127.0.0.1:$GWS
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key
domains: [gw.localhost]
auth:
  secret: $SECRET
sandboxes:
  - id: local
    address: 127.0.0.1
    ports:
      - {port: $APP, access: private}
  - id: other
    address: 127.0.0.1
    ports:
      - {port: $OTHER, access: public}
EOF
wait_port "$GWS"

tok=$("$AKGW" token -c "$T/gateway.yaml" --sandbox local --port "$APP" --ttl 1h)
OWN="https://$APP-local.gw.localhost:$GWS"
SIB="https://$OTHER-other.gw.localhost:$GWS"
PATHGW="http://127.0.0.1:$GW"

# JS: a credentialed fetch, read if CORS lets the page read it.
fetch_js() {
	echo "fetch('$1', {credentials: 'include'}).then(async r => r.status + ' ' + await r.text(), e => 'blocked')"
}
# JS: open a WebSocket, send one message, report the answer or the close.
ws_js() {
	echo "new Promise(res => { const w = new WebSocket('$1'); w.onopen = () => w.send('hi'); w.onmessage = e => { res('message ' + e.data); w.close(); }; w.onclose = e => res('closed ' + e.code); setTimeout(() => res('timeout'), 8000); })"
}

out=$(timeout 50 $PY "$TOP/tests/regress/chromium.py" \
	--step "open $SIB/" \
	--step "go location.href = '$OWN/app?access_token=$tok'" \
	--step "eval $(fetch_js /whoami)" \
	--step "eval $(ws_js "wss://$APP-local.gw.localhost:$GWS/ws")" \
	--step "eval document.cookie" \
	--step "cdp Network.getAllCookies" \
	--step "open $SIB/" \
	--step "eval $(fetch_js "$OWN/whoami")" \
	--step "eval $(ws_js "wss://$APP-local.gw.localhost:$GWS/ws")" \
	--step "open $OWN/" \
	--step "open $PATHGW/local/$APP/?access_token=$tok" \
	--step "open $PATHGW/other/$OTHER/" \
	--step "eval document.cookie = 'akgw_token=$tok; path=/local/$APP/'; 'set'" \
	--step "eval $(fetch_js "/local/$APP/whoami")" \
	--step "eval $(ws_js "ws://127.0.0.1:$GW/local/$APP/ws")" \
	2>"$T/chromium.log") || fail "chromium.py failed: $(tail -n 5 "$T/chromium.log")"
printf '%s\n' "$out" >"$T/steps.jsonl"
step() { sed -n "$1p" "$T/steps.jsonl"; }

# The sandbox's own page, opened from a link on a page of another sandbox
# (the browser marks that request same-site): the gateway sets the cookie
# and goes on by a page of its own origin, and the page, its credentialed
# fetch and its WebSocket work.
assert_contains "the other sandbox's page" '"text": "sandbox other"' "$(step 1)"
assert_contains "own page after the link" "\"url\": \"$OWN/app\"" "$(step 2)"
assert_contains "own page text" '"text": "sandbox local"' "$(step 2)"
assert_contains "own page status" '"status": 200' "$(step 2)"
grep -q "path=/app status=200 .*upstream_ms=- error=- " "$T/gateway.log" ||
	fail "the gateway did not answer the cross-site token link with its own page"
assert_contains "own fetch" '"value": "200 {\"sandbox\": \"local\"}"' "$(step 3)"
assert_contains "own WebSocket" '"value": "message local:hi"' "$(step 4)"
assert_contains "HttpOnly cookie" '"value": ""' "$(step 5)"
assert_contains "__Host- cookie" '"name": "__Host-akgw_token"' "$(step 6)"
assert_contains "cookie is Secure" '"secure": true' "$(step 6)"
ok "the sandbox's own page, fetch and WebSocket work, also from a link on another site"

# Host form: the sibling's page cannot use the cookie.
assert_contains "sibling fetch not read" '"value": "blocked"' "$(step 8)"
assert_contains "sibling WebSocket refused" '"value": "closed 1006"' "$(step 9)"
wait_log "$T/gateway.log" "path=/ws status=403 .*error=cross_origin_credential"
grep -q "path=/whoami status=403 .*error=cross_origin_credential" "$T/gateway.log" ||
	fail "the sibling's fetch was not refused with cross_origin_credential"
assert_contains "own page typed again" '"text": "sandbox local"' "$(step 10)"
ok "host form: a sibling page's credentialed fetch and WebSocket are refused"

# Path form: no cookie is issued, and a cookie the browser has anyway is
# refused, for the fetch and the WebSocket alike.
assert_contains "path form query token" '"status": 403' "$(step 11)"
assert_contains "path form page" "host-form address, http://$APP-local.gw.localhost:$GW/" "$(step 11)"
assert_contains "path-form other page" '"text": "sandbox other"' "$(step 12)"
assert_contains "path-form fetch refused" '"value": "403 {' "$(step 14)"
assert_contains "path-form fetch code" 'host_form_required' "$(step 14)"
assert_contains "path-form WebSocket refused" '"value": "closed 1006"' "$(step 15)"
wait_log "$T/gateway.log" "path=/local/$APP/ws status=403 .*error=host_form_required"
ok "path form: the other sandbox's page cannot use the cookie"

# Nothing refused reached the application: its one fetch and one
# WebSocket are the page's own, and nothing came from another site.
assert_eq "fetches at the application" "1" "$(grep -c '"path": "/whoami"' "$T/app.jsonl")"
assert_eq "WebSockets at the application" "1" "$(grep -c '"path": "/ws"' "$T/app.jsonl")"
if grep -q '"site": "same-site"\|"site": "cross-site"' "$T/app.jsonl"; then
	fail "a request from another site reached the application: $(grep 'same-site\|cross-site' "$T/app.jsonl")"
fi
if grep -q "akt1\." "$T/gateway.log"; then fail "a token was logged"; fi
ok "no refused request reached the application"
