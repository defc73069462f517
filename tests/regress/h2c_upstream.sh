#!/bin/sh
# HTTP/2 to sandbox ports (ports[].protocol h2c, auto): every request to an
# h2c port reaches it as cleartext HTTP/2 with prior knowledge, from
# HTTP/1.1 and HTTP/2 clients alike, on pooled multiplexed connections.
# The target (h2_target.py --plain, python3-h2) logs each connection,
# request and reset stream; the test asserts what it saw (proto h2,
# :authority, :path without the path-form prefix, the forwarded fields, no
# credentials), bodies byte for byte (64 MiB up with Content-Length,
# chunked and over HTTP/2; down over both) with sha256, HEAD, 204/304 and
# trailers, a slow reader held back by flow control (gateway RSS), a
# client that goes away cancelling the upstream stream (RST_STREAM CANCEL),
# 502 upstream_reset and port_not_listening, a cut response after the
# head, refused and GOAWAY'd streams retried, WebSocket upgrades over
# HTTP/1.1, auto ports (gRPC over HTTP/2 only; gRPC from an HTTP/1 client
# refused with 400 grpc_needs_http2 before any upstream), concurrency past
# the server's SETTINGS_MAX_CONCURRENT_STREAMS and limits.h2_upstream_streams
# on new connections, a later request on a pooled connection, the
# /metrics counters, access lines, and a clean exit (sanitizer builds).
. "$(dirname "$0")/lib.sh"

[ -x "$AKGW" ] || fail "$AKGW is not built"
$PY -c 'import h2' || fail "python3-h2 is missing ($PY)"
for t in curl sha256sum awk; do
	command -v $t >/dev/null 2>&1 || fail "$t is missing"
done

GW=$(free_port)
ADM=$(free_port)
H2A=$(free_port) # h2c: the general target
H2M=$(free_port) # h2c: SETTINGS_MAX_CONCURRENT_STREAMS 4
H2D=$(free_port) # h2c: 4 streams, its SETTINGS 200 ms late
H2S=$(free_port) # h2c: the same, refused past 4 from the first frame
NOL=$(free_port) # h2c: nothing listens
AUB=$(free_port) # auto: backend.py (HTTP/1.1 only)
AUT=$(free_port) # auto: h2_target.py --plain (both, by the first bytes)
SECRET=0123456789abcdef0123456789abcdef

mkdir -p "$T/www"
head -c 67108864 /dev/urandom >"$T/www/big.bin"
BIG=$(sha256sum <"$T/www/big.bin" | cut -d' ' -f1)
printf 'hello over h2c\n' >"$T/www/hello.txt"

target() {
	name=$1 port=$2; shift 2
	: >"$T/$name.jsonl"
	spawn "$name" $PY "$TOP/tests/regress/h2_target.py" --plain \
	    --port "$port" --log "$T/$name.jsonl" --root "$T/www" "$@"
}
target h2a "$H2A"
target h2m "$H2M" --max-streams 4
target h2d "$H2D" --max-streams 4 --settings-delay 200
target h2s "$H2S" --max-streams 4 --settings-delay 200 --strict
target aut "$AUT"
spawn aub $PY "$TOP/tests/regress/backend.py" --port "$AUB" --log "$T/aub.jsonl"
for p in "$H2A" "$H2M" "$H2D" "$H2S" "$AUT" "$AUB"; do wait_port "$p"; done

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
admin:
  address: 127.0.0.1:$ADM
domains: [localhost]
workers: 1
log:
  level: info
  format: json
timeouts:
  upstream_idle: 30s
auth:
  secret: $SECRET
sandboxes:
  - id: sb1
    address: 127.0.0.1
    ports:
      - {port: $H2A, protocol: h2c}
      - {port: $H2M, protocol: h2c}
      - {port: $NOL, protocol: h2c}
      - {port: $AUB, protocol: auto}
      - {port: $AUT, protocol: auto}
  - id: priv
    address: 127.0.0.1
    ports:
      - {port: $H2A, protocol: h2c, access: private}
EOF
wait_port "$ADM"

C="curl -sS --max-time 30"
C1="$C --http1.1"
C2="$C --http2-prior-knowledge"
HA="http://$H2A-sb1.localhost:$GW"
PA="http://127.0.0.1:$GW/sb1/$H2A"

