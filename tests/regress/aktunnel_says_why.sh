#!/bin/sh
# aktunnel says what is going on (issue 17 §4), against the real akgateway
# on a plain and a TLS listener:
# - a "connecting to URL" line at start, before anything happens;
# - a refused credential: which flag or variable carries it (or how to give
#   one), backing off 1, 2, 3, 4 s, then exit 4 at the 5th refusal;
# - a wrong sandbox id or the admin port as the gateway: the first 404 at
#   once, with the URL tried and the --sandbox / --gateway hint;
# - wss:// to the plain port and ws:// to the TLS port: the other scheme;
# - "connection N" counts connections that opened, "session resumed" only
#   when the gateway's hello says so, "new session" after its restart, and
#   every reconnect line shows the delay used, jitter included;
# - one line per target failure, with -v and without;
# - --help lists the exit statuses.
. "$(dirname "$0")/lib.sh"

[ -x "$AKTUN" ] || fail "$AKTUN is not built"
[ -f "$CERTS/server.crt" ] || fail "no test certificates in $CERTS (make certs)"
command -v curl >/dev/null 2>&1 || fail "curl is needed"

GW=$(free_port)
GWS=$(free_port)
ADM=$(free_port)
LP=$(free_port)
DEAD=$(free_port) # a target nothing listens on
TOKEN=tok-says-why-0123456789

cat >"$T/gw.yaml" <<EOF
listen:
  - address: 127.0.0.1:$GW
  - address: 127.0.0.1:$GWS
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key
admin:
  address: 127.0.0.1:$ADM
sandboxes:
  - id: msg
    address: 127.0.0.1
    tunnel:
      listen_port: $LP
      token: $TOKEN
      client_wait: 0s
EOF
spawn gateway "$AKGW" -c "$T/gw.yaml"
GW_PID=$LAST_PID
wait_port "$GW"
wait_port "$GWS"
wait_port "$ADM"

# aktun NAME ARGS...: aktunnel for sandbox msg, target $DEAD, log $T/NAME.log.
aktun() {
	name=$1; shift
	spawn "$name" "$AKTUN" --sandbox msg --target "http://127.0.0.1:$DEAD" "$@"
	TUN=$LAST_PID
}

# wait_exit PID SECONDS: until PID exits; its status in $RC.
wait_exit() {
	i=0
	while kill -0 "$1" 2>/dev/null && [ $i -lt $(($2 * 20)) ]; do
		sleep 0.05; i=$((i + 1))
	done
	kill -0 "$1" 2>/dev/null && fail "aktunnel $1 still running after $2 s"
	wait "$1"
	RC=$?
}

# line FILE N: line N of FILE without its timestamp.
line() { sed -n "${2}p" "$1" | cut -d' ' -f2-; }

# gaps FILE PATTERN: each line matching PATTERN says "in X s"; the next
# line of FILE must come X to X + 0.3 s later (the delay actually used).
gaps() {
	$PY - "$1" "$2" <<'EOF' || fail "delays in $1 are not the ones announced"
import datetime, re, sys
lines = open(sys.argv[1]).read().splitlines()
def ts(l):
    return datetime.datetime.strptime(l.split(" ")[0], "%Y-%m-%dT%H:%M:%S.%fZ")
n = 0
for i, l in enumerate(lines[:-1]):
    if not re.search(sys.argv[2], l):
        continue
    want = float(re.search(r" in (\d+(\.\d+)?) s", l).group(1))
    got = (ts(lines[i + 1]) - ts(l)).total_seconds()
    print("announced %.3f s, next line after %.3f s" % (want, got))
    if not want <= got <= want + 0.3:
        sys.exit(1)
    n += 1
sys.exit(0 if n > 0 else 1)
EOF
}

# 1. The start line, then a refused token: the variable named, never the
# token; 1, 2, 3, 4 s apart; the 5th refusal exits 4.
spawn auth env AKERNEL_TOKEN=wrong-token-42 "$AKTUN" --gateway "127.0.0.1:$GW" \
    --sandbox msg --target "http://127.0.0.1:$DEAD" --allow-plaintext-token
