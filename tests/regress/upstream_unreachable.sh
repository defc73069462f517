#!/bin/sh
# An unroutable sandbox address used to be reported as "Nothing is
# listening on port 8000" (502 port_not_listening), after five attempts.
# No route (ENETUNREACH), an unreachable host (EHOSTUNREACH) and a connect
# that is never answered (timeout) now each get 502 upstream_unreachable at
# once, with a sentence that names the address, an access line and a count
# in /metrics.  The gateway runs in a namespace of its own, whose routes
# the test sets: none for 192.0.2.0/24, "unreachable" for 198.51.100.0/24,
# and for 10.77.0.2 a veth neighbour entry with a MAC address nobody has,
# so its SYNs are sent and never answered.
. "$(dirname "$0")/lib.sh"

command -v curl >/dev/null 2>&1 || fail "curl is needed"
NS="akgw-unr-$$"
netns_add "$NS"
ip -n "$NS" route add unreachable 198.51.100.0/24 || fail "cannot add the unreachable route"
ip -n "$NS" link add v0 type veth peer name v1 || fail "cannot add a veth pair"
ip -n "$NS" addr add 10.77.0.1/24 dev v0 || fail "cannot address v0"
ip -n "$NS" link set v0 up && ip -n "$NS" link set v1 up || fail "cannot bring up the veth pair"
ip -n "$NS" neigh add 10.77.0.2 lladdr 02:00:00:00:00:99 dev v0 nud permanent ||
	fail "cannot add the neighbour entry"

GW=18080
ADMIN=19090
cat >"$T/gateway.yaml" <<EOT
listen:
  - address: 127.0.0.1:$GW
admin:
  address: 127.0.0.1:$ADMIN
log:
  format: json
timeouts:
  connect: 400ms
sandboxes:
  - id: noroute
    address: 192.0.2.1
    ports: [{port: 8000}]
  - id: unreach
    address: 198.51.100.1
    ports: [{port: 8000}]
  - id: silent
    address: 10.77.0.2
    ports: [{port: 8000}]
EOT
spawn gateway ip netns exec "$NS" "$AKGW" -c "$T/gateway.yaml"
wait_port_ns "$GW"

# in_ns CMD...: run a client inside the gateway's namespace.
in_ns() { ip netns exec "$NS" "$@"; }

check() {
	id=$1 why=$2
	start=$(date +%s%N)
	out=$(in_ns curl -s -m 10 -D - "http://127.0.0.1:$GW/$id/8000/")
	ms=$(( ($(date +%s%N) - start) / 1000000 ))
	assert_contains "$id status" "HTTP/1.1 502 Bad Gateway" "$out"
	assert_contains "$id header" "X-Gateway-Error: upstream_unreachable" "$out"
	assert_contains "$id code" '"code":"upstream_unreachable"' "$out"
	assert_contains "$id sentence" "Sandbox '$id' cannot be reached: $why" "$out"
	case "$out" in *"Nothing is listening"*) fail "$id: still reported as not listening: $out" ;; esac
	# At once: no five attempts with back-off (the timeout is 400 ms).
	[ "$ms" -lt 1500 ] || fail "$id: the answer took $ms ms"
	ok "$id: 502 upstream_unreachable in $ms ms"
}
check noroute "no route to 192.0.2.1:8000 (Network is unreachable)"
check unreach "no route to 198.51.100.1:8000 (No route to host)"
check silent "10.77.0.2:8000 did not answer a connection within 400ms"

# The browser gets the HTML page with the same code, sandbox and port.
out=$(in_ns curl -s -m 10 -H 'Accept: text/html' "http://127.0.0.1:$GW/noroute/8000/")
assert_contains "html code" "<code>upstream_unreachable</code>" "$out"
assert_contains "html sandbox" "<dt>Sandbox</dt><dd><code>noroute</code>" "$out"
assert_contains "html port" "<dt>Port</dt><dd><code>8000</code>" "$out"

# Each refusal has its access line and its count.
n=$(grep '"msg":"access"' "$T/gateway.log" | grep '"status":502,' | grep -c '"error":"upstream_unreachable"')
assert_eq "access lines" 4 "$n"
m=$(in_ns curl -s -m 5 "http://127.0.0.1:$ADMIN/metrics")
assert_contains "metric" 'akgw_gateway_errors_total{code="upstream_unreachable"} 4' "$m"
ok "access lines and akgw_gateway_errors_total count upstream_unreachable"
