#!/bin/sh
# Port B answers "Expect: 100-continue" only when the gateway means to read
# the body (RFC 9110 §10.1.1): a streamed upload with no tunnel client gets
# its 503 after client_wait without being invited to send its body first
# (Port B used to send 100 Continue at once with the head, so the caller
# sent a body the gateway then refused), and once a client is attached the
# 100 comes, the body follows and arrives byte-exact.  A fast-path body is
# invited at once.
. "$(dirname "$0")/lib.sh"

$PY -c 'import websockets' 2>/dev/null || fail "python3-websockets is needed ($PY)"

GW=$(free_port)
LP=$(free_port)
MOCK="$TOP/tests/regress/sandbox_mock_client.py"

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
sandboxes:
  - id: sbx
    address: 127.0.0.1
    tunnel:
      listen_port: $LP
      client_wait: 1s
EOF
wait_port "$LP"

# expect.py SIZE: send a POST head with Expect: 100-continue and a body of
# SIZE bytes announced; print the first status line that comes back; on a
# 100, send the body and print the final status line and the body's sha256
# as the answer says it.
cat >"$T/expect.py" <<'PYEOF'
import hashlib, json, socket, sys, time
port, size = int(sys.argv[1]), int(sys.argv[2])
body = bytes(i % 251 for i in range(size))
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"POST /sha256 HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
          b"Content-Length: %d\r\n\r\n" % size)
s.settimeout(10)
buf = b""
t0 = time.time()
while b"\r\n\r\n" not in buf and time.time() - t0 < 10:
    d = s.recv(65536)
    if not d:
        break
    buf += d
first = buf.split(b"\r\n")[0].decode()
print(first)
if " 100 " not in first + " ":
    head, _, rest = buf.partition(b"\r\n\r\n")
    print("connection-close" if b"Connection: close" in head else "keep-alive")
    sys.exit(0)
buf = buf.partition(b"\r\n\r\n")[2]
s.sendall(body)
while b"\r\n\r\n" not in buf:
    d = s.recv(65536)
    if not d:
        break
    buf += d
head, _, rest = buf.partition(b"\r\n\r\n")
n = 0
for line in head.split(b"\r\n")[1:]:
    k, _, v = line.partition(b":")
    if k.strip().lower() == b"content-length":
        n = int(v)
while len(rest) < n:
    d = s.recv(65536)
    if not d:
        break
    rest += d
print(head.split(b"\r\n")[0].decode())
print(json.loads(rest[:n])["sha256"] == hashlib.sha256(body).hexdigest())
PYEOF

# 1. No client: no invitation, the 503 after client_wait, and the close
#    (the body that was never asked for is not read).
out=$(timeout 20 $PY "$T/expect.py" "$LP" 300000) || fail "expect.py failed: $out"
assert_eq "no client: the first answer" "HTTP/1.1 503 Service Unavailable
connection-close" "$out"
ok "no client: a 100-continue upload gets its 503, never a 100 Continue first"

# 2. A client: 100 Continue, then the body streams through byte-exact.
spawn mock $PY "$MOCK" --name A --log "$T/A.jsonl" --url "ws://127.0.0.1:$GW/tunnel/sbx"
wait_log "$T/A.jsonl" '"event": "connected"'
out=$(timeout 20 $PY "$T/expect.py" "$LP" 300000) || fail "expect.py failed: $out"
assert_eq "client: 100, then the answer" "HTTP/1.1 100 Continue
HTTP/1.1 200 OK
True" "$out"
grep '"path": "/sha256"' "$T/A.jsonl" | grep -q '"type": "http_req_begin"' ||
	fail "the upload did not stream (http_req_begin)"
ok "with a client: 100 Continue, then a 300 kB streamed upload byte-exact"

# 3. A fast-path body is invited at once.
out=$(timeout 20 $PY "$T/expect.py" "$LP" 1000) || fail "expect.py failed: $out"
assert_eq "fast path: 100, then the answer" "HTTP/1.1 100 Continue
HTTP/1.1 200 OK
True" "$out"
ok "a fast-path body is invited at once"

stop "$GW_PID"
grep -q 'AddressSanitizer\|LeakSanitizer\|runtime error' "$T/gateway.log" && fail "sanitizer report in the gateway log"
ok "tunnel_expect_continue"