TUN=$LAST_PID
wait_exit "$TUN" 20
assert_eq "exit status after five refusals" 4 "$RC"
assert_eq "start line" "info  tunnel msg: connecting to ws://127.0.0.1:$GW/tunnel/msg" "$(line "$T/auth.log" 2)"
hint="the gateway refused the token from AKERNEL_TOKEN: check that it is valid and allowed to open the tunnel of sandbox msg"
for n in 1 2 3 4; do
	assert_eq "refusal $n" "warn  tunnel handshake rejected: HTTP 403 Forbidden: $hint; retrying in $n s (refusal $n of 5 before aktunnel exits)" "$(line "$T/auth.log" $((n + 2)))"
done
assert_eq "last refusal" "error tunnel handshake rejected 5 times in a row (HTTP 403 Forbidden): $hint; exiting with status 4" "$(line "$T/auth.log" 7)"
gaps "$T/auth.log" "refusal [0-9] of 5"
grep -q wrong-token-42 "$T/auth.log" && fail "the log shows the token"
n=$(grep -c 'path=/tunnel/msg status=403 .*error=forbidden' "$T/gateway.log")
assert_eq "refusals the gateway logged" 5 "$n"
ok "start line; a refused token names AKERNEL_TOKEN, backs off 1-4 s, exits 4"

# No token at all (YR_TOKEN set instead): how to give one; --token named.
spawn noauth env YR_TOKEN=yr-token-77 "$AKTUN" --gateway "127.0.0.1:$GW" \
    --sandbox msg --target "http://127.0.0.1:$DEAD"
TUN=$LAST_PID
wait_log "$T/noauth.log" "refusal 1 of 5"
stop "$TUN"
assert_eq "401 without a token" "warn  tunnel handshake rejected: HTTP 401 Unauthorized: no token was sent: set AKERNEL_TOKEN or pass --token (YR_TOKEN is set, but aktunnel reads AKERNEL_TOKEN); retrying in 1 s (refusal 1 of 5 before aktunnel exits)" "$(line "$T/noauth.log" 3)"
aktun flag --gateway "https://localhost:$GWS" --ca-file "$CERTS/ca.crt" --token wrong-token-43
wait_log "$T/flag.log" "refusal 1 of 5"
stop "$TUN"
assert_contains "--token named" "the gateway refused the token from --token:" "$(cat "$T/flag.log")"
grep -q -e yr-token-77 -e wrong-token-43 "$T/noauth.log" "$T/flag.log" && fail "the log shows a token"
ok "no token: AKERNEL_TOKEN or --token suggested; a --token refused over wss names --token"

# 2. A wrong sandbox id, and the admin port given as the gateway: the first
# 404 is shown at once, with the URL tried and what to check.
for case in "nosuch $GW" "msg $ADM"; do
	set -- $case
	spawn "miss-$1" "$AKTUN" --gateway "127.0.0.1:$2" --sandbox "$1" \
	    --target "http://127.0.0.1:$DEAD"
	TUN=$LAST_PID
	wait_log "$T/miss-$1.log" "HTTP 404"
	stop "$TUN"
	assert_eq "404 for sandbox $1 at port $2" "info  tunnel route unavailable (HTTP 404, 1 in a row) at ws://127.0.0.1:$2/tunnel/$1: the sandbox may not be ready yet; if this lasts, check --sandbox ($1) and --gateway (the gateway's HTTP listener, not its admin API); retrying every 1 s" "$(line "$T/miss-$1.log" 3)"
done
ok "a 404 shows the URL and the --sandbox / --gateway hint at once"

# 3. The wrong scheme for the port: the other one is suggested.
aktun wss-plain --gateway "wss://127.0.0.1:$GW" --no-verify-tls
wait_log "$T/wss-plain.log" "cannot connect to the gateway"
stop "$TUN"
assert_contains "wss:// to the plain port" "warn  cannot connect to the gateway: TLS handshake with 127.0.0.1:$GW failed: wrong version number (the gateway does not speak TLS on this port: use ws:// or http:// in --gateway); retrying in 1." "$(cat "$T/wss-plain.log")"
aktun ws-tls --gateway "ws://127.0.0.1:$GWS"
wait_log "$T/ws-tls.log" "cannot connect to the gateway"
stop "$TUN"
assert_contains "ws:// to the TLS port" "warn  cannot connect to the gateway: the gateway closed the connection during the WebSocket upgrade (if this port speaks TLS, use wss:// or https:// in --gateway); retrying in 1." "$(cat "$T/ws-tls.log")"
ok "wss:// to a plain port and ws:// to a TLS port suggest the other scheme"

