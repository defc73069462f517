#!/bin/sh
# Issue 16.1 with curl and the fields a browser sends: the gateway's cookie
# counts only for requests from the sandbox port's own origin (Origin,
# Sec-Fetch-Site), over plain HTTP and HTTPS, for requests and WebSocket
# upgrades; on HTTPS it is __Host- and Secure; the path form refuses the
# query-to-cookie flow and the cookie unless auth.path_form_cookies, and
# header tokens work everywhere.  Each refusal has its status, code,
# sentence, access line and counter, and never reaches the upstream.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
GWS=$(free_port)
ADM=$(free_port)
ECHO=$(free_port)
WS=$(free_port)
OTHER=$(free_port)
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
admin:
  address: 127.0.0.1:$ADM
domains: [gw.localhost]
auth:
  secret: $SECRET
sandboxes:
  - id: local
    address: 127.0.0.1
    ports:
      - {port: $ECHO, access: private}
      - {port: $WS, access: private}
  - id: other
    address: 127.0.0.1
    ports:
      - {port: $OTHER, access: public}
EOF
spawn_gateway "$GW" <"$T/gw.yaml"
wait_port "$GWS"
wait_port "$ADM"

tok=$("$AKGW" token -c "$T/gw.yaml" --sandbox local --port "$ECHO" --ttl 1h)
wstok=$("$AKGW" token -c "$T/gw.yaml" --sandbox local --port "$WS" --ttl 1h)
C="curl -sS --max-time 10"
CS="$C --cacert $CERTS/ca.crt"
U="http://$ECHO-local.gw.localhost:$GW"
US="https://$ECHO-local.gw.localhost:$GWS"
SIB="http://$OTHER-other.gw.localhost:$GW"
CK="Cookie: akgw_token=$tok"
CKS="Cookie: __Host-akgw_token=$tok"

code() { $C -o "$T/body" -w '%{http_code}' "$@"; }
codes() { $CS -o "$T/body" -w '%{http_code}' "$@"; }
upstream() { wc -l <"$T/upstream.jsonl" | tr -d ' '; }
: >"$T/upstream.jsonl"

# The cookie from the port's own page, a navigation or curl: forwarded.
assert_eq "cookie alone" "200" "$(code -H "$CK" "$U/echo")"
assert_eq "own Origin" "200" "$(code -H "$CK" -H "Origin: $U" "$U/echo")"
assert_eq "own Origin, other case" "200" "$(code -H "$CK" -H "Origin: HTTP://$ECHO-LOCAL.gw.localhost:$GW" "$U/echo")"
assert_eq "same-origin" "200" "$(code -H "$CK" -H "Sec-Fetch-Site: same-origin" -H "Sec-Fetch-Mode: cors" "$U/echo")"
assert_eq "typed address" "200" "$(code -H "$CK" -H "Sec-Fetch-Site: none" -H "Sec-Fetch-Mode: navigate" "$U/echo")"
assert_eq "own POST" "200" "$(code -H "$CK" -H "Origin: $U" -H "Sec-Fetch-Site: same-origin" -d x=1 "$U/echo")"
assert_eq "forwarded so far" "6" "$(upstream)"
ok "the cookie from the port's own origin"

# The cookie from a page of another sandbox under the same parent domain,
# or of another site: 403 cross_origin_credential, before the upstream.
assert_eq "sibling Origin" "403" "$(code -H "$CK" -H "Origin: $SIB" -H "Sec-Fetch-Site: same-site" "$U/echo")"
body=$(cat "$T/body")
assert_contains "code" '"code":"cross_origin_credential"' "$body"
assert_contains "sentence" "The cookie for port $ECHO of sandbox 'local' counts only on pages of $U, and this request came from $SIB: a page of another origin cannot use it." "$body"
hdrs=$($C -D - -o /dev/null -H "$CK" -H "Origin: $SIB" "$U/echo")
assert_contains "X-Gateway-Error" "X-Gateway-Error: cross_origin_credential" "$hdrs"
assert_eq "sibling fetch, no Origin" "403" "$(code -H "$CK" -H "Sec-Fetch-Site: same-site" -H "Sec-Fetch-Mode: no-cors" "$U/echo")"
assert_contains "Sec-Fetch-Site sentence" "came from another site (Sec-Fetch-Site: same-site)" "$(cat "$T/body")"
assert_eq "cross-site" "403" "$(code -H "$CK" -H "Sec-Fetch-Site: cross-site" "$U/echo")"
assert_eq "Origin null" "403" "$(code -H "$CK" -H "Origin: null" "$U/echo")"
assert_eq "other port of the sandbox" "403" "$(code -H "$CK" -H "Origin: http://$WS-local.gw.localhost:$GW" "$U/echo")"
assert_eq "https Origin on http" "403" "$(code -H "$CK" -H "Origin: $US" "$U/echo")"
assert_eq "sibling POST" "403" "$(code -H "$CK" -H "Origin: $SIB" -d x=1 "$U/echo")"
# A navigation gets the page in HTML.
assert_eq "sibling iframe" "403" "$(code -H "$CK" -H "Sec-Fetch-Site: same-site" -H "Sec-Fetch-Mode: navigate" -H "Sec-Fetch-Dest: iframe" "$U/echo")"
assert_contains "HTML page" "<code>cross_origin_credential</code>" "$(cat "$T/body")"
# A WebSocket upgrade from the sibling's page, and from the port's own.
out=$($PY "$TOP/tests/regress/ws_echo.py" client "ws://$WS-local.gw.localhost:$GW/ws" --count 1 \
	--header "Cookie: akgw_token=$wstok" --header "Origin: $SIB" 2>&1)
