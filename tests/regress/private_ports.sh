#!/bin/sh
# Private ports: tokens from Authorization: Bearer, X-Access-Token, the
# access_token query parameter (a browser is redirected and gets a cookie,
# on the host form)
# and the cookie; bad, expired and misdirected tokens are refused; tokens
# never reach the upstream or the log; require_tls_for_credentials.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
GWS=$(free_port)
ECHO=$(free_port)
WS=$(free_port)
SECRET=0123456789abcdef0123456789abcdef

spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" --log "$T/upstream.jsonl"
spawn ws $PY "$TOP/tests/regress/ws_echo.py" server "$WS"
wait_port "$ECHO"
wait_port "$WS"

cat >"$T/gw.yaml" <<EOF
listen:
  - address: 127.0.0.1:$GW
  - address: 127.0.0.1:$GWS
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key
domains: [localhost, gw.localhost]
auth:
  secret: $SECRET
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - {port: $ECHO, access: private}
      - {port: $WS, access: private}
  - id: other
    address: 127.0.0.1
    ports:
      - {port: $ECHO, access: private}
EOF
spawn_gateway "$GW" <"$T/gw.yaml"

tok=$("$AKGW" token -c "$T/gw.yaml" --sandbox sbx --port "$ECHO" --ttl 1h)
assert_contains "token format" "akt1." "$tok"
wstok=$("$AKGW" token -c "$T/gw.yaml" --sandbox sbx --port "$WS" --ttl 1h)
short=$("$AKGW" token -c "$T/gw.yaml" --sandbox sbx --port "$ECHO" --ttl 1s)
out=$("$AKGW" token -c "$T/gw.yaml" --sandbox nosuch --port 1 --ttl 1h 2>&1)
assert_eq "token for an unknown sandbox exit" "1" "$?"
out=$("$AKGW" token --sandbox local --port 8000 --ttl 1h 2>&1)
assert_eq "token without a secret exit" "1" "$?"
assert_contains "token without a secret" "auth.secret" "$out"
ok "akgateway token"

C="curl -sS --max-time 10"
U="http://$ECHO-sbx.localhost:$GW"
: >"$T/upstream.jsonl"

code() { $C -o "$T/body" -w '%{http_code}' "$@"; }

# No credential: 401, and nothing reaches the upstream.
assert_eq "no token" "401" "$(code "$U/echo")"
assert_contains "no token code" '"code":"unauthorized"' "$(cat "$T/body")"
assert_eq "bad token" "401" "$(code -H "Authorization: Bearer akt1.bad.sig" "$U/echo")"
sleep 2
assert_eq "expired token" "401" "$(code -H "X-Access-Token: $short" "$U/echo")"
assert_contains "expired message" "The access token expired." "$(cat "$T/body")"
assert_eq "token for another sandbox" "403" "$(code -H "X-Access-Token: $tok" "http://$ECHO-other.localhost:$GW/echo")"
assert_eq "token for another port" "403" "$(code -H "X-Access-Token: $wstok" "$U/echo")"
assert_eq "refused requests at the upstream" "0" "$(wc -l <"$T/upstream.jsonl")"
ok "missing, bad, expired and misdirected tokens are refused before the upstream"

# Each source works, and the credential is stripped before forwarding.
assert_eq "Bearer" "200" "$(code -H "Authorization: Bearer $tok" "$U/echo")"
assert_eq "X-Access-Token" "200" "$(code -H "X-Access-Token: $tok" "$U/echo")"
assert_eq "query" "200" "$(code "$U/echo?a=1&access_token=$tok&b=2")"
assert_contains "query stripped" '"path": "/echo?a=1&b=2"' "$(cat "$T/body")"
assert_eq "cookie" "200" "$(code -H "Cookie: x=1; akgw_token=$tok; y=2" "$U/echo")"
assert_contains "other cookies kept" '["Cookie", "x=1; y=2"]' "$(cat "$T/body")"
assert_eq "path form" "200" "$(code -H "X-Access-Token: $tok" "http://127.0.0.1:$GW/sbx/$ECHO/echo")"
# An application's own Authorization header is not ours and passes through.
assert_eq "app Authorization" "200" "$(code -H "X-Access-Token: $tok" -H "Authorization: Basic YTpi" "$U/echo")"
assert_contains "app Authorization kept" '["Authorization", "Basic YTpi"]' "$(cat "$T/body")"
if grep -q "akt1\." "$T/upstream.jsonl"; then fail "a token reached the upstream"; fi
ok "Bearer, X-Access-Token, query and cookie; stripped before forwarding"

