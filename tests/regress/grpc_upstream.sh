#!/bin/sh
# gRPC and HTTP/2 to sandbox ports.  A port with protocol: h2c gets every
# request as cleartext HTTP/2 (prior knowledge), HTTP/1.1 clients
# translated; a port with protocol: auto gets native gRPC (application/grpc,
# application/grpc+...) over h2c and everything else, grpc-web included,
# over HTTP/1.1.  Real clients: python3-grpcio (grpc_peer.py) through the
# plain listener (h2 prior knowledge) and the TLS one (ALPN h2), python3-h2,
# curl; real servers: grpc_peer.py, nghttpd, h2_target.py --plain, and
# backend.py (HTTP/1.1 only).
#
# Checked, through the plain and the TLS listener where it applies: unary,
# server-, client- and bidi-streaming calls; metadata both ways (binary
# too); an error's status, message and trailers; 4 MiB messages each way
# (sha256); a client deadline and a client cancellation reach the server
# (it logs the cancellation); the gateway's own grpc-timeout (grpc-status
# 4, RST_STREAM CANCEL upstream); 50 calls in progress at once on one
# channel; a paused reader holds the server back; 40 calls to a server
# allowing 8 streams a connection; gRPC from an HTTP/1.1 client refused
# (400 grpc_needs_http2) before any upstream; HTTP/1.1 clients of h2c-only
# servers; an upstream reset before the head (502 upstream_reset) and
# after it (the answer cut short); an HTTP/2 client's departure cancels
# its upstream stream; the gateway's refusals as gRPC clients read them;
# auto's HTTP/1.1 for the rest; REFUSED_STREAM tried again, GOAWAY, a
# restarted server; the access lines.
#
# Only the host form: a gRPC client's :path is /Service/Method and stock
# clients cannot put the path form's /{sandbox}/{port} prefix in front of
# it.  *.localhost names need no resolver: the channel connects to
# 127.0.0.1 and sends the host form as :authority (grpc.default_authority),
# over TLS also checked against the certificate (*.gw.localhost).
. "$(dirname "$0")/lib.sh"

for tool in curl nghttpd; do
	command -v $tool >/dev/null 2>&1 || fail "$tool is needed for this test"
done
$PY -c 'import grpc, h2' 2>/dev/null ||
	fail "python3-grpcio and python3-h2 are needed for this test"
[ -f "$CERTS/ca.crt" ] || fail "no development certificates in $CERTS (make certs)"

PEER="$TOP/tests/regress/grpc_peer.py"
GW=$(free_port)
GWS=$(free_port)
GRPC=$(free_port)	# grpc_peer.py behind protocol: h2c
GRPCA=$(free_port)	# grpc_peer.py behind protocol: auto
GRPCM=$(free_port)	# grpc_peer.py allowing 8 streams a connection, h2c
H2T=$(free_port)	# h2_target.py --plain (h2c only) behind h2c
NGX=$(free_port)	# nghttpd --no-tls (h2c only) behind h2c
BACKA=$(free_port)	# backend.py (HTTP/1.1 only) behind auto
CLOSED=$(free_port)	# nothing listens, behind h2c
GLOG="$T/grpc-calls.log"
GALOG="$T/grpca-calls.log"
GMLOG="$T/grpcm-calls.log"
HLOG="$T/h2t-events.log"
BLOG="$T/backa.jsonl"

mkdir -p "$T/www"
head -c 1048576 /dev/urandom >"$T/www/big.bin"
echo "hello from nghttpd" >"$T/www/hello.txt"
BIGSUM=$(sha256sum <"$T/www/big.bin" | cut -d' ' -f1)

spawn grpc $PY "$PEER" serve --port "$GRPC" --log "$GLOG"
GRPC_PID=$LAST_PID
spawn grpca $PY "$PEER" serve --port "$GRPCA" --log "$GALOG"
spawn grpcm $PY "$PEER" serve --port "$GRPCM" --log "$GMLOG" --max-streams 8
spawn h2t $PY "$TOP/tests/regress/h2_target.py" --plain --port "$H2T" \
	--log "$HLOG"
