#!/bin/sh
# aktunnel speaking HTTP/2 to an https:// target that picks h2 in ALPN, the
# whole way through: code in a sandbox (a network namespace) calls the
# tunnel port, akgateway carries the request to aktunnel, aktunnel to the
# target (h2_target.py, python3-h2, and nghttpd). Asserts that the target
# saw HTTP/2 with the request fields mapped (:authority, no
# connection-specific fields), status and body byte for byte, 64 MiB down
# and up with sha256, 20 concurrent requests on one target connection, a
# second connection past the server's SETTINGS_MAX_CONCURRENT_STREAMS,
# a slow reader holding the target back, --target-http2 off giving
# HTTP/1.1, a reset stream and a GOAWAY giving the caller the documented 502
# with "HTTP/2" and the error code, a refused stream retried, cancelled
# streams leaving the connection to the others, and a target with a bad
# certificate refused as before.
. "$(dirname "$0")/lib.sh"

[ -x "$AKTUN" ] || fail "$AKTUN is not built"
[ -f "$CERTS/ca.crt" ] || fail "no test certificates in $CERTS (make certs)"
$PY -c 'import h2' || fail "python3-h2 is missing"
command -v nghttpd >/dev/null 2>&1 || fail "nghttpd (nghttp2-server) is missing"

NS="akgw-h2-$$"
netns_add "$NS"
nsc() { ip netns exec "$NS" curl -sS --max-time 60 "$@"; }

GW=$(free_port)
TOKEN=tunnel-token-0123456789abcdef
# Room for 20 requests at once through the tunnel (both ends read it).
YR_TUNNEL_MAX_INFLIGHT=32
export YR_TUNNEL_MAX_INFLIGHT

mkdir -p "$T/www"
head -c 67108864 /dev/urandom >"$T/www/big.bin"
BIG=$(sha256sum <"$T/www/big.bin" | cut -d' ' -f1)
printf 'hello over h2\n' >"$T/www/hello.txt"

H2T=$(free_port)
H2S=$(free_port)
NGX=$(free_port)
spawn h2t $PY "$TOP/tests/regress/h2_target.py" --port "$H2T" \
    --cert "$CERTS/server.crt" --key "$CERTS/server.key" --log "$T/h2t.jsonl" \
    --root "$T/www"
spawn h2s $PY "$TOP/tests/regress/h2_target.py" --port "$H2S" \
    --cert "$CERTS/server.crt" --key "$CERTS/server.key" --log "$T/h2s.jsonl" \
    --root "$T/www" --max-streams 5
H2O=$(free_port)
spawn h2o $PY "$TOP/tests/regress/h2_target.py" --port "$H2O" \
    --cert "$CERTS/other.crt" --key "$CERTS/other.key" --log "$T/h2o.jsonl" \
    --root "$T/www"
spawn nghttpd nghttpd -v -a 127.0.0.1 -d "$T/www" "$NGX" \
    "$CERTS/server.key" "$CERTS/server.crt"
wait_port "$H2T"
wait_port "$H2S"
wait_port "$NGX"
wait_port "$H2O"

# Four tunnels, one per sandbox port: the h2 target, the same with
# --target-http2 off, the target with five streams a connection, nghttpd.
spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
sandboxes:
  - id: h2
    netns: /run/netns/$NS
    tunnel:
      listen_port: [8766, 7766, 6766, 5766, 4766]
      token: $TOKEN
      client_wait: 5s
EOF

tun() {
	name=$1 port=$2 target=$3; shift 3
	spawn "$name" "$AKTUN" --gateway "127.0.0.1:$GW" --sandbox h2 \
	    --listen-port "$port" --target "$target" --token "$TOKEN" \
	    --allow-plaintext-token --target-ca-file "$CERTS/ca.crt" "$@"
}
tun tun1 8766 "https://localhost:$H2T" -v
TUN1=$LAST_PID
tun tun2 7766 "https://localhost:$H2T" --target-http2 off -v
tun tun3 6766 "https://localhost:$H2S" -v
TUN3=$LAST_PID
tun tun4 5766 "https://localhost:$NGX"
wait_log "$T/tun1.log" "ready"
wait_log "$T/tun2.log" "ready"
wait_log "$T/tun3.log" "ready"
wait_log "$T/tun4.log" "ready"

# 1. One request: the target saw HTTP/2 and the fields as RFC 9113 wants.
out=$(nsc -H 'X-Tag: a' -H 'X-Tag: b' -H 'Connection: X-Hop' -H 'X-Hop: 1' \
    -H 'Upgrade: foo' -H 'TE: gzip' -H 'Keep-Alive: 5' \
    "http://127.0.0.1:8766/echo?q=1")
assert_contains "protocol at the target" '"proto": "h2"' "$out"
assert_contains ":authority is the target" "\"authority\": \"localhost:$H2T\"" "$out"
assert_contains ":path" '"path": "/echo?q=1"' "$out"
assert_contains "X-Tag kept in order" '["x-tag", "a"], ["x-tag", "b"]' "$out"
for h in host connection x-hop upgrade te keep-alive transfer-encoding; do
	case "$out" in *"[\"$h\","*) fail "$h reached the h2 target: $out" ;; esac