# jx FILE EXPR: the Python expression EXPR on the JSON document in FILE
# (d), with hv(NAME): the values of the request field NAME, comma-joined.
jx() {
	$PY - "$1" "$2" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
def hv(n):
    return ",".join(v for k, v in d["headers"] if k.lower() == n)
print(eval(sys.argv[2]))
PYEOF
}
# treq LOG PATH EXPR: EXPR on the last request event with :path PATH.
treq() {
	grep '"event": "request"' "$1" | $PY -c '
import json, sys
d = None
for l in sys.stdin:
    e = json.loads(l)
    if e["path"] == sys.argv[1]:
        d = e
if d is None:
    sys.exit("no request for %s" % sys.argv[1])
print(eval(sys.argv[2]))' "$2" "$3" || fail "the target saw no request for $2"
}
# nreq LOG PATH: how many request events with :path PATH.
nreq() {
	grep '"event": "request"' "$1" | grep -cF "\"path\": \"$2\""
}
# nconn LOG: connection events so far.
nconn() { grep -c '"event": "conn"' "$1"; }
# rid FILE: the X-Request-Id of the response head curl -D wrote to FILE.
rid() { tr -d '\r' <"$1" | awk 'tolower($1) == "x-request-id:" { v = $2 } END { print v }'; }
# access RID: the gateway's access line for request RID (waits for it).
access() {
	wait_log "$T/gateway.log" "\"request_id\":\"$1\""
	grep "\"msg\":\"access\"" "$T/gateway.log" | grep "\"request_id\":\"$1\""
}
# metric NAME: its value in /metrics.
metric() {
	curl -sS --max-time 5 "http://127.0.0.1:$ADM/metrics" |
	    awk -v k="$1" '$1 == k { print $2 }'
}
# wait_pids PID...: wait for those clients (not for the servers).
wait_pids() { for _p in "$@"; do wait "$_p"; done; }
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
# stop_gw PID LOG: SIGTERM, exit 0 within 5 s, no sanitizer report in LOG.
stop_gw() {
	kill -TERM "$1"
	i=0
	while kill -0 "$1" 2>/dev/null && [ $i -lt 100 ]; do
		sleep 0.05; i=$((i + 1))
	done
	kill -0 "$1" 2>/dev/null && fail "akgateway $1 did not exit within 5 s of SIGTERM"
	wait "$1"
	assert_eq "akgateway exit status ($2)" 0 "$?"
	grep -E 'Sanitizer|runtime error' "$2" && fail "the sanitizer reported in $2"
	return 0
}
ASAN=0
ldd "$AKGW" 2>/dev/null | grep -q libasan && ASAN=1

assert_eq "h2 connections before any request" 0 "$(metric akgw_upstream_h2_connections_total)"
assert_eq "h2 streams before any request" 0 "$(metric akgw_upstream_h2_streams_total)"

# 1. A slow reader (4 MiB/s) of 64 MiB, HTTP/1.1 then HTTP/2, for 2 s each:
# the stream's window opens only as the client takes bytes, so the gateway
# holds no more than a window; the client then goes away mid-body and the
# gateway cancels the upstream stream (RST_STREAM CANCEL at the target).
# First, before any large transfer has grown the heap.
$C1 -o /dev/null "$HA/echo?warm" || fail "warm-up request failed"
base=$(rss "$GW_PID")
peak=$base
for v in 1 2; do
	case $v in 1) cl="$C1" ;; 2) cl="$C2" ;; esac
	$cl --limit-rate 4M --max-time 2 -o "$T/slow$v.out" \
	    "$HA/files/big.bin?slow=$v" 2>/dev/null &
	cp=$!
	i=0
	while kill -0 "$cp" 2>/dev/null && [ $i -lt 50 ]; do
		r=$(rss "$GW_PID")
		[ "$r" -gt "$peak" ] && peak=$r
		sleep 0.1; i=$((i + 1))
	done
	wait "$cp"
	assert_eq "slow reader $v: curl timed out (28)" 28 "$?"
	got=$(wc -c <"$T/slow$v.out")
	[ "$got" -gt 4000000 ] && [ "$got" -lt 67108864 ] ||
	    fail "slow reader $v got $got bytes in 2 s at 4 MiB/s"
	cmp -s -n "$got" "$T/slow$v.out" "$T/www/big.bin" ||
	    fail "slow reader $v: the bytes differ from the file"
	c=$(treq "$T/h2a.jsonl" "/files/big.bin?slow=$v" 'd["conn"]')
	s=$(treq "$T/h2a.jsonl" "/files/big.bin?slow=$v" 'd["stream"]')
	wait_log "$T/h2a.jsonl" "\"event\": \"reset\", \"conn\": $c, \"stream\": $s, \"error\": 8,"
done
echo "gateway VmRSS: $base kB before, $peak kB at most while two slow readers took 64 MiB"
if [ "$ASAN" = 1 ]; then
	echo "note: RSS not bounded in a sanitizer build"
else
	[ $((peak - base)) -lt 4096 ] ||
	    fail "a slow reader grew the gateway's RSS from $base kB to $peak kB"
fi
ok "a slow reader holds the h2c target back (RSS +$((peak - base)) kB); a client gone mid-body cancels the stream"

