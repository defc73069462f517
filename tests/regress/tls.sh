#!/bin/sh
# HTTPS listeners: the host form on gw.localhost and the path form with the
# development CA (curl --cacert), an SNI map, ALPN h2 and http/1.1, TLS 1.2 as the
# floor, session resumption, handshake failures that are logged and cost
# nothing else, and certificates reloaded on SIGHUP without dropping
# connections (a broken file keeps the old certificates in service).
. "$(dirname "$0")/lib.sh"

for tool in curl openssl; do
	command -v $tool >/dev/null 2>&1 || fail "$tool is needed for this test"
done
[ -f "$CERTS/ca.crt" ] || fail "no development certificates in $CERTS (make certs)"

GW=$(free_port)
GWS=$(free_port)
ECHO=$(free_port)
UP="$T/upstream.jsonl"

# The listener's files are copies, so the test can replace them.
mkdir -p "$T/tls"
cp "$CERTS/server.crt" "$CERTS/server.key" "$CERTS/other.crt" "$CERTS/other.key" "$T/tls/"

spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" --log "$UP"
wait_port "$ECHO"

spawn_gateway "$GWS" <<EOF
listen:
  - address: 127.0.0.1:$GW
  - address: 127.0.0.1:$GWS
    tls:
      cert: $T/tls/server.crt
      key: $T/tls/server.key
      sni:
        - names: [other.localhost]
          cert: $T/tls/other.crt
          key: $T/tls/other.key
domains: [localhost, gw.localhost]
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $ECHO
EOF
wait_port "$GW"

C="curl -sS --max-time 20"
CA="--cacert $CERTS/ca.crt"
HS="https://$ECHO-sbx.gw.localhost:$GWS"

# The values of field $1 in the last request the upstream received.
up_header() {
	tail -n 1 "$UP" | $PY -c '
import json, sys
r = json.loads(sys.stdin.read())
for k, v in r["headers"]:
    if k.lower() == sys.argv[1].lower():
        print(v)' "$1"
}

# The target of the last request the upstream received.
up_path() {
	tail -n 1 "$UP" | $PY -c 'import json, sys; print(json.loads(sys.stdin.read())["path"])'
}

# The certificate the TLS listener presents for server name $1 (none: no
# SNI), as openssl s_client sees it, in PEM.
served_cert() {
	if [ -n "$1" ]; then sni="-servername $1"; else sni="-noservername"; fi
	timeout 10 openssl s_client -connect "127.0.0.1:$GWS" $sni </dev/null 2>/dev/null |
		openssl x509 2>/dev/null
}

# Subject CN and SHA-256 fingerprint of a PEM certificate on stdin.
cert_cn() {
	openssl x509 -noout -subject -nameopt RFC2253 2>/dev/null | sed -n 's/^subject=.*CN=\([^,]*\).*/\1/p'
}
cert_fp() {
	openssl x509 -noout -fingerprint -sha256 2>/dev/null | sed 's/.*=//; s/://g' | tr 'A-F' 'a-f'
}

# How many times the gateway logged a failed handshake.
handshake_failures() {
	grep -c 'TLS handshake failed' "$T/gateway.log"
}

# Wait until the gateway log has $2 lines matching $1 (5 s at most).
wait_log() {
	i=0
	while [ "$(grep -c "$1" "$T/gateway.log")" -lt "$2" ] && [ $i -lt 100 ]; do
		sleep 0.05; i=$((i + 1))
	done
	[ "$(grep -c "$1" "$T/gateway.log")" -ge "$2" ] || fail "the gateway did not log '$1'"
}

