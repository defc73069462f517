#!/bin/sh
# Issue 16, section 4: a request refused while its head is read (400
# framing errors, 408 slow head, 429 over the connection limit, 431) used
# to leave no access line and no count in /metrics.  Each now has one
# access line (no query string, no credential) and is counted by status
# class and code; so is a refusal on the tunnel's Port B.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
ADM=$(free_port)
UP=$(free_port)
LP=$(free_port)
spawn backend $PY "$TOP/tests/regress/backend.py" --port "$UP" --log "$T/up.jsonl"
wait_port "$UP"
spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
admin:
  address: 127.0.0.1:$ADM
domains: [localhost]
workers: 1
log:
  level: info
  format: json
timeouts:
  request_header: 1s
limits:
  max_connections: 3
  max_header_size: 4KiB
sandboxes:
  - id: local
    address: 127.0.0.1
    ports:
      - port: $UP
    tunnel:
      listen_port: $LP
EOF
wait_port "$ADM"
wait_port "$LP"

# Send raw bytes ($2, printf-style) to port $1; print the status line.
raw() { raw_send "$1" "$2" | head -n 1 | tr -d '\r'; }

# Access lines (JSON) whose status and error are $1 and $2.
naccess() {
	grep '"msg":"access"' "$T/gateway.log" | grep "\"status\":$1," | grep -c "\"error\":\"$2\""
}
# The value of metric line $1 (exact, with labels).
metric() {
	curl -sS "http://127.0.0.1:$ADM/metrics" | awk -v k="$1" '$1 == k { print $2 }'
}

H="Host: $UP-local.localhost"

# 400: a framing error (Content-Length with chunked), with a secret query.
s=$(raw "$GW" "POST /x?access_token=SECRET400 HTTP/1.1\r\n$H\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n")
assert_contains "framing refusal" " 400 " "$s"
wait_log "$T/gateway.log" '"status":400,'
assert_eq "one access line for the 400" 1 "$(naccess 400 content_length_and_transfer_encoding)"

# 431: a head larger than max_header_size.
big=$(head -c 6000 /dev/zero | tr '\0' a)
s=$(raw "$GW" "GET /y?access_token=SECRET431 HTTP/1.1\r\n$H\r\nX-Big: $big\r\n\r\n")
assert_contains "oversize head refusal" " 431 " "$s"
wait_log "$T/gateway.log" '"status":431,'
assert_eq "one access line for the 431" 1 "$(naccess 431 header_too_large)"

# 408: a head that never ends.
s=$(raw "$GW" "GET /z?access_token=SECRET408 HTTP/1.1\r\n$H\r\n")
assert_contains "slow head refusal" " 408 " "$s"
wait_log "$T/gateway.log" '"status":408,'
assert_eq "one access line for the 408" 1 "$(naccess 408 request_timeout)"

# 429: over max_connections (3): two idle connections and this one... the
# fourth gets 429.
$PY - "$GW" "$T/held" <<'PYEOF' &
import socket, sys, time
ss = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(3)]
open(sys.argv[2], "w").close()
time.sleep(8)
PYEOF
HOLD=$!
PIDS="$PIDS $HOLD"
i=0
while [ ! -f "$T/held" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
s=$(raw "$GW" "GET / HTTP/1.1\r\n$H\r\n\r\n")
assert_contains "over the connection limit" " 429 " "$s"
wait_log "$T/gateway.log" '"status":429,'
assert_eq "one access line for the 429" 1 "$(naccess 429 too_many_connections)"
kill $HOLD 2>/dev/null
wait $HOLD 2>/dev/null
ok "400, 431, 408 and 429 refusals each have an access line"

# Counted by class and code.
assert_eq "request_timeout counted" 1 "$(metric 'akgw_gateway_errors_total{code="request_timeout"}')"
assert_eq "header_too_large counted" 1 "$(metric 'akgw_gateway_errors_total{code="header_too_large"}')"
assert_eq "CL+TE counted" 1 "$(metric 'akgw_gateway_errors_total{code="content_length_and_transfer_encoding"}')"
assert_eq "too_many_connections counted" 1 "$(metric 'akgw_gateway_errors_total{code="too_many_connections"}')"
assert_eq "4xx class counted" 4 "$(metric 'akgw_requests_total{class="4xx"}')"
ok "refusals are counted by class and code in /metrics"

# Port B: a framing error there is logged and counted too.
s=$(raw "$LP" "GET /b?access_token=SECRETB HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
assert_contains "Port B refusal" " 400 " "$s"
wait_log "$T/gateway.log" '"msg":"tunnel_access"'
line=$(grep '"msg":"tunnel_access"' "$T/gateway.log" | tail -n 1)
assert_contains "Port B line status" '"status":400' "$line"
assert_contains "Port B line code" '"error":"duplicate_content_length"' "$line"
assert_eq "Port B refusal counted" 1 "$(metric 'akgw_gateway_errors_total{code="duplicate_content_length"}')"
assert_eq "Port B request counted" 1 "$(metric akgw_tunnel_requests_total)"
ok "a Port B refusal has a tunnel_access line and a count"

# No query string and no credential in any line.
if grep -q 'SECRET' "$T/gateway.log"; then
	fail "a query string reached the log: $(grep SECRET "$T/gateway.log" | head -n 1)"
fi
ok "no query string in the log"
