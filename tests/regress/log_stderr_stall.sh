#!/bin/sh
# A stalled log stalled the gateway (issue 16, section 4): each access line
# was a blocking write(2) on the event loop, so once nobody read stderr
# (a full pipe: 64 KiB) every request on that worker hung.  Now lines go to
# a bounded buffer a writer thread drains: requests are served at full
# speed, lines that do not fit are dropped and counted in /metrics, and
# once the pipe is read again the kept lines arrive whole, with a line
# saying how many were dropped.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
ADM=$(free_port)
ECHO=$(free_port)
N=3000

spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" --log "$T/upstream.jsonl"
wait_port "$ECHO"

cat >"$T/gateway.yaml" <<EOF
listen:
  - address: 127.0.0.1:$GW
admin:
  address: 127.0.0.1:$ADM
workers: 1
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $ECHO
EOF
# stderr is a FIFO this shell holds open and never reads.
mkfifo "$T/stderr.fifo" || fail "mkfifo"
exec 3<>"$T/stderr.fifo"
"$AKGW" -c "$T/gateway.yaml" >"$T/gateway.log" 2>"$T/stderr.fifo" &
GW_PID=$!
PIDS="$PIDS $GW_PID"
wait_port "$GW"
wait_port "$ADM"

# N requests on one keep-alive connection, answered by the gateway itself
# (an unknown sandbox: 404), each with 5 s to be answered, then proxied
# ones.  Prints "404s 200s".
$PY - "$GW" "$N" "$ECHO" >"$T/client.out" 2>&1 <<'EOF'
import http.client, sys
port, n, echo = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
codes = {}
for i in range(n):
    c.request("GET", "/nosuch/80/stall-%d?secret=q" % i)
    r = c.getresponse()
    r.read()
    codes[r.status] = codes.get(r.status, 0) + 1
for i in range(20):
    c.request("GET", "/sbx/%s/echo?during=stall" % echo)
    r = c.getresponse()
    r.read()
    codes[r.status] = codes.get(r.status, 0) + 1
print(codes.get(404, 0), codes.get(200, 0))
EOF
rc=$?
[ $rc -eq 0 ] || fail "the client failed while stderr was stalled: $(tail -n 3 "$T/client.out")"
assert_eq "answers while stderr is stalled (404s 200s)" "$N 20" "$(cat "$T/client.out")"
ok "$N requests answered while nobody reads the gateway's stderr"

metrics=$(curl -sS --max-time 10 "http://127.0.0.1:$ADM/metrics") || fail "GET /metrics"
dropped=$(echo "$metrics" | sed -n 's/^akgw_log_lines_dropped_total \([0-9]*\)$/\1/p')
[ -n "$dropped" ] || fail "no akgw_log_lines_dropped_total in /metrics"
[ "$dropped" -gt 0 ] || fail "no line counted as dropped ($dropped)"
[ "$dropped" -lt "$N" ] || fail "every line dropped ($dropped)"
assert_contains "requests counted" "akgw_requests_total{class=\"4xx\"} $N" "$metrics"
ok "$dropped log lines dropped and counted"

# Read the FIFO again: the kept lines come whole, then the drop notice and
# a request made after the stall.
$PY - "$T/stderr.fifo" "$T/drained" <<'EOF' &
import os, select, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK)
out = open(sys.argv[2], "wb")
data = b""
deadline = time.monotonic() + 20
while time.monotonic() < deadline and b"/after-stall" not in data:
    select.select([fd], [], [], 0.2)
    try:
        chunk = os.read(fd, 65536)
    except BlockingIOError:
        continue
    data += chunk
    out.write(chunk)
    out.flush()
EOF
reader=$!
# The notice comes once the writer has drained every buffer.
wait_log "$T/drained" " warn  dropped [0-9]* log lines"
curl -sS --max-time 10 -o /dev/null "http://127.0.0.1:$GW/sbx/$ECHO/after-stall" || fail "request after the stall"
i=0
while kill -0 "$reader" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
kill -0 "$reader" 2>/dev/null && fail "the kept lines did not come"
grep -q "/after-stall" "$T/drained" || fail "the line of the request after the stall did not come"
# The notice counts the lines dropped so far, at least those /metrics saw
# (the admin line of that scrape may have been dropped too).
told=$(sed -n 's/.* warn  dropped \([0-9]*\) log lines: the log output did not keep up (\([0-9]*\) dropped since start)$/\2/p' "$T/drained" | tail -n 1)
[ -n "$told" ] || fail "no line saying how many lines were dropped"
[ "$told" -ge "$dropped" ] || fail "the notice says $told dropped, /metrics said $dropped"
kept=$(grep -c ' access .*path=/nosuch/80/stall-[0-9]* status=404 ' "$T/drained")
[ "$kept" -gt 0 ] && [ "$((kept + told))" -ge "$N" ] ||
	fail "$kept access lines kept and $told dropped, of $N"
assert_eq "lines not whole" "0" "$(grep -cv '^20[0-9][0-9]-[0-9][0-9]-[0-9][0-9]T.* \(info\|warn\|error\|debug\) ' "$T/drained")"
grep -q 'secret=q' "$T/drained" && fail "a query string was logged"
ok "$kept kept lines arrive whole once stderr is read, then the drop notice"
