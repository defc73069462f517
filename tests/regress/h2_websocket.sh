#!/bin/sh
# WebSockets over HTTP/2 (RFC 8441) from clients: the gateway's SETTINGS
# enable extended CONNECT, and a stream with :protocol websocket reaches
# the sandbox port as an HTTP/1.1 upgrade, through both address forms,
# over h2c (prior knowledge) and TLS (ALPN h2).  The client
# (tests/regress/h2_ws.py, python3-h2) frames and masks its WebSocket
# frames itself: echoes byte for byte, permessage-deflate and the
# subprotocol passed through, 64 MiB each way with sha256, a slow reader
# with the gateway's RSS and the backend's progress bounded, WebSockets
# and requests multiplexed on one connection, refusals that reach no
# upstream, the access line, the client's reset, the upstream's close,
# the client's end of stream, and websocket_idle rather than the request
# idle timeout.
. "$(dirname "$0")/lib.sh"

command -v curl >/dev/null 2>&1 || fail "curl is needed for this test"
[ -f "$CERTS/ca.crt" ] || fail "no development certificates in $CERTS (make certs)"
$PY -c 'import h2, websockets' 2>/dev/null || fail "python3-h2 and python3-websockets are needed"

GW=$(free_port)
GWS=$(free_port)
GW1=$(free_port)
ADMIN=$(free_port)
WS=$(free_port)
PRIV=$(free_port)
HTTP=$(free_port)
RAW=$(free_port)
SECRET=0123456789abcdef0123456789abcdef

spawn ws $PY "$TOP/tests/regress/h2_ws.py" server "$WS" --log "$T/ws.jsonl"
spawn priv $PY "$TOP/tests/regress/h2_ws.py" server "$PRIV" --log "$T/priv.jsonl"
spawn http $PY "$TOP/tests/regress/backend.py" --port "$HTTP" --log "$T/http.jsonl"
spawn raw $PY "$TOP/tests/regress/raw_backend.py" --port "$RAW" --log "$T/raw.jsonl"
wait_port "$WS"
wait_port "$PRIV"
wait_port "$HTTP"
wait_port "$RAW"

# Under AddressSanitizer freed memory sits in a quarantine (256 MiB by
# default) that would read as growth; keep it small so RSS means something
# (as bulk.sh does).
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=1"
export ASAN_OPTIONS

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
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $WS
      - port: $PRIV
        access: private
      - port: $HTTP
      - port: $RAW
EOF
wait_port "$GWS"
wait_port "$GW1"

H2WS="$PY $TOP/tests/regress/h2_ws.py"
PLAIN="--port $GW --authority $WS-sbx.localhost:$GW"
TLS="--port $GWS --tls --ca $CERTS/ca.crt --authority $WS-sbx.gw.localhost:$GWS"
run() { out=$($H2WS "$@" 2>&1) || fail "h2_ws.py $1: $out"; echo "$out"; }
lines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }

# --- SETTINGS --------------------------------------------------------------
run settings $PLAIN
run settings $TLS
out=$(raw_send "$GW1" 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n')
assert_contains "http2: false still refuses the preface" "HTTP/1.1 505" "$out"
ok "SETTINGS_ENABLE_CONNECT_PROTOCOL=1 over h2c and TLS h2; http2: false has no h2"

# --- echoes, both address forms, h2c and TLS --------------------------------
run echo $PLAIN
run echo $TLS
run echo --port "$GW" --authority "127.0.0.1:$GW" --path "/sbx/$WS/ws"
run echo --port "$GWS" --tls --ca "$CERTS/ca.crt" \
	--authority "gw.localhost:$GWS" --path "/sbx/$WS/ws"
assert_eq "handshakes at the backend" "4" "$(grep -c '"open": "/ws"' "$T/ws.jsonl")"
hs=$(grep '"open": "/ws"' "$T/ws.jsonl" | head -n 1)
assert_contains "upgrade asked upstream" '["Upgrade", "websocket"]' "$hs"
assert_contains "connection upgrade" '["Connection", "Upgrade"]' "$hs"
assert_contains "version 13" '["Sec-WebSocket-Version", "13"]' "$hs"
assert_contains "a key of ours" '"Sec-WebSocket-Key"' "$hs"
assert_contains "host" "[\"Host\", \"$WS-sbx.localhost:$GW\"]" "$hs"
assert_contains "via" '["Via", "2 akgateway"]' "$hs"
hs=$(grep '"open": "/ws"' "$T/ws.jsonl" | sed -n 4p)
assert_contains "path form prefix" "[\"X-Forwarded-Prefix\", \"/sbx/$WS\"]" "$hs"
assert_contains "TLS proto" '["X-Forwarded-Proto", "https"]' "$hs"
n=$(grep -c '"closed": "/ws", "code": 1000' "$T/ws.jsonl")
assert_eq "closing handshakes at the backend" "4" "$n"
ok "echoes byte for byte over h2c and TLS, host and path form; the upgrade upstream is HTTP/1.1"

run echo $PLAIN --path /early --early
run deflate $PLAIN --path /chat
assert_contains "subprotocol offered upstream" 'superchat, chat' "$(grep '"open": "/chat"' "$T/ws.jsonl")"
ok "permessage-deflate and the subprotocol pass through"

# --- bulk, slow reader --------------------------------------------------
run bulk $PLAIN --mib 64
run bulk $TLS --mib 64
ok "64 MiB each way over h2c and TLS h2, sha256 equal"

out=$(run slow $PLAIN --mib 64 --pid "$GW_PID" --sent "$T/ws.jsonl.sent" \
	--stall 2 --max-sent 24 --max-rss 24)
echo "$out"
want=$(sed -n 's/.*"flood_sha256": "\([0-9a-f]*\)".*/\1/p' "$T/ws.jsonl")
assert_contains "the flood arrived whole" "sha256 $want" "$out"
ok "a slow reader: the backend and the gateway's memory wait for it"

run push $PLAIN --pid "$GW_PID" --stall 2 --max-sent 24 --max-rss 24
ok "a sandbox that reads nothing: the client and the gateway's memory wait for it"

# --- multiplexing -----------------------------------------------------
run multi $PLAIN --get-authority "$HTTP-sbx.localhost:$GW"
run multi $TLS --get-authority "$HTTP-sbx.gw.localhost:$GWS"
ok "two WebSockets and requests on one connection"

# --- refusals ---------------------------------------------------------
n0=$(lines "$T/ws.jsonl")
p0=$(lines "$T/priv.jsonl")
run refused --port "$GW" --authority "$WS-nosuch.localhost:$GW" \
	--expect 404 --code sandbox_not_found
run refused --port "$GW" --authority "9999-sbx.localhost:$GW" \
	--expect 404 --code port_not_published
run refused --port "$GW" --authority "$PRIV-sbx.localhost:$GW" \
	--expect 401 --code unauthorized
run refused $PLAIN --protocol connect-udp --expect 501 --code unsupported_protocol
run refused $TLS --protocol foo --expect 501 --code unsupported_protocol
run refused $PLAIN --plain-connect --expect 400 --code bad_request_target
assert_eq "nothing reached the backend" "$n0" "$(lines "$T/ws.jsonl")"
assert_eq "nothing reached the private port" "$p0" "$(lines "$T/priv.jsonl")"
tok=$("$AKGW" token -c "$T/gateway.yaml" --sandbox sbx --port "$PRIV" --ttl 1h)
run echo --port "$GW" --authority "$PRIV-sbx.localhost:$GW" \
	--header "authorization: Bearer $tok"
grep -q '"open": "/ws"' "$T/priv.jsonl" || fail "the private port's WebSocket did not open"
grep -qi 'authorization\|akt1\.' "$T/priv.jsonl" && fail "the token reached the sandbox"
ok "refusals (404, 401, 501, 400) reach no upstream; a token opens the private port and stays at the gateway"

run refused $PLAIN --path /deny --expect 403 --body "denied by the app"
grep -q '"denied": "/deny"' "$T/ws.jsonl" || fail "the backend did not answer /deny"
run refused --port "$GW" --authority "$RAW-sbx.localhost:$GW" --path /badaccept \
	--expect 502 --code bad_upstream_response --body "Sec-WebSocket-Accept does not match"
grep -q '"head": "GET /badaccept HTTP/1.1' "$T/raw.jsonl" || fail "the raw backend saw no upgrade request"
ok "a sandbox's refusal is relayed as a response; a 101 with a wrong accept is 502"

# --- the access line, metrics -----------------------------------------
line=$(grep "access .*method=CONNECT path=/ws status=200 .*port=$WS " "$T/gateway.log" | head -n 1)
assert_contains "access line proto" "proto=h2 stream=" "$line"
assert_contains "access line close" "close=websocket upstream closed" "$line"
case "$line" in *"bytes_in=0 "*|*"bytes_out=0 "*) fail "no bytes counted: $line" ;; esac
grep -q "access .*method=CONNECT .*status=501 .*error=unsupported_protocol .*proto=h2" "$T/gateway.log" ||
	fail "no access line for the unknown :protocol"