# --- HTTPS, host form and path form -----------------------------------------
: >"$UP"
out=$($C $CA "$HS/echo?a=1") || fail "HTTPS host form on gw.localhost failed"
assert_contains "HTTPS host form reaches the upstream" '"path": "/echo?a=1"' "$out"
assert_eq "X-Forwarded-Proto over TLS" "https" "$(up_header X-Forwarded-Proto)"
assert_eq "Host over TLS" "$ECHO-sbx.gw.localhost:$GWS" "$(up_header Host)"
$C $CA -o /dev/null "https://127.0.0.1:$GWS/sbx/$ECHO/echo?b=2" || fail "HTTPS path form failed"
assert_eq "upstream target, HTTPS path form" "/echo?b=2" "$(up_path)"
assert_eq "X-Forwarded-Prefix, HTTPS path form" "/sbx/$ECHO" "$(up_header X-Forwarded-Prefix)"
assert_eq "X-Forwarded-Proto, HTTPS path form" "https" "$(up_header X-Forwarded-Proto)"
$C -o /dev/null "http://$ECHO-sbx.localhost:$GW/echo" || fail "plain listener failed"
assert_eq "X-Forwarded-Proto on the plain listener" "http" "$(up_header X-Forwarded-Proto)"
ok "HTTPS host form and path form, X-Forwarded-Proto https"

# Keep-alive and a 5 MiB upload over TLS.
conns=$($C $CA -w '%{num_connects}' -o /dev/null "$HS/echo" -o /dev/null "$HS/echo" \
	-o /dev/null "$HS/echo") || fail "three requests over one TLS connection"
assert_eq "TLS connections for 3 requests" "100" "$conns"
head -c 5242880 /dev/urandom >"$T/up.bin"
want=$(sha256sum <"$T/up.bin" | cut -d' ' -f1)
out=$($C $CA --data-binary "@$T/up.bin" "$HS/echo") || fail "upload over TLS"
assert_contains "upload over TLS checksum" "\"body_sha256\": \"$want\"" "$out"
out=$($C $CA -H 'Transfer-Encoding: chunked' --data-binary "@$T/up.bin" "$HS/echo") ||
	fail "chunked upload over TLS"
assert_contains "chunked upload over TLS checksum" "\"body_sha256\": \"$want\"" "$out"
ok "keep-alive and uploads over TLS"

# A client that is done closes without close_notify, as browsers do: that
# is the end of a connection, not a failed handshake.
n0=$(handshake_failures)
out=$($PY - "$GWS" "$CERTS/ca.crt" "$ECHO-sbx.gw.localhost" <<'PYEOF'
import socket, ssl, sys
port, ca, host = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=ca)
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                    server_hostname=host)
s.sendall(("GET /echo HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host, port)).encode())
buf = b""
while b"\r\n\r\n" not in buf:
    buf += s.recv(65536)
head, _, rest = buf.partition(b"\r\n\r\n")
cl = [int(l.split(b":")[1]) for l in head.split(b"\r\n")
      if l.lower().startswith(b"content-length:")][0]
while len(rest) < cl:
    rest += s.recv(65536)
print(head.split(b"\r\n")[0].decode())
s.close()   # no close_notify, all input read
PYEOF
)
assert_eq "request before a close without close_notify" "HTTP/1.1 200 OK" "$out"
sleep 0.3
assert_eq "handshake failures logged for a finished connection" "$n0" "$(handshake_failures)"
ok "a finished TLS connection is not logged as a failed handshake"

# --- SNI, ALPN, protocol floor, resumption -------------------------------------
assert_eq "certificate for other.localhost" "other.localhost" "$(served_cert other.localhost | cert_cn)"
assert_eq "certificate for a gw.localhost name" "localhost" "$(served_cert "$ECHO-sbx.gw.localhost" | cert_cn)"
assert_eq "certificate for an unknown name" "localhost" "$(served_cert unknown.example | cert_cn)"
assert_eq "certificate without SNI" "localhost" "$(served_cert "" | cert_cn)"
code=$($C $CA -o /dev/null -w '%{http_code}' "https://other.localhost:$GWS/") ||
	fail "curl could not verify other.localhost"
assert_eq "other.localhost (not a port URL) over TLS" "404" "$code"
ok "SNI picks other.crt for other.localhost"

# HTTP/2 is on by default (listen.http2): h2 first, http/1.1 for the
# clients that ask only for it (h2_downstream.sh checks http2: false).
out=$(timeout 10 openssl s_client -connect "127.0.0.1:$GWS" -servername localhost \
	-alpn h2,http/1.1 </dev/null 2>/dev/null)
assert_contains "ALPN" "ALPN protocol: h2" "$out"
out=$(timeout 10 openssl s_client -connect "127.0.0.1:$GWS" -servername localhost \
	-alpn http/1.1 </dev/null 2>/dev/null)
assert_contains "ALPN for an HTTP/1.1 client" "ALPN protocol: http/1.1" "$out"
out=$(timeout 10 openssl s_client -connect "127.0.0.1:$GWS" -servername other.localhost \
	-alpn h2,http/1.1 </dev/null 2>/dev/null)
assert_contains "ALPN on an SNI certificate" "ALPN protocol: h2" "$out"
ok "ALPN selects h2, and http/1.1 for a client that asks only for it"

timeout 10 openssl s_client -connect "127.0.0.1:$GWS" -servername localhost -tls1_2 \
	-sess_out "$T/sess" </dev/null >/dev/null 2>&1 || fail "TLS 1.2 handshake failed"
out=$(timeout 10 openssl s_client -connect "127.0.0.1:$GWS" -servername localhost -tls1_2 \
	-sess_in "$T/sess" </dev/null 2>/dev/null)
assert_contains "TLS 1.2 session resumption" "Reused, TLSv1.2" "$out"
ok "TLS 1.2 session resumption"

n0=$(handshake_failures)
out=$(timeout 10 openssl s_client -connect "127.0.0.1:$GWS" -servername localhost -tls1_1 \
	-cipher 'DEFAULT:@SECLEVEL=0' </dev/null 2>&1) && fail "a TLS 1.1 handshake succeeded: $out"
case "$out" in *"no protocols available"*) fail "openssl s_client could not offer TLS 1.1" ;; esac
wait_log 'TLS handshake failed' $((n0 + 1))
out=$($C "http://127.0.0.1:$GWS/sbx/$ECHO/echo" 2>&1) &&
	fail "a plain HTTP request on the TLS port was answered: $out"