# 2. HTTP/1.1 and HTTP/2 clients, host form and path form: HTTP/2 at the
# target, :authority the client's Host, :path without the path-form
# prefix, the gateway's fields, no hop-by-hop ones.
for v in 1 2; do
	for form in host path; do
		case $v in 1) cl="$C1" ;; 2) cl="$C2" ;; esac
		case $form in host) u=$HA auth="$H2A-sb1.localhost:$GW" ;;
		path) u=$PA auth="127.0.0.1:$GW" ;; esac
		w="$v $form form"
		if [ $v = 1 ]; then
			code=$($cl -D "$T/h" -o "$T/b" -w '%{http_code}' \
			    -H 'X-Tag: a' -H 'X-Tag: b' -H 'Connection: X-Hop' \
			    -H 'X-Hop: 1' -H 'Keep-Alive: 5' \
			    -H 'X-Forwarded-For: 192.0.2.7' "$u/echo?q=$v-$form")
		else
			code=$($cl -D "$T/h" -o "$T/b" -w '%{http_code}' \
			    -H 'X-Tag: a' -H 'X-Tag: b' \
			    -H 'X-Forwarded-For: 192.0.2.7' "$u/echo?q=$v-$form")
		fi
		assert_eq "$w: status" 200 "$code"
		assert_eq "$w: protocol at the target" h2 "$(jx "$T/b" 'd["proto"]')"
		assert_eq "$w: :authority" "$auth" "$(jx "$T/b" 'd["authority"]')"
		assert_eq "$w: :path" "/echo?q=$v-$form" "$(jx "$T/b" 'd["path"]')"
		assert_eq "$w: :scheme" http "$(jx "$T/b" 'hv(":scheme")')"
		assert_eq "$w: X-Tag in order" "a,b" "$(jx "$T/b" 'hv("x-tag")')"
		assert_eq "$w: X-Forwarded-For" "192.0.2.7, 127.0.0.1" "$(jx "$T/b" 'hv("x-forwarded-for")')"
		assert_eq "$w: X-Forwarded-Host" "$auth" "$(jx "$T/b" 'hv("x-forwarded-host")')"
		assert_eq "$w: X-Forwarded-Proto" http "$(jx "$T/b" 'hv("x-forwarded-proto")')"
		case $v in 1) via="1.1 akgateway" ;; 2) via="2 akgateway" ;; esac
		assert_eq "$w: Via" "$via" "$(jx "$T/b" 'hv("via")')"
		assert_eq "$w: X-Request-Id" "$(rid "$T/h")" "$(jx "$T/b" 'hv("x-request-id")')"
		case $form in
		host) assert_eq "$w: no X-Forwarded-Prefix" "" "$(jx "$T/b" 'hv("x-forwarded-prefix")')" ;;
		path) assert_eq "$w: X-Forwarded-Prefix" "/sb1/$H2A" "$(jx "$T/b" 'hv("x-forwarded-prefix")')" ;;
		esac
		for f in host connection x-hop keep-alive te transfer-encoding upgrade; do
			assert_eq "$w: no $f field" "" "$(jx "$T/b" "hv(\"$f\")")"
		done
		line=$(access "$(rid "$T/h")")
		assert_contains "$w: access status" '"status":200,' "$line"
		assert_contains "$w: access port" "\"sandbox\":\"sb1\",\"port\":$H2A," "$line"
		assert_contains "$w: access proto" "\"proto\":\"h$v\"" "$line"
	done
done
ok "HTTP/1.1 and HTTP/2 clients, host and path form: the target saw HTTP/2 with the rewritten fields"

# A private h2c port: no credential reaches the target, other cookies do.
tok=$("$AKGW" token -c "$T/gateway.yaml" --sandbox priv --port "$H2A" --ttl 1h) ||
    fail "akgateway token failed"
PU="http://$H2A-priv.localhost:$GW"
code=$($C1 -o "$T/b" -w '%{http_code}' -H "X-Access-Token: $tok" \
    -H "Cookie: x=1; akgw_token=$tok; y=2" "$PU/echo?a=1&access_token=$tok")
assert_eq "private port, token: status" 200 "$code"
assert_eq "private port: query token stripped" "/echo?a=1" "$(jx "$T/b" 'd["path"]')"
assert_eq "private port: other cookies kept" "x=1; y=2" "$(jx "$T/b" 'hv("cookie")')"
code=$($C2 -o "$T/b2" -w '%{http_code}' -H "Authorization: Bearer $tok" "$PU/echo?b=1")
assert_eq "private port, Bearer over HTTP/2: status" 200 "$code"
assert_eq "private port: no Authorization" "" "$(jx "$T/b2" 'hv("authorization")')"
assert_eq "private port: no X-Access-Token" "" "$(jx "$T/b" 'hv("x-access-token")')"
grep -qF "$tok" "$T/h2a.jsonl" && fail "the access token reached the h2c target"
code=$($C1 -o /dev/null -w '%{http_code}' "$PU/echo?no-token")
assert_eq "private port without a token" 401 "$code"
assert_eq "refused request at the target" 0 "$(nreq "$T/h2a.jsonl" "/echo?no-token")"
ok "a private h2c port: credentials stripped before the target"

