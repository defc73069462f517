#!/bin/sh
# Reverse tunnel, terminate mode, the gateway as the sandbox role: a sandbox
# in a network namespace with a tunnel on listen port 8766; a scripted
# tunnel client (sandbox_mock_client.py) attaches through the gateway; code
# "in the sandbox" (curl in the namespace) calls http://127.0.0.1:8766.
#
# Fast path, 10 MiB up and down with sha256, SSE one event at a time, HEAD
# and bodiless statuses, a client error -> 502 with its message, no client
# -> 503 after client_wait, a request before any client attaches, a reconnect
# blip, http_timeout -> 504 (the client is told "downstream request
# closed"), past max_inflight a wait then 429, both tunnel routes, auth 401/403, 404
# tunnel_not_configured, Port B unreachable from the host's loopback,
# application WebSockets (the target's close code reaching the caller),
# address placement, admin info and metrics, and a
# tunnel added and removed through the admin API.
. "$(dirname "$0")/lib.sh"

$PY -c 'import websockets' 2>/dev/null || fail "python3-websockets is needed ($PY)"

NS="akgw-tun-$$"
netns_add "$NS"

GW=$(free_port)
ADM=$(free_port)
HOSTLP=$(free_port)
MOCK="$TOP/tests/regress/sandbox_mock_client.py"
TOKEN="tunnel-token-0123456789"
C="curl -sS --max-time 30"
nsc() { ip netns exec "$NS" curl -sS --max-time 30 "$@"; }

# Start a mock client NAME with ARGS; its events go to $T/NAME.jsonl.
start_mock() {
	name=$1; shift
	spawn "mock_$name" $PY "$MOCK" --name "$name" --log "$T/$name.jsonl" "$@"
	MOCK_PID=$LAST_PID
}

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
admin:
  address: 127.0.0.1:$ADM
log:
  level: debug
sandboxes:
  - id: sbx
    netns: /run/netns/$NS
    ports:
      - port: 8000
    tunnel:
      listen_port: 8766
      client_wait: 1s
      http_timeout: 2s
  - id: locked
    netns: /run/netns/$NS
    tunnel:
      listen_port: 7766
      token: $TOKEN
  - id: plain
    netns: /run/netns/$NS
    ports:
      - port: 8000
  - id: onhost
    address: 127.0.0.1
    tunnel:
      listen_port: $HOSTLP
      client_wait: 0s
EOF
wait_port "$ADM"
wait_port_ns 8766
wait_port_ns 7766
wait_port "$HOSTLP"

# Port B exists before any client and lives in the namespace only.
out=$($C -o /dev/null -w '%{http_code}' "http://127.0.0.1:8766/" 2>&1) &&
	fail "Port B answered on the host's loopback: $out"
ok "Port B listens in the namespace, not on the host's loopback"

