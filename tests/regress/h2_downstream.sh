#!/bin/sh
# HTTP/2 from clients: ALPN h2 on a TLS listener, prior knowledge on a plain
# one, HTTP/1.1 only where a listener says http2: false.  Every stream is
# an exchange like an HTTP/1.1 request: both address forms, the error codes,
# private ports, bodies byte for byte both ways, SSE event by event, the
# access line (proto=h2, stream=) and the metrics by protocol.  Real
# clients: curl, nghttp, h2load.
. "$(dirname "$0")/lib.sh"

for tool in curl nghttp h2load openssl; do
	command -v $tool >/dev/null 2>&1 || fail "$tool is needed for this test"
done
[ -f "$CERTS/ca.crt" ] || fail "no development certificates in $CERTS (make certs)"

GW=$(free_port)
GWS=$(free_port)
GW1=$(free_port)
ADMIN=$(free_port)
ECHO=$(free_port)
PRIV=$(free_port)
CLOSED=$(free_port)
TUN=$(free_port)
UP="$T/upstream.jsonl"
SECRET=0123456789abcdef0123456789abcdef

FILES=$(free_port)
mkdir -p "$T/www"
head -c 67108864 /dev/urandom >"$T/www/big.bin"
spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" --log "$UP"
spawn backend2 $PY "$TOP/tests/regress/backend.py" --port "$PRIV" --log "$T/priv.jsonl"
spawn files sh -c "cd '$T/www' && exec $PY -m http.server $FILES --bind 127.0.0.1"
wait_port "$ECHO"
wait_port "$PRIV"
wait_port "$FILES"

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
  - address: 127.0.0.1:$GWS
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key
  - address: 127.0.0.1:$GW1
    http2: false
admin:
  address: 127.0.0.1:$ADMIN
domains: [localhost, gw.localhost]
auth:
  secret: $SECRET
timeouts:
  connect: 2s
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $ECHO
      - port: $PRIV
        access: private
      - port: $CLOSED
      - port: $FILES
    tunnel:
      listen_port: $TUN
EOF
wait_port "$GWS"
wait_port "$GW1"

C="curl -sS --max-time 30"
H2C="$C --http2-prior-knowledge"
H2S="$C --http2 --cacert $CERTS/ca.crt"
ups() { [ -f "$UP" ] && wc -l <"$UP" || echo 0; }

# --- negotiation -----------------------------------------------------------
v=$($H2C -o /dev/null -w '%{http_version}' "http://$ECHO-sbx.localhost:$GW/")
assert_eq "prior knowledge on the plain listener" "2" "$v"
v=$($H2S -o /dev/null -w '%{http_version}' "https://$ECHO-sbx.gw.localhost:$GWS/")
assert_eq "ALPN h2 on the TLS listener" "2" "$v"
v=$($C -o /dev/null -w '%{http_version}' "http://$ECHO-sbx.localhost:$GW/")
assert_eq "HTTP/1.1 still on the plain listener" "1.1" "$v"
v=$($C --http1.1 --cacert "$CERTS/ca.crt" -o /dev/null -w '%{http_version}' \
	"https://$ECHO-sbx.gw.localhost:$GWS/")
assert_eq "HTTP/1.1 still on the TLS listener" "1.1" "$v"
out=$(timeout 10 openssl s_client -connect "127.0.0.1:$GWS" -servername localhost \
	-alpn h2,http/1.1 </dev/null 2>/dev/null)