# 3. 64 MiB up (Content-Length, chunked, HTTP/2) and down (HTTP/1.1,
# HTTP/2), sha256 at both ends.
up() {
	w=$1; shift
	"$@" >"$T/up.json" || fail "$w: curl failed"
	assert_eq "$w: length at the target" 67108864 "$(jx "$T/up.json" 'd["body_len"]')"
	assert_eq "$w: sha256 at the target" "$BIG" "$(jx "$T/up.json" 'd["body_sha256"]')"
}
up "64 MiB up, Content-Length" $C1 --data-binary "@$T/www/big.bin" "$HA/sink?u=cl"
assert_eq "Content-Length at the target" 67108864 "$(jx "$T/up.json" 'hv("content-length")')"
up "64 MiB up, chunked" $C1 -H 'Transfer-Encoding: chunked' --data-binary "@$T/www/big.bin" "$HA/sink?u=chunked"
assert_eq "no Content-Length for a chunked body" "" "$(jx "$T/up.json" 'hv("content-length")')"
up "64 MiB up over HTTP/2" $C2 --data-binary "@$T/www/big.bin" "$HA/sink?u=h2"
assert_eq "Content-Length from an HTTP/2 client" 67108864 "$(jx "$T/up.json" 'hv("content-length")')"
got=$($C1 "$HA/files/big.bin" | sha256sum | cut -d' ' -f1)
assert_eq "64 MiB down to HTTP/1.1" "$BIG" "$got"
got=$($C2 "$PA/files/big.bin" | sha256sum | cut -d' ' -f1)
assert_eq "64 MiB down to HTTP/2 (path form)" "$BIG" "$got"
code=$($C1 -o "$T/hello.out" -w '%{http_code}' "$HA/files/hello.txt")
assert_eq "small file status" 200 "$code"
cmp -s "$T/hello.out" "$T/www/hello.txt" || fail "small file differs"
ok "64 MiB up (Content-Length, chunked, HTTP/2) and down (HTTP/1.1, HTTP/2), byte-exact"

# 4. HEAD, 204, 304, trailers.
for v in 1 2; do
	case $v in 1) cl="$C1" ;; 2) cl="$C2" ;; esac
	code=$($cl -I -D "$T/h" -o "$T/b" -w '%{http_code} %{size_download}' "$HA/files/big.bin?head=$v")
	assert_eq "HEAD over $v: status, no body" "200 0" "$code"
	assert_contains "HEAD over $v: length" "content-length: 67108864" "$(tr -d '\r' <"$T/h" | tr 'A-Z' 'a-z')"
	assert_eq "HEAD at the target" HEAD "$(treq "$T/h2a.jsonl" "/files/big.bin?head=$v" 'd["method"]')"
	for s in 204 304; do
		code=$($cl -D "$T/h" -o "$T/b" -w '%{http_code} %{size_download}' "$HA/status/$s")
		assert_eq "$s over $v" "$s 0" "$code"
	done
	# Trailers: HTTP/2 clients get them as such, HTTP/1.1 ones after the
	# last chunk (curl writes both into the -D file after the head).
	code=$($cl -H 'TE: trailers' -D "$T/h" -o "$T/b" -w '%{http_code}' "$HA/trailers?n=1000")
	assert_eq "trailers over $v: status" 200 "$code"
	assert_eq "trailers over $v: body" 1000 "$(tr -cd t <"$T/b" | wc -c)"
	assert_contains "trailers over $v: x-trailer" "x-trailer: done" "$(tr -d '\r' <"$T/h")"
	assert_contains "trailers over $v: grpc-status" "grpc-status: 0" "$(tr -d '\r' <"$T/h")"
done
# Two requests on one HTTP/1.1 connection after a 304: kept alive.
n=$($C1 -o /dev/null -o /dev/null -w '%{num_connects}\n' "$HA/status/304" "$HA/echo?after304" | tr '\n' ' ')
assert_eq "connections for a 304 and the next request" "1 0 " "$n"
ok "HEAD, 204, 304 and trailers through an h2c port, HTTP/1.1 and HTTP/2 clients"

# 5. A WebSocket upgrade to an h2c port still goes over HTTP/1.1 (the
# target answers it with a plain 200; what matters is how it arrived).
$C1 --max-time 5 -o /dev/null -H 'Connection: Upgrade' -H 'Upgrade: websocket' \
    -H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==' \
    "$HA/ws-check" 2>/dev/null