# 4. Connections, not attempts; resumed only when the gateway says so.  A
# stopped gateway misses pongs: the same gateway resumes the session.  A
# restarted one has a new session.  Every delay is the one announced.
spawn tun env AKERNEL_TOKEN="$TOKEN" "$AKTUN" --gateway "127.0.0.1:$GW" \
    --sandbox msg --target "http://127.0.0.1:$DEAD" --allow-plaintext-token \
    --ping-interval 0.3 --ping-timeout 0.3
TUN=$LAST_PID
wait_log "$T/tun.log" "tunnel msg ready"
kill -STOP "$GW_PID"
wait_log "$T/tun.log" "heartbeat timeout"
kill -CONT "$GW_PID"
wait_log "$T/tun.log" "reconnected"
assert_contains "resumed" "info  tunnel msg reconnected (connection 2, session resumed)" "$(cat "$T/tun.log")"
# One target failure, one line (no -v): the 502 carries the sentence.
code=$(curl -sS -o "$T/fail.out" -w '%{http_code}' --max-time 10 "http://127.0.0.1:$LP/fail")
assert_eq "target down: status" 502 "$code"
wait_log "$T/tun.log" "cannot connect to the target 127.0.0.1:$DEAD"
n=$(grep -c "cannot connect to the target 127.0.0.1:$DEAD" "$T/tun.log")
assert_eq "lines about one target failure" 1 "$n"
assert_contains "the target failure" "warn  cannot connect to the target 127.0.0.1:$DEAD: Connection refused" "$(cat "$T/tun.log")"
kill -9 "$GW_PID"
wait "$GW_PID" 2>/dev/null
wait_log "$T/tun.log" "cannot connect to the gateway: 127.0.0.1:$GW: Connection refused; retrying in"
spawn gateway2 "$AKGW" -c "$T/gw.yaml"
GW_PID=$LAST_PID
wait_port "$GW"
wait_log "$T/tun.log" "connection 3"
stop "$TUN"
log=$(cat "$T/tun.log")
assert_contains "new session after a restart" "info  tunnel msg reconnected (connection 3, new session: the gateway did not have this client's session, so requests that were in flight are lost)" "$log"
case "$log" in *"connection 4"*) fail "connection counted twice: $log" ;; esac
grep -q "retrying in [0-9]*\.[0-9][0-9][0-9] s" "$T/tun.log" || fail "no jittered delay shown"
gaps "$T/tun.log" "(reconnecting|retrying) in"
ok "connection N counts connections; resumed vs new session as the gateway says; delays as announced"

# 5. With -v a target failure is one line too: the request's, a warning.
spawn tunv env AKERNEL_TOKEN="$TOKEN" "$AKTUN" --gateway "127.0.0.1:$GW" \
    --sandbox msg --target "http://127.0.0.1:$DEAD" --allow-plaintext-token -v
TUN=$LAST_PID
wait_log "$T/tunv.log" "tunnel msg ready"
code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$LP/fail?q=secret")
assert_eq "target down (-v): status" 502 "$code"
wait_log "$T/tunv.log" "GET /fail failed"
stop "$TUN"
n=$(grep -c "cannot connect to the target 127.0.0.1:$DEAD" "$T/tunv.log")
assert_eq "lines about one target failure (-v)" 1 "$n"
assert_contains "the request's line" "warn  GET /fail failed: cannot connect to the target 127.0.0.1:$DEAD: Connection refused (0 bytes up, 0 bytes down, " "$(cat "$T/tunv.log")"
grep -q secret "$T/tunv.log" && fail "the log shows the query string"
ok "one line per target failure, with -v and without"

# 6. --help lists every exit status, as docs/aktunnel.md does.
help=$("$AKTUN" --help)
for s in "  0  stopped by SIGINT or SIGTERM" "  1  setup error" "  2  bad flags or environment" \
    "  3  another client took over the sandbox's tunnel" "  4  the gateway refused the credential (HTTP 401 or 403) 5 times in a"; do
	assert_contains "--help exit status" "$s" "$help"
done
grep -q '^| 4 | the gateway refused the credential' "$TOP/docs/aktunnel.md" || fail "docs/aktunnel.md lacks exit status 4"
ok "--help lists exit statuses 0-4"
