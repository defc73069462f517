#!/bin/sh
# SIGTERM drains (issue 20): the gateway stops accepting and lets what is
# in flight finish, for up to timeouts.drain, then exits 0.
#
# 1. timeouts.drain 20s, two workers: five slow HTTP/1 requests (2 s
#    each), a 50 MiB download, three requests through a terminate-mode
#    tunnel (aktunnel, the sandbox a network namespace), a slow HTTP/2
#    stream and an idle keep-alive connection, all in flight at SIGTERM.
#    The slow requests answer 200 with Connection: close, the download's
#    sha256 is right, the tunnel's requests answer 200, the HTTP/2 stream
#    gets GOAWAY and its answer; the idle connection is closed at once;
#    /readyz says 503 draining and /metrics akgw_draining 1 meanwhile;
#    new connections (public listener, Port B) are refused; aktunnel is
#    told 1012 "service restart"; the process exits 0 long before 20s.
# 2. timeouts.drain 2s: WebSockets open at SIGTERM (wss, ws over HTTP/2,
#    plain ws, and a wss and an HTTP/2 one whose backend is in the middle
#    of a frame at the deadline) and a request that would take 10 s.  At
#    the deadline the wss and the HTTP/2 ones get a close frame 1001 from
#    the gateway (those in the middle of a frame after its end, and
#    nothing after it); the plain one, relayed by splice(2), and the
#    request are cut; the process exits 0 within the deadline and the
#    grace, its log counting them.
# 3. A second SIGTERM during a drain stops at once.
. "$(dirname "$0")/lib.sh"

$PY -c 'import websockets, h2' 2>/dev/null ||
	fail "python3-websockets and python3-h2 are needed ($PY)"
command -v nghttp >/dev/null 2>&1 || fail "nghttp (nghttp2-client) is needed"

NS="akgw-drain-$$"
netns_add "$NS"

GW=$(free_port)
ADM=$(free_port)
BE=$(free_port)
FILES=$(free_port)
TARGET=$(free_port)
C="curl -sS --max-time 30"