assert_eq "WebSocket upgrade: protocol at the target" HTTP/1.1 "$(treq "$T/h2a.jsonl" /ws-check 'd["proto"]')"
assert_eq "WebSocket upgrade: Upgrade field" websocket "$(treq "$T/h2a.jsonl" /ws-check '",".join(v for k, v in d["headers"] if k.lower() == "upgrade")')"
ok "a WebSocket upgrade to an h2c port goes over HTTP/1.1"

# 6. Resets, refusals, GOAWAY, nothing listening.
for v in 1 2; do
	case $v in 1) cl="$C1" ;; 2) cl="$C2" ;; esac
	code=$($cl -D "$T/h" -o "$T/b" -w '%{http_code}' "$HA/reset?v=$v")
	assert_eq "RST_STREAM before the head over $v: status" 502 "$code"
	assert_contains "RST_STREAM before the head: code" '"code":"upstream_reset"' "$(cat "$T/b")"
	assert_contains "RST_STREAM before the head: sentence" "reset the stream (INTERNAL_ERROR) without answering" "$(cat "$T/b")"
	line=$(access "$(rid "$T/h")")
	assert_contains "RST_STREAM before the head: access line" '"status":502,' "$line"
	assert_contains "RST_STREAM before the head: access error" '"error":"upstream_reset"' "$line"

	$cl -D "$T/h" -o "$T/b" "$HA/reset-late?v=$v" 2>/dev/null
	rc=$?
	case $v in
	1) assert_eq "RST_STREAM after the head: curl over HTTP/1.1 (18: cut)" 18 "$rc" ;;
	2) assert_eq "RST_STREAM after the head: curl over HTTP/2 (92: stream reset)" 92 "$rc" ;;
	esac
	assert_contains "RST_STREAM after the head: head went out" " 200" "$(head -n 1 "$T/h")"
	assert_eq "RST_STREAM after the head: bytes before the cut" 1000 "$(wc -c <"$T/b")"
	line=$(access "$(rid "$T/h")")
	assert_contains "RST_STREAM after the head: access status" '"status":200,' "$line"
	assert_contains "RST_STREAM after the head: access says cut" '"close":"upstream closed mid-response"' "$line"
done
wait_log "$T/gateway.log" "broke off: INTERNAL_ERROR"

before=$(nconn "$T/h2a.jsonl")
code=$($C1 -o "$T/b" -w '%{http_code}' "$HA/refuse-once?r=1")
assert_eq "REFUSED_STREAM: retried, status" 200 "$code"
assert_eq "REFUSED_STREAM: the answer" "/refuse-once?r=1" "$(jx "$T/b" 'd["path"]')"
assert_eq "REFUSED_STREAM: attempts at the target" 2 "$(nreq "$T/h2a.jsonl" "/refuse-once?r=1")"
assert_eq "REFUSED_STREAM: the retry on a fresh connection" $((before + 1)) "$(nconn "$T/h2a.jsonl")"
code=$($C2 -o "$T/b" -w '%{http_code}' "$HA/goaway-once?g=1")
assert_eq "GOAWAY past the stream: retried, status" 200 "$code"
assert_eq "GOAWAY past the stream: attempts" 2 "$(nreq "$T/h2a.jsonl" "/goaway-once?g=1")"
# GOAWAY with this stream the last one, then the connection closes without
# an answer: a clean 502, in bounded time, and the next request is served.
start=$(date +%s)
code=$($C1 --max-time 10 -o "$T/b" -w '%{http_code}' "$HA/goaway")
assert_eq "GOAWAY then close: status" 502 "$code"
assert_contains "GOAWAY then close: code" '"code":"upstream_closed"' "$(cat "$T/b")"
[ $(($(date +%s) - start)) -le 5 ] || fail "GOAWAY then close took $(($(date +%s) - start)) s"
code=$($C1 -o "$T/b" -w '%{http_code}' "$HA/echo?after-goaway")
assert_eq "after GOAWAY: status" 200 "$code"
ok "RST_STREAM: 502 upstream_reset before the head, a cut after it; REFUSED_STREAM and GOAWAY retried; GOAWAY then close a clean 502"

for v in 1 2; do
	case $v in 1) cl="$C1" ;; 2) cl="$C2" ;; esac
	code=$($cl -D "$T/h" -o "$T/b" -w '%{http_code}' "http://$NOL-sb1.localhost:$GW/x")
	assert_eq "nothing listening over $v: status" 502 "$code"
	assert_contains "nothing listening: code" '"code":"port_not_listening"' "$(cat "$T/b")"
	line=$(access "$(rid "$T/h")")
	assert_contains "nothing listening: access error" '"error":"port_not_listening"' "$line"
done
ok "nothing listening on an h2c port: 502 port_not_listening"

