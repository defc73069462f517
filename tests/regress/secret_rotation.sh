#!/bin/sh
# Rotating the token secret without a flag day (issue 20): with
# auth.secrets: [A] a token minted with A opens a private port; restarted
# with [B, A] the A-token still works and akgateway token signs with B;
# restarted with [B] the A-token is refused (401 on a port, 403 on the
# tunnel) before the upstream, and the B-token works.  Neither secrets nor
# tokens reach the log or the upstream.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
GWS=$(free_port)
ECHO=$(free_port)
TUN=$(free_port)
A=aaaaaaaaaaaaaaaa0123456789abcdef
B=bbbbbbbbbbbbbbbb0123456789abcdef

spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" --log "$T/upstream.jsonl"
wait_port "$ECHO"

# conf SECRETS-LINE: a gateway configuration with that auth.secrets line.
conf() {
	cat <<EOF
listen:
  - address: 127.0.0.1:$GW
  - address: 127.0.0.1:$GWS
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key
domains: [localhost, gw.localhost]
auth:
  $1
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - {port: $ECHO, access: private}
    tunnel:
      listen_port: $TUN
EOF
}

C="curl -sS --max-time 10"
U="http://$ECHO-sbx.localhost:$GW/echo"
code() { $C -o "$T/body" -w '%{http_code}' "$@"; }

# tunnel_status TOKEN: the status of a tunnel request carrying TOKEN (a
# plain GET, so one the gateway lets past its check fails the upgrade).
tunnel_status() {
	raw_send "$GW" "GET /tunnel/sbx HTTP/1.1\r\nHost: localhost\r\nX-Auth: $1\r\nConnection: close\r\n\r\n" >"$T/tunnel"
	head -n 1 "$T/tunnel" | cut -d' ' -f2
}

# restart SECRETS-LINE: stop the gateway if it runs and start it with that.
restart() {
	if [ -n "${GW_PID:-}" ]; then stop "$GW_PID"; fi
	conf "$1" >"$T/gw.yaml"
	out=$("$AKGW" -c "$T/gw.yaml" --check 2>&1)
	assert_contains "--check with $1" "configuration is valid" "$out"
	spawn_gateway "$GW" <"$T/gw.yaml"
	wait_port "$GWS"
}

# no_secrets_logged PATTERN: once the last request's line (PATTERN) is in
# the gateway's log (a thread of its own writes it), neither secret nor any
# token is there, and no token reached the upstream.
no_secrets_logged() {
	wait_log "$T/gateway.log" "$1"
	for s in "$A" "$B" "akt1\."; do
		if grep -q "$s" "$T/gateway.log"; then fail "'$s' is in the gateway's log"; fi
	done
	if grep -q "akt1\." "$T/upstream.jsonl"; then fail "a token reached the upstream"; fi
}

# Phase 1: [A].
restart "secrets: [$A]"
tokA=$("$AKGW" token -c "$T/gw.yaml" --sandbox sbx --port "$ECHO" --ttl 1h)
assert_contains "A-token format" "akt1." "$tokA"
tunA=$("$AKGW" token -c "$T/gw.yaml" --sandbox sbx --tunnel --ttl 1h)
assert_eq "A-token with [A]" "200" "$(code -H "Authorization: Bearer $tokA" "$U")"
assert_contains "A-token with [A]: body" '"path": "/echo"' "$(cat "$T/body")"
assert_eq "no token with [A]" "401" "$(code "$U")"
assert_eq "A tunnel token with [A]" "400" "$(tunnel_status "$tunA")"
assert_contains "A tunnel token with [A]: past the check" '"code":"bad_websocket_upgrade"' "$(cat "$T/tunnel")"
no_secrets_logged "status=400 "
ok "secrets [A]: a token minted with A opens the port and the tunnel"