# until WHAT CMD...: run CMD every 50 ms until it succeeds (10 s at most).
until_ok() {
	_what=$1; shift
	_i=0
	while ! "$@" >/dev/null 2>&1; do
		_i=$((_i + 1))
		[ $_i -lt 200 ] || fail "timed out waiting for $_what"
		sleep 0.05
	done
}
# count FILE PATTERN: lines of FILE matching PATTERN (0 without FILE).
count() { grep -c "$2" "$1" 2>/dev/null || true; }
at_least() { [ "$(count "$1" "$2")" -ge "$3" ]; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
# exited PID: the process is gone (a zombie counts as gone).
exited() { ! kill -0 "$1" 2>/dev/null || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
refused() {
	"$@" -sS --max-time 5 -o /dev/null 2>/dev/null
	[ $? -eq 7 ]
}

mkdir -p "$T/www"
head -c 52428800 /dev/urandom >"$T/www/big.bin"
want=$(sha256sum <"$T/www/big.bin" | cut -d' ' -f1)
spawn backend $PY "$TOP/tests/regress/backend.py" --port "$BE" --log "$T/be.jsonl"
spawn target $PY "$TOP/tests/regress/backend.py" --port "$TARGET" --log "$T/target.jsonl"
spawn files sh -c "cd '$T/www' && exec $PY -m http.server $FILES --bind 127.0.0.1"
wait_port "$BE"
wait_port "$TARGET"
wait_port "$FILES"

# An idle keep-alive connection: one request answered, then nothing.
# It says when (wall clock, ms) and how the gateway closed it.
cat >"$T/idle.py" <<'EOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
s.sendall(b"GET /sbx/%s/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % sys.argv[2].encode())
buf = b""
while b"\r\n\r\n" not in buf:
    buf += s.recv(4096)
head, body = buf.split(b"\r\n\r\n", 1)
n = [int(l.split(b":")[1]) for l in head.split(b"\r\n")
     if l.lower().startswith(b"content-length:")][0]
while len(body) < n:
    body += s.recv(4096)
open(sys.argv[3], "w").close()
s.settimeout(25)
try:
    d = s.recv(4096)
except socket.timeout:
    print("still open")
    sys.exit(0)
print("closed %s at %d" % ("cleanly" if d == b"" else "with %r" % d[:40],
                           int(time.time() * 1000)))
EOF

# A WebSocket that echoes once, says it is open, then waits for its end.
cat >"$T/ws.py" <<'EOF'
import asyncio, ssl, sys, time
import websockets

async def main(url, ready, cafile):
    ctx = ssl.create_default_context(cafile=cafile) if url.startswith("wss:") else None
    async with websockets.connect(url, ssl=ctx, ping_interval=None,
                                  open_timeout=10, close_timeout=5) as ws:
        await ws.send("hello")
        assert await ws.recv() == "hello"
        open(ready, "w").close()
        msgs = []
        try:
            while True:
                msgs.append(len(await asyncio.wait_for(ws.recv(), 30)))
        except websockets.ConnectionClosed as e:
            r = e.rcvd
            print("close %s %s msgs=%s at %d" % (
                r.code if r else "none", r.reason if r else "-",
                ",".join(map(str, msgs)), int(time.time() * 1000)))
        except asyncio.TimeoutError:
            print("still open")

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
EOF

# A WebSocket backend that echoes one message, then sends the first half
# of a 10-byte binary frame; the rest of it, and a frame "after", once
# FILE exists.  One thread per connection.
cat >"$T/midframe.py" <<'EOF'
import base64, hashlib, os, socket, sys, threading, time

def serve(c, finish):
    req = b""
    while b"\r\n\r\n" not in req:
        req += c.recv(4096)
    key = [l.split(b":", 1)[1].strip() for l in req.split(b"\r\n")
           if l.lower().startswith(b"sec-websocket-key:")][0]
    acc = base64.b64encode(hashlib.sha1(
        key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
              b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + acc +
              b"\r\n\r\n")
    buf = b""
    while len(buf) < 6 or len(buf) < 6 + (buf[1] & 0x7f):
        buf += c.recv(4096)
    n, mask = buf[1] & 0x7f, buf[2:6]
    payload = bytes(b ^ mask[i % 4] for i, b in enumerate(buf[6:6 + n]))
    c.sendall(bytes([0x80 | (buf[0] & 0x0f), n]) + payload)
    c.sendall(bytes([0x82, 10]) + b"01234")
    end = time.monotonic() + 30
    while not os.path.exists(finish) and time.monotonic() < end:
        time.sleep(0.02)
    c.sendall(b"56789" + bytes([0x81, 5]) + b"after")
    c.settimeout(30)
    try:
        while c.recv(4096):
            pass
    except OSError:
        pass
    c.close()

ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", int(sys.argv[1])))
ls.listen(8)
while True:
    c, _ = ls.accept()
    threading.Thread(target=serve, args=(c, sys.argv[2]), daemon=True).start()
EOF

# --- 1. everything in flight finishes --------------------------------------

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
    http2: true
admin:
  address: 127.0.0.1:$ADM
workers: 2
timeouts:
  drain: 20s
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $BE
      - port: $FILES
  - id: box
    netns: /run/netns/$NS
    tunnel:
      listen_port: 8766
EOF
wait_port "$ADM"
NS=$NS wait_port_ns 8766
spawn tun "$AKTUN" --gateway "127.0.0.1:$GW" --sandbox box \
	--target "http://127.0.0.1:$TARGET"
TUN_PID=$LAST_PID
out=$(ip netns exec "$NS" curl -sS --max-time 30 http://127.0.0.1:8766/echo)
assert_contains "a request through the tunnel" '"path": "/echo"' "$out"

pids=""
for i in 1 2 3 4 5; do
	$C -i -o "$T/slow$i.out" "http://127.0.0.1:$GW/sbx/$BE/slow?ms=2000&n=$i" &
	pids="$pids $!"
done
for i in 1 2 3; do
	ip netns exec "$NS" curl -sS --max-time 30 -i -o "$T/tun$i.out" \
	    "http://127.0.0.1:8766/slow?ms=2000&t=$i" &
	pids="$pids $!"
done
nghttp -v "http://127.0.0.1:$GW/sbx/$BE/slow?ms=2000&h2=1" >"$T/h2.out" 2>&1 &
pids="$pids $!"
$C --limit-rate 20M -o "$T/big.out" "http://127.0.0.1:$GW/sbx/$FILES/big.bin" &
dl=$!
$PY "$T/idle.py" "$GW" "$BE" "$T/idle.ready" >"$T/idle.out" 2>&1 &
idle=$!
until_ok "six slow requests at the backend" at_least "$T/be.jsonl" '/slow?ms=2000' 6
until_ok "three tunnel requests at the target" at_least "$T/target.jsonl" '/slow?ms=2000&t=' 3
until_ok "the idle connection" test -f "$T/idle.ready"
until_ok "the download under way" sh -c "[ \$(stat -c %s '$T/big.out' 2>/dev/null || echo 0) -ge 1048576 ]"

t0=$(now_ms)
kill -TERM "$GW_PID"
wait_log "$T/gateway.log" "received SIGTERM, draining (up to 20s)"
out=$(curl -sS -i "http://127.0.0.1:$ADM/readyz")
assert_contains "readyz while draining" "HTTP/1.1 503" "$out"
assert_contains "readyz: code" '"code":"draining"' "$out"
out=$(curl -sS "http://127.0.0.1:$ADM/metrics")
assert_contains "metrics while draining" "akgw_draining 1" "$out"
until_ok "the public listener refusing" refused curl "http://127.0.0.1:$GW/sbx/$BE/"
until_ok "Port B refusing" refused ip netns exec "$NS" curl http://127.0.0.1:8766/
# A reload now would open what the drain closed: it is refused.
kill -HUP "$GW_PID"
wait_log "$T/gateway.log" "SIGHUP: configuration not reloaded: the gateway is draining"
until_ok "the public listener still refusing after SIGHUP" refused curl "http://127.0.0.1:$GW/sbx/$BE/"
ok "draining: readyz 503 draining, akgw_draining 1, new connections refused (listener and Port B), a reload refused"

wait "$idle"
out=$(cat "$T/idle.out")
case "$out" in "closed cleanly at "*) ;; *) fail "idle keep-alive connection: $out" ;; esac
ms=$(( ${out##* } - t0 ))
[ "$ms" -ge 0 ] && [ "$ms" -lt 1000 ] ||
	fail "the idle keep-alive connection closed ${ms}ms after SIGTERM"
ok "the idle keep-alive connection was closed at once (${ms}ms)"

for p in $pids; do wait "$p" || fail "a request in flight failed (see $T)"; done
for i in 1 2 3 4 5; do
	out=$(tr -d '\r' <"$T/slow$i.out")
	assert_contains "slow request $i" "HTTP/1.1 200" "$out"
	assert_contains "slow request $i: Connection: close" "Connection: close" "$out"
	assert_contains "slow request $i: body" "slow" "$out"
done
ok "five slow HTTP/1 requests in flight answered 200, each with Connection: close"
for i in 1 2 3; do
	out=$(tr -d '\r' <"$T/tun$i.out")
	assert_contains "tunnel request $i" "HTTP/1.1 200" "$out"
	assert_contains "tunnel request $i: body" "slow" "$out"
done
ok "three tunnel requests in flight answered 200"
out=$(cat "$T/h2.out")
assert_contains "h2: GOAWAY" "recv GOAWAY frame" "$out"
assert_contains "h2: GOAWAY's code" "error_code=NO_ERROR" "$out"
assert_contains "h2: last stream" "last_stream_id=1" "$out"
assert_contains "h2: the stream's answer" ":status: 200" "$out"
assert_contains "h2: the stream's body" "slow" "$out"
ok "the HTTP/2 connection got GOAWAY(NO_ERROR, last 1) and its stream completed"
wait "$dl" || fail "the download failed"
got=$(sha256sum <"$T/big.out" | cut -d' ' -f1)
assert_eq "50 MiB download's sha256" "$want" "$got"
ok "the 50 MiB download in flight completed, sha256 right"

until_ok "the gateway's exit" exited "$GW_PID"
wait "$GW_PID"
rc=$?
ms=$(( $(now_ms) - t0 ))
assert_eq "exit status after the drain" 0 "$rc"
[ "$ms" -lt 15000 ] || fail "the drain took ${ms}ms with nothing left after ~2.5s"
wait_log "$T/gateway.log" "drained in .*: every connection finished"
wait_log "$T/gateway.log" "stopped"
wait_log "$T/tun.log" "close 1012: service restart"
ok "exited 0 ${ms}ms after SIGTERM, every connection finished; aktunnel told 1012"
stop "$TUN_PID"

# --- 2. at the deadline ----------------------------------------------------

GW2=$(free_port)
GWS=$(free_port)
WS=$(free_port)
MID=$(free_port)
spawn wsserver $PY "$TOP/tests/regress/ws_echo.py" server "$WS"
spawn midframe $PY "$T/midframe.py" "$MID" "$T/finish"
wait_port "$WS"
wait_port "$MID"
spawn_gateway "$GW2" <<EOF
listen:
  - address: 127.0.0.1:$GW2
    http2: true
  - address: 127.0.0.1:$GWS
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key
workers: 2
log:
  level: debug
timeouts:
  drain: 2s
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $BE
      - port: $WS
      - port: $MID
EOF
wait_port "$GWS"
$PY "$T/ws.py" "wss://127.0.0.1:$GWS/sbx/$WS/tls" "$T/wss.ready" "$CERTS/ca.crt" >"$T/wss.out" 2>&1 &
wss=$!
$PY "$T/ws.py" "ws://127.0.0.1:$GW2/sbx/$WS/plain" "$T/ws.ready" "$CERTS/ca.crt" >"$T/ws.out" 2>&1 &
wsp=$!
$PY "$TOP/tests/regress/h2_ws.py" drain --port "$GW2" --authority "127.0.0.1:$GW2" \
	--path "/sbx/$WS/h2" --ready "$T/h2ws.ready" >"$T/h2ws.out" 2>&1 &
h2ws=$!
$PY "$T/ws.py" "wss://127.0.0.1:$GWS/sbx/$MID/tls" "$T/wssmid.ready" "$CERTS/ca.crt" >"$T/wssmid.out" 2>&1 &
wssmid=$!
$PY "$TOP/tests/regress/h2_ws.py" drain --port "$GW2" --authority "127.0.0.1:$GW2" \
	--path "/sbx/$MID/h2" --ready "$T/h2mid.ready" --mid 10 >"$T/h2mid.out" 2>&1 &
h2mid=$!
$C -i -o "$T/long.out" "http://127.0.0.1:$GW2/sbx/$BE/slow?ms=10000&long=1" 2>"$T/long.err" &
long=$!
until_ok "the wss WebSocket" test -f "$T/wss.ready"
until_ok "the ws WebSocket" test -f "$T/ws.ready"
until_ok "the HTTP/2 WebSocket" test -f "$T/h2ws.ready"
until_ok "the wss WebSocket in a frame" test -f "$T/wssmid.ready"
until_ok "the HTTP/2 WebSocket in a frame" test -f "$T/h2mid.ready"
until_ok "the long request at the backend" at_least "$T/be.jsonl" 'long=1' 1

t0=$(now_ms)
kill -TERM "$GW_PID"
wait_log "$T/gateway.log" "received SIGTERM, draining (up to 2s)"
# The backend ends its frames in progress once every loop's deadline has
# passed: their debug lines count 4 WebSockets closing and 2 cut.
deadline_counts() {
	awk '/drain deadline: / { for (i = 2; i <= NF; i++) {
		if ($i == "WebSockets") w += $(i - 1)
		if ($i == "connections" && $(i + 1) == "cut") c += $(i - 1) } }
	    END { print w + 0, c + 0 }' "$T/gateway.log"
}
deadline_done() { [ "$(deadline_counts)" = "4 2" ]; }
until_ok "the deadline on every loop" deadline_done
touch "$T/finish"
wait "$wss"
out=$(cat "$T/wss.out")
case "$out" in "close 1001 going away msgs= at "*) ;; *) fail "wss at the deadline: $out" ;; esac
ms=$(( ${out##* } - t0 ))
[ "$ms" -ge 1900 ] && [ "$ms" -lt 4000 ] || fail "the wss close came ${ms}ms after SIGTERM, not at the 2s deadline"
wait "$h2ws" || fail "the HTTP/2 WebSocket: $(cat "$T/h2ws.out")"
out=$(cat "$T/h2ws.out")
case "$out" in "ok drain: GOAWAY, close 1001 going away at "*) ;; *) fail "h2 WebSocket: $out" ;; esac
ms=$(( $(echo "$out" | sed 's/.* at \([0-9]*\),.*/\1/') - t0 ))
[ "$ms" -ge 1900 ] && [ "$ms" -lt 4000 ] || fail "the h2 WebSocket's close came ${ms}ms after SIGTERM"
ok "at the deadline: close 1001 to the wss and the HTTP/2 WebSockets (which got GOAWAY first and kept echoing)"
wait "$wssmid"
out=$(cat "$T/wssmid.out")
case "$out" in "close 1001 going away msgs=10 at "*) ;; *) fail "wss in a frame at the deadline: $out" ;; esac
wait "$h2mid" || fail "the HTTP/2 WebSocket in a frame: $(cat "$T/h2mid.out")"
out=$(cat "$T/h2mid.out")
case "$out" in "ok drain: GOAWAY, close 1001 going away at "*) ;; *) fail "h2 WebSocket in a frame: $out" ;; esac
ok "at the deadline, in the middle of a frame: the frame's end, then close 1001, nothing after (wss and HTTP/2)"
wait "$wsp"
out=$(cat "$T/ws.out")
case "$out" in "close none - msgs= at "*) ;; *) fail "plain ws at the deadline: $out" ;; esac
wait "$long" && fail "the 10 s request was answered: $(cat "$T/long.out")"
[ -s "$T/long.out" ] && fail "the 10 s request got bytes: $(cat "$T/long.out")"
ok "at the deadline: the plain ws (spliced) and the 10 s request were cut"

