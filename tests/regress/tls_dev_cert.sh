#!/bin/sh
# The development certificate's *.localhost was refused by Chromium and
# OpenSSL alike (a wildcard right under a single label), and only a test
# knew that *.gw.localhost with domains: [gw.localhost] works.  The dev
# certificate now covers gw.localhost and *.gw.localhost, and
# config/gateway-https.yaml serves it with gw.localhost as a domain.  This
# test runs that example (on free ports) and checks that OpenSSL, curl and
# Chromium (trusting the dev CA in its NSS database, certificates
# verified) all accept https://{port}-local.gw.localhost/, and that OpenSSL
# refuses a name under the bare *.localhost, as the docs say.
. "$(dirname "$0")/lib.sh"

for tool in curl openssl certutil chromium; do
	command -v $tool >/dev/null 2>&1 || fail "$tool is needed (make deps)"
done
[ -f "$CERTS/ca.crt" ] || fail "no development certificates in $CERTS (make certs)"

GW=$(free_port)
GWS=$(free_port)
ADMIN=$(free_port)
UP=$(free_port)
TP=$(free_port)
mkdir -p "$T/www" && echo "hello from the sandbox" >"$T/www/index.html"
spawn backend $PY -m http.server "$UP" --bind 127.0.0.1 --directory "$T/www"
wait_port "$UP"
sed -e "s|build/certs/|$CERTS/|g" -e "s|127.0.0.1:8080|127.0.0.1:$GW|" \
    -e "s|127.0.0.1:8443|127.0.0.1:$GWS|" -e "s|127.0.0.1:9090|127.0.0.1:$ADMIN|" \
    -e "s|listen_port: 8766|listen_port: $TP|" \
    "$TOP/config/gateway-https.yaml" >"$T/https.yaml"
spawn_gateway "$GWS" <"$T/https.yaml"

# OpenSSL: the host-form name verifies; one under *.localhost does not.
v=$(echo | openssl s_client -connect "127.0.0.1:$GWS" -servername "$UP-local.gw.localhost" \
	-verify_hostname "$UP-local.gw.localhost" -CAfile "$CERTS/ca.crt" 2>&1)
assert_contains "openssl verifies the host-form name" "Verify return code: 0 (ok)" "$v"
v=$(echo | openssl s_client -connect "127.0.0.1:$GWS" -servername gw.localhost \
	-verify_hostname gw.localhost -CAfile "$CERTS/ca.crt" 2>&1)
assert_contains "openssl verifies gw.localhost" "Verify return code: 0 (ok)" "$v"
v=$(echo | openssl s_client -connect "127.0.0.1:$GWS" -servername "$UP-local.localhost" \
	-verify_hostname "$UP-local.localhost" -CAfile "$CERTS/ca.crt" 2>&1)
assert_contains "openssl refuses *.localhost" "Verify return code: 62 (hostname mismatch)" "$v"
ok "OpenSSL verifies *.gw.localhost and gw.localhost, refuses a name under *.localhost"

# curl, verifying, resolves *.localhost to loopback itself.
out=$(curl -sS -m 10 --cacert "$CERTS/ca.crt" "https://$UP-local.gw.localhost:$GWS/" 2>&1)
assert_eq "curl through the HTTPS example" "hello from the sandbox" "$out"
ok "curl --cacert reaches https://$UP-local.gw.localhost:$GWS/"

# Chromium, verifying against the dev CA in a fresh NSS database.
mkdir -p "$T/home/.pki/nssdb"
certutil -N -d "sql:$T/home/.pki/nssdb" --empty-password || fail "certutil -N failed"
certutil -A -d "sql:$T/home/.pki/nssdb" -t "C,," -n akgateway-dev-ca -i "$CERTS/ca.crt" ||
	fail "certutil -A failed"
out=$(HOME="$T/home" timeout 50 $PY "$TOP/tests/regress/chromium.py" --verify-tls \
	--step "open https://$UP-local.gw.localhost:$GWS/" \
	--step "eval location.protocol + ' ' + document.body.innerText.trim()" \
	--step "open https://$UP-local.localhost:$GWS/" \
	2>"$T/chromium.log") || fail "chromium.py failed: $(tail -n 5 "$T/chromium.log")"
assert_contains "Chromium's status" '"status": 200' "$out"
assert_contains "Chromium's page" '"value": "https: hello from the sandbox"' "$out"
ok "Chromium verifies the dev certificate for https://$UP-local.gw.localhost:$GWS/"
assert_contains "Chromium refuses a name under *.localhost" "ERR_CERT_COMMON_NAME_INVALID" "$out"
ok "Chromium refuses https://$UP-local.localhost:$GWS/ (not in the certificate)"