# Phase 2: [B, A]; the new secret first.
restart "secrets: [$B, $A]"
assert_eq "A-token with [B, A]" "200" "$(code -H "X-Access-Token: $tokA" "$U")"
assert_contains "A-token with [B, A]: body" '"path": "/echo"' "$(cat "$T/body")"
assert_eq "A-token with [B, A] over TLS" "200" "$(code --cacert "$CERTS/ca.crt" -H "X-Access-Token: $tokA" "https://$ECHO-sbx.gw.localhost:$GWS/echo")"
tokB=$("$AKGW" token -c "$T/gw.yaml" --sandbox sbx --port "$ECHO" --ttl 1h)
tunB=$("$AKGW" token -c "$T/gw.yaml" --sandbox sbx --tunnel --ttl 1h)
# Signed with B, the first: check the HMAC apart from the gateway.
signer=$($PY - "$tokB" "$A" "$B" <<'PYEOF'
import base64, hashlib, hmac, sys
tok = sys.argv[1]
head, sig = tok.rsplit(".", 1)
for name, key in (("A", sys.argv[2]), ("B", sys.argv[3])):
    mac = hmac.new(key.encode(), head.encode(), hashlib.sha256).digest()
    if base64.urlsafe_b64encode(mac).rstrip(b"=").decode() == sig:
        print(name)
PYEOF
)
assert_eq "akgateway token signs with the first secret" "B" "$signer"
assert_eq "B-token with [B, A]" "200" "$(code -H "X-Access-Token: $tokB" "$U")"
assert_contains "B-token with [B, A]: body" '"path": "/echo"' "$(cat "$T/body")"
assert_eq "A tunnel token with [B, A]" "400" "$(tunnel_status "$tunA")"
no_secrets_logged "status=400 "
ok "secrets [B, A]: the A-token still works, new tokens are signed with B"

# Phase 3: [B]; A dropped.
restart "secrets: [$B]"
: >"$T/upstream.jsonl"
assert_eq "A-token with [B]" "401" "$(code -H "X-Access-Token: $tokA" "$U")"
assert_contains "A-token with [B]: code" '"code":"unauthorized"' "$(cat "$T/body")"
assert_contains "A-token with [B]: message" "The access token's signature does not match" "$(cat "$T/body")"
assert_eq "A-token in a cookie with [B]" "401" "$(code -H "Cookie: akgw_token=$tokA" "$U")"
assert_eq "A tunnel token with [B]" "403" "$(tunnel_status "$tunA")"
assert_contains "A tunnel token with [B]: code" '"code":"forbidden"' "$(cat "$T/tunnel")"
assert_eq "refused requests at the upstream" "0" "$(wc -l <"$T/upstream.jsonl")"
assert_eq "B-token with [B]" "200" "$(code -H "Authorization: Bearer $tokB" "$U")"
assert_contains "B-token with [B]: body" '"path": "/echo"' "$(cat "$T/body")"
assert_eq "B tunnel token with [B]" "400" "$(tunnel_status "$tunB")"
assert_eq "requests at the upstream" "1" "$(wc -l <"$T/upstream.jsonl")"
no_secrets_logged "status=400 "
ok "secrets [B]: the A-token is refused before the upstream, the B-token works"

# The one-element form is the same list; a file with both is refused.
restart "secret: $B"
assert_eq "B-token with secret: B" "200" "$(code -H "X-Access-Token: $tokB" "$U")"
assert_eq "A-token with secret: B" "401" "$(code -H "X-Access-Token: $tokA" "$U")"
printf 'listen:\n  - address: 127.0.0.1:%s\nauth:\n  secret: %s\n  secrets: [%s]\n' \
    "$GW" "$A" "$B" >"$T/both.yaml"
out=$("$AKGW" -c "$T/both.yaml" --check 2>&1)
assert_eq "both keys exit" "1" "$?"
assert_eq "both keys message" "akgateway: $T/both.yaml:5:3: auth.secret and auth.secrets are both set; keep one (auth.secret: X is auth.secrets: [X])" "$out"
case "$out" in *"$A"*|*"$B"*) fail "an error message shows a secret" ;; esac
printf 'listen:\n  - address: 127.0.0.1:%s\nauth:\n  secrets:\n    - %s\n    - tooshort\n' \
    "$GW" "$B" >"$T/short.yaml"
out=$("$AKGW" -c "$T/short.yaml" --check 2>&1)
assert_eq "short entry message" "akgateway: $T/short.yaml:6:7: auth.secrets entry 2 must be at least 16 bytes; make one with: openssl rand -hex 32" "$out"
ok "auth.secret is the one-element form; both keys or a short entry are refused with file:line:column"