# 7. Clients that go away before the head: an HTTP/2 client resetting its
# stream (its connection carries on), an HTTP/2 client closing its
# connection, an HTTP/1.1 client resetting its connection.  Each reaches
# the target as RST_STREAM CANCEL.
out=$($PY - "$GW" "$H2A-sb1.localhost:$GW" "/slow?ms=3000&c=h2" 300 <<'PYEOF'
import socket, sys, time
import h2.config, h2.connection, h2.events
port, host, path, ms = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
s = socket.create_connection(("127.0.0.1", port), timeout=10)
c = h2.connection.H2Connection(
    h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
c.initiate_connection()
def req(p):
    return [(":method", "GET"), (":scheme", "http"), (":authority", host),
            (":path", p)]
c.send_headers(1, req(path), end_stream=True)
s.sendall(c.data_to_send())
time.sleep(ms / 1000)
c.reset_stream(1, 8)
c.send_headers(3, req("/echo?after-reset"), end_stream=True)
s.sendall(c.data_to_send())
status, end = None, time.monotonic() + 10
while time.monotonic() < end:
    d = s.recv(65536)
    if not d:
        sys.exit("the gateway closed the connection")
    for ev in c.receive_data(d):
        if isinstance(ev, h2.events.ResponseReceived):
            if ev.stream_id == 1:
                sys.exit("stream 1 answered after its reset")
            status = dict(ev.headers)[":status"]
        if isinstance(ev, h2.events.StreamEnded) and ev.stream_id == 3:
            print(status)
            sys.exit(0)
    s.sendall(c.data_to_send())
sys.exit("no answer on stream 3")
PYEOF
) || fail "HTTP/2 client reset: $out"
assert_eq "the request after a reset, same client connection" 200 "$out"
c=$(treq "$T/h2a.jsonl" "/slow?ms=3000&c=h2" 'd["conn"]')
s=$(treq "$T/h2a.jsonl" "/slow?ms=3000&c=h2" 'd["stream"]')
wait_log "$T/h2a.jsonl" "\"event\": \"reset\", \"conn\": $c, \"stream\": $s, \"error\": 8,"
wait_log "$T/gateway.log" '"close":"stream reset by the client"'
$C2 --max-time 0.5 "$HA/slow?ms=3000&c=h2close" >/dev/null 2>&1
c=$(treq "$T/h2a.jsonl" "/slow?ms=3000&c=h2close" 'd["conn"]')
s=$(treq "$T/h2a.jsonl" "/slow?ms=3000&c=h2close" 'd["stream"]')
wait_log "$T/h2a.jsonl" "\"event\": \"reset\", \"conn\": $c, \"stream\": $s, \"error\": 8,"
$PY - "$GW" "$H2A-sb1.localhost:$GW" "/slow?ms=3000&c=h1rst" <<'PYEOF' || fail "HTTP/1.1 client reset failed"
import socket, struct, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (sys.argv[3], sys.argv[2])).encode())
time.sleep(0.3)
s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
s.close()  # an RST, not a half-close
PYEOF
c=$(treq "$T/h2a.jsonl" "/slow?ms=3000&c=h1rst" 'd["conn"]')
s=$(treq "$T/h2a.jsonl" "/slow?ms=3000&c=h1rst" 'd["stream"]')
wait_log "$T/h2a.jsonl" "\"event\": \"reset\", \"conn\": $c, \"stream\": $s, \"error\": 8,"
ok "a client that resets its stream or its connection, or closes an HTTP/2 one, cancels the upstream stream"

# 8. auto ports: the rest over HTTP/1.1, native gRPC over HTTP/2 only.
AU="http://$AUB-sb1.localhost:$GW"
code=$($C1 -o "$T/b" -w '%{http_code}' "$AU/echo?auto=1")
assert_eq "auto, HTTP/1.1 client: status" 200 "$code"
code=$($C2 -o "$T/b" -w '%{http_code}' "$AU/echo?auto=2")
assert_eq "auto, HTTP/2 client: status" 200 "$code"
assert_eq "auto: both reached the HTTP/1.1 backend" 2 "$(grep -c '"path": "/echo?auto=' "$T/aub.jsonl")"
printf '\0\0\0\0\5hello' >"$T/grpc.msg"
for u in "$AU" "$HA"; do
	code=$($C1 -D "$T/h" -o "$T/b" -w '%{http_code}' -H 'Content-Type: application/grpc' \
	    -H 'TE: trailers' --data-binary "@$T/grpc.msg" "$u/pkg.Svc/Call")
	assert_eq "gRPC over HTTP/1.1 ($u): status" 400 "$code"
	assert_contains "gRPC over HTTP/1.1: code" '"code":"grpc_needs_http2"' "$(cat "$T/b")"
	line=$(access "$(rid "$T/h")")
	assert_contains "gRPC over HTTP/1.1: access error" '"error":"grpc_needs_http2"' "$line"