spawn nghttpd nghttpd -v --no-tls --echo-upload -a 127.0.0.1 -d "$T/www" "$NGX"
spawn backa $PY "$TOP/tests/regress/backend.py" --port "$BACKA" --log "$BLOG"
wait_log "$T/grpc.log" "^listening $GRPC"
wait_log "$T/grpca.log" "^listening $GRPCA"
wait_log "$T/grpcm.log" "^listening $GRPCM"
wait_port "$H2T"
wait_port "$NGX"
wait_port "$BACKA"

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
  - address: 127.0.0.1:$GWS
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key
domains: [localhost, gw.localhost]
log:
  level: info
timeouts:
  connect: 2s
sandboxes:
  - id: sb1
    address: 127.0.0.1
    ports:
      - port: $GRPC
        access: public
        protocol: h2c
      - port: $H2T
        protocol: h2c
      - port: $NGX
        protocol: h2c
      - port: $CLOSED
        protocol: h2c
      - port: $GRPCM
        protocol: h2c
  - id: sb2
    address: 127.0.0.1
    ports:
      - port: $GRPCA
        protocol: auto
      - port: $BACKA
        protocol: auto
EOF
wait_port "$GWS"

# Each curl says which HTTP it speaks, whatever lib.sh's pass would pick.
C="command curl -sS --max-time 30"
H1="$C --http1.1"
H2C="$C --http2-prior-knowledge"
H2S="$C --http2 --cacert $CERTS/ca.crt"
H1S="$C --http1.1 --cacert $CERTS/ca.crt"
calls() { _n=$(grep -c "^call " "$1" 2>/dev/null); echo "${_n:-0}"; }
lines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }
resets() { grep -c '"event": "reset".*"error": 8,' "$HLOG"; }

# Wait until resets (CANCEL) in h2_target.py's log pass $1 (10 s at most).
wait_resets() {
	i=0
	while [ "$(resets)" -le "$1" ] && [ $i -lt 200 ]; do
		sleep 0.05; i=$((i + 1))
	done
	[ "$(resets)" -gt "$1" ] || fail "$2: the upstream stream was not reset (CANCEL)"
}

# The host form of port $1 of sandbox $2 on the plain listener and on the
# TLS one (whose certificate covers *.gw.localhost).
plain() { echo "--target 127.0.0.1:$GW --authority $1-$2.localhost:$GW"; }
tls() {
	echo "--target 127.0.0.1:$GWS --ca $CERTS/ca.crt" \
	    "--authority $1-$2.gw.localhost:$GWS"
}

# gcall ARGS...: one grpc_peer.py scenario; its failure is the test's.
gcall() {
	_out=$(timeout 120 $PY "$PEER" call "$@" 2>&1) || fail "gRPC: $_out"
	echo "  $_out"
}

# The JSON field "code" of a gateway's error body.
json_code() {
	$PY -c 'import json,sys; print(json.load(sys.stdin).get("code"))' 2>/dev/null
}

# A 5-byte gRPC frame around "hi", for the raw clients.
printf '\000\000\000\000\002hi' >"$T/frame.bin"

# --- every kind of call, through both listeners ----------------------------
for l in plain tls; do
	a=$($l "$GRPC" sb1)
	gcall $a unary
	gcall $a server-stream --n 1000 --size 1024
	gcall $a client-stream --n 200 --size 16384
	gcall $a bidi --n 50
	gcall $a fail
	gcall $a big --size 4194304
	ok "h2c port over the $l listener: unary, server-, client- and bidi-streaming, metadata, error trailers, 4 MiB each way"
done

line=$(grep 'access .*path=/akgw.test.Peer/Unary ' "$T/gateway.log" | head -n 1)
[ -n "$line" ] || fail "no access line for the unary call"
assert_contains "access line of a gRPC call: protocol" "proto=h2" "$line"
assert_contains "access line of a gRPC call: status" "status=200" "$line"
assert_contains "access line of a gRPC call: port" "port=$GRPC" "$line"
assert_contains "access line of a gRPC call: sandbox" "sandbox=sb1" "$line"
ok "a gRPC call's access line says proto=h2 status=200 and its port"

# --- deadlines and cancellation reach the server ---------------------------
for l in plain tls; do
	a=$($l "$GRPC" sb1)
	gcall $a deadline --timeout 1 --tag "dl-$l"
	wait_log "$GLOG" "^cancelled Slow tag=dl-$l "
	# The deadline travels upstream as grpc-timeout (at most the client's).
	grep -Eq "^call Slow tag=dl-$l .*deadline=(0\.|1\.0)" "$GLOG" ||
		fail "the server saw no deadline of at most 1 s: $(grep "tag=dl-$l" "$GLOG")"
	gcall $a cancel --timeout 10 --tag "cx-$l"
	wait_log "$GLOG" "^cancelled Slow tag=cx-$l reason=cancel"
	ok "over the $l listener a client deadline and a client cancel end the server's call"
