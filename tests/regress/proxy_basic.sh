#!/bin/sh
# The first proxied requests: host-form routing to a sandbox from the YAML
# sandboxes: section, byte-exact bodies both ways, keep-alive on both sides,
# and clear refusals that never reach the upstream.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
FILES=$(free_port)
ECHO=$(free_port)
CLOSED=$(free_port)

mkdir -p "$T/www"
echo "hello from the sandbox" >"$T/www/index.txt"
head -c 10485760 /dev/urandom >"$T/www/big.bin"
spawn files sh -c "cd '$T/www' && exec $PY -m http.server $FILES --bind 127.0.0.1"
spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" --log "$T/upstream.jsonl"
wait_port "$FILES"
wait_port "$ECHO"

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
domains: [localhost, gw.test]
timeouts:
  connect: 2s
sandboxes:
  - id: sbx@v1/one
    address: 127.0.0.1
    ports:
      - port: $FILES
      - port: $ECHO
        access: public
      - port: $CLOSED
  - id: other
    address: 127.0.0.1
    ports:
      - port: $ECHO
        host_rewrite: "localhost:\${port}"
EOF

C="curl -sS --max-time 20"
# curl resolves *.localhost to loopback itself; other names use --resolve.
R="--resolve $FILES-sbx-at-v1-one.gw.test:$GW:127.0.0.1"

# A GET through the host form, by safe id, on both domains.
body=$($C "http://$FILES-sbx-at-v1-one.localhost:$GW/index.txt")
assert_eq "GET body" "hello from the sandbox" "$body"
body=$($C $R "http://$FILES-sbx-at-v1-one.gw.test:$GW/index.txt")
assert_eq "GET body on the second domain" "hello from the sandbox" "$body"
ok "GET through the host form"

# A 10 MiB download, byte for byte.
want=$(sha256sum <"$T/www/big.bin" | cut -d' ' -f1)
got=$($C "http://$FILES-sbx-at-v1-one.localhost:$GW/big.bin" | sha256sum | cut -d' ' -f1)
assert_eq "10 MiB download checksum" "$want" "$got"
ok "10 MiB download"

# A 10 MiB upload with Content-Length, then chunked.
out=$($C --data-binary "@$T/www/big.bin" "http://$ECHO-sbx-at-v1-one.localhost:$GW/echo")
assert_contains "upload checksum" "\"body_sha256\": \"$want\"" "$out"
assert_contains "upload length" "\"body_len\": 10485760" "$out"
out=$($C -H 'Transfer-Encoding: chunked' --data-binary "@$T/www/big.bin" "http://$ECHO-sbx-at-v1-one.localhost:$GW/echo")
assert_contains "chunked upload checksum" "\"body_sha256\": \"$want\"" "$out"
ok "10 MiB uploads, Content-Length and chunked"

# Forwarded headers and Host: kept, or rewritten when host_rewrite is set.
out=$($C "http://$ECHO-sbx-at-v1-one.localhost:$GW/echo")
assert_contains "Host kept" "[\"Host\", \"$ECHO-sbx-at-v1-one.localhost:$GW\"]" "$out"
assert_contains "X-Forwarded-For" "[\"X-Forwarded-For\", \"127.0.0.1\"]" "$out"
assert_contains "X-Forwarded-Proto" "[\"X-Forwarded-Proto\", \"http\"]" "$out"
assert_contains "Via" "[\"Via\", \"1.1 akgateway\"]" "$out"
out=$($C "http://$ECHO-other.localhost:$GW/echo")
assert_contains "Host rewritten" "[\"Host\", \"localhost:$ECHO\"]" "$out"
ok "forwarded headers and host_rewrite"

# Chunked and close-delimited responses reach the client whole.
out=$($C "http://$ECHO-sbx-at-v1-one.localhost:$GW/chunked")
assert_eq "chunked response" "part 0
part 1
part 2" "$out"
out=$($C "http://$ECHO-sbx-at-v1-one.localhost:$GW/eof")
assert_eq "close-delimited response" "until close" "$out"
ok "chunked and close-delimited responses"

# Keep-alive on both sides: one client connection, one upstream connection.
# (Not in the HTTP/2 pass: curl 7.88 cannot reuse a prior-knowledge
# connection, curl issue 10634; h2_downstream.sh runs many streams on one
# connection with h2load.)
if [ "$H2" != 1 ]; then
	: >"$T/upstream.jsonl"
	u="http://$ECHO-sbx-at-v1-one.localhost:$GW/connection"
	conns=$($C -w '%{num_connects}' -o /dev/null "$u" -o /dev/null "$u" -o /dev/null "$u")
	assert_eq "client connections for 3 requests" "100" "$conns"
	ports=$(sed 's/.*"peer_port": \([0-9]*\).*/\1/' "$T/upstream.jsonl" | sort -u | wc -l)
	assert_eq "upstream connections for 3 requests" "1" "$ports"
	ok "keep-alive on both sides"