until_ok "the gateway's exit" exited "$GW_PID"
wait "$GW_PID"
rc=$?
ms=$(( $(now_ms) - t0 ))
assert_eq "exit status after the deadline" 0 "$rc"
[ "$ms" -lt $((2000 + 2000 + 1500)) ] || fail "exited ${ms}ms after SIGTERM: more than the deadline and the grace"
wait_log "$T/gateway.log" "drain deadline passed with 6 connections still open: 4 WebSockets closed with 1001, 2 cut; 0 left"
ok "exited 0 ${ms}ms after SIGTERM (deadline 2s), the log counting 4 WebSockets closed with 1001 and 2 cut"

# --- 3. a second SIGTERM ---------------------------------------------------

GW3=$(free_port)
spawn_gateway "$GW3" <<EOF
listen:
  - address: 127.0.0.1:$GW3
timeouts:
  drain: 30s
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $BE
EOF
$C -o /dev/null "http://127.0.0.1:$GW3/sbx/$BE/slow?ms=10000&again=1" 2>/dev/null &
again=$!
until_ok "the request at the backend" at_least "$T/be.jsonl" 'again=1' 1
kill -TERM "$GW_PID"
wait_log "$T/gateway.log" "received SIGTERM, draining (up to 30s)"
t0=$(now_ms)
kill -TERM "$GW_PID"
until_ok "the gateway's exit" exited "$GW_PID"
wait "$GW_PID"
rc=$?
ms=$(( $(now_ms) - t0 ))
assert_eq "exit status after a second SIGTERM" 0 "$rc"
[ "$ms" -lt 2000 ] || fail "a second SIGTERM took ${ms}ms to stop the gateway"
wait_log "$T/gateway.log" "received SIGTERM while draining, stopping now"
wait "$again" 2>/dev/null
ok "a second SIGTERM during the drain stopped the gateway at once (${ms}ms)"