done

# The gateway's own grpc-timeout: h2_target.py ignores grpc-timeout and
# answers /slow after 8 s, the raw client never cancels; only the gateway
# can answer grpc-status 4 after 300 ms, and cancel the upstream stream.
n0=$(resets)
out=$(timeout 30 $PY "$PEER" raw-timeout --port "$GW" \
	--authority "$H2T-sb1.localhost:$GW" --path "/slow?ms=8000" \
	--grpc-timeout 300m --tag gwdl 2>&1) || fail "raw gRPC client: $out"
assert_contains "gateway deadline: trailers-only grpc-status" "grpc-status=4 in=head " "$out"
assert_contains "gateway deadline: HTTP status" "status=200 " "$out"
took=$(echo "$out" | sed -n 's/.* took=\([0-9.]*\) .*/\1/p')
$PY -c "import sys; sys.exit(not 0.29 <= $took < 3)" ||
	fail "grpc-status 4 after $took s for grpc-timeout 300m"
wait_log "$HLOG" '"path": "/slow?ms=8000"'
wait_resets "$n0" "gateway deadline"
wait_log "$T/gateway.log" 'access .*path=/slow .*error=grpc_deadline_exceeded'
ok "the gateway answers grpc-status 4 when grpc-timeout passes ($took s) and resets the upstream stream with CANCEL"

# The same once the head and a first part came (/drip: the end after 8 s):
# grpc-status 4 in trailers after what the client had.
n0=$(resets)
out=$(timeout 30 $PY "$PEER" raw-timeout --port "$GW" \
	--authority "$H2T-sb1.localhost:$GW" --path "/drip?ms=8000" \
	--grpc-timeout 300m --tag gwdl2 2>&1) || fail "raw gRPC client: $out"
assert_contains "gateway deadline after the head: trailers" "grpc-status=4 in=trailers " "$out"
assert_contains "gateway deadline after the head: what came before" "body=6" "$out"
took=$(echo "$out" | sed -n 's/.* took=\([0-9.]*\) .*/\1/p')
$PY -c "import sys; sys.exit(not 0.29 <= $took < 3)" ||
	fail "grpc-status 4 after $took s for grpc-timeout 300m"
wait_resets "$n0" "gateway deadline after the head"
wait_log "$T/gateway.log" 'access .*path=/drip .*error=grpc_deadline_exceeded'
ok "after the head the gateway ends the answer with grpc-status 4 in trailers ($took s) and resets the upstream stream"

# --- many calls at once on one channel ------------------------------------
for l in plain tls; do
	gcall $($l "$GRPC" sb1) concurrent --n 50 --tag "many-$l"
	n=$(grep -c "^call Gather tag=many-$l " "$GLOG")
	assert_eq "calls the server saw ($l)" 50 "$n"
	conns=$(grep "^call Gather tag=many-$l " "$GLOG" |
		sed 's/.* peer=\([^ ]*\) .*/\1/' | sort -u | wc -l)
	[ "$conns" -lt 50 ] ||
		fail "50 concurrent calls took $conns upstream connections (no multiplexing)"
	ok "50 calls in progress together on one channel ($l), $conns upstream connection(s)"
done

# --- a client that reads slowly holds the server back ------------------------
# It reads one message of a 64 MiB stream and then nothing until told: the
# server must stop after what the windows hold (a few MiB), not push the
# rest into the gateway's memory.  The server can send only what the
# gateway's windows let it, so its count bounds what the gateway holds (the
# gateway's RSS would say less: a sanitizer build's allocator keeps freed
# memory).
sent() { grep "^progress ServerStream tag=$1 " "$GLOG" | tail -n 1 | sed 's/.*sent=//'; }
for l in plain tls; do
	rm -f "$T/release"
	timeout 120 $PY "$PEER" call $($l "$GRPC" sb1) slow-reader --n 4096 \
	    --size 16384 --tag "slow-$l" --release "$T/release" \
	    >"$T/slow-reader.log" 2>&1 &
	SR=$!
	PIDS="$PIDS $SR"
	wait_log "$T/slow-reader.log" "^paused"
	# Wait until the server stops moving: the same count for 1 s.
	i=0; last=-1; same=0
	while [ $i -lt 200 ] && [ $same -lt 10 ]; do
		cur=$(sent "slow-$l")
		if [ "${cur:-0}" = "$last" ]; then same=$((same + 1)); else same=0; last=${cur:-0}; fi
		sleep 0.1; i=$((i + 1))
	done
	[ $same -ge 10 ] || fail "the server never stopped sending to a paused reader ($l): $last"
	[ "$last" -lt 1024 ] ||
		fail "the server sent $last of 4096 messages of 16 KiB to a reader that read one ($l)"
	touch "$T/release"
	wait $SR || fail "slow reader ($l): $(cat "$T/slow-reader.log")"
	ok "a paused gRPC reader holds the server at $last of 4096 messages of 16 KiB ($l)"
