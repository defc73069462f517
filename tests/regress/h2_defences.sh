#!/bin/sh
# HTTP/2 attacks a public gateway meets, each answered with GOAWAY (or a
# reset, or a 431) with the right error code, a log line that names the
# defence, and nothing else harmed: rapid reset (CVE-2023-44487), a
# CONTINUATION flood (CVE-2024-27316), SETTINGS, PING and empty-DATA
# floods, a header list over the limit (HPACK bomb), more concurrent
# streams than allowed, the per-connection stream cap and the idle
# timeout.  After each, the gateway still serves, and its memory stayed
# bounded.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
ECHO=$(free_port)
UP="$T/upstream.jsonl"

spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" --log "$UP"
wait_port "$ECHO"
spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
domains: [localhost]
timeouts:
  keepalive: 2s
limits:
  max_header_size: 16KiB
  h2_max_concurrent_streams: 100
  h2_max_requests: 400
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $ECHO
EOF

AUTH="$ECHO-sbx.localhost:$GW"
attack() { $PY "$TOP/tests/regress/h2_attack.py" "$GW" "$AUTH" "$1"; }
# GOAWAY error codes (RFC 9113 section 7).
NO_ERROR=0
PROTOCOL_ERROR=1
ENHANCE_YOUR_CALM=11
json() { echo "$1" | $PY -c "import json,sys; print(json.load(sys.stdin)$2)"; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$GW_PID/status"; }
still_serves() {
	body=$(curl -sS --max-time 10 --http2-prior-knowledge "http://$AUTH/echo") ||
		fail "after $1: the gateway no longer serves"
	assert_contains "after $1: a normal request" '"method": "GET"' "$body"
}
rss0=$(rss_kb)

out=$(attack rapid_reset)
assert_eq "rapid reset: GOAWAY" "$ENHANCE_YOUR_CALM" "$(json "$out" '["goaway"]')"
wait_log "$T/gateway.log" 'HTTP/2 h2_rapid_reset'
n=$(wc -l <"$UP")
[ "$n" -lt 1000 ] || fail "rapid reset: $n requests reached the upstream"
still_serves "rapid reset"
ok "rapid reset gets GOAWAY ENHANCE_YOUR_CALM ($n streams reached the upstream)"

out=$(attack continuation_flood)
code=$(json "$out" '["goaway"]')
case "$code" in "$ENHANCE_YOUR_CALM"|"$PROTOCOL_ERROR") ;;
*) fail "CONTINUATION flood: GOAWAY code '$code' ($out)" ;; esac
wait_log "$T/gateway.log" 'HTTP/2 h2_continuation_flood'
still_serves "CONTINUATION flood"
ok "CONTINUATION flood gets GOAWAY ($code)"

out=$(attack settings_flood)
assert_eq "SETTINGS flood: GOAWAY" "$ENHANCE_YOUR_CALM" "$(json "$out" '["goaway"]')"
wait_log "$T/gateway.log" 'HTTP/2 h2_flood'
still_serves "SETTINGS flood"
ok "SETTINGS flood gets GOAWAY ENHANCE_YOUR_CALM"

out=$(attack ping_flood)
[ "$(json "$out" '["closed"]')" = True ] || [ "$(json "$out" '["goaway"]')" = "$ENHANCE_YOUR_CALM" ] ||
	fail "PING flood: neither GOAWAY nor a close: $out"
still_serves "PING flood"
ok "PING flood from a peer that does not read is cut off"

out=$(attack empty_data)
assert_eq "empty DATA flood: GOAWAY" "$ENHANCE_YOUR_CALM" "$(json "$out" '["goaway"]')"
wait_log "$T/gateway.log" 'HTTP/2 h2_flood'
still_serves "empty DATA flood"
ok "empty DATA frames flood gets GOAWAY ENHANCE_YOUR_CALM"

n0=$(wc -l <"$UP")
out=$(attack header_bomb)
st=$(json "$out" '["statuses"].get("1")')
rst=$(json "$out" '["resets"].get("1")')
ga=$(json "$out" '["goaway"]')
[ "$st" = 431 ] || [ "$rst" != None ] || [ "$ga" != None ] ||
	fail "header list over the limit: no 431, reset or GOAWAY: $out"
assert_eq "header bomb reached no upstream" "$n0" "$(wc -l <"$UP")"
still_serves "header bomb"
ok "a header list over max_header_size is refused (431 $st, reset $rst, GOAWAY $ga)"

out=$(attack too_many_streams)
refused=$(json "$out" '["refused"]')
[ "$refused" -ge 100 ] || [ "$(json "$out" '["goaway"]')" != None ] ||
	fail "streams past the limit were not refused: $out"
still_serves "too many streams"
ok "streams past h2_max_concurrent_streams are refused ($refused REFUSED_STREAM)"

out=$(attack lifetime)
assert_eq "stream cap: GOAWAY" "$NO_ERROR" "$(json "$out" '["goaway"]')"
n=$(json "$out" '["statuses"]' | tr ',' '\n' | grep -c 200)
assert_eq "stream cap: streams answered before GOAWAY" "400" "$n"
ok "h2_max_requests ends a connection with GOAWAY NO_ERROR after 400 streams"

out=$(attack idle)
assert_eq "idle: GOAWAY" "$NO_ERROR" "$(json "$out" '["goaway"]')"
assert_eq "idle: closed" "True" "$(json "$out" '["closed"]')"
ok "an idle HTTP/2 connection gets GOAWAY and is closed after keepalive"

rss1=$(rss_kb)
[ $((rss1 - rss0)) -lt 65536 ] || fail "the gateway grew from $rss0 to $rss1 KiB under the attacks"
ok "memory stayed bounded: $rss0 -> $rss1 KiB"