# No client: 503 after client_wait (1 s), JSON with code and sentence.
start=$(date +%s%N)
out=$(nsc -i http://127.0.0.1:8766/hello)
ms=$(( ($(date +%s%N) - start) / 1000000 ))
assert_contains "no client" "HTTP/1.1 503" "$out"
assert_contains "no client: code" '"code":"tunnel_not_connected"' "$out"
assert_contains "no client: sentence" "No tunnel client is connected for sandbox 'sbx'." "$out"
[ $ms -ge 900 ] && [ $ms -lt 5000 ] || fail "503 came after ${ms}ms, not after client_wait (1s)"
ok "no client: 503 tunnel_not_connected after client_wait (${ms}ms)"

# A request made before any client attaches succeeds once one does.
nsc -o "$T/early.out" http://127.0.0.1:8766/whoami &
early=$!
sleep 0.3
start_mock A --url "ws://127.0.0.1:$GW/tunnel/sbx" --ping-interval 1 \
	--session 00112233-4455-4677-8899-aabbccddeeff
A=$MOCK_PID
wait "$early" || fail "the request made before the client attached failed"
assert_eq "request before the client" "A" "$(cat "$T/early.out")"
wait_log "$T/A.jsonl" '"event": "connected"'
ok "a request made before the client attached is served once it does"

# Fast path.
out=$(nsc -i http://127.0.0.1:8766/hello)
assert_contains "fast path" "HTTP/1.1 200 OK" "$out"
assert_contains "fast path: body" "pong" "$out"
assert_contains "fast path: length" "Content-Length: 4" "$out"
grep '"path": "/hello"' "$T/A.jsonl" | grep -q '"type": "http_req"' || fail "/hello did not travel as http_req"
out=$(nsc -X POST --data-binary 'hello world' -H 'X-Tag: one' -H 'X-Tag: two' -H 'Connection: X-Hop' -H 'X-Hop: 1' http://127.0.0.1:8766/echo)
assert_contains "echo: body" '"len": 11' "$out"
assert_contains "echo: duplicate headers in order" '["X-Tag", "one"], ["X-Tag", "two"]' "$out"
case "$out" in *X-Hop*|*'"Host"'*) fail "hop-by-hop or Host forwarded: $out" ;; esac
# The fast path carries the body's own length, as the Python V2 sandbox does.
assert_contains "echo: Content-Length of the body" '["Content-Length", "11"]' "$out"
ok "fast path request and response; hop-by-hop fields stripped"

# 10 MiB up and down, streamed, checked with sha256.
head -c 10485760 /dev/urandom >"$T/up.bin"
want=$(sha256sum "$T/up.bin" | cut -c1-64)
out=$(nsc -X POST --data-binary "@$T/up.bin" http://127.0.0.1:8766/sha256)
assert_contains "10 MiB upload: sha256" "\"sha256\": \"$want\"" "$out"
assert_contains "10 MiB upload: length" '"len": 10485760' "$out"
grep '"path": "/sha256"' "$T/A.jsonl" | grep -q '"type": "http_req_begin"' || fail "the upload did not stream (http_req_begin)"
want=$($PY "$MOCK" pattern 10485760 | sha256sum | cut -c1-64)
got=$(nsc "http://127.0.0.1:8766/bytes?n=10485760" | sha256sum | cut -c1-64)
assert_eq "10 MiB download (Content-Length)" "$want" "$got"
got=$(nsc "http://127.0.0.1:8766/bytes?n=10485760&cl=0" | sha256sum | cut -c1-64)
assert_eq "10 MiB download (chunked)" "$want" "$got"
out=$(nsc -D - -o /dev/null "http://127.0.0.1:8766/bytes?n=100000")
assert_contains "streamed response: length" "Content-Length: 100000" "$out"
case "$out" in *Transfer-Encoding*) fail "Content-Length and Transfer-Encoding together: $out" ;; esac
out=$(nsc -D - -o /dev/null "http://127.0.0.1:8766/bytes?n=100000&cl=0")
assert_contains "streamed response without length: chunked" "Transfer-Encoding: chunked" "$out"
case "$out" in *Content-Length*) fail "chunked response carries Content-Length: $out" ;; esac
ok "10 MiB up and down byte-exact; Content-Length when known, chunked otherwise, never both"

# HEAD and bodiless statuses (§10.3).
out=$(nsc -I "http://127.0.0.1:8766/bytes?n=100000")
assert_contains "HEAD: length of the streamed response" "Content-Length: 100000" "$out"
out=$(nsc -i "http://127.0.0.1:8766/status?code=204")
assert_contains "204" "HTTP/1.1 204" "$out"
case "$out" in *Content-Length*|*Transfer-Encoding*) fail "204 with framing: $out" ;; esac
out=$(nsc -i "http://127.0.0.1:8766/status?code=304&cl=55")
case "$out" in *Content-Length*) fail "304 with Content-Length: $out" ;; esac
ok "HEAD keeps the length; 204 and 304 have no framing"

# SSE: each event reaches the caller as it is produced.
cat >"$T/sse.py" <<'PYEOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", 8766))
s.sendall(b"GET /sse?n=3&gap_ms=500 HTTP/1.1\r\nHost: x\r\n\r\n")
buf, seen, t0 = b"", {}, time.time()
while len(seen) < 3 and time.time() - t0 < 10:
    d = s.recv(65536)
    if not d:
        break
    buf += d
    for i in range(3):
        if i not in seen and b"data: event-%d" % i in buf:
            seen[i] = time.time() - t0
print(" ".join("%.3f" % seen.get(i, -1) for i in range(3)))
PYEOF
times=$(ip netns exec "$NS" $PY "$T/sse.py")
$PY - "$times" <<'PYEOF' || fail "SSE events did not arrive one at a time: $times"
import sys
t = [float(x) for x in sys.argv[1].split()]
assert all(x >= 0 for x in t), t
assert t[1] - t[0] >= 0.35 and t[2] - t[1] >= 0.35, t
PYEOF
ok "SSE: events arrive one at a time ($times s)"

# Our answer to the client's ping echoes its id (§7, scenario 49).
wait_log "$T/A.jsonl" '"event": "pong"'
ok "the client's pings are answered"