done

# An upstream that allows 8 streams a connection (its SETTINGS) gets no
# more: 40 calls at once all succeed, however the gateway spreads them.
gcall $(plain "$GRPCM" sb1) parallel --n 40 --ms 200 --tag lim
assert_eq "calls the 8-stream server saw" 40 "$(grep -c '^finished Slow tag=lim$' "$GMLOG")"
# Streams sent before the server's SETTINGS arrive may pass its limit (the
# initial value is unlimited); grpc-core accepts them until its SETTINGS
# are acknowledged, so this reports the spread and does not judge it.
spread=$(grep "^call Slow tag=lim " "$GMLOG" | sed 's/.* peer=\([^ ]*\) .*/\1/' |
	sort | uniq -c | awk '{ n++; if ($1 > m) m = $1 } END { print n " upstream connection(s), at most " m " calls on one" }')
ok "40 calls at once to a server allowing 8 streams a connection all succeed ($spread)"

# --- gRPC from HTTP/1.1 is refused before any upstream -----------------------
g0=$(calls "$GLOG")
b0=$(lines "$BLOG")
for ct in application/grpc application/grpc+proto; do
	for url in "http://$GRPC-sb1.localhost:$GW/akgw.test.Peer/Unary" \
	    "https://$GRPC-sb1.gw.localhost:$GWS/akgw.test.Peer/Unary" \
	    "http://$BACKA-sb2.localhost:$GW/echo"; do
		out=$($H1S -o "$T/refused.json" -w '%{http_code}' \
			-H "Content-Type: $ct" -H "TE: trailers" \
			--data-binary "@$T/frame.bin" "$url")
		assert_eq "HTTP/1.1 $ct to $url: status" 400 "$out"
		assert_eq "HTTP/1.1 $ct to $url: code" grpc_needs_http2 \
			"$(json_code <"$T/refused.json")"
	done
done
assert_eq "calls the gRPC server saw after the refusals" "$g0" "$(calls "$GLOG")"
assert_eq "requests backend.py saw after the refusals" "$b0" "$(lines "$BLOG")"
line=$(grep 'access .*error=grpc_needs_http2' "$T/gateway.log" | tail -n 1)
[ -n "$line" ] || fail "a refused HTTP/1.1 gRPC request has no access line"
assert_contains "access line of the refusal: status" "status=400" "$line"
assert_contains "access line of the refusal: protocol" "proto=h1" "$line"
ok "gRPC over HTTP/1.1 is refused (400 grpc_needs_http2), logged, and reaches no upstream"

# --- HTTP/1.1 and plain HTTP/2 clients of h2c-only servers ------------------
got=$($H1 "http://$NGX-sb1.localhost:$GW/big.bin" | sha256sum | cut -d' ' -f1)
assert_eq "HTTP/1.1 GET of 1 MiB from nghttpd" "$BIGSUM" "$got"
got=$($H1S "https://$NGX-sb1.gw.localhost:$GWS/big.bin" | sha256sum | cut -d' ' -f1)
assert_eq "HTTP/1.1 GET over TLS from nghttpd" "$BIGSUM" "$got"
got=$($H2C "http://$NGX-sb1.localhost:$GW/big.bin" | sha256sum | cut -d' ' -f1)
assert_eq "h2c GET from nghttpd" "$BIGSUM" "$got"
got=$($H2S "https://$NGX-sb1.gw.localhost:$GWS/big.bin" | sha256sum | cut -d' ' -f1)
assert_eq "h2 GET over TLS from nghttpd" "$BIGSUM" "$got"
hdr=$($H1 -sI "http://$NGX-sb1.localhost:$GW/hello.txt")
assert_contains "HTTP/1.1 HEAD from nghttpd" "HTTP/1.1 200" "$hdr"
got=$($H1 --data-binary "@$T/www/big.bin" "http://$NGX-sb1.localhost:$GW/hello.txt" |
	sha256sum | cut -d' ' -f1)