assert_contains "sibling WebSocket" "403" "$out"
out=$($PY "$TOP/tests/regress/ws_echo.py" client "ws://$WS-local.gw.localhost:$GW/ws" --count 3 \
	--header "Cookie: akgw_token=$wstok" --header "Origin: http://$WS-local.gw.localhost:$GW" \
	--header "Sec-Fetch-Site: same-origin")
assert_eq "own WebSocket" "ok 3" "$out"
assert_eq "refused requests at the upstream" "6" "$(upstream)"
ok "the cookie from another origin is refused, requests and WebSockets alike"

# Header tokens are not the browser's doing: they work from anywhere.
assert_eq "Bearer, sibling Origin" "200" "$(code -H "Authorization: Bearer $tok" -H "Origin: $SIB" -H "Sec-Fetch-Site: same-site" "$U/echo")"
assert_eq "X-Access-Token, cross-site" "200" "$(code -H "X-Access-Token: $tok" -H "$CK" -H "Sec-Fetch-Site: cross-site" "$U/echo")"
if grep -q "akt1\." "$T/upstream.jsonl"; then fail "a token reached the upstream"; fi
ok "header tokens work from any origin"

# HTTPS: the cookie is __Host- and Secure; only that name counts there.
hdrs=$($CS -D - -o /dev/null -H 'Sec-Fetch-Mode: navigate' -H 'Sec-Fetch-Site: none' "$US/page?access_token=$tok")
assert_contains "303" "HTTP/1.1 303" "$hdrs"
assert_contains "Location" "Location: /page" "$hdrs"
assert_contains "__Host- cookie" "Set-Cookie: __Host-akgw_token=$tok; Path=/; HttpOnly; SameSite=Lax; Max-Age=" "$hdrs"
assert_contains "Secure" "; Secure" "$hdrs"
assert_eq "__Host- cookie, own Origin" "200" "$(codes -H "$CKS" -H "Origin: $US" "$US/echo")"
assert_eq "__Host- cookie, sibling" "403" "$(codes -H "$CKS" -H "Origin: https://$OTHER-other.gw.localhost:$GWS" "$US/echo")"
assert_eq "http Origin on https" "403" "$(codes -H "$CKS" -H "Origin: $U" "$US/echo")"
assert_eq "bare cookie over HTTPS" "401" "$(codes -H "$CK" "$US/echo")"
assert_eq "__Host- cookie among others" "200" "$(codes -H "Cookie: a=1; __Host-akgw_token=$tok" -H "Sec-Fetch-Site: same-origin" "$US/echo")"
assert_contains "only the other cookie upstream" '["Cookie", "a=1"]' "$(cat "$T/body")"
# A token link followed from another site: after a 303 the browser would
# call the next request cross-site, so the gateway goes on by its own page.
hdrs=$($CS -D "$T/hdrs" -o "$T/body" -H 'Sec-Fetch-Mode: navigate' -H 'Sec-Fetch-Site: cross-site' "$US/page?x=1&access_token=$tok"; cat "$T/hdrs")
assert_contains "landing 200" "HTTP/1.1 200 OK" "$hdrs"
assert_contains "landing cookie" "Set-Cookie: __Host-akgw_token=" "$hdrs"
assert_contains "landing refresh" '<meta http-equiv="refresh" content="0;url=/page?x=1">' "$(cat "$T/body")"
hdrs=$($CS -I -H 'Sec-Fetch-Mode: navigate' -H 'Sec-Fetch-Site: cross-site' "$US/page?access_token=$tok")
assert_contains "HEAD gets the 303, no body" "HTTP/1.1 303" "$hdrs"
ok "HTTPS: __Host- and Secure; a link from another site lands on a page of ours"

