#!/bin/sh
# An upgraded connection ends one direction at a time, in every relay:
# splice(2) (plain client), the buffered relay (TLS client; plain client
# with AKGW_SPLICE=0).  A client that ends its stream (FIN) still gets
# what the upstream sends after it, and the upstream sees the end; an
# upstream that ends its stream still gets what the client sends after it,
# and the client sees the end (a FIN, or close_notify on TLS).  The
# connection closes once both directions have ended.
. "$(dirname "$0")/lib.sh"

command -v curl >/dev/null 2>&1 || fail "curl is needed"

GW=$(free_port)
GWS=$(free_port)
GW2=$(free_port)
UP=$(free_port)
ADM=$(free_port)
ADM2=$(free_port)
PEER="$TOP/tests/regress/relay_peer.py"

spawn upstream $PY "$PEER" server "$UP"
wait_port "$UP"

# $1 listen port, $2 admin port: a gateway config with a TLS listener
# next to the plain one (the TLS one on $GWS for the first gateway only).
gw_conf() {
	cat <<EOF
listen:
  - address: 127.0.0.1:$1
$3
admin:
  address: 127.0.0.1:$2
log:
  level: debug
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $UP
EOF
}

TLS_LISTEN="  - address: 127.0.0.1:$GWS
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key"
gw_conf "$GW" "$ADM" "$TLS_LISTEN" >"$T/gateway1.yaml"
spawn_gateway "$GW" <"$T/gateway1.yaml"
wait_port "$GWS"
# The same, without splice(2): plain clients go through the buffered relay.
gw_conf "$GW2" "$ADM2" "" >"$T/gateway2.yaml"
AKGW_SPLICE=0 spawn gateway2 "$AKGW" -c "$T/gateway2.yaml"
wait_port "$GW2"

# peer WHAT PORT MODE [ARGS]: run the client; prints its "ok ..." line.
peer() {
	what=$1; shift
	out=$(timeout 30 $PY "$PEER" client "$1" "/sbx/$UP" "$2" "$@" 2>&1) ||
		fail "$what: client failed: $out"
	echo "$out"
}

# metric PORT NAME: a value from that gateway's /metrics.
metric() {
	curl -s "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n { print $2 }'
}

for mode in "plain, splice:$GW:" "tls:$GWS:--tls $CERTS/ca.crt" \
	"plain, buffered:$GW2:"; do
	name=${mode%%:*}
	rest=${mode#*:}
	port=${rest%%:*}
	args=${rest#*:}

	# The client ends first; the upstream answers after that end.
	out=$(peer "$name, client ends first" "$port" up $args)
	assert_eq "$name: the upstream's bytes after the client's FIN" \
		"ok got after-eof:5" "$out"

	# The upstream ends first; the client answers after that end.
	out=$(peer "$name, upstream ends first" "$port" down $args)
	case "$name" in
	tls) assert_eq "$name: close_notify, then the client's bytes" \
		"ok got bye close_notify" "$out" ;;
	*) assert_eq "$name: a FIN, then the client's bytes" "ok got bye" "$out" ;;
	esac
	got=$(grep '"event": "eof"' "$T/upstream.log" | grep '/down' | tail -n 1)
	assert_contains "$name: the upstream read the client's reply" \
		'"read": "reply"' "$got"
	# Both ends reached the upstream only once each direction had ended.
	up=$(grep '"event": "eof"' "$T/upstream.log" | grep '/up"' | tail -n 1)
	assert_contains "$name: the upstream read the client's bytes" \
		'"read": "hello"' "$up"
	ok "$name: half-close each way"
done

# Every relay closed once both ends were in; none is left half-closed.
for p in "$ADM" "$ADM2"; do
	i=0
	while [ "$(metric "$p" akgw_websockets_active)" != 0 ] && [ $i -lt 100 ]; do
		sleep 0.05; i=$((i + 1))
	done
	assert_eq "websockets open on :$p" 0 "$(metric "$p" akgw_websockets_active)"
	assert_eq "half-closed on :$p" 0 "$(metric "$p" akgw_websockets_half_closed)"
done
for f in "$T/gateway.log" "$T/gateway2.log"; do
	grep -q 'close=websocket client closed' "$f" ||
		fail "no access line closed by the client in $f"
	grep -q 'close=websocket upstream closed' "$f" ||
		fail "no access line closed by the upstream in $f"
done
ok "every relay closed after both directions ended"
# Each relay was the one named: splice only where it is on.
grep -q 'relaying with splice' "$T/gateway.log" ||
	fail "the plain client on :$GW was not spliced"
! grep -q 'relaying with splice' "$T/gateway2.log" ||
	fail "AKGW_SPLICE=0 still spliced"
