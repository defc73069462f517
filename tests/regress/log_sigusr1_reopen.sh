#!/bin/sh
# SIGUSR1 killed the gateway (issue 16, section 4): nothing caught it, so
# logrotate's "mv the file, signal the daemon" ended the process, and
# without a signal the gateway wrote on into the moved file forever.  Now
# SIGUSR1 reopens log.file under its name: lines go on into the moved file
# until the signal, and into a fresh file after it, with nothing lost or
# written twice, on every worker.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
ECHO=$(free_port)
LOG="$T/logs/gateway-access.log"
mkdir -p "$T/logs"

spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" --log "$T/upstream.jsonl"
wait_port "$ECHO"
spawn_gateway "$GW" <<EOF
log:
  file: $LOG
listen:
  - address: 127.0.0.1:$GW
workers: 2
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $ECHO
EOF

C="curl -sS --max-time 10 -o /dev/null"
# get PATH: four requests on their own connections, so both workers log.
get() {
	for i in 1 2 3 4; do
		$C "http://127.0.0.1:$GW/sbx/$ECHO/$1-$i?token=secret" || fail "request $1-$i"
	done
}
# lines FILE PATTERN: how many lines of FILE match.
lines() { grep -c "$2" "$1" 2>/dev/null || true; }

get before
wait_log "$LOG" "path=[^ ]*/before-4 "
mv "$LOG" "$LOG.1" || fail "mv"
get moved
wait_log "$LOG.1" "path=[^ ]*/moved-4 "
[ -e "$LOG" ] && fail "a line was written under the old name before SIGUSR1"

kill -USR1 "$GW_PID" || fail "kill -USR1"
wait_log "$LOG" "received SIGUSR1, reopened the log file"
kill -0 "$GW_PID" 2>/dev/null || fail "the gateway died of SIGUSR1"
get after
wait_log "$LOG" "path=[^ ]*/after-4 "

assert_eq "old file: lines before the signal" "8" "$(lines "$LOG.1" 'path=[^ ]*/\(before\|moved\)-[1-4] ')"
assert_eq "old file: lines after the signal" "0" "$(lines "$LOG.1" 'path=[^ ]*/after-')"
assert_eq "new file: lines after the signal" "4" "$(lines "$LOG" 'path=[^ ]*/after-[1-4] ')"
assert_eq "new file: lines before the signal" "0" "$(lines "$LOG" 'path=[^ ]*/\(before\|moved\)-')"
assert_eq "query strings logged" "0" "$(cat "$LOG" "$LOG.1" | grep -c 'token=secret')"
ok "SIGUSR1 after mv: the moved file keeps the old lines, a fresh file gets the new ones"

# A file that cannot be opened again (a directory took its name; the
# tests run as root, so permissions would not stop it) keeps the old one.
mv "$LOG" "$LOG.2" || fail "mv"
mkdir "$LOG" || fail "mkdir"
kill -USR1 "$GW_PID" || fail "kill -USR1"
wait_log "$LOG.2" "received SIGUSR1: cannot open log file $LOG: Is a directory; still writing to the old file"
get still
wait_log "$LOG.2" "path=[^ ]*/still-4 "
kill -0 "$GW_PID" 2>/dev/null || fail "the gateway died"
ok "SIGUSR1 when the file cannot be opened: the old file stays in use"

stop "$GW_PID"
grep -q ' stopped$' "$LOG.2" || fail "no 'stopped' line at exit"
ok "the last lines are written at exit"