done
code=$(nsc -o "$T/hello.out" -w '%{http_code}' "http://127.0.0.1:8766/files/hello.txt")
assert_eq "status over h2" 200 "$code"
cmp -s "$T/hello.out" "$T/www/hello.txt" || fail "body over h2 differs"
out=$(nsc -D - -o /dev/null "http://127.0.0.1:8766/files/hello.txt")
assert_contains "response head over h2" "x-target: h2" "$out"
ok "the target saw HTTP/2: status, head and body byte for byte, request fields mapped"

# 2. 64 MiB down and up through the tunnel, sha256.
got=$(nsc "http://127.0.0.1:8766/files/big.bin" | sha256sum | cut -d' ' -f1)
assert_eq "64 MiB download over h2" "$BIG" "$got"
out=$(nsc --data-binary "@$T/www/big.bin" "http://127.0.0.1:8766/sink")
assert_contains "64 MiB upload over h2" "\"body_sha256\": \"$BIG\"" "$out"
assert_contains "upload length" '"body_len": 67108864' "$out"
out=$(nsc -H 'Transfer-Encoding: chunked' --data-binary "@$T/www/hello.txt" \
    "http://127.0.0.1:8766/sink")
assert_contains "chunked upload over h2" '"body_len": 14' "$out"
ok "64 MiB download and upload over h2, byte-exact"

# wait_jobs: wait for the clients in $jobs (not for the servers).
wait_jobs() {
	for j in $jobs; do wait "$j"; done
	jobs=""
}
jobs=""

# 3. 20 concurrent requests, one target connection.
before=$(grep -c '"event": "conn"' "$T/h2t.jsonl")
i=0
while [ $i -lt 20 ]; do
	nsc -o "$T/c$i.out" "http://127.0.0.1:8766/slow?ms=1500&i=$i" &
	jobs="$jobs $!"
	i=$((i + 1))
done
wait_jobs
i=0
while [ $i -lt 20 ]; do
	assert_contains "concurrent request $i" "\"path\": \"/slow?ms=1500&i=$i\"" "$(cat "$T/c$i.out")"
	i=$((i + 1))
