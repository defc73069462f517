#!/bin/sh
# netns placement: a sandbox given as `netns: /run/netns/NAME` is reached on
# 127.0.0.1 inside that namespace.  The test makes a namespace, runs a
# backend on its loopback and another on the same port of the host's
# loopback, and checks that the gateway reaches the one in the namespace.
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || fail "netns.sh must run as root (it creates a network namespace)"
command -v ip >/dev/null 2>&1 || fail "ip (iproute2) is needed for this test"

NS="akgw-$$"
NS2="akgw-$$-b"
ns_done=0
# Stop what runs in the namespaces, then delete them, whatever happens.
ns_cleanup() {
	[ $ns_done = 1 ] && return
	ns_done=1
	cleanup
	ip netns del "$NS" 2>/dev/null
	ip netns del "$NS2" 2>/dev/null
}
trap ns_cleanup EXIT
trap 'ns_cleanup; exit 1' INT TERM

ip netns add "$NS" || fail "cannot create network namespace $NS"
ip -n "$NS" link set lo up || fail "cannot bring up lo in $NS"
ip netns add "$NS2" || fail "cannot create network namespace $NS2"
ip -n "$NS2" link set lo up || fail "cannot bring up lo in $NS2"

GW=$(free_port)
PORT=$(free_port)
CLOSED=$(free_port)

# Wait until something listens on 127.0.0.1:$2 inside namespace $1.
wait_port_ns() {
	i=0
	while [ $i -lt 100 ]; do
		if ip netns exec "$1" $PY -c "import socket,sys; s=socket.socket(); s.settimeout(0.2); sys.exit(s.connect_ex(('127.0.0.1',$2)))" 2>/dev/null; then
			return 0
		fi
		sleep 0.05; i=$((i + 1))
	done
	fail "nothing listens on port $2 in namespace $1"
}

spawn ns_backend ip netns exec "$NS" $PY "$TOP/tests/regress/backend.py" --port "$PORT" --log "$T/ns.jsonl"
spawn ns2_backend ip netns exec "$NS2" $PY "$TOP/tests/regress/backend.py" --port "$PORT" --log "$T/ns2.jsonl"
spawn host_backend $PY "$TOP/tests/regress/backend.py" --port "$PORT" --log "$T/host.jsonl"
wait_port_ns "$NS" "$PORT"
wait_port_ns "$NS2" "$PORT"
wait_port "$PORT"

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
timeouts:
  connect: 2s
sandboxes:
  - id: inns
    netns: /run/netns/$NS
    ports:
      - port: $PORT
      - port: $CLOSED
  - id: inns2
    netns: /run/netns/$NS2
    ports:
      - port: $PORT
  - id: onhost
    address: 127.0.0.1
    ports:
      - port: $PORT
  - id: gone
    netns: /run/netns/$NS-missing
    ports:
      - port: $PORT
EOF

C="curl -sS --max-time 20"
n() { wc -l <"$1" | tr -d ' '; }

# The host backend answers on the host's loopback: the test is meaningful.
$C -o /dev/null "http://127.0.0.1:$PORT/direct-check" || fail "the host backend does not answer"
assert_eq "host backend requests" "1" "$(n "$T/host.jsonl")"
: >"$T/host.jsonl"

# Host form and path form into the namespace.
out=$($C "http://$PORT-inns.localhost:$GW/echo?via=host") || fail "host form into the namespace"
assert_contains "host form into the namespace" '"path": "/echo?via=host"' "$out"
out=$($C "http://127.0.0.1:$GW/inns/$PORT/echo?via=path") || fail "path form into the namespace"
assert_contains "path form into the namespace" '"path": "/echo?via=path"' "$out"
assert_eq "requests that reached the namespace's backend" "2" "$(n "$T/ns.jsonl")"
assert_eq "requests that reached the host's backend" "0" "$(n "$T/host.jsonl")"
grep -q 'via=host' "$T/ns.jsonl" || fail "the namespace's backend did not get the host-form request"
ok "a netns sandbox is reached on the namespace's loopback, not the host's"

# Keep-alive and a pooled connection inside the namespace.
: >"$T/ns.jsonl"
u="http://$PORT-inns.localhost:$GW/connection"
conns=$($C -w '%{num_connects}' -o /dev/null "$u" -o /dev/null "$u" -o /dev/null "$u") ||
	fail "three requests into the namespace"
assert_eq "client connections" "100" "$conns"
peers=$(sed 's/.*"peer_port": \([0-9]*\).*/\1/' "$T/ns.jsonl" | sort -u | wc -l | tr -d ' ')
assert_eq "upstream connections in the namespace for 3 requests" "1" "$peers"
ok "pooled upstream connection inside the namespace"

# Two namespaces with the same port, and the host, each get their own.
: >"$T/ns.jsonl"; : >"$T/ns2.jsonl"; : >"$T/host.jsonl"
for i in 1 2; do
	$C -o /dev/null "http://$PORT-inns.localhost:$GW/echo?to=ns1" || fail "request to inns"
	$C -o /dev/null "http://$PORT-inns2.localhost:$GW/echo?to=ns2" || fail "request to inns2"
	$C -o /dev/null "http://$PORT-onhost.localhost:$GW/echo?to=host" || fail "request to onhost"
done
assert_eq "namespace 1 requests" "2 0 0" "$(grep -c to=ns1 "$T/ns.jsonl") $(grep -c to=ns2 "$T/ns.jsonl") $(grep -c to=host "$T/ns.jsonl")"
assert_eq "namespace 2 requests" "0 2 0" "$(grep -c to=ns1 "$T/ns2.jsonl") $(grep -c to=ns2 "$T/ns2.jsonl") $(grep -c to=host "$T/ns2.jsonl")"
assert_eq "host requests" "0 0 2" "$(grep -c to=ns1 "$T/host.jsonl") $(grep -c to=ns2 "$T/host.jsonl") $(grep -c to=host "$T/host.jsonl")"
ok "two namespaces and the host with the same port stay apart"

# Refusals: a closed port in the namespace, a namespace that does not exist.
out=$($C -i "http://$CLOSED-inns.localhost:$GW/x")
assert_contains "closed port in the namespace" "HTTP/1.1 502" "$out"
assert_contains "closed port in the namespace code" "X-Gateway-Error: port_not_listening" "$out"
out=$($C -i "http://$PORT-gone.localhost:$GW/x")
assert_contains "missing namespace" "HTTP/1.1 502" "$out"
assert_contains "missing namespace code" "X-Gateway-Error: sandbox_unreachable" "$out"
assert_contains "missing namespace message" "network namespace cannot be entered" "$out"
assert_eq "requests that reached the host's backend for a missing namespace" "0" \
	"$(grep -c '"/x"' "$T/host.jsonl")"
$C -o /dev/null "http://$PORT-inns.localhost:$GW/echo?after=1" || fail "namespace after the refusals"
kill -0 "$GW_PID" 2>/dev/null || fail "the gateway died"
ok "closed port and missing namespace refused; the gateway keeps serving"
