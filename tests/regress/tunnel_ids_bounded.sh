#!/bin/sh
# The ids a tunnel client sends are keys of the gateway's lookups (issue
# 18, item 8): every frame looks its exchange up, and a finished one's
# tombstone.  Both are hashed with a per-process random key, and bounded:
# 1,100 exchanges through one tunnel leave exactly 1,024 tombstones (the
# oldest 76 evicted and counted, shown by the admin API), and a client
# flooding frames of every kind for ids the gateway never gave, plus late
# answers for finished ones, grows nothing: no exchange, no tombstone, no
# error, and the tunnel keeps serving.  The debug log shows each finished
# exchange's state and flags (tunnel_xchg_show).
. "$(dirname "$0")/lib.sh"

$PY -c 'import websockets' 2>/dev/null || fail "python3-websockets is needed ($PY)"
command -v curl >/dev/null 2>&1 || fail "curl is needed"

GW=$(free_port)
ADM=$(free_port)
LP=$(free_port)
MOCK="$TOP/tests/regress/sandbox_mock_client.py"
C="curl -sS --max-time 30"

spawn_gateway "$GW" <<EOC
listen:
  - address: 127.0.0.1:$GW
admin:
  address: 127.0.0.1:$ADM
log:
  level: debug
sandboxes:
  - id: sbx
    address: 127.0.0.1
    tunnel:
      listen_port: $LP
      client_wait: 5s
EOC
wait_port "$ADM"
wait_port "$LP"
spawn mock $PY "$MOCK" --name M --log "$T/M.jsonl" \
	--url "ws://127.0.0.1:$GW/tunnel/sbx"
wait_log "$T/M.jsonl" '"event": "connected"'
wait_log "$T/gateway.log" "negotiated V2"

# The tunnel as the admin API shows it, checked by the Python in $1.
admin_check() {
	out=$($C "http://127.0.0.1:$ADM/v1/sandboxes/sbx")
	$PY - "$out" "$1" <<'PYEOF' || fail "admin: $out"
import json, sys
t = json.loads(sys.argv[1])["tunnel"]["listeners"][0]
exec(sys.argv[2])
PYEOF
}

# 1. 1,100 exchanges, one after another on one keep-alive connection.
$C -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$LP/hello?i=[1-1100]" \
	>"$T/codes" || fail "curl through the tunnel failed"
assert_eq "exchanges answered 200" 1100 "$(grep -cx 200 "$T/codes")"
admin_check '
assert t["state"] == "connected", t
assert t["requests"] == 1100 and t["errors"] == 0, t
assert t["exchanges"] == 0, t
assert t["tombstones_max"] == 1024, t
assert t["tombstones"] == 1024, t
assert t["tombstones_evicted"] == 76, t
'
ok "1,100 exchanges: 1,024 tombstones kept, the oldest 76 evicted and counted"

grep -q 'exchange [0-9a-f-]* state=sent flags=UP_DONE|COUNTED finished: done' \
	"$T/gateway.log" || fail "no exchange state and flags in the debug log"
ok "the debug log shows a finished exchange's state and flags"

# 2. The client floods frames for ids it was never given, and answers the
# finished exchanges again.
out=$($C "http://127.0.0.1:$LP/flood?n=1000")
assert_eq "flood request" "flooded 1000" "$out"
unknown=$(grep -c ' for unknown [0-9a-f-]* dropped' "$T/gateway.log")
finished=$(grep -c 'http_resp for finished [0-9a-f-]* dropped' "$T/gateway.log")
[ "$unknown" -ge 5076 ] || fail "only $unknown frames for unknown ids reached the gateway"
[ "$finished" -ge 1000 ] || fail "only $finished late answers for finished ids were seen"
admin_check '
assert t["state"] == "connected", t
assert t["requests"] == 1101 and t["errors"] == 0, t
assert t["exchanges"] == 0 and t["in_flight"] == 0, t
assert t["tombstones"] == 1024, t
assert t["tombstones_evicted"] == 77, t
'
ok "$unknown frames for unknown ids and $finished late answers grew no exchange and no tombstone"

out=$($C "http://127.0.0.1:$LP/hello")
assert_eq "a request after the flood" pong "$out"
kill -0 "$GW_PID" || fail "the gateway died"
ok "the tunnel still serves after the flood"
