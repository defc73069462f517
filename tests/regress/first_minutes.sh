#!/bin/sh
# What a newcomer meets in the first minutes, beyond the tour:
# - the no_route page said "serves sandbox ports at
#   http://{port}-{sandbox}.localhost/" without the listener's port, so
#   following it went to port 80: it now names the listener's scheme and
#   port (and the order of its first domain), and the address it shows,
#   filled in, works;
# - "akgateway --help" left out "token --tunnel" and tunnel-server's flags;
# - "akgateway token --tunnel" for a sandbox without a tunnel minted
#   silently, while the port case warned.
. "$(dirname "$0")/lib.sh"

command -v curl >/dev/null 2>&1 || fail "curl is needed"
[ -f "$CERTS/server.crt" ] || fail "no development certificates in $CERTS (make certs)"

# --help: every subcommand and every flag of each.
out=$("$AKGW" --help)
assert_eq "--help exit" 0 $?
for want in "akgateway token --sandbox ID (--port N | --all-ports | --tunnel)" \
	"--ttl DURATION" "--tunnel       grant the sandbox's reverse tunnel" \
	"akgateway tunnel-server [--ws ADDR]" "--client-wait D" "--http-timeout D" \
	"--listen ADDR" "--token T" "-v, --verbose" "--check"; do
	assert_contains "akgateway --help" "$want" "$out"
done
ok "akgateway --help shows token (with --tunnel) and tunnel-server's flags"

GW=$(free_port)
GWS=$(free_port)
UP=$(free_port)
TP=$(free_port)
mkdir -p "$T/www" && echo "the app" >"$T/www/index.html"
spawn backend $PY -m http.server "$UP" --bind 127.0.0.1 --directory "$T/www"
wait_port "$UP"
spawn_gateway "$GW" <<EOT
listen:
  - address: 127.0.0.1:$GW
  - address: 127.0.0.1:$GWS
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key
domains: [gw.localhost]
auth:
  secret: "0123456789abcdef0123456789abcdef"
sandboxes:
  - id: notun
    address: 127.0.0.1
    ports: [{port: $UP}]
  - id: withtun
    address: 127.0.0.1
    ports: [{port: $UP}]
    tunnel: {listen_port: $TP}
EOT
wait_port "$GWS"

# token --tunnel: a warning for the sandbox without a tunnel, none for the other.
tok=$("$AKGW" token -c "$T/gateway.yaml" --sandbox notun --tunnel --ttl 1h 2>"$T/warn")
assert_eq "token exit" 0 $?
[ -n "$tok" ] || fail "no token printed"
assert_eq "token --tunnel warning" "akgateway token: warning: sandbox 'notun' has no tunnel in $T/gateway.yaml; the token is of no use until one is configured" "$(cat "$T/warn")"
"$AKGW" token -c "$T/gateway.yaml" --sandbox withtun --tunnel --ttl 1h >/dev/null 2>"$T/warn" ||
	fail "token for withtun failed"
assert_eq "no warning with a tunnel" "" "$(cat "$T/warn")"
"$AKGW" token -c "$T/gateway.yaml" --sandbox notun --port 1 --ttl 1h >/dev/null 2>"$T/warn"
assert_contains "the port case warns as before" "does not publish port 1" "$(cat "$T/warn")"
ok "token --tunnel warns when the sandbox has no tunnel, like the port case"

# no_route names the listener's scheme and port; the example, filled in, works.
for url in "http://127.0.0.1:$GW/" "https://127.0.0.1:$GWS/"; do
	case $url in https:*) s=https p=$GWS ;; *) s=http p=$GW ;; esac
	out=$(curl -s -m 5 --cacert "$CERTS/ca.crt" "$url")
	assert_contains "no_route code on $s" '"code":"no_route"' "$out"
	assert_contains "no_route sentence on $s" "serves sandbox ports at $s://{port}-{sandbox}.gw.localhost:$p/ and /{sandbox}/{port}/" "$out"
	ex=$(echo "$out" | sed -n 's|.* at \([a-z]*://{port}-{sandbox}[^ ]*/\) and .*|\1|p')
	ex=$(echo "$ex" | sed "s/{port}/$UP/; s/{sandbox}/notun/")
	got=$(curl -s -m 5 --cacert "$CERTS/ca.crt" "$ex")
	assert_eq "following the no_route example $ex" "the app" "$got"
	ok "no_route on $s shows $s://{port}-{sandbox}.gw.localhost:$p/, and $ex works"
done

# A first domain that reads only {sandbox}-{port} is shown that way.
GW2=$(free_port)
cat >"$T/idport.yaml" <<EOT
listen:
  - address: 127.0.0.1:$GW2
domains:
  - {name: ak.localhost, host_format: id-port}
sandboxes:
  - {id: notun, address: 127.0.0.1, ports: [{port: $UP}]}
EOT
spawn gateway2 "$AKGW" -c "$T/idport.yaml"
wait_port "$GW2"
out=$(curl -s -m 5 "http://127.0.0.1:$GW2/")
assert_contains "no_route for an id-port domain" "at http://{sandbox}-{port}.ak.localhost:$GW2/ and" "$out"
got=$(curl -s -m 5 "http://notun-$UP.ak.localhost:$GW2/")
assert_eq "following the id-port example" "the app" "$got"
ok "no_route shows {sandbox}-{port} for a domain that reads only that order"