done
grep -q 'pkg.Svc' "$T/aub.jsonl" "$T/h2a.jsonl" &&
    fail "a gRPC request from an HTTP/1.1 client reached an upstream"
AT="http://$AUT-sb1.localhost:$GW"
code=$($C2 -o "$T/b" -w '%{http_code}' -H 'Content-Type: application/grpc' \
    -H 'TE: trailers' --data-binary "@$T/grpc.msg" "$AT/pkg.Svc/Call")
assert_eq "gRPC over HTTP/2 to auto: status" 200 "$code"
assert_eq "gRPC to auto: HTTP/2 at the target" h2 "$(jx "$T/b" 'd["proto"]')"
assert_eq "gRPC to auto: te" trailers "$(jx "$T/b" 'hv("te")')"
assert_eq "gRPC to auto: content-type" application/grpc "$(jx "$T/b" 'hv("content-type")')"
assert_eq "gRPC to auto: the message" 10 "$(jx "$T/b" 'd["body_len"]')"
code=$($C2 -o "$T/b" -w '%{http_code}' "$AT/echo?not-grpc")
assert_eq "auto, not gRPC, HTTP/2 client: status" 200 "$code"
assert_eq "auto, not gRPC: HTTP/1.1 at the target" HTTP/1.1 "$(jx "$T/b" 'd["proto"]')"
ok "auto ports: native gRPC over HTTP/2, the rest HTTP/1.1; gRPC from HTTP/1.1 refused before any upstream"

# 9. 20 requests at once to a target of 4 streams a connection: all
# answered, on more than one connection, the counters moved by what the
# target saw; a later request takes a pooled connection.
c0=$(metric akgw_upstream_h2_connections_total)
s0=$(metric akgw_upstream_h2_streams_total)
pids=""
i=0
while [ $i -lt 20 ]; do
	$C1 -o "$T/c$i.out" -w '%{http_code}' "http://$H2M-sb1.localhost:$GW/slow?ms=1000&i=$i" >"$T/c$i.code" &
	pids="$pids $!"
	i=$((i + 1))
done
wait_pids $pids
i=0
while [ $i -lt 20 ]; do
	assert_eq "concurrent request $i: status" 200 "$(cat "$T/c$i.code")"
	assert_eq "concurrent request $i: answer" "/slow?ms=1000&i=$i" "$(jx "$T/c$i.out" 'd["path"]')"
	i=$((i + 1))
done
n=$(nconn "$T/h2m.jsonl")
[ "$n" -gt 1 ] || fail "20 requests to a target of 4 streams took $n connection(s)"
assert_eq "h2 connections counted" "$((c0 + n))" "$(metric akgw_upstream_h2_connections_total)"
assert_eq "h2 streams counted" "$((s0 + 20))" "$(metric akgw_upstream_h2_streams_total)"
$C1 -o /dev/null "http://$H2M-sb1.localhost:$GW/echo?pooled"
assert_eq "a later request: no new connection" "$n" "$(nconn "$T/h2m.jsonl")"
assert_eq "a later request: counted as a stream, not a connection" "$((c0 + n))" "$(metric akgw_upstream_h2_connections_total)"
ok "20 concurrent requests, 4 streams a connection: $n connections, then a pooled one"

# The gateway stops cleanly (a sanitizer build reports here).
stop_gw "$GW_PID" "$T/gateway.log"
ok "akgateway exits 0 after the h2c runs"

# 10. limits.h2_upstream_streams: 2 and a target with no limit of its own:
# 10 requests at once take at least 5 connections, 2 streams each at most.
GW2=$(free_port)
H2B=$(free_port)
target h2b "$H2B"
wait_port "$H2B"
cat >"$T/gw2.yaml" <<EOF
listen:
  - address: 127.0.0.1:$GW2
domains: [localhost]
workers: 1
log:
  level: info
  format: json
limits:
  h2_upstream_streams: 2
sandboxes:
  - id: sb2
    address: 127.0.0.1
    ports:
      - {port: $H2B, protocol: h2c}
EOF
spawn gw2 "$AKGW" -c "$T/gw2.yaml"
GW2_PID=$LAST_PID
wait_port "$GW2"
pids=""
i=0
while [ $i -lt 10 ]; do
	$C1 -o /dev/null -w '%{http_code}' "http://$H2B-sb2.localhost:$GW2/slow?ms=1000&k=$i" >"$T/k$i.code" &
	pids="$pids $!"
	i=$((i + 1))
done
wait_pids $pids
i=0
while [ $i -lt 10 ]; do
	assert_eq "h2_upstream_streams 2, request $i" 200 "$(cat "$T/k$i.code")"
	i=$((i + 1))
