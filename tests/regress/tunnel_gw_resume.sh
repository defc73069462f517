#!/bin/sh
# Reverse tunnel, terminate mode: sessions, resume and takeover
# (tunnel-protocol.md §8).  The sandbox is a network namespace; a scripted
# tunnel client drops its link at chosen moments and dials again.
#
# - a pending request is replayed with its id on the resumed session (§8.4);
# - a download resumes from the sandbox's ack_offset, byte-exact (§8.6);
# - an upload resumes from the client's ack_offset, resending what it had
#   not acknowledged, byte-exact (§8.6);
# - a non-resumable client's requests fail 502 when its link drops (§8.3);
# - a client with another session fails the old session's requests (§8.3);
# - the newest connection wins and the old one is closed "replaced" (§8.2);
# - a replaced session that dials again is refused with 4409, so the two
#   clients never take turns (issue 16 §6).
. "$(dirname "$0")/lib.sh"

$PY -c 'import websockets' 2>/dev/null || fail "python3-websockets is needed ($PY)"

NS="akgw-tres-$$"
netns_add "$NS"

GW=$(free_port)
ADM=$(free_port)
MOCK="$TOP/tests/regress/sandbox_mock_client.py"
URL="ws://127.0.0.1:$GW/tunnel/sbx"
nsc() { ip netns exec "$NS" curl -sS --max-time 60 "$@"; }

start_mock() {
	name=$1; shift
	spawn "mock_$name" $PY "$MOCK" --name "$name" --log "$T/$name.jsonl" "$@"
	MOCK_PID=$LAST_PID
}

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
admin:
  address: 127.0.0.1:$ADM
log:
  level: debug
sandboxes:
  - id: sbx
    netns: /run/netns/$NS
    tunnel:
      listen_port: 8766
      client_wait: 3s
      http_timeout: 20s
EOF
wait_port "$ADM"
wait_port_ns 8766

start_mock A --url "$URL"
A=$MOCK_PID
wait_log "$T/A.jsonl" '"event": "connected"'

# A pending request is replayed with its id after the client resumes (§8.4).
out=$(nsc -i http://127.0.0.1:8766/replay-once)
assert_contains "replayed request" "HTTP/1.1 200" "$out"
assert_contains "replayed request: body" "resume-ok" "$out"
n=$(grep -c '"path": "/replay-once"' "$T/A.jsonl")
assert_eq "times the request reached the client" "2" "$n"
ids=$(grep '"path": "/replay-once"' "$T/A.jsonl" | sed 's/.*"id": "\([^"]*\)".*/\1/' | sort -u | wc -l | tr -d ' ')
assert_eq "distinct ids of the replays" "1" "$ids"
wait_log "$T/gateway.log" 'session resumed'
ok "a pending request is replayed with the same id on the resumed session"

# A download resumes from the sandbox's ack_offset, byte-exact (§8.6).
want=$($PY "$MOCK" pattern 10485760 | sha256sum | cut -c1-64)
got=$(nsc "http://127.0.0.1:8766/bytes?n=10485760&drop=3000000" | sha256sum | cut -c1-64)
assert_eq "download across a dropped link" "$want" "$got"
grep -q '"reason": "response"' "$T/A.jsonl" || fail "the client did not drop mid-download"
got=$(nsc "http://127.0.0.1:8766/bytes?n=10485760&cl=0&drop=5000000" | sha256sum | cut -c1-64)
assert_eq "chunked download across a dropped link" "$want" "$got"
ok "downloads resume mid-body byte-exact (with and without Content-Length)"

# An upload resumes from the client's ack_offset; unacknowledged chunks are
# sent again with their offsets and the client drops the duplicates.
head -c 10485760 /dev/urandom >"$T/up.bin"
want=$(sha256sum "$T/up.bin" | cut -c1-64)
out=$(nsc -X POST --data-binary "@$T/up.bin" "http://127.0.0.1:8766/sha256?drop=4000000&slow=1")
assert_contains "upload across a dropped link" "\"sha256\": \"$want\"" "$out"
wait_log "$T/gateway.log" 'resumes at byte'
grep '"event": "upload_done"' "$T/A.jsonl" | tail -1 | grep -q '"dups": [1-9]' ||
	fail "the client saw no duplicate chunk after the resume"
out=$(nsc -X POST -H 'Transfer-Encoding: chunked' --data-binary "@$T/up.bin" "http://127.0.0.1:8766/sha256?drop=7000000&slow=1")
assert_contains "chunked upload across a dropped link" "\"sha256\": \"$want\"" "$out"
ok "uploads resume from ack_offset byte-exact, resending what was not acknowledged"

# Admin and metrics saw the resumes and replays.
out=$(curl -sS "http://127.0.0.1:$ADM/metrics")
case "$out" in *"akgw_tunnel_resumes_total 0"*) fail "no resume counted: $out" ;; esac
case "$out" in *"akgw_tunnel_replays_total 0"*) fail "no replay counted: $out" ;; esac
ok "metrics count resumes and replays"

# The client pings, the gateway answers and never pings itself (§7); the
# admin API shows how long the client has been silent.  A client frozen
# past silence_timeout: tunnel_client_stall.sh.
out=$(curl -sS "http://127.0.0.1:$ADM/v1/sandboxes/sbx")
assert_contains "admin idle_ms" '"idle_ms":' "$out"
assert_contains "admin client_pings" '"client_pings":' "$out"
grep -q '"event": "server_ping"' "$T/A.jsonl" && fail "the gateway pinged the client"
ok "admin shows idle_ms and client_pings; the gateway sent no ping"