assert_contains "ALPN prefers h2" "ALPN protocol: h2" "$out"
out=$(raw_send "$GW1" 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n')
assert_contains "a preface on an http2: false listener" "HTTP/1.1 505" "$out"
ok "h2 negotiated by ALPN and by prior knowledge; http2: false keeps HTTP/1.1"

# --- requests as exchanges ------------------------------------------------
body=$($H2C "http://$ECHO-sbx.localhost:$GW/echo?x=1")
assert_contains "host form GET" '"method": "GET"' "$body"
assert_contains "path and query reach the sandbox" '"path": "/echo?x=1"' "$body"

body=$($H2S "https://gw.localhost:$GWS/sbx/$ECHO/echo")
assert_contains "path form GET over TLS" '"path": "/echo"' "$body"
assert_contains "path form prefix" '["X-Forwarded-Prefix", "/sbx/'"$ECHO"'"]' "$body"
assert_contains "X-Forwarded-Proto https" '["X-Forwarded-Proto", "https"]' "$body"
hdr=$($H2C -sI "http://$ECHO-sbx.localhost:$GW/")
assert_contains "HEAD over h2" "HTTP/2 200" "$hdr"
ok "GET and HEAD through both address forms over h2"

want=$(sha256sum <"$T/www/big.bin" | cut -d' ' -f1)
out=$($H2C --data-binary "@$T/www/big.bin" "http://$ECHO-sbx.localhost:$GW/sink")
assert_contains "64 MiB upload over h2c" "\"body_sha256\": \"$want\"" "$out"
out=$($H2S --data-binary "@$T/www/big.bin" "https://$ECHO-sbx.gw.localhost:$GWS/sink")
assert_contains "64 MiB upload over TLS h2" "\"body_sha256\": \"$want\"" "$out"
# A streamed body of unknown length (no content-length) reaches the
# sandbox chunked, byte for byte.
out=$($H2C -T - "http://$ECHO-sbx.localhost:$GW/sink" <"$T/www/big.bin")
assert_contains "streamed upload over h2c" "\"body_sha256\": \"$want\"" "$out"
ok "64 MiB uploads over h2c and TLS h2, checksums match"

got=$($H2C "http://$FILES-sbx.localhost:$GW/big.bin" | sha256sum | cut -d' ' -f1)
assert_eq "64 MiB download over h2c" "$want" "$got"
got=$($H2S "https://$FILES-sbx.gw.localhost:$GWS/big.bin" | sha256sum | cut -d' ' -f1)
assert_eq "64 MiB download over TLS h2" "$want" "$got"
body=$($H2C "http://$ECHO-sbx.localhost:$GW/chunked")
assert_contains "a chunked answer over h2" "part 0" "$body"
ok "64 MiB downloads over h2c and TLS h2, checksums match"

# --- refusals: status, code, sentence, nothing upstream -------------------
n0=$(ups)
out=$($H2C -w '\n%{http_code}' "http://$ECHO-nosuch.localhost:$GW/")
assert_contains "unknown sandbox status" "404" "$out"
assert_contains "unknown sandbox code" '"code":"sandbox_not_found"' "$out"
out=$($H2C -w '\n%{http_code}' "http://9999-sbx.localhost:$GW/")
assert_contains "undeclared port" '"code":"port_not_published"' "$out"
out=$($H2C -w '\n%{http_code}' "http://$CLOSED-sbx.localhost:$GW/")
assert_contains "port not listening status" "502" "$out"
assert_contains "port not listening code" '"code":"port_not_listening"' "$out"
out=$($H2C -w '\n%{http_code}' "http://127.0.0.1:$GW/tunnel/sbx")
assert_contains "tunnel over h2" '"code":"tunnel_needs_http1"' "$out"
out=$($H2C -w '\n%{http_code}' "http://$PRIV-sbx.localhost:$GW/")
assert_contains "private port without a token" "401" "$out"
assert_contains "private port code" '"code":"unauthorized"' "$out"
assert_eq "nothing reached an upstream" "$n0" "$(ups)"
[ -s "$T/priv.jsonl" ] && fail "the private port's upstream saw a refused request"
tok=$("$AKGW" token -c "$T/gateway.yaml" --sandbox sbx --port "$PRIV" --ttl 1h)
body=$($H2C -H "Authorization: Bearer $tok" "http://$PRIV-sbx.localhost:$GW/echo")
assert_contains "private port with a token" '"method": "GET"' "$body"
case "$body" in *"$tok"*) fail "the token reached the sandbox" ;; esac
case "$body" in *Authorization*) fail "the Authorization field reached the sandbox" ;; esac
ok "refusals over h2 carry their status and code and reach no upstream"

