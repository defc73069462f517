#!/bin/sh
# Requests beyond the client's max_inflight wait in a queue instead of
# getting 429 (issue 17 §1).  With the default window of 16, the 17th
# concurrent request through a terminate-mode tunnel used to get 429 at
# once, where the Python reference sandbox queues it.  Now a request past
# the window waits for a free slot, at most client_wait, among at most
# tunnel.max_queued others; only a full queue answers 429 at once, and a
# request that waited client_wait without a slot gets 429 too, each with
# the code tunnel_busy, a sentence, an access-log line and a counter.
. "$(dirname "$0")/lib.sh"

$PY -c 'import websockets' 2>/dev/null || fail "python3-websockets is needed ($PY)"

GW=$(free_port)
ADM=$(free_port)
LP1=$(free_port)
LP2=$(free_port)
MOCK="$TOP/tests/regress/sandbox_mock_client.py"
C="curl -sS --max-time 20"

spawn_gateway "$GW" <<EOC
listen:
  - address: 127.0.0.1:$GW
admin:
  address: 127.0.0.1:$ADM
sandboxes:
  - id: wide
    address: 127.0.0.1
    tunnel:
      listen_port: $LP1
      client_wait: 10s
  - id: narrow
    address: 127.0.0.1
    tunnel:
      listen_port: $LP2
      client_wait: 1s
      http_timeout: 4s
      max_queued: 2
EOC
wait_port "$LP1"
wait_port "$LP2"
spawn mockw $PY "$MOCK" --name W --log "$T/W.jsonl" --url "ws://127.0.0.1:$GW/tunnel/wide"
spawn mockn $PY "$MOCK" --name N --log "$T/N.jsonl" --max-inflight 1 \
	--url "ws://127.0.0.1:$GW/tunnel/narrow"
wait_log "$T/W.jsonl" '"event": "connected"'
wait_log "$T/N.jsonl" '"event": "connected"'
wait_log "$T/gateway.log" "inflight 1,"

# 1. 40 concurrent requests against max_inflight 16: every one answered.
pids=""
for i in $(seq 40); do
	$C -o "$T/r.$i" -w '%{http_code}\n' "http://127.0.0.1:$LP1/slow?ms=300&i=$i" >"$T/s.$i" &
	pids="$pids $!"
done
for p in $pids; do wait "$p"; done
for i in $(seq 40); do
	assert_eq "request $i status" 200 "$(cat "$T/s.$i")"
	assert_eq "request $i body" slow-ok "$(cat "$T/r.$i")"
done
n=$(grep -c '"path": "/slow' "$T/W.jsonl")
assert_eq "requests the client saw" 40 "$n"
ok "40 concurrent requests with max_inflight 16: all 200, the rest queued"

# 2. max_inflight 1, max_queued 2: one in flight, two wait, the fourth
# is refused at once.
$C -o /dev/null "http://127.0.0.1:$LP2/hang" &
hang=$!
wait_log "$T/N.jsonl" '"path": "/hang"'
$C -i "http://127.0.0.1:$LP2/hello?q=1" >"$T/q1" &
q1=$!
$C -i "http://127.0.0.1:$LP2/hello?q=2" >"$T/q2" &
q2=$!
i=0
until $C "http://127.0.0.1:$ADM/v1/sandboxes/narrow" 2>/dev/null | grep -q '"waiting": *2'; do
	i=$((i + 1)); [ $i -lt 100 ] || fail "two requests never waited: $($C "http://127.0.0.1:$ADM/v1/sandboxes/narrow")"
	sleep 0.05
done
start=$(date +%s%N)
out=$($C -i "http://127.0.0.1:$LP2/hello?q=3")
ms=$((($(date +%s%N) - start) / 1000000))
assert_contains "queue full: status" "HTTP/1.1 429" "$out"
assert_contains "queue full: code" '"code":"tunnel_busy"' "$out"
assert_contains "queue full: sentence" "The tunnel's queue is full: 2 requests already wait for a free slot in the client's max_inflight (max_queued)." "$out"
[ "$ms" -lt 500 ] || fail "the full queue took $ms ms to refuse"
ok "a full queue (max_queued 2) refuses at once: 429 tunnel_busy with a sentence"

# 3. The two waiting ones get 429 when client_wait (1 s) passes.
wait "$q1"; wait "$q2"
for q in q1 q2; do
	assert_contains "$q: status" "HTTP/1.1 429" "$(cat "$T/$q")"
	assert_contains "$q: code" '"code":"tunnel_busy"' "$(cat "$T/$q")"
	assert_contains "$q: sentence" "no slot of 1 freed within client_wait (1000ms)" "$(cat "$T/$q")"
done
grep -q 'path=/hello?q=' "$T/N.jsonl" "$T/gateway.log" && fail "a query string was logged"
wait "$hang"
assert_eq "after the hang" pong "$($C "http://127.0.0.1:$LP2/hello")"
n=$(grep -c 'tunnel_access sandbox=narrow.*path=/hello .*status=429 .*error=tunnel_busy' "$T/gateway.log")
assert_eq "access lines for the 429s" 3 "$n"
out=$($C "http://127.0.0.1:$ADM/metrics")
assert_contains "counter" 'akgw_gateway_errors_total{code="tunnel_busy"} 3' "$out"
grep -q '"path": "/hello?q=' "$T/N.jsonl" && fail "a refused request reached the client"
ok "waiting past client_wait: 429 tunnel_busy; three access lines and the counter; nothing reached the client"