# A response shorter than announced: the caller's body is cut and the client
# is told (§4.7, scenario 48); the tunnel stays up.
out=$(nsc -sS -o /dev/null http://127.0.0.1:8766/short 2>&1) && fail "a short response completed: $out"
wait_log "$T/A.jsonl" '"message": "response content length mismatch"'
out=$(nsc http://127.0.0.1:8766/hello)
assert_eq "after a length mismatch" "pong" "$out"
ok "a response shorter than its content_length is cut; the client is told"

# Strict request heads on Port B (§10.1, scenarios 37, 38).
cat >"$T/raw.py" <<'PYEOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", 8766))
s.sendall(sys.argv[1].encode().decode("unicode_escape").encode("latin-1"))
s.settimeout(10)
print(s.recv(65536).split(b"\r\n")[0].decode())
PYEOF
raw() { ip netns exec "$NS" $PY "$T/raw.py" "$1"; }
out=$(raw 'POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab')
assert_contains "two Content-Length values" "400" "$out"
hdrs=$($PY -c 'print("".join("X-H%d: v\\r\\n" % i for i in range(201)))')
out=$(raw "GET /x HTTP/1.1\\r\\nHost: x\\r\\n$hdrs\\r\\n")
assert_contains "201 header fields" "431" "$out"
ok "Port B: ambiguous Content-Length is 400, 201 header fields are 431"

# A malformed binary frame ends the link with 1002 (scenarios 43, 62).  It
# comes from A's session (a client that breaks the protocol, then dials
# again and resumes): another session would have replaced A's, which may
# then not come back (tunnel_gw_resume.sh).
cat >"$T/badframe.py" <<'PYEOF'
import asyncio, json, sys, websockets
async def main():
    async with websockets.connect(sys.argv[1], ping_interval=None) as ws:
        await ws.send(json.dumps({"type": "hello", "protocol_version": 2,
            "max_stream_chunk": 65536, "max_inflight": 16,
            "stream_window_frames": 16, "resume": True,
            "session_id": "00112233-4455-4677-8899-aabbccddeeff"}))
        await ws.send(b"\x01\x02\x03")
        try:
            while True:
                await asyncio.wait_for(ws.recv(), 10)
        except websockets.exceptions.ConnectionClosed:
            pass
        print(ws.close_code)
asyncio.run(main())
PYEOF
out=$(timeout 20 $PY "$T/badframe.py" "ws://127.0.0.1:$GW/tunnel/sbx")
assert_eq "close code after a malformed binary frame" "1002" "$out"
wait_log "$T/gateway.log" 'broke the protocol: binary envelope is shorter than its header'
out=$(nsc http://127.0.0.1:8766/whoami)
assert_eq "the client resumes after the bad link" "A" "$out"
ok "a malformed binary frame ends that link with 1002; the tunnel serves again"

# A client error becomes 502 with its message.
out=$(nsc -i "http://127.0.0.1:8766/error?msg=upstream%20unreachable")
assert_contains "client error" "HTTP/1.1 502" "$out"
assert_contains "client error: code" '"code":"tunnel_error"' "$out"
assert_contains "client error: message" '"message":"upstream unreachable"' "$out"
ok "a client error is 502 tunnel_error with its message"

# http_timeout: 504, and the client is told the downstream request closed.
start=$(date +%s%N)
out=$(nsc -i http://127.0.0.1:8766/hang)
ms=$(( ($(date +%s%N) - start) / 1000000 ))
assert_contains "timeout" "HTTP/1.1 504" "$out"
assert_contains "timeout: code" '"code":"tunnel_timeout"' "$out"
assert_contains "timeout: sentence" 'Tunnel timeout' "$out"
[ $ms -ge 1900 ] && [ $ms -lt 6000 ] || fail "504 after ${ms}ms, not after http_timeout (2s)"
wait_log "$T/A.jsonl" '"message": "downstream request closed"'
ok "no response within http_timeout: 504 tunnel_timeout, client told 'downstream request closed'"

# The caller gives up early: the client is told.
: >"$T/A.jsonl"
nsc --max-time 0.5 http://127.0.0.1:8766/hang >/dev/null 2>&1
wait_log "$T/A.jsonl" '"message": "downstream request closed"'
ok "a caller that closes early: client told 'downstream request closed'"

# Reconnect blip: the link drops, a request made meanwhile succeeds.
: >"$T/A.jsonl"
kill -USR1 "$A"
out=$(nsc -i http://127.0.0.1:8766/whoami)
assert_contains "request during a reconnect blip" "HTTP/1.1 200" "$out"
wait_log "$T/A.jsonl" '"dropped": true'
ok "a request made during a reconnect blip succeeds"

# Application WebSocket echo through the tunnel.
out=$(ip netns exec "$NS" timeout 30 $PY "$TOP/tests/regress/ws_echo.py" client "ws://127.0.0.1:8766/chat?room=one" --count 5 --size 20) ||
	fail "WebSocket text echo: $out"
assert_eq "WebSocket text echo" "ok 5" "$out"
out=$(ip netns exec "$NS" timeout 30 $PY "$TOP/tests/regress/ws_echo.py" client "ws://127.0.0.1:8766/chat" --count 3 --size 300000) ||
	fail "WebSocket binary echo: $out"
assert_eq "WebSocket binary echo" "ok 3" "$out"
grep -q '"event": "ws_connect".*"path": "/chat?room=one"' "$T/A.jsonl" || fail "ws_connect did not carry the path with its query"
ok "application WebSockets: text and 300 kB binary messages echo byte for byte"

# The target closes with a registered code the caller must see as sent:
# 1012-1014 came after RFC 6455, and were turned into 1000 on the way.
for code in 1012 1014 1011 4000; do
	out=$(ip netns exec "$NS" timeout 30 $PY - "$code" <<'PYEOF'
import asyncio, sys, websockets
async def main():
    async with websockets.connect("ws://127.0.0.1:8766/chat",
                                  ping_interval=None, open_timeout=10) as ws:
        await ws.send("close " + sys.argv[1])
        try:
            await asyncio.wait_for(ws.recv(), 10)
        except websockets.ConnectionClosed:
            pass
        print(ws.close_code, ws.close_reason)
asyncio.run(main())
PYEOF
) || fail "WebSocket closed by the target with $code: $out"
	assert_eq "close code from the target" "$code closed by the target" "$out"
done
ok "application WebSockets: the target's close code reaches the caller, 1012-1014 too"

# Admin API: the tunnel's state, client and counters.
out=$($C "http://127.0.0.1:$ADM/v1/sandboxes/sbx")
$PY - "$out" <<'PYEOF' || fail "admin: tunnel state: $out"
import json, sys
t = json.loads(sys.argv[1])["tunnel"]["listeners"][0]
assert t["state"] == "connected", t
assert t["client"].startswith("127.0.0.1:"), t
assert t["connected_since"].startswith("20"), t
assert t["generation"] >= 3, t          # links accepted, the blip included
assert t["resumable"] is True and t["protocol"] == "v2", t
assert t["listen"] == "127.0.0.1:8766" and t["netns"].startswith("/run/netns/"), t
assert t["in_flight"] == 0 and t["waiting"] == 0, t
assert t["bytes_in"] >= 10485760 and t["bytes_out"] >= 2 * 10485760, t
assert t["requests"] > 10 and t["errors"] >= 2, t
assert t["idle_ms"] >= 0 and "link_bytes_in" in t, t
PYEOF
out=$($C "http://127.0.0.1:$ADM/metrics")
assert_contains "metrics: sessions" "akgw_tunnel_sessions 1" "$out"
# The bad link and A after it, and A after the blip: three resumes.
assert_contains "metrics: resumes" "akgw_tunnel_resumes_total 3" "$out"
assert_contains "metrics: replays" "akgw_tunnel_replays_total" "$out"
assert_contains "metrics: errors" "akgw_tunnel_errors_total" "$out"
ok "admin shows state, client, since, generation; metrics count sessions and resumes"

# max_inflight: a client that allows one request at a time.
# The second form of the route: /{id}/{reverse_port} is /sbx/8765.
stop "$A"
start_mock B --url "ws://127.0.0.1:$GW/sbx/8765" --max-inflight 1
B=$MOCK_PID
wait_log "$T/B.jsonl" '"event": "connected"'
out=$(nsc http://127.0.0.1:8766/whoami)
assert_eq "the /{id}/{reverse_port} route" "B" "$out"
nsc -o /dev/null http://127.0.0.1:8766/hang &
hang=$!
wait_log "$T/B.jsonl" '"path": "/hang"'
out=$(nsc -i http://127.0.0.1:8766/hello)
assert_contains "max_inflight" "HTTP/1.1 429" "$out"
assert_contains "max_inflight: code" '"code":"tunnel_busy"' "$out"
wait "$hang"
out=$(nsc http://127.0.0.1:8766/hello)
assert_eq "after the held request ended" "pong" "$out"
ok "the /{id}/{reverse_port} route; past max_inflight 1 a request waits client_wait, then 429 tunnel_busy"

# Auth: a tunnel token is required when configured.
start_mock N --url "ws://127.0.0.1:$GW/tunnel/locked" --once
wait "$MOCK_PID"
grep -q '"status": 401' "$T/N.jsonl" || fail "no token: expected 401"
start_mock W --url "ws://127.0.0.1:$GW/tunnel/locked" --token wrong-token-0123456789 --once
wait "$MOCK_PID"
grep -q '"status": 403' "$T/W.jsonl" || fail "wrong token: expected 403"
start_mock R --url "ws://127.0.0.1:$GW/tunnel/locked" --token "$TOKEN"
wait_log "$T/R.jsonl" '"event": "connected"'
out=$(nsc http://127.0.0.1:7766/whoami)
assert_eq "right token" "R" "$out"
ok "tunnel token: 401 without, 403 wrong, attached with the right one"

# 404 for a sandbox without a tunnel, and for an unknown sandbox.
up="-H Connection:Upgrade -H Upgrade:websocket -H Sec-WebSocket-Version:13 -H Sec-WebSocket-Key:dGhlIHNhbXBsZSBub25jZQ=="
out=$($C -i $up "http://127.0.0.1:$GW/tunnel/plain")
assert_contains "no tunnel" "HTTP/1.1 404" "$out"
assert_contains "no tunnel: code" '"code":"tunnel_not_configured"' "$out"
out=$($C -i $up "http://127.0.0.1:$GW/tunnel/nosuch")
assert_contains "unknown sandbox" "HTTP/1.1 404" "$out"
out=$($C -i "http://127.0.0.1:$GW/tunnel/sbx")
assert_contains "not an upgrade" "HTTP/1.1 400" "$out"
assert_contains "not an upgrade: code" '"code":"bad_websocket_upgrade"' "$out"
out=$($C -i -H Connection:Upgrade -H Upgrade:websocket -H Sec-WebSocket-Version:8 \
	-H Sec-WebSocket-Key:dGhlIHNhbXBsZSBub25jZQ== "http://127.0.0.1:$GW/tunnel/sbx")
assert_contains "old WebSocket version" "HTTP/1.1 426" "$out"
assert_contains "old WebSocket version: the one we speak" "Sec-WebSocket-Version: 13" "$out"
ok "404 tunnel_not_configured, 404 for an unknown sandbox, 400 for a plain GET, 426 for version 8"

# Address placement: Port B at the sandbox's address; client_wait 0 is 503 at once.
out=$($C -i "http://127.0.0.1:$HOSTLP/x")
assert_contains "address placement, no client" "HTTP/1.1 503" "$out"
start_mock H --url "ws://127.0.0.1:$GW/tunnel/onhost"
wait_log "$T/H.jsonl" '"event": "connected"'
out=$($C "http://127.0.0.1:$HOSTLP/whoami")
assert_eq "address placement" "H" "$out"
ok "address placement: Port B at the sandbox's address"

# A tunnel added through the admin API opens Port B; deleting it closes it.
out=$($C -X PUT "http://127.0.0.1:$ADM/v1/sandboxes/dyn" -H 'Content-Type: application/json' \
	--data-binary "{\"netns\": \"/run/netns/$NS\", \"tunnel\": {\"listen_port\": 9766, \"client_wait\": \"5s\"}}")
assert_contains "PUT with a tunnel" '"listen_port":9766' "$out"
wait_port_ns 9766
nsc -o "$T/dyn.out" -w '%{http_code}' http://127.0.0.1:9766/held >"$T/dyn.code" &
held=$!
sleep 0.3
$C -o /dev/null -X DELETE "http://127.0.0.1:$ADM/v1/sandboxes/dyn"
wait "$held"
assert_eq "held request when the tunnel is removed" "503" "$(cat "$T/dyn.code")"
assert_contains "held request: code" '"code":"tunnel_removed"' "$(cat "$T/dyn.out")"
ip netns exec "$NS" curl -s --max-time 2 -o /dev/null http://127.0.0.1:9766/ &&
	fail "Port B still open after the tunnel was deleted"
ok "admin PUT opens Port B, DELETE closes it and answers held requests 503"

# A clean stop: no sanitizer report, no leak.
stop "$GW_PID"
grep -q 'AddressSanitizer\|LeakSanitizer\|runtime error' "$T/gateway.log" && fail "sanitizer report in the gateway log"
ok "tunnel_gw_basic"