done
after=$(grep -c '"event": "conn"' "$T/h2t.jsonl")
assert_eq "new target connections for 20 requests" "$before" "$after"
n=$(grep '"path": "/slow?ms=1500' "$T/h2t.jsonl" | $PY -c '
import json, sys
print(len({json.loads(l)["conn"] for l in sys.stdin}))')
assert_eq "connections that carried the 20 requests" 1 "$n"
[ "$(grep -c '"event": "conn"' "$T/h2t.jsonl")" = 1 ] ||
    fail "aktunnel opened more than one connection: $(cat "$T/h2t.jsonl" | grep conn)"
ok "20 concurrent requests carried on one HTTP/2 connection"

# 4. Past SETTINGS_MAX_CONCURRENT_STREAMS (5): a second connection.
i=0
while [ $i -lt 8 ]; do
	nsc -o "$T/s$i.out" "http://127.0.0.1:6766/slow?ms=1500&s=$i" &
	jobs="$jobs $!"
	i=$((i + 1))
done
wait_jobs
i=0
while [ $i -lt 8 ]; do
	assert_contains "request $i past the stream limit" '"proto": "h2"' "$(cat "$T/s$i.out")"
	i=$((i + 1))
done
n=$(grep '"path": "/slow' "$T/h2s.jsonl" | $PY -c '
import json, sys
print(len({json.loads(l)["conn"] for l in sys.stdin}))')
assert_eq "connections for 8 requests, 5 streams each" 2 "$n"
ok "past the server's stream limit a second HTTP/2 connection opens"

# 5. A slow sandbox reader (8 MiB/s for 64 MiB): the stream's window opens
# only as bytes go on to the gateway, so aktunnel never holds the body.
got=$(nsc --limit-rate 8M "http://127.0.0.1:6766/files/big.bin" | sha256sum | cut -d' ' -f1)
assert_eq "64 MiB to a slow reader over h2" "$BIG" "$got"
hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/$TUN3/status")
echo "aktunnel peak RSS after a slow 64 MiB download: $hwm kB"
# AddressSanitizer's shadow and quarantine make RSS meaningless there.
if ldd "$AKTUN" | grep -q libasan; then
	echo "note: peak RSS not bounded in a sanitizer build"
else
	[ "$hwm" -lt 40960 ] || fail "aktunnel's peak RSS grew to $hwm kB for a slow reader"
fi
ok "a slow reader holds the target back: aktunnel peak RSS $hwm kB for 64 MiB"

# 6. --target-http2 off: HTTP/1.1 to the same target.
out=$(nsc "http://127.0.0.1:7766/echo")
assert_contains "protocol with --target-http2 off" '"proto": "HTTP/1.1"' "$out"
grep '"alpn": "http/1.1"' "$T/h2t.jsonl" >/dev/null ||
    fail "ALPN did not pick http/1.1 with --target-http2 off"
ok "--target-http2 off speaks HTTP/1.1"

# 7. A reset stream: 502 with a sentence naming HTTP/2 and the code; the
# connection stays for the next request.
out=$(nsc -i "http://127.0.0.1:8766/reset")
assert_contains "reset: status" "HTTP/1.1 502" "$out"
assert_contains "reset: reason" "the target reset the HTTP/2 stream: INTERNAL_ERROR (0x2)" "$out"
wait_log "$T/tun1.log" "GET /reset failed: the target reset the HTTP/2 stream: INTERNAL_ERROR (0x2)"
out=$(nsc -i "http://127.0.0.1:8766/reset-late")
assert_contains "reset mid-body: head went out" "HTTP/1.1 200" "$out"
out=$(nsc "http://127.0.0.1:8766/echo")
assert_contains "the next request after resets" '"proto": "h2"' "$out"
[ "$(grep -c '"event": "conn"' "$T/h2t.jsonl")" = 2 ] ||
    fail "a reset stream cost the connection"
ok "a reset stream gives 502 with HTTP/2 and the error code"

# 8. A refused stream (the target did not process it) is tried again once.
out=$(nsc "http://127.0.0.1:8766/refuse-once?r=1")
assert_contains "refused stream retried" '"path": "/refuse-once?r=1"' "$out"
assert_eq "attempts at the target" 2 "$(grep -c '"path": "/refuse-once?r=1"' "$T/h2t.jsonl")"
ok "a stream refused with REFUSED_STREAM is retried once"

# 9. Callers that go away mid-download cancel their streams only: the
# connection carries on, byte-exact.
for i in 1 2 3; do
	ip netns exec "$NS" curl -sS --max-time 60 "http://127.0.0.1:8766/files/big.bin" 2>/dev/null |
	    head -c 1000000 >/dev/null
done
wait_log "$T/tun1.log" "cancelled by the sandbox"
got=$(nsc "http://127.0.0.1:8766/files/big.bin" | sha256sum | cut -d' ' -f1)
assert_eq "64 MiB after cancelled streams" "$BIG" "$got"
[ "$(grep -c '"event": "conn"' "$T/h2t.jsonl")" = 2 ] ||
    fail "cancelled streams cost the connection"
ok "cancelled streams leave the HTTP/2 connection to the others"

# 10. GOAWAY with an error, then the connection closes: the stream it left
# unanswered fails with the GOAWAY's code; the next request gets a new
# connection.
out=$(nsc -i "http://127.0.0.1:8766/goaway")
assert_contains "GOAWAY: status" "HTTP/1.1 502" "$out"
assert_contains "GOAWAY: reason" "the target sent HTTP/2 GOAWAY: ENHANCE_YOUR_CALM (0xb)" "$out"
out=$(nsc "http://127.0.0.1:8766/echo")
assert_contains "the next request after GOAWAY" '"proto": "h2"' "$out"
[ "$(grep -c '"event": "conn"' "$T/h2t.jsonl")" = 3 ] ||
    fail "no new connection after GOAWAY"
ok "GOAWAY gives 502 with HTTP/2 and the error code; a new connection follows"

# 11. nghttpd: a real HTTP/2 server saw the request over h2.
code=$(nsc -o "$T/ngx.out" -w '%{http_code}' "http://127.0.0.1:5766/hello.txt")
assert_eq "nghttpd status" 200 "$code"
cmp -s "$T/ngx.out" "$T/www/hello.txt" || fail "nghttpd body differs"
got=$(nsc "http://127.0.0.1:5766/big.bin" | sha256sum | cut -d' ' -f1)
assert_eq "64 MiB from nghttpd" "$BIG" "$got"
wait_log "$T/nghttpd.log" "recv HEADERS frame"
assert_contains "nghttpd saw :authority" ":authority: localhost:$NGX" "$(cat "$T/nghttpd.log")"
ok "nghttpd serves through the tunnel over HTTP/2"

# 12. A target with a certificate for another name: refused as before,
# before any HTTP/2 byte.
tun tun5 4766 "https://localhost:$H2O"
wait_log "$T/tun5.log" "ready"
out=$(nsc -i "http://127.0.0.1:4766/echo")
assert_contains "bad certificate: status" "HTTP/1.1 502" "$out"
assert_contains "bad certificate: reason" "TLS certificate verification of the target localhost:$H2O failed: hostname mismatch" "$out"
[ -s "$T/h2o.jsonl" ] && grep -q '"event": "request"' "$T/h2o.jsonl" &&
    fail "a request reached the target with the bad certificate"
ok "a target with a bad certificate is refused, nothing sent"

# 13. aktunnel stops cleanly after all that (a sanitizer build reports here).
kill -TERM "$TUN1"
wait "$TUN1"
assert_eq "aktunnel exit status" 0 "$?"
if grep -E "Sanitizer|runtime error" "$T/tun1.log"; then
	fail "the sanitizer reported on aktunnel"
fi
ok "aktunnel exits 0 after the HTTP/2 runs"