wait_log 'TLS handshake failed' $((n0 + 2))
code=$($C $CA -o /dev/null -w '%{http_code}' "$HS/echo")
assert_eq "HTTPS after failed handshakes" "200" "$code"
kill -0 "$GW_PID" 2>/dev/null || fail "the gateway died"
ok "TLS 1.1 and plain HTTP refused, logged, and the gateway keeps serving"

# --- SIGHUP: replaced certificates ---------------------------------------------
# A second CA and a server certificate for the same names.
mkdir -p "$T/ca2"
cat >"$T/ca2/ext.cnf" <<EOF
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
[srv]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, DNS:*.localhost, DNS:*.gw.localhost, IP:127.0.0.1
EOF
(
	cd "$T/ca2" &&
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key &&
	openssl req -new -x509 -key ca.key -subj "/CN=akgateway test CA 2" -days 2 \
		-config ext.cnf -extensions ca -out ca.crt &&
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out server.key &&
	openssl req -new -key server.key -subj "/CN=localhost2" -out server.csr &&
	openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -set_serial 2 -days 2 \
		-extfile ext.cnf -extensions srv -out server.crt
) >"$T/ca2/openssl.out" 2>&1 || fail "cannot make the second CA: $(cat "$T/ca2/openssl.out")"
CA2="--cacert $T/ca2/ca.crt"
old_fp=$(cert_fp <"$CERTS/server.crt")
new_fp=$(cert_fp <"$T/ca2/server.crt")

