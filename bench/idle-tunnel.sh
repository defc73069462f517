#!/bin/sh
# Workload 7's idle-tunnel cell alone (bench/run.bash, w7): the gateway's
# RSS growth per idle tunnel session, for one build.  N sandboxes, each
# with a terminate-mode tunnel; akbench-idle opens one tunnel WebSocket to
# each, says the V2 hello, answers pings and stays.
#
#   BUILD=build N=1000 sh bench/idle-tunnel.sh
#
# Prints "idle tunnel: X.XX KiB per tunnel (RSS a -> b KiB, n=N)".
# INUSE=1 also prints malloc's bytes in use and heap per tunnel (gdb
# calls malloc_stats() in the gateway), WRAP="heaptrack -o FILE" runs the
# gateway under a tool, as in bench/idle-http.sh.
set -eu
BUILD=${BUILD:-build}
N=${N:-1000}
TOP=$(cd "$(dirname "$0")/.." && pwd)
UTIL="python3 $TOP/bench/lib/util.py"
T=$(mktemp -d /tmp/akbench-idle-tunnel.XXXXXX)
TOKEN="akbench-tunnel-token-$$-0123456789"
. "$TOP/bench/lib/idle.sh"

set -- $($UTIL ports 2)
port=$1
base=$($UTIL portrange "$N" 20000 32000)
: >"$T/sb.yaml"
i=0
while [ $i -lt "$N" ]; do
	printf '  - id: sb%d\n    address: 127.0.0.1\n    tunnel: {listen_port: %d, token: "%s"}\n' \
	    $i $((base + i)) "$TOKEN" >>"$T/sb.yaml"
	i=$((i + 1))
done
cat >"$T/gw.yaml" <<EOF
log: {level: warn}
workers: 1
listen:
  - address: 127.0.0.1:$port
domains: [gw.bench.invalid]
timeouts: {keepalive: 300s, upstream_idle: 300s, idle: 300s}
sandboxes:
$(cat "$T/sb.yaml")
EOF
ulimit -n 65536 2>/dev/null || true
${WRAP:-} "$BUILD/akgateway" -c "$T/gw.yaml" >"$T/gw.log" 2>&1 &
gw=$!
wait_port "$port" && wait_port $((base + N - 1)) || {
	cat "$T/gw.log"
	exit 1
}
sleep 0.5
before=$($UTIL rss "$gw")
[ -z "${INUSE:-}" ] || { ibefore=$(inuse); hbefore=$(heap); }
"$BUILD/bench/akbench-idle" --url "ws://127.0.0.1:$port/tunnel/sb%d" \
    --connections "$N" --mode tunnel --hold 600 --header "X-Auth: $TOKEN" \
    >"$T/idle.log" 2>&1 &
idle=$!
wait_idle_ready
sleep 1
after=$($UTIL rss "$gw")
[ -z "${INUSE:-}" ] || { iafter=$(inuse); hafter=$(heap); }
idle_report "idle tunnel" tunnel
