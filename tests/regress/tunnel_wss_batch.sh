#!/bin/sh
# Many small requests at once through a wss tunnel share TLS records and
# system calls.  libevent 2.1 hands a TLS read callback one record per
# loop pass, and encrypts each chain of a TLS output as a record of its
# own, written with a write(2) of its own: every message on a busy link
# was a record, a write at one end and two reads at the other, and both
# programs went through their loop once per message (2.4 times the CPU
# of a plain ws link per request).  Now the messages that arrive together
# are read together (evio_read_more_tls) and small frames share an output
# chain (wsconn_gather).
#
# Every process runs on one CPU, so that work queues up while another
# runs, as it does under load; 1500 requests, 64 at a time, all answered
# byte for byte.  The counts come from /proc/PID/io (syscr, syscw: read
# and write system calls of any kind), so they are exact, not timed.
# Before: aktunnel made 1.8 writes per request (the target's, and a
# record for nearly every response) and the gateway 2.6 reads; now about
# 1.3-1.5 and 1.7-2.0.
. "$(dirname "$0")/lib.sh"

command -v taskset >/dev/null 2>&1 || fail "taskset (util-linux) is needed for this test"
NS="akgw-wssb-$$"
netns_add "$NS"
GWS=$(free_port)
TARGET=$(free_port)
TOKEN=tunnel-token-0123456789abcdef
N=1500

spawn target taskset -c 0 $PY "$TOP/tests/regress/backend.py" --port "$TARGET" \
	--log "$T/target.jsonl"
wait_port "$TARGET"
cat >"$T/gateway.yaml" <<EOC
listen:
  - address: 127.0.0.1:$GWS
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key
sandboxes:
  - id: batch
    netns: /run/netns/$NS
    tunnel:
      listen_port: 8766
      token: $TOKEN
EOC
spawn gateway env YR_TUNNEL_MAX_INFLIGHT=64 taskset -c 0 "$AKGW" -c "$T/gateway.yaml"
GW_PID=$LAST_PID
wait_port "$GWS"
spawn tun env YR_TUNNEL_MAX_INFLIGHT=64 taskset -c 0 "$AKTUN" \
	--gateway "https://localhost:$GWS" --sandbox batch \
	--target "http://127.0.0.1:$TARGET" --token "$TOKEN" --ca-file "$CERTS/ca.crt"
TUN_PID=$LAST_PID
for _ in $(seq 100); do
	ip netns exec "$NS" curl -s -o /dev/null "http://127.0.0.1:8766/" && break
	sleep 0.1
done
out=$(ip netns exec "$NS" curl -sS --max-time 10 http://127.0.0.1:8766/echo -d warm)
assert_contains "a request through the wss tunnel" '"body_len": 4' "$out"

# io PID FIELD: one counter of /proc/PID/io.
io() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/io"; }

gr0=$(io "$GW_PID" syscr); tw0=$(io "$TUN_PID" syscw)
# Each response echoes its own path: /echo?i=N comes back with i=N.
ip netns exec "$NS" taskset -c 0 curl -sS --max-time 120 -Z --no-progress-meter --parallel-max 64 \
	-w '%{http_code} %{size_download}\n' -o "$T/body_#1.json" \
	"http://127.0.0.1:8766/echo?i=[1-$N]" >"$T/codes" ||
	fail "curl failed (exit $?)"
gr1=$(io "$GW_PID" syscr); tw1=$(io "$TUN_PID" syscw)

assert_eq "responses" "$N" "$(wc -l <"$T/codes")"
assert_eq "responses that are not 200" "" "$(grep -v '^200 ' "$T/codes" | head -3)"
bad=0
for i in $(seq "$N"); do
	grep -qF "\"path\": \"/echo?i=$i\"" "$T/body_$i.json" || { bad=$i; break; }
done
[ "$bad" = 0 ] || fail "response $bad is not its request's: $(head -c 300 "$T/body_$bad.json")"
ok "$N requests, 64 at a time, through a wss tunnel: each answered with its own echo"

tw=$((tw1 - tw0)); gr=$((gr1 - gr0))
echo "aktunnel: $tw writes, gateway: $gr reads for $N requests"
# Shared records: well under a record per response at aktunnel.
[ $((tw * 100)) -lt $((N * 165)) ] ||
	fail "aktunnel made $tw write calls for $N requests (one record per response: 2 per request)"
# Shared reads: under one read per record at the gateway.
[ $((gr * 100)) -lt $((N * 235)) ] ||
	fail "the gateway made $gr read calls for $N requests (two per record: 3 per request)"
ok "messages on a busy wss link share records and system calls"
