#!/bin/sh
# Workload 7's idle keep-alive cell alone (bench/run.bash, w7), akgateway
# only: the gateway's RSS growth per idle HTTP/1.1 connection, for one
# build.  The gateway runs bench/conf/akgateway.yaml.in with workers: 1; a
# short wrk run warms it; akbench-idle then opens N connections that each
# make one request to a port URL (/size/0) and stay idle.
#
#   BUILD=build N=1000 sh bench/idle-http.sh
#
# Prints "idle http: X.XX KiB per connection (RSS a -> b KiB, n=N)".
# WRAP="heaptrack -o FILE" runs the gateway under a tool (the RSS is then
# the tool's); HOLD=s keeps everything up s seconds after the measure;
# HOOK=cmd runs "cmd before PID TMPDIR" and "cmd after PID TMPDIR" beside
# each RSS read.  INUSE=1 also prints the growth of malloc's bytes in use
# per connection (gdb calls malloc_stats() in the gateway: a figure without
# the page rounding and free space that RSS counts).
set -eu
BUILD=${BUILD:-build}
N=${N:-1000}
TOP=$(cd "$(dirname "$0")/.." && pwd)
UTIL="python3 $TOP/bench/lib/util.py"
T=$(mktemp -d /tmp/akbench-idle-http.XXXXXX)
. "$TOP/bench/lib/idle.sh"

ulimit -n 65536 2>/dev/null || true
set -- $($UTIL ports 3 41000 41999)
port=$1
tport=$2
bport=$3
: >"$T/sb.yaml"
$UTIL render "$TOP/bench/conf/akgateway.yaml.in" "$T/gw.yaml" \
    WORKERS_LINE="workers: 1" LOG_LINE="log: {level: warn}" \
    PORT="$port" TLS_PORT="$tport" CERT="$BUILD/certs/server.crt" \
    KEY="$BUILD/certs/server.key" MAXCONN=100000 BACKEND_PORT="$bport" \
    SANDBOXES="@$T/sb.yaml"
# As w7 runs it: nothing pinned, a backend with two threads, one worker.
"$BUILD/bench/akbench-backend" --listen "127.0.0.1:$bport" \
    --threads 2 >"$T/bk.log" 2>&1 &
bk=$!
${WRAP:-} "$BUILD/akgateway" -c "$T/gw.yaml" >"$T/gw.log" 2>&1 &
gw=$!
wait_port "$bport" && wait_port "$port" || {
	cat "$T/gw.log" "$T/bk.log"
	exit 1
}
url="http://127.0.0.1:$port/bench/$bport"
# A few requests first, so the baseline is a warmed process (as w7).
timeout 20 wrk -t1 -c8 -d1s "$url/size/1024" >/dev/null 2>&1
sleep 0.5
before=$($UTIL rss "$gw")
[ -z "${HOOK:-}" ] || $HOOK before "$gw" "$T"
[ -z "${INUSE:-}" ] || { ibefore=$(inuse); hbefore=$(heap); }
"$BUILD/bench/akbench-idle" --url "$url/size/0" --connections "$N" \
    --mode http --hold 600 >"$T/idle.log" 2>&1 &
idle=$!
wait_idle_ready
sleep 1
after=$($UTIL rss "$gw")
[ -z "${HOOK:-}" ] || $HOOK after "$gw" "$T"
[ -z "${INUSE:-}" ] || { iafter=$(inuse); hafter=$(heap); }
# Pooled upstream connections (a fixed cost the ramp leaves): for the report.
nup=$(ss -Htn state established "( dport = :$bport )" 2>/dev/null | wc -l)
idle_report "idle http" connection
echo "upstream connections open: $nup"
[ -z "${HOLD:-}" ] || { echo "gateway $gw, akbench-idle $idle: holding ${HOLD}s"; sleep "$HOLD"; }
