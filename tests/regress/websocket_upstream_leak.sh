#!/bin/sh
# A WebSocket whose client has ended its stream while the sandbox app has
# stopped reading keeps no upstream socket beyond its deadline: the
# connection stays one client connection (counted in max_connections and
# /metrics) until timeouts.websocket_fin after the client's end, then the
# upstream is reset; and a gateway that stops (SIGTERM: at the end of its
# drain, timeouts.drain 1s) resets it too.  Over TLS and over plain HTTP
# through the buffered relay (AKGW_SPLICE=0).
. "$(dirname "$0")/lib.sh"

command -v curl >/dev/null 2>&1 || fail "curl is needed"
command -v ss >/dev/null 2>&1 || fail "ss (iproute2) is needed"

GW=$(free_port)
GWS=$(free_port)
UP=$(free_port)
ADM=$(free_port)
PEER="$TOP/tests/regress/relay_peer.py"

spawn upstream $PY "$PEER" server "$UP"
wait_port "$UP"

# $1: websocket_fin.  One connection at most: a held relay is counted.
start_gateway() {
	cat >"$T/gateway.yaml" <<EOF
listen:
  - address: 127.0.0.1:$GW
  - address: 127.0.0.1:$GWS
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key
admin:
  address: 127.0.0.1:$ADM
timeouts:
  websocket_fin: $1
  drain: 1s
limits:
  max_connections: 1
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $UP
EOF
	AKGW_SPLICE=0 spawn gateway "$AKGW" -c "$T/gateway.yaml"
	GW_PID=$LAST_PID
	wait_port "$GW"
	wait_port "$GWS"
}

# The upstream's connections from the gateway, as the upstream sees them.
upstream_conns() {
	ss -Htn state established "( sport = :$UP )" | wc -l
}

metric() {
	curl -s "http://127.0.0.1:$ADM/metrics" | awk -v n="$1" '$1 == n { print $2 }'
}

# wait_for WHAT CMD EXPECTED TENTHS: poll CMD until it prints EXPECTED.
wait_for() {
	i=0
	while [ "$($2)" != "$3" ] && [ $i -lt "$4" ]; do
		sleep 0.1; i=$((i + 1))
	done
	assert_eq "$1" "$3" "$($2)"
}

# stall NAME ARGS: a client sends 200 KB to the /stall upstream (more than
# it reads), ends its stream and stays connected.
stall() {
	name=$1; shift
	timeout 30 $PY "$PEER" client "$@" >"$T/client-$name.log" 2>&1 &
	PIDS="$PIDS $!"
	wait_log "$T/client-$name.log" "^ok sent 200000"
}

start_gateway 2s
for mode in "tls:$GWS:--tls $CERTS/ca.crt" "plain:$GW:"; do
	name=${mode%%:*}
	rest=${mode#*:}
	port=${rest%%:*}
	args=${rest#*:}

	stall "$name" "$port" "/sbx/$UP" stall --bytes 200000 $args
	wait_for "$name: the relay counts as half-closed" \
		"metric akgw_websockets_half_closed" 1 50
	assert_eq "$name: the upstream connection is open" 1 "$(upstream_conns)"
	assert_eq "$name: counted as a client connection" 1 \
		"$(metric akgw_connections_active)"
	# It holds the only connection max_connections allows.
	out=$(curl -s "http://127.0.0.1:$GW/sbx/$UP/")
	assert_contains "$name: the next client is refused" \
		'"code":"too_many_connections"' "$(echo "$out" | tr -d ' ')"
	# websocket_fin (2 s) after the client's end, the upstream is reset.
	wait_for "$name: upstream connections after websocket_fin" \
		upstream_conns 0 60
	wait_for "$name: half-closed relays after websocket_fin" \
		"metric akgw_websockets_half_closed" 0 20
	assert_eq "$name: client connections after websocket_fin" 0 \
		"$(metric akgw_connections_active)"
	assert_eq "$name: websockets after websocket_fin" 0 \
		"$(metric akgw_websockets_active)"
	ok "$name: a stalled upstream is reset websocket_fin after the client's end"
done
n=$(grep -c 'status=101.*close=websocket half-closed timeout' "$T/gateway.log")
assert_eq "access lines for the two timeouts" 2 "$n"

# A gateway that stops resets what it still holds.
stop "$GW_PID"
start_gateway 1h
stall shutdown "$GWS" "/sbx/$UP" stall --bytes 200000 --tls "$CERTS/ca.crt"
wait_for "before stopping: half-closed relays" \
	"metric akgw_websockets_half_closed" 1 50
assert_eq "before stopping: upstream connections" 1 "$(upstream_conns)"
kill -TERM "$GW_PID"
wait_for "after the gateway stopped: upstream connections" upstream_conns 0 50
ok "a stopping gateway resets a stalled upstream"