grep -q "access .*method=CONNECT .*status=404 .*error=sandbox_not_found .*proto=h2" "$T/gateway.log" ||
	fail "no access line for the unknown sandbox"
rm -f "$T/hold"
$H2WS echo $PLAIN --path /held --hold "$T/hold" >"$T/held.out" 2>&1 &
HELD=$!
PIDS="$PIDS $HELD"
i=0
while [ ! -f "$T/hold" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
[ -f "$T/hold" ] || fail "the held WebSocket did not open: $(cat "$T/held.out")"
m=$(curl -sS "http://127.0.0.1:$ADMIN/metrics")
assert_contains "an open WebSocket counted" "akgw_websockets_active 1" "$m"
rm -f "$T/hold"
wait "$HELD" || fail "the held WebSocket: $(cat "$T/held.out")"
wait_log "$T/gateway.log" "path=/held status=200 .*close=websocket upstream closed"
m=$(curl -sS "http://127.0.0.1:$ADMIN/metrics")
assert_contains "none open at the end" "akgw_websockets_active 0" "$m"
ok "access lines say method=CONNECT and proto=h2; akgw_websockets_active counts them"

# --- ends -------------------------------------------------------------
run rst $PLAIN --path "/ws?rst" --get-authority "$HTTP-sbx.localhost:$GW"
wait_log "$T/ws.jsonl" '"closed": "/ws?rst", "code": 1006'
wait_log "$T/gateway.log" "path=/ws status=200 .*close=stream reset by the client"
ok "the client's RST_STREAM closes the upstream connection"

run upclose $PLAIN
wait_log "$T/ws.jsonl" '"closed": "/close", "code": 1000'
wait_log "$T/ws.jsonl" '"closed": "/drop", "code": 1006'
wait_log "$T/gateway.log" "path=/drop status=200 .*close=websocket upstream closed"
run upclose $TLS
ok "the upstream's close (with and without a close frame) ends the stream"

run halfclose $PLAIN --path "/ws?half"
wait_log "$T/ws.jsonl" '"closed": "/ws?half", "code": 1006'
ok "the client's END_STREAM reaches the upstream as the end of its input"

# --- idle timeouts: websocket_idle, not idle; an h2c port -------------------
GW2=$(free_port)
cat >"$T/gw2.yaml" <<EOF
listen:
  - address: 127.0.0.1:$GW2
domains: [localhost]
timeouts:
  idle: 1s
  websocket_idle: 4s
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $WS
        protocol: h2c
EOF
spawn gateway2 "$AKGW" -c "$T/gw2.yaml"
GW2_PID=$LAST_PID
wait_port "$GW2"
run idle --port "$GW2" --authority "$WS-sbx.localhost:$GW2" --path "/ws?idle" --quiet 2.5
wait_log "$T/ws.jsonl" '"closed": "/ws?idle", "code": 1006'
wait_log "$T/gateway2.log" "path=/ws status=200 .*close=stream idle timeout"
ok "a quiet WebSocket outlives timeouts.idle and ends at timeouts.websocket_idle; it upgrades over HTTP/1.1 on an h2c port too"

if grep -q "akt1\." "$T/gateway.log"; then fail "a token was logged"; fi
# Both stop cleanly (a sanitizer build reports leaks here).
stop "$GW_PID"
stop "$GW2_PID"
if grep -E "Sanitizer|runtime error" "$T/gateway.log" "$T/gateway2.log"; then
	fail "the sanitizer reported on the gateway"
fi