# --- SSE: event by event ---------------------------------------------------
$PY - "$GW" "$ECHO" >"$T/sse.out" 2>&1 <<'PYEOF' || fail "SSE over h2: $(cat "$T/sse.out")"
import socket, sys, time
import h2.connection, h2.config, h2.events
gw, port = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", gw), timeout=10)
c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
c.initiate_connection()
c.send_headers(1, [(":method", "GET"), (":scheme", "http"),
    (":authority", f"{port}-sbx.localhost:{gw}"), (":path", "/sse?n=3&delay=0.5")],
    end_stream=True)
s.sendall(c.data_to_send())
start = time.monotonic()
times, data, ended = [], b"", False
while not ended:
    chunk = s.recv(65536)
    if not chunk:
        break
    for ev in c.receive_data(chunk):
        if isinstance(ev, h2.events.DataReceived):
            c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            data += ev.data
            while data.count(b"\n\n") > len(times):
                times.append(time.monotonic() - start)
        if isinstance(ev, h2.events.StreamEnded):
            ended = True
    s.sendall(c.data_to_send())
if len(times) != 3:
    sys.exit(f"expected 3 events, got {len(times)}: {data!r}")
# Each event arrives when it is sent, not all at the end.
if times[0] > 0.4 or times[2] - times[0] < 0.8:
    sys.exit(f"events were not streamed one by one: {times}")
print("ok", times)
PYEOF
ok "SSE over h2 arrives event by event"

# --- many streams, real load tools ----------------------------------------
# These tools do not resolve *.localhost: the path form.  At most 20
# streams at once: the Python backend queues only a few connections.
out=$(nghttp -nv "http://127.0.0.1:$GW/sbx/$ECHO/echo" 2>&1)
assert_contains "nghttp sees SETTINGS" "SETTINGS" "$out"
assert_contains "nghttp gets 200" ":status: 200" "$out"
out=$(h2load -n 2000 -c 2 -m 10 "http://127.0.0.1:$GW/sbx/$ECHO/" 2>&1)
assert_contains "h2load: every request answered 2xx" "2000 succeeded, 0 failed, 0 errored" "$out"
assert_contains "h2load status codes" "status codes: 2000 2xx" "$out"
out=$(h2load -n 400 -c 1 -m 20 "https://127.0.0.1:$GWS/sbx/$ECHO/" 2>&1)
assert_contains "h2load over TLS" "400 succeeded, 0 failed, 0 errored" "$out"
ok "nghttp and h2load (many streams per connection) over h2c and TLS"

# --- the access line and the metrics -------------------------------------
wait_log "$T/gateway.log" 'proto=h2 stream=[0-9]'
line=$(grep 'access .*path=/echo .*proto=h2' "$T/gateway.log" | tail -n 1)
assert_contains "access line of an h2 stream" "status=200" "$line"
case "$line" in *"x=1"*) fail "the query string was logged" ;; esac
grep -q 'error=sandbox_not_found .*proto=h2' "$T/gateway.log" ||
	fail "a refused h2 stream has no access line"
m=$(curl -sS "http://127.0.0.1:$ADMIN/metrics")
n=$(echo "$m" | sed -n 's/^akgw_requests_by_protocol_total{protocol="h2"} //p')
[ "${n:-0}" -ge 2400 ] || fail "akgw_requests_by_protocol_total for h2 is '$n'"
n=$(echo "$m" | sed -n 's/^akgw_h2_connections_total //p')
[ "${n:-0}" -ge 10 ] || fail "akgw_h2_connections_total is '$n'"
ok "access lines say proto=h2 and the stream; metrics count by protocol"