assert_eq "HTTP/1.1 POST of 1 MiB echoed by nghttpd" "$BIGSUM" "$got"
grep -q "recv HEADERS frame" "$T/nghttpd.log" || fail "nghttpd saw no HTTP/2 request"
ok "HTTP/1.1 and HTTP/2 clients GET, HEAD and POST through an h2c port to nghttpd"

out=$($H1 --data-binary "@$T/www/big.bin" "http://$H2T-sb1.localhost:$GW/echo?a=1")
assert_contains "HTTP/1.1 POST reaches h2_target over h2" '"proto": "h2"' "$out"
assert_contains "method" '"method": "POST"' "$out"
assert_contains "path and query" '"path": "/echo?a=1"' "$out"
assert_contains "body" "\"body_sha256\": \"$BIGSUM\"" "$out"
out=$($H1 -T - "http://$H2T-sb1.localhost:$GW/sink" <"$T/www/big.bin")
assert_contains "a chunked HTTP/1.1 upload reaches h2_target" "\"body_sha256\": \"$BIGSUM\"" "$out"
# RFC 9113 section 8.2.2: no connection-specific fields in HTTP/2.
for h in connection transfer-encoding keep-alive upgrade proxy-connection; do
	case "$out" in *"[\"$h\","*) fail "a connection-specific field $h went upstream over h2: $out" ;; esac
done
ok "HTTP/1.1 uploads (sized and chunked) reach an h2c-only server byte for byte, without HTTP/1 fields"

# --- an upstream that resets a stream before its head -----------------------
for c in "$H1" "$H2C"; do
	out=$($c -o "$T/reset.json" -w '%{http_code}' "http://$H2T-sb1.localhost:$GW/reset")
	assert_eq "stream reset before the head ($c): status" 502 "$out"
	assert_eq "stream reset before the head ($c): code" upstream_reset \
		"$(json_code <"$T/reset.json")"
done
grep -q 'access .*path=/reset .*error=upstream_reset' "$T/gateway.log" ||
	fail "no access line with upstream_reset"
ok "a stream reset before the head is 502 upstream_reset"

# A response cut short by the upstream never looks complete: h2_target.py
# sends the head (content-length 100000) and 1000 bytes, then resets.
for c in "$H1" "$H2C"; do
	$c -o /dev/null "http://$H2T-sb1.localhost:$GW/reset-late" 2>/dev/null &&
		fail "a response reset after 1000 bytes looked complete ($c)"
done
ok "a stream reset after the head cuts the client's response short"

# An HTTP/2 client that goes away (curl closes the connection, it sends no
# RST_STREAM) cancels its upstream stream.  Not HTTP/1.1: the gateway takes
# a client's end after a whole request for a half-close and still answers.
n0=$(resets)
$H2C --max-time 1 -o /dev/null "http://$H2T-sb1.localhost:$GW/slow?ms=8000" \
	2>/dev/null && fail "/slow?ms=8000 answered within 1 s"
wait_resets "$n0" "an HTTP/2 client that went away"
ok "an HTTP/2 client that goes away resets its upstream stream (CANCEL)"

# --- refusals a gRPC client reads: trailers-only, grpc-status ---------------
g0=$(calls "$GLOG")
gcall $(plain "$GRPC" nosuch) refused --code NOT_FOUND --gw-error sandbox_not_found
gcall $(plain "$CLOSED" sb1) refused --code UNAVAILABLE --gw-error port_not_listening
gcall $(tls "$H2T" sb1) refused --path /reset --code UNAVAILABLE --gw-error upstream_reset
assert_eq "calls the gRPC server saw" "$g0" "$(calls "$GLOG")"
grep -q 'access .*path=/reset status=502 .*error=upstream_reset .*proto=h2' "$T/gateway.log" ||
	fail "no access line status=502 error=upstream_reset for the gRPC call"
ok "gRPC clients read the gateway's refusals as grpc-status (NOT_FOUND, UNAVAILABLE)"