# A browser navigation with ?access_token= is redirected and gets a cookie.
hdrs=$($C -D - -o /dev/null -H 'Sec-Fetch-Mode: navigate' "$U/page?x=1&access_token=$tok")
assert_contains "303" "HTTP/1.1 303" "$hdrs"
assert_contains "Location" "Location: /page?x=1" "$hdrs"
assert_contains "cookie attributes" "Path=/; HttpOnly; SameSite=Lax; Max-Age=" "$hdrs"
# Not on the path form, which every sandbox shares one origin with (see
# cross_origin_cookie.sh for auth.path_form_cookies).
assert_eq "path-form token link" "403" "$(code -H 'Accept: text/html' "http://127.0.0.1:$GW/sbx/$ECHO/page?access_token=$tok")"
assert_contains "path-form refusal" "<code>host_form_required</code>" "$(cat "$T/body")"
# curl as a browser: follow the redirect with a cookie jar.
if [ "$H2" = 1 ]; then
	# curl 7.88 cannot reuse a prior-knowledge connection for -L (curl
	# issue 10634, fixed in 8.0): follow the redirect by hand.
	$C -c "$T/jar" -o /dev/null -H 'Accept: text/html' "$U/echo?access_token=$tok"
	body=$($C -b "$T/jar" -H 'Accept: text/html' "$U/echo")
else
	body=$($C -L -c "$T/jar" -b "$T/jar" -H 'Accept: text/html' "$U/echo?access_token=$tok")
fi
assert_contains "after the redirect" '"path": "/echo"' "$body"
ok "query token becomes a cookie for browsers"

# A WebSocket authenticated by the cookie.
out=$($PY "$TOP/tests/regress/ws_echo.py" client "ws://$WS-sbx.localhost:$GW/ws" --count 5 --header "Cookie: akgw_token=$wstok")
assert_eq "websocket with cookie" "ok 5" "$out"
out=$($PY "$TOP/tests/regress/ws_echo.py" client "ws://$WS-sbx.localhost:$GW/ws" --count 1 2>&1)
assert_contains "websocket without token" "401" "$out"
ok "WebSocket with a cookie"

# Tokens and query strings never appear in the gateway's log (once the
# last request's line is there: lines are written by a thread of their own).
wait_log "$T/gateway.log" 'path=/ws status=401 '
if grep -q "akt1\." "$T/gateway.log"; then fail "a token was logged"; fi
if grep -q "access_token" "$T/gateway.log"; then fail "a query string was logged"; fi
ok "nothing secret in the log"

# require_tls_for_credentials: refused on plain HTTP, accepted over TLS.
kill "$GW_PID"; wait "$GW_PID" 2>/dev/null
sed 's/^  secret: .*/&\n  require_tls_for_credentials: true/' "$T/gw.yaml" >"$T/gw2.yaml"
spawn_gateway "$GW" <"$T/gw2.yaml"
wait_port "$GWS"
assert_eq "credential over plain HTTP" "403" "$(code -H "X-Access-Token: $tok" "$U/echo")"
assert_contains "credentials_need_tls" '"code":"credentials_need_tls"' "$(cat "$T/body")"
assert_eq "credential over TLS" "200" "$(code --cacert "$CERTS/ca.crt" -H "X-Access-Token: $tok" "https://$ECHO-sbx.gw.localhost:$GWS/echo")"
assert_contains "X-Forwarded-Proto https" '["X-Forwarded-Proto", "https"]' "$(cat "$T/body")"
ok "require_tls_for_credentials"