# The newest connection wins; the old one is closed "replaced" (§8.2).
stop "$A"
start_mock OLD --url "$URL" --once
OLD=$MOCK_PID
wait_log "$T/OLD.jsonl" '"event": "connected"'
start_mock NEW --url "$URL"
NEW=$MOCK_PID
wait_log "$T/OLD.jsonl" '"event": "closed"'
line=$(grep '"event": "closed"' "$T/OLD.jsonl")
assert_contains "old link: reason" '"reason": "replaced"' "$line"
assert_contains "old link: close code 1012" '"code": 1012' "$line"
wait_log "$T/NEW.jsonl" '"event": "connected"'
out=$(nsc http://127.0.0.1:8766/whoami)
assert_eq "requests go to the newest client" "NEW" "$out"
ok "the newest connection wins; the old one is closed as replaced"

# Another session takes over while requests are pending: the old
# session's idempotent request (GET) goes to the new session, which
# answers it; a POST fails 502 (tunnel client session was replaced), since
# the old client may have run it already.
nsc -o "$T/pend.out" -w '%{http_code}' -X POST -d x http://127.0.0.1:8766/hang >"$T/pend.code" &
pend=$!
nsc -o "$T/idem.out" -w '%{http_code}' "http://127.0.0.1:8766/hang?unless=OTHER" >"$T/idem.code" &
idem=$!
wait_log "$T/NEW.jsonl" '"path": "/hang"'
wait_log "$T/NEW.jsonl" '"path": "/hang?unless=OTHER"'
stop "$NEW"
start_mock OTHER --url "$URL"
OTHER=$MOCK_PID
wait "$pend"
assert_eq "pending POST of a replaced session" "502" "$(cat "$T/pend.code")"
assert_contains "pending POST of a replaced session: why" "session was replaced" "$(cat "$T/pend.out")"
wait "$idem"
assert_eq "pending GET of a replaced session" "200" "$(cat "$T/idem.code")"
assert_eq "pending GET answered by the new session" "OTHER" "$(cat "$T/idem.out")"
wait_log "$T/gateway.log" 'replayed 1 pending request (idempotent, to the new client session)'
ok "another session: pending GETs are replayed to it, a POST fails 502"

# A client without a session: its pending request fails 502 when it drops.
stop "$OTHER"
start_mock NOSESS --url "$URL" --no-session
NOSESS=$MOCK_PID
wait_log "$T/NOSESS.jsonl" '"event": "connected"'
nsc -o "$T/ns.out" -w '%{http_code}' http://127.0.0.1:8766/hang >"$T/ns.code" &
pend=$!
wait_log "$T/NOSESS.jsonl" '"path": "/hang"'
kill -USR1 "$NOSESS"
wait "$pend"
assert_eq "non-resumable client dropped" "502" "$(cat "$T/ns.code")"
assert_contains "non-resumable client dropped: code" '"code":"tunnel_error"' "$(cat "$T/ns.out")"
wait_log "$T/gateway.log" 'does not resume sessions'
ok "a non-resumable client's pending request fails 502 when its link drops"

# Newest wins, always: a client whose session was replaced and that dials
# again with it (as the reference client does after the 1012, or as a
# client cut off while the other took over does) is refused with 4409
# tunnel_session_replaced; the newer client keeps the tunnel.  A client
# never seen before still takes over.
stop "$NOSESS"
SX=0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d
start_mock X --url "$URL" --session "$SX"
X=$MOCK_PID
wait_log "$T/X.jsonl" '"event": "connected"'
assert_eq "before the takeover" "X" "$(nsc http://127.0.0.1:8766/whoami)"
start_mock Y --url "$URL"
Y=$MOCK_PID
wait_log "$T/X.jsonl" '"code": 1012'
wait_log "$T/X.jsonl" '"code": 4409'
line=$(grep '"code": 4409' "$T/X.jsonl" | head -1)
assert_contains "refused return: reason" '"reason": "tunnel_session_replaced: ' "$line"
i=0
while [ $i -lt 5 ]; do
	assert_eq "request $i while the replaced client dials again" "Y" "$(nsc http://127.0.0.1:8766/whoami)"
	i=$((i + 1))
done
grep -q 'refused: its session was replaced by a newer client' "$T/gateway.log" ||
	fail "the gateway did not log the refusal"
grep -q 'tunnel_refused .*status=4409 code=tunnel_session_replaced' "$T/gateway.log" ||
	fail "no tunnel_refused access line"
out=$(curl -sS "http://127.0.0.1:$ADM/metrics")
n=$(printf '%s\n' "$out" | sed -n 's/^akgw_tunnel_refused_total //p')
[ "${n:-0}" -ge 1 ] || fail "no refusal counted: $n"
stop "$X"
start_mock Z --url "$URL"
Z=$MOCK_PID
wait_log "$T/Y.jsonl" '"code": 1012'
assert_eq "a client never seen before takes over" "Z" "$(nsc http://127.0.0.1:8766/whoami)"
stop "$Y"
stop "$Z"
ok "a replaced session that comes back is refused (4409); a new client still takes over"

stop "$GW_PID"
grep -q 'AddressSanitizer\|LeakSanitizer\|runtime error' "$T/gateway.log" && fail "sanitizer report in the gateway log"
ok "tunnel_gw_resume"