# The path form: one origin for every sandbox, so no cookie by default.
P="http://127.0.0.1:$GW/local/$ECHO"
n=$(upstream)
assert_eq "path-form token link" "403" "$(code -H 'Sec-Fetch-Mode: navigate' -H 'Accept: text/html' "$P/page?access_token=$tok")"
assert_contains "host_form_required page" "<code>host_form_required</code>" "$(cat "$T/body")"
assert_contains "names the host form" "host-form address, http://$ECHO-local.gw.localhost:$GW/" "$(cat "$T/body")"
assert_eq "path-form cookie" "403" "$(code -H "Cookie: akgw_token=$tok" "$P/echo")"
assert_contains "path-form cookie code" '"code":"host_form_required"' "$(cat "$T/body")"
assert_eq "path-form cookie, own Origin" "403" "$(code -H "Cookie: akgw_token=$tok" -H "Origin: http://127.0.0.1:$GW" "$P/echo")"
assert_eq "path form refusals at the upstream" "$n" "$(upstream)"
assert_eq "path-form Bearer (the SDK)" "200" "$(code -H "Authorization: Bearer $tok" "$P/echo")"
assert_eq "path-form X-Access-Token" "200" "$(code -H "X-Access-Token: $tok" "$P/echo")"
assert_eq "path-form query token, not a navigation" "200" "$(code "$P/echo?access_token=$tok")"
ok "path form: no cookie, no token link; header tokens work"

# Every refusal is logged with its code and counted.
grep -q "path=/echo status=403 .*error=cross_origin_credential" "$T/gateway.log" || fail "no access line for cross_origin_credential"
grep -q "path=/local/$ECHO/page status=403 .*error=host_form_required" "$T/gateway.log" || fail "no access line for host_form_required"
m=$($C "http://127.0.0.1:$ADM/metrics")
assert_contains "counter cross_origin_credential" 'akgw_gateway_errors_total{code="cross_origin_credential"} 12' "$m"
assert_contains "counter host_form_required" 'akgw_gateway_errors_total{code="host_form_required"} 3' "$m"
if grep -q "akt1\." "$T/gateway.log"; then fail "a token was logged"; fi
ok "access lines and counters"

# auth.path_form_cookies: true restores the cookie on the path form, for
# the gateway's own origin (which every sandbox shares) only.
kill "$GW_PID"; wait "$GW_PID" 2>/dev/null
sed 's/^  secret: .*/&\n  path_form_cookies: true/' "$T/gw.yaml" >"$T/gw2.yaml"
spawn_gateway "$GW" <"$T/gw2.yaml"
wait_port "$GWS"
hdrs=$($C -D - -o /dev/null -H 'Accept: text/html' "$P/page?access_token=$tok")
assert_contains "path-form 303" "HTTP/1.1 303" "$hdrs"
assert_contains "path-form Location" "Location: /local/$ECHO/page" "$hdrs"
assert_contains "path-form cookie path" "Set-Cookie: akgw_token=$tok; Path=/local/$ECHO/; HttpOnly" "$hdrs"
hdrs=$($CS -D - -o /dev/null -H 'Accept: text/html' "https://127.0.0.1:$GWS/local/$ECHO/page?access_token=$tok")
assert_contains "path-form __Secure- cookie" "Set-Cookie: __Secure-akgw_token=$tok; Path=/local/$ECHO/; HttpOnly; SameSite=Lax; Max-Age=" "$hdrs"
assert_eq "path-form cookie, flag on" "200" "$(code -H "Cookie: akgw_token=$tok" "$P/echo")"
assert_eq "path-form cookie, gateway's Origin" "200" "$(code -H "Cookie: akgw_token=$tok" -H "Origin: http://127.0.0.1:$GW" "$P/echo")"
assert_eq "path-form cookie, another site" "403" "$(code -H "Cookie: akgw_token=$tok" -H "Origin: http://evil.example" "$P/echo")"
assert_contains "another site code" '"code":"cross_origin_credential"' "$(cat "$T/body")"
ok "auth.path_form_cookies: true"
