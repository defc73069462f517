#!/bin/sh
# Out of file descriptors: the gateway pauses accepting for a second instead
# of spinning on a listener that stays readable, and serves again once
# descriptors are free.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
ECHO=$(free_port)
spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" --log "$T/upstream.jsonl"
wait_port "$ECHO"
cat >"$T/gateway.yaml" <<EOF
listen: [{address: 127.0.0.1:$GW}]
sandboxes: [{id: sbx, address: 127.0.0.1, ports: [{port: $ECHO}]}]
EOF
spawn gateway sh -c "ulimit -n 40 && exec '$AKGW' -c '$T/gateway.yaml'"
GW_PID=$LAST_PID
wait_port "$GW"

# Hold 60 connections open for 3 s: more than the 40 descriptors allow.
$PY - "$GW" "$T/cpu" "$GW_PID" <<'EOF' &
import socket, sys, time
port, out, pid = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def cpu():
    f = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / 100.0
socks = []
for i in range(60):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port))
    except OSError:
        pass
    socks.append(s)
time.sleep(0.5)
start = cpu()
time.sleep(2.5)
open(out, "w").write("%.2f\n" % (cpu() - start))
for s in socks:
    s.close()
EOF
HOLDER=$!
wait "$HOLDER"
used=$(cat "$T/cpu")
wait_log "$T/gateway.log" "pausing accept"
# A spinning accept loop would burn the whole 2.5 s of CPU.
$PY -c "import sys; sys.exit(0 if float('$used') < 0.5 else 1)" ||
	fail "gateway used ${used}s of CPU in 2.5 s while out of descriptors"
ok "accept pauses while out of descriptors (${used}s CPU)"

sleep 1.5
out=$(curl -sS --max-time 10 "http://$ECHO-sbx.localhost:$GW/x")
assert_eq "request after the pause" "ok" "$out"
kill -0 "$GW_PID" || fail "gateway died"
ok "serves again once descriptors are free"
