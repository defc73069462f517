#!/bin/sh
# A small chunked upload through a terminate-mode tunnel reaches the target
# with a Content-Length (issue 17 §1).  A 33-byte chunked POST used to go
# out as a streamed http_req_begin with content_length null, so a target
# that reads bodies by Content-Length got no length and an empty body.
# Like the Python V2 sandbox, the gateway now reads a body of unknown
# length up to the fast-path limit + 1 byte (for at most 250 ms) first: if
# it ends within that, it goes as one http_req carrying Content-Length;
# a larger one, or one still arriving after 250 ms, streams as before.
#
# Checked with the scripted client (the frame type and its headers) and
# with the real aktunnel in front of a target that reads by Content-Length
# only.
. "$(dirname "$0")/lib.sh"

$PY -c 'import websockets' 2>/dev/null || fail "python3-websockets is needed ($PY)"

GW=$(free_port)
LP1=$(free_port)
LP2=$(free_port)
TGT=$(free_port)
MOCK="$TOP/tests/regress/sandbox_mock_client.py"
C="curl -sS --max-time 20"

# A target that knows only Content-Length: no length, no body.
cat >"$T/cltarget.py" <<'EOP'
import hashlib, json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        cl = self.headers.get("Content-Length")
        body = self.rfile.read(int(cl)) if cl is not None else b""
        out = json.dumps({"content_length": cl,
                          "transfer_encoding": self.headers.get("Transfer-Encoding"),
                          "len": len(body), "body": body.decode("latin-1")[:64],
                          "sha256": hashlib.sha256(body).hexdigest()}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOP
spawn target $PY "$T/cltarget.py" "$TGT"
wait_port "$TGT"

spawn_gateway "$GW" <<EOC
listen:
  - address: 127.0.0.1:$GW
sandboxes:
  - id: sbx
    address: 127.0.0.1
    tunnel:
      listen_port: [$LP1, $LP2]
EOC
wait_port "$LP1"
wait_port "$LP2"
spawn mock $PY "$MOCK" --name M --log "$T/M.jsonl" \
	--url "ws://127.0.0.1:$GW/tunnel/sbx/$((LP1 - 1))"
spawn aktunnel "$AKTUN" --gateway "127.0.0.1:$GW" --sandbox sbx \
	--listen-port "$LP2" --target "http://127.0.0.1:$TGT"
wait_log "$T/M.jsonl" '"event": "connected"'
for _ in $(seq 100); do
	[ "$($C -o /dev/null -w '%{http_code}' -d x "http://127.0.0.1:$LP2/" 2>/dev/null)" = 200 ] && break
	sleep 0.1
done

BODY33="the thirty-three byte chunk body"
BODY33="$BODY33."
[ ${#BODY33} -eq 33 ] || fail "the test body is ${#BODY33} bytes"
sha33=$(printf %s "$BODY33" | sha256sum | cut -d' ' -f1)

# 1. The scripted client sees one http_req with Content-Length: 33.
out=$($C -H 'Transfer-Encoding: chunked' --data-binary "$BODY33" "http://127.0.0.1:$LP1/echo")
assert_contains "33 bytes: length" '"len": 33' "$out"
assert_contains "33 bytes: sha256" "\"sha256\": \"$sha33\"" "$out"
assert_contains "33 bytes: Content-Length header" '["Content-Length", "33"]' "$out"
case "$out" in *[Tt]ransfer-[Ee]ncoding*) fail "Transfer-Encoding relayed: $out" ;; esac
req=$(grep '"path": "/echo"' "$T/M.jsonl" | tail -1)
assert_contains "33 bytes: frame" '"type": "http_req"' "$req"
ok "a 33-byte chunked POST goes as http_req with Content-Length: 33"

# 2. Through aktunnel, a target that reads by Content-Length gets it all.
out=$($C -H 'Transfer-Encoding: chunked' --data-binary "$BODY33" "http://127.0.0.1:$LP2/")
assert_contains "aktunnel: Content-Length" '"content_length": "33"' "$out"
assert_contains "aktunnel: body" "\"body\": \"$BODY33\"" "$out"
assert_contains "aktunnel: sha256" "\"sha256\": \"$sha33\"" "$out"
ok "through aktunnel a Content-Length-only target receives the 33 bytes"

# 3. Exactly the fast-path limit still goes fast; one byte more streams.
head -c 65536 /dev/urandom >"$T/64k"
head -c 65537 /dev/urandom >"$T/64k1"
head -c 300000 /dev/urandom >"$T/300k"
for f in 64k 64k1 300k; do
	want=$(sha256sum <"$T/$f" | cut -d' ' -f1)
	n=$(wc -c <"$T/$f")
	out=$($C -H 'Transfer-Encoding: chunked' --data-binary "@$T/$f" "http://127.0.0.1:$LP1/echo?f=$f")
	assert_contains "$f: length" "\"len\": $n" "$out"
	assert_contains "$f: sha256" "\"sha256\": \"$want\"" "$out"
done
# The whole fast path reaches a Content-Length target; a streamed body of
# unknown length goes on chunked (this target cannot read that).
out=$($C -H 'Transfer-Encoding: chunked' --data-binary "@$T/64k" "http://127.0.0.1:$LP2/")
assert_contains "64 KiB via aktunnel: Content-Length" '"content_length": "65536"' "$out"
assert_contains "64 KiB via aktunnel: sha256" "\"sha256\": \"$(sha256sum <"$T/64k" | cut -d' ' -f1)\"" "$out"
assert_contains "64 KiB: fast" '"type": "http_req"' "$(grep '/echo?f=64k"' "$T/M.jsonl")"
assert_contains "64 KiB + 1: streamed" '"type": "http_req_begin"' "$(grep '/echo?f=64k1"' "$T/M.jsonl")"
assert_contains "300 KB: streamed" '"type": "http_req_begin"' "$(grep '/echo?f=300k"' "$T/M.jsonl")"
ok "chunked 64 KiB goes fast (with its length through aktunnel); 64 KiB + 1 and 300 KB stream, byte-exact"

# 4. A small body that is slow to arrive streams after 250 ms, intact.
cat >"$T/slow.py" <<'EOP'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"POST /echo?f=slow HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
          b"Connection: close\r\n\r\n5\r\nfirst\r\n")
time.sleep(1)
s.sendall(b"6\r\nsecond\r\n0\r\n\r\n")
data = b""
s.settimeout(10)
while True:
    b = s.recv(65536)
    if not b:
        break
    data += b
print(data.decode())
EOP
out=$($PY "$T/slow.py" "$LP1")
assert_contains "slow: status" "HTTP/1.1 200" "$out"
assert_contains "slow: length" '"len": 11' "$out"
assert_contains "slow: streamed" '"type": "http_req_begin"' "$(grep '/echo?f=slow"' "$T/M.jsonl")"
ok "a small chunked body still arriving after 250 ms streams, intact"
