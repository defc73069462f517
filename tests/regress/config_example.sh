#!/bin/sh
# config/gateway.yaml claimed to show the defaults but left out auth:,
# timeouts.websocket_idle and limits.max_connections_per_sandbox, and said
# "access: public   # only public in this release" while private ports
# exist.  This test --checks the example (and config/gateway-https.yaml),
# and asks the parser itself for every key it knows, section by section
# (the "expected one of" list of an unknown-key error), so that a key added
# to the gateway and not to the example fails here.
. "$(dirname "$0")/lib.sh"

EX="$TOP/config/gateway.yaml"
[ -f "$CERTS/server.crt" ] || fail "no development certificates in $CERTS (make certs)"

out=$(cd "$TOP" && "$AKGW" -c config/gateway.yaml --check 2>&1)
assert_eq "--check the example" "akgateway: config/gateway.yaml: configuration is valid" "$out"
ok "config/gateway.yaml passes --check"

# The HTTPS example names build/certs; check it against this build's.
sed "s|build/certs/|$CERTS/|g" "$TOP/config/gateway-https.yaml" >"$T/https.yaml"
out=$("$AKGW" -c "$T/https.yaml" --check 2>&1)
assert_contains "--check the HTTPS example" "configuration is valid" "$out"
ok "config/gateway-https.yaml passes --check"

grep -q "only public" "$EX" && fail "the example still says only public ports exist"

# Every key the parser knows (lib.sh), set or shown commented out, as
# "key:" or "- key:".
conf_keys >"$T/conf_keys"
n=0
while read -r sect k; do
	grep -Eq "^[ #-]*$k:" "$EX" || fail "config/gateway.yaml leaves out '$k' (a key of $sect: $(grep "^$sect " "$T/conf_keys" | cut -d' ' -f2 | tr '\n' ' '))"
	n=$((n + 1))
done <"$T/conf_keys"
[ $n -gt 40 ] || fail "only $n keys found: the probes no longer work"
ok "config/gateway.yaml shows all $n keys the parser knows"

# The values it sets are the defaults: the same answers as the built-in.
"$AKGW" -c "$EX" --check >/dev/null 2>&1 || fail "the example does not pass --check"
for key in 'request_header: 10s' 'connect: 5s' 'keepalive: 75s' 'upstream_idle: 5s' \
	'upstream_response: 0' 'idle: 300s' 'websocket_idle: 1h' 'max_connections: 10000' \
	'max_header_size: 32KiB' 'max_headers: 100' 'max_body_size: 0' 'cookie: akgw_token' \
	'require_tls_for_credentials: false' 'path_form_cookies: false' 'mode: terminate' \
	'client_wait: 10s' 'http_timeout: 600s' 'workers: auto' 'level: info' 'format: text'; do
	grep -q "^ *$key\( \|$\)" "$EX" || fail "config/gateway.yaml does not set '$key' (docs/configuration.md's default)"
	[ "$key" = "workers: auto" ] && continue # prose, not a table row
	grep -q "\`${key%%:*}\`.*\`${key#*: }\`" "$TOP/docs/configuration.md" ||
		fail "docs/configuration.md does not give '$key' as the default"
done
ok "the example's values are the documented defaults"
