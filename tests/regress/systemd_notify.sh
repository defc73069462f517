#!/bin/sh
# akgateway under systemd's Type=notify, with the test as the service
# manager: a datagram socket of its own as NOTIFY_SOCKET.  The gateway must
# say READY=1 (and MAINPID) once it serves, RELOADING=1 then READY=1 around
# a SIGHUP, WATCHDOG=1 pings at half of WATCHDOG_USEC, MAINPID moving to
# the new process on a SIGUSR2 upgrade, and STOPPING=1 on SIGTERM; without NOTIFY_SOCKET it runs as before (every other test).
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
SOCK="$T/notify.sock"
# The manager: print every message, one line per field, as it comes.
spawn notify $PY -u -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print("bound", flush=True)
while True:
    m = s.recv(4096).decode()
    for l in m.split("\n"):
        if l:
            print(l, flush=True)
' "$SOCK"
wait_log "$T/notify.log" '^bound'
cat >"$T/gateway.yaml" <<YAML
listen:
  - address: 127.0.0.1:$GW
domains: [localhost]
workers: 1
sandboxes:
  - id: local
    address: 127.0.0.1
    ports:
      - port: 1-65535
YAML
# WATCHDOG_PID must name the gateway: the shell execs it, keeping its pid.
spawn gateway sh -c 'NOTIFY_SOCKET="$1" WATCHDOG_USEC=400000 WATCHDOG_PID=$$ exec "$2" -c "$3"' \
    sh "$SOCK" "$AKGW" "$T/gateway.yaml"
GW_PID=$LAST_PID
wait_port "$GW"
wait_log "$T/notify.log" '^READY=1$'
wait_log "$T/notify.log" "^MAINPID=$GW_PID\$"
ok "READY=1 and MAINPID=$GW_PID once it serves"

# Pings at half of WATCHDOG_USEC: several within a second.
wait_log "$T/gateway.log" 'systemd watchdog: a ping every 200ms'
n0=$(grep -c '^WATCHDOG=1$' "$T/notify.log")
i=0
while [ "$(grep -c '^WATCHDOG=1$' "$T/notify.log")" -lt $((n0 + 3)) ] && [ $i -lt 60 ]; do
	sleep 0.05; i=$((i + 1))
done
[ "$(grep -c '^WATCHDOG=1$' "$T/notify.log")" -ge $((n0 + 3)) ] ||
    fail "fewer than 3 WATCHDOG=1 pings in 3 s at WATCHDOG_USEC=400000"
ok "WATCHDOG=1 every 200 ms"

# SIGHUP: RELOADING=1 (with MONOTONIC_USEC), then READY=1 again.
nready=$(grep -c '^READY=1$' "$T/notify.log")
kill -HUP "$GW_PID"
wait_log "$T/notify.log" '^RELOADING=1$'
wait_log "$T/notify.log" '^MONOTONIC_USEC=[0-9][0-9]*$'
i=0
while [ "$(grep -c '^READY=1$' "$T/notify.log")" -le "$nready" ] && [ $i -lt 100 ]; do
	sleep 0.05; i=$((i + 1))
done
[ "$(grep -c '^READY=1$' "$T/notify.log")" -gt "$nready" ] ||
    fail "no READY=1 after the reload"
# In that order.
order=$(grep -E '^(READY|RELOADING)=1$' "$T/notify.log" | tr '\n' ' ')
assert_eq "reload order" "READY=1 RELOADING=1 READY=1 " "$order"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$GW/local/$GW/")
assert_eq "still serving after the reload" 404 "$code"
ok "SIGHUP: RELOADING=1, then READY=1, and it serves"

# SIGUSR2: the new process says READY=1 with its MAINPID, the old one
# hands MAINPID over, exits, and the new one keeps the watchdog fed.
kill -USR2 "$GW_PID"
wait_log "$T/gateway.log" 'upgrade: started process [0-9]*'
NEW_PID=$(sed -n 's/.*upgrade: started process \([0-9]*\).*/\1/p' "$T/gateway.log" | tail -n 1)
wait_log "$T/notify.log" "^MAINPID=$NEW_PID\$"
wait_log "$T/notify.log" '^STATUS=upgraded$'
i=0
while kill -0 "$GW_PID" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
kill -0 "$GW_PID" 2>/dev/null && fail "the old process did not leave after the upgrade"
kill -0 "$NEW_PID" 2>/dev/null || fail "the new process $NEW_PID is not running"
grep -q '^STOPPING=1$' "$T/notify.log" && fail "the upgrade said STOPPING=1"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$GW/local/$GW/")
assert_eq "the new process serves" 404 "$code"
n0=$(grep -c '^WATCHDOG=1$' "$T/notify.log")
i=0
while [ "$(grep -c '^WATCHDOG=1$' "$T/notify.log")" -lt $((n0 + 3)) ] && [ $i -lt 60 ]; do
	sleep 0.05; i=$((i + 1))
done
[ "$(grep -c '^WATCHDOG=1$' "$T/notify.log")" -ge $((n0 + 3)) ] ||
    fail "the new process sends no WATCHDOG=1"
PIDS="$PIDS $NEW_PID"
GW_PID=$NEW_PID
ok "SIGUSR2: MAINPID=$NEW_PID and READY=1 from the new process, the old one gone, the watchdog fed"

# SIGTERM: STOPPING=1, then the exit; no ping after it.
kill -TERM "$GW_PID"
wait_log "$T/notify.log" '^STOPPING=1$'
i=0
while kill -0 "$GW_PID" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
kill -0 "$GW_PID" 2>/dev/null && fail "the gateway did not exit after SIGTERM"
tail -n 1 "$T/notify.log" | grep -q '^STATUS=stopping$' ||
    fail "a message came after STOPPING=1: $(tail -n 3 "$T/notify.log" | tr '\n' ' ')"
ok "SIGTERM: STOPPING=1, then the exit"
