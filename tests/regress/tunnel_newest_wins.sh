#!/bin/sh
# The newest tunnel client wins, always (issue 16 §6).  Client A runs in a
# network namespace joined to the host by a veth pair; a black-hole route
# cuts it off, so it never sees the 1012 "replaced" the gateway sends when
# client B takes over.  When the network heals, A dials again with its old
# session: the gateway refuses it (close 4409 tunnel_session_replaced),
# aktunnel A says so and exits 3, and every request keeps reaching B's
# target.  Without the refusal A took the tunnel back and B exited 3.
. "$(dirname "$0")/lib.sh"

NS="akgw-nws-$$"  # the sandbox
NSA="akgw-nwa-$$" # client A's machine
netns_add "$NS"
netns_add "$NSA"
nsc() { ip netns exec "$NS" curl -sS --max-time 20 "$@"; }

# A /30 of 10.231.0.0/16 no interface of the host has yet.
n=$(($$ % 16384)) i=0
while :; do
	HOSTIP="10.231.$((n / 64)).$((n % 64 * 4 + 1))"
	ip -o addr show | grep -q "inet $HOSTIP/" || break
	i=$((i + 1)) n=$(((n + 1) % 16384))
	[ $i -lt 64 ] || fail "no free 10.231.x.y/30 for the veth pair"
done
AIP="${HOSTIP%.*}.$((${HOSTIP##*.} + 1))"
VH="nwh$$" VA="nwa$$"
# The peer is made inside $NSA: deleting $NSA at exit deletes the pair.
ip link add "$VH" type veth peer name "$VA" netns "$NSA" || fail "cannot create a veth pair"
ip addr add "$HOSTIP/30" dev "$VH" && ip link set "$VH" up ||
	fail "cannot set up $VH"
ip -n "$NSA" addr add "$AIP/30" dev "$VA" && ip -n "$NSA" link set "$VA" up ||
	fail "cannot set up $VA"

GW=$(free_port)
ADM=$(free_port)
TA=$(free_port)
TB=$(free_port)
spawn targetA ip netns exec "$NSA" $PY "$TOP/tests/regress/backend.py" --port "$TA" --log "$T/targetA.jsonl"
spawn targetB $PY "$TOP/tests/regress/backend.py" --port "$TB" --log "$T/targetB.jsonl"
wait_port "$TB"
(NS=$NSA; wait_port_ns "$TA") || exit 1

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
  - address: $HOSTIP:$GW
admin:
  address: 127.0.0.1:$ADM
sandboxes:
  - id: sbx
    netns: /run/netns/$NS
    tunnel:
      listen_port: 8766
      client_wait: 5s
EOF
wait_port "$ADM"
wait_port_ns 8766

# A: dropped by its own heartbeat within about 2 s of the cut.
spawn tunA ip netns exec "$NSA" "$AKTUN" --gateway "$HOSTIP:$GW" --sandbox sbx \
	--target "http://127.0.0.1:$TA" --ping-interval 0.5 --ping-timeout 1
A=$LAST_PID
wait_log "$T/tunA.log" "tunnel sbx ready"
out=$(nsc "http://127.0.0.1:8766/echo")
assert_contains "through A" '"path": "/echo"' "$out"
assert_eq "requests at A's target" 1 "$(wc -l <"$T/targetA.jsonl" | tr -d ' ')"
ok "client A serves the tunnel from its namespace"

# Cut A off; once its heartbeat gave up, B takes over.
ip -n "$NSA" route add blackhole "$HOSTIP/32" || fail "cannot add the black-hole route"
wait_log "$T/tunA.log" "heartbeat timeout"
spawn tunB "$AKTUN" --gateway "127.0.0.1:$GW" --sandbox sbx --target "http://127.0.0.1:$TB"
B=$LAST_PID
wait_log "$T/tunB.log" "tunnel sbx ready"
i=0
while [ $i -lt 100 ]; do
	out=$(nsc "http://127.0.0.1:8766/echo?before-heal")
	case "$out" in *'"path": "/echo?before-heal"'*) break ;; esac
	sleep 0.1; i=$((i + 1))
done
assert_contains "through B while A is cut off" '"path": "/echo?before-heal"' "$out"
grep -q '"path": "/echo?before-heal"' "$T/targetA.jsonl" && fail "A's target got a request after B took over"
# A keeps dialling into the black hole meanwhile.
wait_log "$T/tunA.log" "cannot connect to the gateway"
ok "client B took over while A was cut off"

# Heal.  A dials again with its old session, and must not take the tunnel
# back: the gateway refuses it and A exits 3 (20 s at most).
ip -n "$NSA" route del blackhole "$HOSTIP/32" || fail "cannot remove the black-hole route"
i=0
while kill -0 "$A" 2>/dev/null && kill -0 "$B" 2>/dev/null && [ $i -lt 200 ]; do
	sleep 0.1; i=$((i + 1))
done
kill -0 "$B" 2>/dev/null || fail "client B exited after the heal: $(tail -n 3 "$T/tunB.log")"
kill -0 "$A" 2>/dev/null && fail "client A is still running 20 s after the heal"
wait "$A"
assert_eq "client A's exit status" 3 "$?"
assert_contains "client A says why" \
	"a newer client took over the tunnel of sandbox sbx while this one was disconnected" \
	"$(cat "$T/tunA.log")"
assert_contains "client A names the code" "4409 tunnel_session_replaced" "$(cat "$T/tunA.log")"
wait_log "$T/gateway.log" 'tunnel sbx:8766: client .* refused: its session was replaced'
grep -q 'tunnel_refused .*code=tunnel_session_replaced' "$T/gateway.log" ||
	fail "no tunnel_refused access line"
ok "client A returns, is refused (4409 tunnel_session_replaced) and exits 3"

# Every later request reaches B's target, none A's.
na=$(wc -l <"$T/targetA.jsonl" | tr -d ' ')
nb=$(wc -l <"$T/targetB.jsonl" | tr -d ' ')
i=0
while [ $i -lt 20 ]; do
	out=$(nsc "http://127.0.0.1:8766/echo?after-$i")
	assert_contains "request $i after the heal" "\"path\": \"/echo?after-$i\"" "$out"
	i=$((i + 1))
done
assert_eq "requests at B's target after the heal" $((nb + 20)) "$(wc -l <"$T/targetB.jsonl" | tr -d ' ')"
assert_eq "requests at A's target after the heal" "$na" "$(wc -l <"$T/targetA.jsonl" | tr -d ' ')"
kill -0 "$B" 2>/dev/null || fail "client B exited"
out=$(curl -sS "http://127.0.0.1:$ADM/metrics")
assert_contains "refusals counted" "akgw_tunnel_refused_total 1" "$out"
ok "20 requests after the heal all reach B's target"

stop "$GW_PID"
grep -q 'AddressSanitizer\|LeakSanitizer\|runtime error' "$T/gateway.log" "$T/tunA.log" "$T/tunB.log" &&
	fail "sanitizer report"
ok "tunnel_newest_wins"