# A client that holds one TLS connection over the reload: one request
# before it, one after; it prints the status and the certificate it saw.
$PY - "$GWS" "$CERTS/ca.crt" "$ECHO-sbx.gw.localhost" "$T/hup.done" >"$T/keepalive.out" 2>&1 <<'PYEOF' &
import hashlib, os, socket, ssl, sys, time
port, ca, host, flag = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
ctx = ssl.create_default_context(cafile=ca)
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                    server_hostname=host)
fp = hashlib.sha256(s.getpeercert(binary_form=True)).hexdigest()
def req(n):
    s.sendall(("GET /echo?n=%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (n, host, port)).encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            return "closed"
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    cl = [int(l.split(b":")[1]) for l in head.split(b"\r\n")
          if l.lower().startswith(b"content-length:")][0]
    while len(rest) < cl:
        d = s.recv(65536)
        if not d:
            return "closed"
        rest += d
    return head.split(b" ")[1].decode()
print("first", req(1), fp, flush=True)
deadline = time.monotonic() + 20
while not os.path.exists(flag) and time.monotonic() < deadline:
    time.sleep(0.05)
print("second", req(2), fp, flush=True)
PYEOF
KA=$!
# A client whose TCP connection is accepted before the reload and whose
# handshake (with SNI) happens after it.
$PY - "$GWS" "$CERTS/ca.crt" "$T/hup.pending" >"$T/pending.out" 2>&1 <<'PYEOF' &
import os, socket, ssl, sys, time
port, ca, flag = int(sys.argv[1]), sys.argv[2], sys.argv[3]
raw = socket.create_connection(("127.0.0.1", port), timeout=10)
print("connected", flush=True)
deadline = time.monotonic() + 20
while not os.path.exists(flag) and time.monotonic() < deadline:
    time.sleep(0.05)
ctx = ssl.create_default_context(cafile=ca)
try:
    s = ctx.wrap_socket(raw, server_hostname="other.localhost")
    cn = [v for rdn in s.getpeercert()["subject"] for k, v in rdn if k == "commonName"]
    print("handshake", cn[0], flush=True)
except Exception as e:
    print("handshake failed:", e, flush=True)
PYEOF
PEND=$!
i=0
while ! grep -q '^first' "$T/keepalive.out" && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
assert_eq "request before the reload" "first 200 $old_fp" "$(cat "$T/keepalive.out")"
i=0
while ! grep -q '^connected' "$T/pending.out" && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
grep -q '^connected' "$T/pending.out" || fail "the pending client did not connect"

cp "$T/ca2/server.crt" "$T/tls/server.crt"
cp "$T/ca2/server.key" "$T/tls/server.key"
kill -HUP "$GW_PID"
wait_log 'configuration reloaded' 1
code=$($C $CA2 -o /dev/null -w '%{http_code}' "$HS/echo") ||
	fail "a new connection does not verify with the new CA"
assert_eq "HTTPS with the new certificate" "200" "$code"
$C $CA -o /dev/null "$HS/echo" 2>/dev/null && fail "a new connection still verifies with the old CA"
assert_eq "served certificate after the reload" "$new_fp" "$(served_cert "$ECHO-sbx.gw.localhost" | cert_fp)"
assert_eq "SNI certificate after the reload" "other.localhost" "$(served_cert other.localhost | cert_cn)"
touch "$T/hup.done"
i=0
while kill -0 $KA 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
assert_eq "the connection opened before the reload, after it" \
	"first 200 $old_fp
second 200 $old_fp" "$(cat "$T/keepalive.out")"
ok "SIGHUP reloads certificates; open connections keep working"

# The connection accepted before the reload now does its handshake, asking
# for other.localhost: it must get other.crt (old or reloaded, the same
# file), and the gateway must live on.
touch "$T/hup.pending"
i=0
while kill -0 $PEND 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
assert_eq "a handshake begun before the reload" "connected
handshake other.localhost" "$(cat "$T/pending.out")"
kill -0 "$GW_PID" 2>/dev/null || fail "the gateway died during a handshake begun before the reload"
ok "a handshake begun before SIGHUP completes with SNI"

# --- SIGHUP with broken files: refused, the old certificates stay in service -------------
echo "not a certificate" >"$T/tls/server.crt"
kill -HUP "$GW_PID"
wait_log 'configuration not reloaded' 1
assert_eq "served certificate after a broken reload" "$new_fp" \
	"$(served_cert "$ECHO-sbx.gw.localhost" | cert_fp)"
code=$($C $CA2 -o /dev/null -w '%{http_code}' "$HS/echo") || fail "HTTPS after a broken reload"
assert_eq "HTTPS after a broken reload" "200" "$code"
# A certificate that does not match its key is refused the same way.
cp "$CERTS/other.crt" "$T/tls/server.crt"
kill -HUP "$GW_PID"
wait_log 'configuration not reloaded' 2
assert_contains "mismatched key reason" "does not match" \
	"$(grep 'configuration not reloaded' "$T/gateway.log" | tail -n 1)"
assert_eq "served certificate after a mismatched reload" "$new_fp" \
	"$(served_cert "$ECHO-sbx.gw.localhost" | cert_fp)"
kill -0 "$GW_PID" 2>/dev/null || fail "the gateway died"
ok "SIGHUP with a broken certificate keeps the old one"
