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

# keys_of YAML: the keys the parser expects where YAML puts 'zz_unknown'.
keys_of() {
	printf '%s\n' "$1" >"$T/probe.yaml"
	msg=$("$AKGW" -c "$T/probe.yaml" --check 2>&1)
	case "$msg" in
	*"unknown key 'zz_unknown'"*"(expected one of: "*")") ;;
	*) fail "no unknown-key error for the probe: $msg" ;;
	esac
	echo "$msg" | sed 's/.*(expected one of: \(.*\))$/\1/' | tr -d ',' 
}
L='listen:
  - address: 127.0.0.1:1'
TLS="$L
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key"
SB="$L
sandboxes:
  - id: a
    address: 127.0.0.1"
n=0
for probe in \
	"$L
zz_unknown: 1" \
	"$L
log: {zz_unknown: 1}" \
	"listen:
  - address: 127.0.0.1:1
    zz_unknown: 1" \
	"$L
    tls:
      zz_unknown: 1" \
	"$TLS
      sni:
        - zz_unknown: 1" \
	"$L
admin: {zz_unknown: 1}" \
	"$L
domains:
  - {name: x.example, zz_unknown: 1}" \
	"$L
timeouts: {zz_unknown: 1}" \
	"$L
limits: {zz_unknown: 1}" \
	"$L
auth: {zz_unknown: 1}" \
	"$SB
    zz_unknown: 1" \
	"$SB
    ports:
      - {port: 1, zz_unknown: 1}" \
	"$SB
    tunnel: {listen_port: 8766, zz_unknown: 1}"; do
	for k in $(keys_of "$probe"); do
		# Set, or shown commented out, as "key:" or "- key:".
		grep -Eq "^[ #-]*$k:" "$EX" || fail "config/gateway.yaml leaves out '$k' (a key of: $(keys_of "$probe" | tr '\n' ' '))"
		n=$((n + 1))
	done
done
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