fi

# Refusals: status, code, sentence, and nothing reaches the upstream.
: >"$T/upstream.jsonl"
check_refusal() {
	url=$1 status=$2 code=$3 sentence=$4
	out=$($C -i "$url")
	first=$(printf '%s' "$out" | head -n 1 | tr -d '\r')
	assert_contains "status for $url" "HTTP/1.1 $status" "$first"
	assert_contains "X-Gateway-Error for $url" "X-Gateway-Error: $code" "$out"
	assert_contains "code for $url" "\"code\":\"$code\"" "$out"
	assert_contains "message for $url" "$sentence" "$out"
}
check_refusal "http://$ECHO-nosuch.localhost:$GW/x" 404 sandbox_not_found \
	"No sandbox 'nosuch' is known to this gateway."
check_refusal "http://9-sbx-at-v1-one.localhost:$GW/x" 404 port_not_published \
	"Sandbox 'sbx@v1/one' does not publish port 9."
check_refusal "http://$GW-sbx-at-v1-one.localhost:$GW/x" 404 port_not_published \
	"does not publish port $GW."
check_refusal "http://127.0.0.1:$GW/x" 404 no_route "is not such an address"
check_refusal "http://99999-sbx.localhost:$GW/x" 400 bad_host "is not a port URL"
check_refusal "http://$CLOSED-sbx-at-v1-one.localhost:$GW/x" 502 port_not_listening \
	"Nothing is listening on port $CLOSED in sandbox 'sbx@v1/one'"
n=$(wc -l <"$T/upstream.jsonl")
assert_eq "requests that reached the upstream" "0" "$n"
ok "refusals with status, code and sentence"

# A browser navigation gets HTML.
out=$($C -H 'Accept: text/html' "http://$ECHO-nosuch.localhost:$GW/")
assert_contains "HTML error status" '<p class="st">Error 404</p>' "$out"
assert_contains "HTML error reason" "<h1>Not Found</h1>" "$out"
assert_contains "HTML error code" "<dt>Code</dt><dd><code>sandbox_not_found</code>" "$out"
ok "HTML error page for browsers"

# A malformed request gets 400, the connection closes, the upstream sees nothing.
raw() {
	$PY -c "
import socket, sys
s = socket.create_connection(('127.0.0.1', $GW))
s.sendall(sys.argv[1].encode().decode('unicode_escape').encode('latin-1'))
s.settimeout(5)
d = b''
while True:
    b = s.recv(65536)
    if not b:
        break
    d += b
sys.stdout.write(d.decode('latin-1'))" "$1"
}
out=$(raw "POST /echo HTTP/1.1\r\nHost: $ECHO-sbx-at-v1-one.localhost\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc")
assert_contains "CL+TE refused" "HTTP/1.1 400" "$out"
assert_contains "CL+TE code" "content_length_and_transfer_encoding" "$out"
assert_contains "CL+TE connection closed" "Connection: close" "$out"
n=$(wc -l <"$T/upstream.jsonl")
assert_eq "malformed requests that reached the upstream" "0" "$n"
ok "malformed request refused"

# Pipelined requests are answered in order on one connection.
out=$(raw "GET /status/201 HTTP/1.1\r\nHost: $ECHO-sbx-at-v1-one.localhost\r\n\r\nGET /status/202 HTTP/1.1\r\nHost: $ECHO-sbx-at-v1-one.localhost\r\nConnection: close\r\n\r\n")
first=$(printf '%s' "$out" | grep '^HTTP/1.1' | tr -d '\r' | tr '\n' ' ')
assert_eq "pipelined responses in order" "HTTP/1.1 201 Created HTTP/1.1 202 Accepted " "$first"
ok "pipelined requests"

# SIGTERM stops the gateway cleanly: a drain, with nothing in flight.
kill -TERM "$GW_PID"
i=0
while kill -0 "$GW_PID" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
kill -0 "$GW_PID" 2>/dev/null && fail "gateway still running after SIGTERM"
wait "$GW_PID"
assert_eq "exit status after SIGTERM" "0" "$?"
assert_contains "drain logged" "received SIGTERM, draining (up to 30s)" "$(cat "$T/gateway.log")"
assert_contains "drain over" "every connection finished" "$(cat "$T/gateway.log")"
ok "SIGTERM drains, then stops the gateway"
