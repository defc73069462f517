#!/bin/sh
# A tunnel client frozen for a while (SIGSTOP, then SIGCONT) recovers
# (issue 17 §1).  The gateway used to ping the client and drop it after
# 30 s without a frame; both reference clients then stayed "listening"
# with their receive loop stuck answering the queued gateway ping, and
# every request got 503.  Now the sandbox role never pings (§7: the client
# pings, the server answers) and a client is dead only after its own
# silence for silence_timeout (default 60 s, three of the client's 20 s
# ping intervals; 3 s here against a 1 s ping interval).
#
# A freeze shorter than silence_timeout: the link survives, requests go on.
# A longer one: the gateway drops the link, says why, and the client dials
# again when it wakes.  Never a ping from the gateway.
. "$(dirname "$0")/lib.sh"

$PY -c 'import websockets' 2>/dev/null || fail "python3-websockets is needed ($PY)"

GW=$(free_port)
LP=$(free_port)
MOCK="$TOP/tests/regress/sandbox_mock_client.py"
C="curl -sS --max-time 10"

spawn_gateway "$GW" <<EOC
listen:
  - address: 127.0.0.1:$GW
sandboxes:
  - id: sbx
    address: 127.0.0.1
    tunnel:
      listen_port: $LP
      client_wait: 5s
      silence_timeout: 3s
EOC
wait_port "$LP"
spawn mock $PY "$MOCK" --name M --log "$T/M.jsonl" --ping-interval 1 \
	--url "ws://127.0.0.1:$GW/tunnel/sbx"
MPID=$LAST_PID
wait_log "$T/M.jsonl" '"event": "connected"'
wait_log "$T/gateway.log" "negotiated V2"
assert_eq "before the freeze" pong "$($C "http://127.0.0.1:$LP/hello")"

# 1. Frozen for 2 s, less than silence_timeout: nothing is dropped.
kill -STOP "$MPID"
sleep 2
kill -CONT "$MPID"
assert_eq "after a 2 s freeze" pong "$($C "http://127.0.0.1:$LP/hello")"
n=$(grep -c '"event": "connected"' "$T/M.jsonl")
assert_eq "connections after a 2 s freeze" 1 "$n"
grep -q "no frame from the client" "$T/gateway.log" &&
	fail "the gateway dropped a client frozen for less than silence_timeout"
ok "a client frozen 2 s (silence_timeout 3 s) keeps its link and its requests work"

# 2. Frozen for 5 s: dropped for its silence, and back when it wakes.
kill -STOP "$MPID"
wait_log "$T/gateway.log" "no frame from the client for 3000ms (silence_timeout)"
kill -CONT "$MPID"
i=0
while [ "$(grep -c '"event": "connected"' "$T/M.jsonl")" -lt 2 ] && [ $i -lt 100 ]; do
	sleep 0.1; i=$((i + 1))
done
assert_eq "connections after a 5 s freeze" 2 "$(grep -c '"event": "connected"' "$T/M.jsonl")"
out=""
for _ in $(seq 50); do
	out=$($C "http://127.0.0.1:$LP/hello" 2>/dev/null) && [ "$out" = pong ] && break
	sleep 0.1
done
assert_eq "after a 5 s freeze" pong "$out"
ok "a client silent past silence_timeout is dropped with the reason; it dials again and requests work"

# 3. The gateway answers the client's pings and never pings itself; watch
# three more of the client's ping intervals on the new link.
base=$(grep -c '"event": "pong"' "$T/M.jsonl")
i=0
while [ "$(grep -c '"event": "pong"' "$T/M.jsonl")" -lt $((base + 3)) ] && [ $i -lt 100 ]; do
	sleep 0.1; i=$((i + 1))
done
pongs=$(grep -c '"event": "pong"' "$T/M.jsonl")
[ "$pongs" -ge $((base + 3)) ] || fail "the client's pings were not answered ($pongs pongs)"
grep -q '"event": "server_ping"' "$T/M.jsonl" &&
	fail "the gateway pinged the client: $(grep server_ping "$T/M.jsonl" | head -1)"
ok "the gateway never pings ($pongs of the client's pings answered)"