# --- auto: gRPC over h2c, the rest over HTTP/1.1 ----------------------------
a0=$(calls "$GALOG")
gcall $(plain "$GRPCA" sb2) unary
gcall $(tls "$GRPCA" sb2) bidi --n 20
assert_eq "calls the auto port's gRPC server saw" $((a0 + 2)) "$(calls "$GALOG")"
b0=$(lines "$BLOG")
body=$($H1 "http://$BACKA-sb2.localhost:$GW/echo?via=h1")
assert_contains "auto: HTTP/1.1 GET" '"path": "/echo?via=h1"' "$body"
body=$($H2C "http://$BACKA-sb2.localhost:$GW/echo?via=h2c")
assert_contains "auto: h2c GET reaches the HTTP/1.1 server" '"path": "/echo?via=h2c"' "$body"
body=$($H2S "https://$BACKA-sb2.gw.localhost:$GWS/echo?via=h2")
assert_contains "auto: h2 GET over TLS reaches the HTTP/1.1 server" '"path": "/echo?via=h2"' "$body"
# grpc-web is not native gRPC: HTTP/1.1 upstream, from either client.
body=$($H2C -H 'Content-Type: application/grpc-web+proto' \
	--data-binary "@$T/frame.bin" "http://$BACKA-sb2.localhost:$GW/echo?via=web2")
assert_contains "auto: grpc-web from h2 goes over HTTP/1.1" '"path": "/echo?via=web2"' "$body"
assert_contains "auto: grpc-web body" '"body_len": 7' "$body"
body=$($H1 -H 'Content-Type: application/grpc-web-text' \
	--data-binary "AAAAAAJoaQ==" "http://$BACKA-sb2.localhost:$GW/echo?via=web1")
assert_contains "auto: grpc-web from HTTP/1.1 is not refused" '"path": "/echo?via=web1"' "$body"
assert_eq "requests backend.py saw over HTTP/1.1" $((b0 + 5)) "$(lines "$BLOG")"
ok "auto sends gRPC over h2c and GET, h2 and grpc-web requests over HTTP/1.1"

grep -q 'access .*path=/echo .*sandbox=sb2 .*proto=h2' "$T/gateway.log" ||
	fail "no access line for an h2 request through the auto port"
ok "access lines for the auto port"

# --- connections that end: REFUSED_STREAM, GOAWAY, a restarted server -------
# A stream the server refused (REFUSED_STREAM: never processed) is tried
# again; h2_target.py refuses /refuse-once the first time only.
out=$($H2C "http://$H2T-sb1.localhost:$GW/refuse-once?n=1")
assert_contains "a refused stream tried again" '"path": "/refuse-once?n=1"' "$out"
assert_eq "attempts h2_target.py saw" 2 "$(grep -c '"path": "/refuse-once?n=1"' "$HLOG")"
ok "a stream refused with REFUSED_STREAM is tried again and answered"

# h2_target.py answers /goaway with GOAWAY and closes; the next request
# goes over a new connection.
c0=$(grep -c '"event": "conn"' "$HLOG")
$H2C -o /dev/null "http://$H2T-sb1.localhost:$GW/goaway" 2>/dev/null
out=$($H2C "http://$H2T-sb1.localhost:$GW/echo?after=goaway")
assert_contains "a request after GOAWAY" '"path": "/echo?after=goaway"' "$out"
[ "$(grep -c '"event": "conn"' "$HLOG")" -gt "$c0" ] ||
	fail "no new upstream connection after GOAWAY"
ok "after an upstream's GOAWAY the next request gets a new connection"

# The gRPC server restarts on its port: the pooled connections to the old
# one are gone, the next calls get new ones.
stop "$GRPC_PID"
spawn grpc2 $PY "$PEER" serve --port "$GRPC" --log "$GLOG"
wait_log "$T/grpc2.log" "^listening $GRPC"
gcall $(plain "$GRPC" sb1) unary
gcall $(tls "$GRPC" sb1) unary
ok "calls after the gRPC server restarted succeed"

# A clean stop: no sanitizer report, no leak (in a sanitizer build).
stop "$GW_PID"
kill -0 "$GW_PID" 2>/dev/null && fail "the gateway did not stop within 5 s"
grep -q 'AddressSanitizer\|LeakSanitizer\|runtime error' "$T/gateway.log" &&
	fail "sanitizer report in the gateway log"
ok "the gateway stops cleanly"