done
n=$(nconn "$T/h2b.jsonl")
[ "$n" -ge 5 ] || fail "10 requests at once, 2 streams a connection: $n connections"
mo=$(grep '"path": "/slow' "$T/h2b.jsonl" | $PY -c '
import json, sys
print(max(json.loads(l)["open"] for l in sys.stdin))')
[ "$mo" -le 2 ] || fail "h2_upstream_streams 2, yet a connection carried $mo streams at once"
stop_gw "$GW2_PID" "$T/gw2.log"
ok "limits.h2_upstream_streams 2: $n connections for 10 requests, at most $mo streams each"

# 11. A new connection's streams before the server's SETTINGS arrived: the
# server's SETTINGS_MAX_CONCURRENT_STREAMS (4) still bounds them.  Targets
# one round trip away (their SETTINGS, and their reading of the gateway's
# frames, 200 ms late), a fresh gateway: 20 requests at once to the target
# that takes what comes must never see more than 4 streams open on a
# connection; 20 POSTs at once to the one that refuses past 4 from the
# first frame (as nghttp2 and Go servers do) must all be answered.
GW3=$(free_port)
cat >"$T/gw3.yaml" <<EOF
listen:
  - address: 127.0.0.1:$GW3
domains: [localhost]
workers: 1
log:
  level: info
  format: json
sandboxes:
  - id: sb1
    address: 127.0.0.1
    ports:
      - {port: $H2A, protocol: h2c}
      - {port: $H2D, protocol: h2c}
      - {port: $H2S, protocol: h2c}
EOF
spawn gw3 "$AKGW" -c "$T/gw3.yaml"
GW3_PID=$LAST_PID
wait_port "$GW3"
pids=""
i=0
while [ $i -lt 20 ]; do
	$C1 -o /dev/null -w '%{http_code}' "http://$H2D-sb1.localhost:$GW3/slow?ms=1000&m=$i" >"$T/m$i.code" &
	pids="$pids $!"
	i=$((i + 1))
done
wait_pids $pids
i=0
while [ $i -lt 20 ]; do
	assert_eq "SETTINGS late, request $i" 200 "$(cat "$T/m$i.code")"
	i=$((i + 1))
done
stats=$(grep '"path": "/slow' "$T/h2d.jsonl" | $PY -c '
import collections, json, sys
L = [json.loads(l) for l in sys.stdin]
c = collections.Counter(d["conn"] for d in L)
print(max(d["open"] for d in L), len(c), sorted(c.values()))')
mo=${stats%% *}
[ "$mo" -le 4 ] || fail "SETTINGS late: a connection carried $mo streams at once, past the server's limit of 4 (most open, connections, requests each: $stats)"
pids=""
i=0
while [ $i -lt 20 ]; do
	$C1 -o "$T/p$i.out" -w '%{http_code}' --data-binary "post $i" \
	    "http://$H2S-sb1.localhost:$GW3/slow?ms=1000&p=$i" >"$T/p$i.code" &
	pids="$pids $!"
	i=$((i + 1))
done
wait_pids $pids
i=0
while [ $i -lt 20 ]; do
	[ "$(cat "$T/p$i.code")" = 200 ] ||
	    fail "SETTINGS late, POST $i to a server refusing past 4 streams: $(cat "$T/p$i.code") $(cat "$T/p$i.out"); refused at the target: $(grep -c '"event": "refused"' "$T/h2s.jsonl")"
	i=$((i + 1))
done
ok "streams opened before the server's SETTINGS keep within its SETTINGS_MAX_CONCURRENT_STREAMS"

# 12. An HTTP/1.1 client that closes (curl --max-time: FIN, not RST) before
# the head: the upstream stream is cancelled as for the other clients that
# go away, not left to run until its answer.
$C1 --max-time 0.5 "http://$H2A-sb1.localhost:$GW3/slow?ms=3000&c=h1close" >/dev/null 2>&1
c=$(treq "$T/h2a.jsonl" "/slow?ms=3000&c=h1close" 'd["conn"]')
s=$(treq "$T/h2a.jsonl" "/slow?ms=3000&c=h1close" 'd["stream"]')
i=0
while ! grep -q "\"event\": \"reset\", \"conn\": $c, \"stream\": $s," "$T/h2a.jsonl" && [ $i -lt 40 ]; do
	sleep 0.05; i=$((i + 1))
done
grep -q "\"event\": \"reset\", \"conn\": $c, \"stream\": $s," "$T/h2a.jsonl" ||
    fail "an HTTP/1.1 client that closed before the head left its upstream stream running"
ok "an HTTP/1.1 client closing before the head cancels the upstream stream"

stop_gw "$GW3_PID" "$T/gw3.log"
ok "the last akgateway exits 0"
