#!/bin/bash
# akgateway benchmark harness: akgateway against a direct connection, nginx,
# HAProxy and ssh -R, on loopback, in one run.  bench/README.md explains the
# workloads, the equivalent settings and how to read the results.
#
# Knobs (environment):
#   QUICK=1        short run (<= 4 minutes): 1 run each, short durations,
#                  fewer workloads, the per-core table only
#   BUILD=dir      where akgateway, aktunnel, certs/ and bench/ are (build)
#   RUNS=N         runs per contender and workload (3; QUICK: 1)
#   ONLY=1,3,6     run only these workloads (1..10); "accesslog" stands for 8,
#                  "h2" for 9,10 (HTTP/2 and gRPC), "goals" for 1,3,4,7,8,9
#                  (what the goals table needs)
#   W9_SIZES="1024 16384"  response sizes of workload 9 (QUICK: 1024)
#   MODES="percore both"   tables to make (percore; "both" adds ~25 minutes)
#   RESULTS_DIR=dir        where <date>-<host>.md and .png go (bench/results)
#   DURATION=s WARMUP=s    wrk / akbench-ws seconds per run and warm-up
#   SIDE_DURATION=s        seconds per run of workloads 2 and 5 (5; QUICK: 3)
#   BULK_BYTES=n           bulk transfer size (1 GiB; QUICK: 256 MiB)
#   IDLE_HTTP=n IDLE_WS=n IDLE_TUNNEL=n   idle connections for workload 7
#   SSH_CIPHER=c           ssh -R cipher (aes128-gcm@openssh.com)
#   SSH_PROXY=fdpass|socat how ssh reaches sshd in the namespace (fdpass)
#   TUNNEL_INFLIGHT=n      YR_TUNNEL_MAX_INFLIGHT for the akgateway tunnel (64)
#   KEEP_TMP=1             keep the temporary directory (for debugging)

set -u
export LC_ALL=C

TOP=$(cd "$(dirname "$0")/.." && pwd)
BENCH="$TOP/bench"
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$TOP/$BUILD" ;; esac
QUICK=${QUICK:-0}
[ "$QUICK" = 1 ] || QUICK=0
if [ $QUICK = 1 ]; then
	RUNS=${RUNS:-1}
	DURATION=${DURATION:-3}
	WARMUP=${WARMUP:-1}
	BULK_BYTES=${BULK_BYTES:-268435456}
	IDLE_HTTP=${IDLE_HTTP:-1000}
	IDLE_WS=${IDLE_WS:-1000}
	IDLE_TUNNEL=${IDLE_TUNNEL:-100}
	MODES=${MODES:-percore}
	W1_SIZES=${W1_SIZES:-1024}
	W1_CONNS=${W1_CONNS:-64}
	W9_SIZES=${W9_SIZES:-1024}
	SIDE_DURATION=${SIDE_DURATION:-$DURATION}
else
	RUNS=${RUNS:-3}
	DURATION=${DURATION:-10}
	WARMUP=${WARMUP:-2}
	BULK_BYTES=${BULK_BYTES:-1073741824}
	IDLE_HTTP=${IDLE_HTTP:-10000}
	IDLE_WS=${IDLE_WS:-10000}
	IDLE_TUNNEL=${IDLE_TUNNEL:-1000}
	MODES=${MODES:-percore}
	W1_SIZES=${W1_SIZES:-0 1024 16384}
	W1_CONNS=${W1_CONNS:-64 256}
	W9_SIZES=${W9_SIZES:-1024 16384}
	SIDE_DURATION=${SIDE_DURATION:-5}
fi
ONLY=${ONLY:-1,2,3,4,5,6,7,8,9,10}
ONLY=${ONLY//accesslog/8}
ONLY=${ONLY//goals/1,3,4,7,8,9}
ONLY=${ONLY//h2/9,10}
RESULTS_DIR=${RESULTS_DIR:-$BENCH/results}
SSH_CIPHER=${SSH_CIPHER:-aes128-gcm@openssh.com}
SSH_PROXY=${SSH_PROXY:-fdpass}
TUNNEL_INFLIGHT=${TUNNEL_INFLIGHT:-64}
KEEP_TMP=${KEEP_TMP:-0}

AKGW="$BUILD/akgateway"
AKTUN="$BUILD/aktunnel"
CERTS="$BUILD/certs"
BK="$BUILD/bench/akbench-backend"
WSLOAD="$BUILD/bench/akbench-ws"
IDLE="$BUILD/bench/akbench-idle"
GRPCBK="$BUILD/bench/akbench-grpc"
UTILPY="$BENCH/lib/util.py"
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
util() { $PY "$UTILPY" "$@"; }

START_TS=$(date +%s)
T=$(mktemp -d "${TMPDIR:-/tmp}/akbench.XXXXXX")
mkdir -p "$T/logs" "$T/out" "$T/ssh"
RES="$T/results.tsv"
META="$T/meta.tsv"
CMDS="$T/commands.txt"
: >"$RES"
: >"$META"
: >"$CMDS"
NS="akbench-$$"
NS_MADE=0
PIDS=""
FGPID=""
MADE_RUN_SSHD=0

cleanup() {
	local p i
	[ -n "$FGPID" ] && kill "$FGPID" 2>/dev/null
	for p in $PIDS; do kill "$p" 2>/dev/null; done
	for p in $PIDS; do
		i=0
		while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do
			sleep 0.1
			i=$((i + 1))
		done
		kill -9 "$p" 2>/dev/null
	done
	PIDS=""
	[ $NS_MADE = 1 ] && ip netns del "$NS" 2>/dev/null
	NS_MADE=0
	[ $MADE_RUN_SSHD = 1 ] && rmdir /run/sshd 2>/dev/null
	MADE_RUN_SSHD=0
	if [ "$KEEP_TMP" = 1 ]; then
		echo "bench: kept $T" >&2
	else
		rm -rf "$T"
	fi
}
trap cleanup EXIT
# fd 3 is the harness's stderr, also inside redirected functions.
exec 3>&2
trap 'echo "bench: interrupted" >&3; exit 130' INT TERM

elapsed() { echo $(($(date +%s) - START_TS)); }
say() { printf '[%4ss] %s\n' "$(elapsed)" "$*" >&3; }
die() {
	echo "bench: $*" >&2
	exit 1
}
meta() { printf '%s\t%s\n' "$1" "$2" >>"$META"; }
want() { case ",$ONLY," in *",$1,"*) return 0 ;; esac; return 1; }

# Quote a command line for the record (only when needed).
qcmd() {
	local a out=""
	for a in "$@"; do
		case "$a" in
		'' | *[!A-Za-z0-9_./:=@%,+-]*) a="'${a//\'/\'\\\'\'}'" ;;
		esac
		out="$out${out:+ }$a"
	done
	printf '%s' "$out"
}
logcmd() { qcmd "$@" >>"$CMDS"; echo >>"$CMDS"; }

# Keep one rendered copy of each configuration for the report.
save_conf() { # NAME FILE
	mkdir -p "$T/configs"
	[ -e "$T/configs/$1" ] || cp "$2" "$T/configs/$1"
}

# Run a load command in the background and wait for it, so that INT and
# TERM reach the harness at once (bash runs traps only between commands).
runfg() {
	"$@" 3>&- &
	FGPID=$!
	wait "$FGPID"
	local rc=$?
	FGPID=""
	return $rc
}

# spawn NAME CMD...: start in the background, log to $T/logs/NAME.log.
spawn() {
	local name=$1
	shift
	logcmd "$@"
	"$@" >"$T/logs/$name.log" 2>&1 3>&- &
	LAST_PID=$!
	PIDS="$PIDS $LAST_PID"
}

# Stop a process we started (TERM, then KILL after 5 s).
stop_pid() {
	local p=$1 i=0 q
	kill "$p" 2>/dev/null
	while kill -0 "$p" 2>/dev/null && [ $i -lt 100 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	kill -9 "$p" 2>/dev/null
	wait "$p" 2>/dev/null
	q=""
	for i in $PIDS; do [ "$i" = "$p" ] || q="$q $i"; done
	PIDS=$q
}
stop_all() {
	local p
	for p in $PIDS; do stop_pid "$p"; done
}

wait_port() { # PORT [NS]
	if [ -n "${2:-}" ]; then
		ip netns exec "$2" $PY "$UTILPY" waitport "$1" 10
	else
		util waitport "$1" 10
	fi
}

cpu_ticks() { # PIDS... ("-" when none)
	if [ $# = 0 ]; then echo -; else util cpu "$@"; fi
}
cpu_secs() { # BEFORE AFTER
	if [ "$1" = - ] || [ "$2" = - ]; then
		echo -
	else
		awk -v a="$1" -v b="$2" -v hz="$HZ" 'BEGIN { printf "%.3f", (b - a) / hz }'
	fi
}

# rec MODE W CELL METRIC CONTENDER ROUND VALUE P50 P99 WORK CPU STATUS [NOTE]
rec() {
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
	    "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$9" "${10}" "${11}" \
	    "${12}" "${13:-}" >>"$RES"
}

# ---------------------------------------------------------------- checks

[ "$(id -u)" = 0 ] || die "must run as root (network namespace, sshd, taskset)"
for t in wrk curl nginx haproxy ssh ssh-keygen ip taskset gnuplot openssl; do
	command -v "$t" >/dev/null 2>&1 || die "$t is missing: run make bench-deps"
done
[ -x /usr/sbin/sshd ] || die "/usr/sbin/sshd is missing: run make bench-deps"
[ -x "$AKGW" ] && [ -x "$AKTUN" ] || die "$AKGW or $AKTUN is missing: run make"
[ -f "$CERTS/server.crt" ] || die "$CERTS/server.crt is missing: run make certs"
for t in "$BK" "$WSLOAD" "$IDLE" "$GRPCBK"; do
	[ -x "$t" ] || die "$t is missing: run make bench-tools"
done
if want 9 || want 10; then
	command -v h2load >/dev/null 2>&1 || die "h2load is missing: run make bench-deps"
fi
if want 9; then
	command -v h2o >/dev/null 2>&1 || die "h2o is missing: run make bench-deps"
fi
NCPU=$(nproc)
[ "$NCPU" -ge 2 ] || die "needs at least 2 CPUs (found $NCPU)"
HZ=$(getconf CLK_TCK)

ulimit -n 200000 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null
NOFILE=$(ulimit -n)
[ "$NOFILE" = unlimited ] && NOFILE=1048576
MAXCONN=$(((NOFILE - 200) / 2))
[ $MAXCONN -gt 100000 ] && MAXCONN=100000
# Idle connections: the proxy holds two descriptors for each.
fit_idle() {
	local n=$1 cap=$(((NOFILE - 300) / 2))
	[ "$n" -gt "$cap" ] && n=$cap
	echo "$n"
}

# TLS: everything that goes through OpenSSL's configuration offers or
# accepts only TLS 1.3 with TLS_AES_128_GCM_SHA256.
util render "$BENCH/conf/openssl.cnf.in" "$T/openssl.cnf"
export OPENSSL_CONF="$T/openssl.cnf"
save_conf "openssl.cnf (OPENSSL_CONF)" "$T/openssl.cnf"
cat "$CERTS/server.crt" "$CERTS/server.key" >"$T/haproxy.pem"

# Does this akgateway have a workers: key?
printf 'workers: 2\nlisten:\n  - address: 127.0.0.1:1\n' >"$T/workers-probe.yaml"
if "$AKGW" -c "$T/workers-probe.yaml" --check >/dev/null 2>&1 ||
    "$AKGW" --help 2>&1 | grep -q 'workers'; then
	GW_WORKERS=1
else
	GW_WORKERS=0
fi

TUNNEL_TOKEN="akbench-tunnel-token-$$-0123456789"
truncate -s "$BULK_BYTES" "$T/zeros"

# ---------------------------------------------------------------- machine

host=$(hostname -s 2>/dev/null || hostname)
meta date "$(date -u '+%Y-%m-%d %H:%M:%S UTC')"
meta host "$host"
meta cpu "$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)"
meta cores "$NCPU ($(lscpu | sed -n 's/^Thread(s) per core: *//p') thread(s) per core)"
meta hypervisor "$(lscpu | sed -n 's/^Hypervisor vendor: *//p')"
meta memory "$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
meta kernel "$(uname -srm)"
meta os "$(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-?}")"
meta "ulimit -n" "$NOFILE"
meta "project commit" "$(cd "$TOP" && git rev-parse --short HEAD 2>/dev/null)$(cd "$TOP" && git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"

pkgver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo '?'; }
meta "v:akgateway" "$("$AKGW" --version 2>&1 | head -n 1)$([ $GW_WORKERS = 1 ] && echo ' (workers: key supported)' || echo ' (single event loop: no workers: key)')"
meta "v:aktunnel" "$("$AKTUN" --version 2>&1 | head -n 1)"
meta "v:nginx" "$(nginx -v 2>&1 | head -n 1) (Debian nginx-light $(pkgver nginx-light))"
meta "v:haproxy" "$(haproxy -v 2>&1 | head -n 1)"
meta "v:openssh" "$(ssh -V 2>&1) (openssh-server $(pkgver openssh-server))"
meta "v:wrk" "wrk $(pkgver wrk)"
meta "v:curl" "$(curl --version | head -n 1)"
meta "v:h2load" "$(h2load --version 2>/dev/null | head -n 1) (workloads 9 and 10)"
meta "v:h2o" "$(h2o --version 2>/dev/null | head -n 1) (Debian h2o $(pkgver h2o); workload 9)"
meta "v:openssl" "$(openssl version)"
meta "v:libevent" "libevent $(pkgver libevent-2.1-7)"
meta "v:gnuplot" "$(gnuplot --version 2>&1 | head -n 1)"
for t in "$BK" "$WSLOAD" "$IDLE" "$GRPCBK"; do
	v=$("$t" --version 2>/dev/null | head -n 1)
	[ -n "$v" ] || v="sha256 $(sha256sum "$t" | cut -c1-12)"
	meta "v:$(basename "$t")" "$v"
done
[ "$SSH_PROXY" = socat ] && meta "v:socat" "$(socat -V 2>/dev/null | sed -n 's/^socat version/socat/p' | head -n 1)"
meta "v:python3" "$($PY --version 2>&1) (harness helpers only)"
meta "knob:QUICK" "$QUICK"
meta "knob:RUNS" "$RUNS"
meta "knob:DURATION" "${DURATION}s (warm-up ${WARMUP}s)"
meta "knob:SIDE_DURATION" "${SIDE_DURATION}s (workloads 2 and 5)"
meta "knob:BULK_BYTES" "$BULK_BYTES"
meta "knob:MODES" "$MODES"
meta "knob:ONLY" "$ONLY"
meta "knob:SSH_CIPHER" "$SSH_CIPHER"
meta "knob:SSH_PROXY" "$SSH_PROXY"
meta "knob:TUNNEL_INFLIGHT" "$TUNNEL_INFLIGHT"

# ---------------------------------------------------------------- modes

# set_mode percore|both: pinning prefixes, worker counts.
set_mode() {
	MODE=$1
	if [ "$MODE" = percore ]; then
		PINP=(taskset -c 0)
		PINL=(taskset -c 1)
		WORKERS=1
		BTHREADS=1
	else
		PINP=()
		PINL=()
		WORKERS=2
		BTHREADS=2
	fi
}

# ---------------------------------------------------------------- contenders


declare -A BASE TBASE ROOTS

start_backend() { # sets BK_PORT
	BK_PORT=$(util ports 1)
	spawn backend "${PINL[@]}" "$BK" --listen "127.0.0.1:$BK_PORT" --threads "$BTHREADS"
	wait_port "$BK_PORT" || die "akbench-backend did not start: $(tail -n 5 "$T/logs/backend.log")"
	BASE[direct]="http://127.0.0.1:$BK_PORT"
	ROOTS[direct]=""
}

# gw_config OUT PORT TLSPORT SANDBOXES_FILE [LOG_LINE]
gw_config() {
	local wl=""
	[ $GW_WORKERS = 1 ] && wl="workers: $WORKERS"
	util render "$BENCH/conf/akgateway.yaml.in" "$1" WORKERS_LINE="$wl" \
	    LOG_LINE="${5:-"log: {level: warn}"}" \
	    PORT="$2" TLS_PORT="$3" CERT="$CERTS/server.crt" KEY="$CERTS/server.key" \
	    MAXCONN="$MAXCONN" BACKEND_PORT="$BK_PORT" SANDBOXES="@$4"
	"$AKGW" -c "$1" --check >"$T/logs/gwcheck.log" 2>&1 ||
	    die "akgateway refused its config: $(cat "$T/logs/gwcheck.log")"
}

# start_akgateway [SANDBOXES_FILE [NAME LOG_LINE CONF_TITLE]]: NAME is the
# contender (akgateway), LOG_LINE the config's log: line (level warn).
start_akgateway() {
	local p tp sbf=${1:-/dev/null} name=${2:-akgateway} conf
	conf="$T/$name.yaml"
	read -r p tp <<<"$(util ports 2)"
	gw_config "$conf" "$p" "$tp" "$sbf" "${3:-}"
	spawn "$name" env YR_TUNNEL_MAX_BODY_SIZE=1073741824 \
	    YR_TUNNEL_MAX_INFLIGHT="$TUNNEL_INFLIGHT" "${PINP[@]}" "$AKGW" -c "$conf"
	GW_PID=$LAST_PID
	if [ -n "${4:-}" ]; then
		save_conf "akgateway.yaml ($4)" "$conf"
	elif [ "$sbf" = /dev/null ]; then
		save_conf "akgateway.yaml ($MODE)" "$conf"
	elif [ "$sbf" = "$T/tunnel-sandboxes.yaml" ]; then
		save_conf "akgateway.yaml (tunnels, $MODE)" "$conf"
	fi
	wait_port "$p" && wait_port "$tp" || die "akgateway did not start: $(tail -n 5 "$T/logs/$name.log")"
	GW_PORT=$p
	GW_TLS_PORT=$tp
	BASE[$name]="http://127.0.0.1:$p/bench/$BK_PORT"
	TBASE[$name]="https://127.0.0.1:$tp/bench/$BK_PORT"
	ROOTS[$name]=$GW_PID
}

# start_nginx [NAME ACCESS_LOG CONF_TITLE]: NAME is the contender (nginx),
# ACCESS_LOG the access_log directive's arguments (off).
start_nginx() {
	local p tp name=${1:-nginx} dir
	dir="$T/$name"
	read -r p tp <<<"$(util ports 2)"
	mkdir -p "$dir"
	util render "$BENCH/conf/nginx.conf.in" "$T/$name.conf" WORKERS="$WORKERS" \
	    NOFILE="$NOFILE" WORKER_CONNECTIONS="$((MAXCONN * 2 * 17 / 16 / WORKERS + 1000))" \
	    TMP="$T" DIR="$dir" NAME="$name" ACCESS_LOG="${2:-off}" BACKEND_PORT="$BK_PORT" \
	    CERT="$CERTS/server.crt" KEY="$CERTS/server.key" PORT="$p" TLS_PORT="$tp" \
	    H2="${NGX_H2:-}" GRPC="${NGX_GRPC:-}"
	# worker_connections leaves nginx the 1/16 it keeps free (past that it
	# closes idle connections); descriptors are bounded by ulimit -n anyway.
	save_conf "nginx.conf (${3:-$MODE})" "$T/$name.conf"
	spawn "$name" "${PINP[@]}" nginx -e "$T/logs/$name-error.log" -c "$T/$name.conf" -p "$dir/"
	wait_port "$p" && wait_port "$tp" || die "nginx did not start: $(tail -n 5 "$T/logs/$name.log" "$T/logs/$name-error.log")"
	BASE[$name]="http://127.0.0.1:$p"
	TBASE[$name]="https://127.0.0.1:$tp"
	ROOTS[$name]=$LAST_PID
}

start_haproxy() {
	local p tp
	read -r p tp <<<"$(util ports 2)"
	util render "$BENCH/conf/haproxy.cfg.in" "$T/haproxy.cfg" WORKERS="$WORKERS" \
	    MAXCONN="$MAXCONN" TMP="$T" BACKEND_PORT="$BK_PORT" PORT="$p" TLS_PORT="$tp" \
	    H2C="${HAP_H2C:-}" ALPN="${HAP_ALPN:-http/1.1}" GRPC="${HAP_GRPC:-}"
	save_conf "haproxy.cfg (${1:-$MODE})" "$T/haproxy.cfg"
	spawn haproxy "${PINP[@]}" haproxy -db -f "$T/haproxy.cfg"
	wait_port "$p" && wait_port "$tp" || die "haproxy did not start: $(tail -n 5 "$T/logs/haproxy.log")"
	BASE[haproxy]="http://127.0.0.1:$p"
	TBASE[haproxy]="https://127.0.0.1:$tp"
	ROOTS[haproxy]=$LAST_PID
}

start_http_contenders() {
	start_backend
	start_akgateway
	start_nginx
	start_haproxy
}

# start_h2o: h2o as an h2 (TLS and h2c) to HTTP/1.1 reverse proxy, for
# workload 9 only.
start_h2o() {
	local p tp
	read -r p tp <<<"$(util ports 2)"
	util render "$BENCH/conf/h2o.conf.in" "$T/h2o.conf" WORKERS="$WORKERS" \
	    MAXCONN="$MAXCONN" TMP="$T" BACKEND_PORT="$BK_PORT" PORT="$p" TLS_PORT="$tp" \
	    CERT="$CERTS/server.crt" KEY="$CERTS/server.key"
	save_conf "h2o.conf ($MODE)" "$T/h2o.conf"
	spawn h2o "${PINP[@]}" h2o -c "$T/h2o.conf"
	wait_port "$p" && wait_port "$tp" || die "h2o did not start: $(tail -n 5 "$T/logs/h2o.log" "$T/logs/h2o-error.log" 2>/dev/null)"
	BASE[h2o]="http://127.0.0.1:$p"
	TBASE[h2o]="https://127.0.0.1:$tp"
	ROOTS[h2o]=$LAST_PID
}

# Check what each TLS listener negotiates (recorded in the results), once
# for each contender: tls_probe [CONTENDER...].
declare -A TLS_PROBED
tls_probe() {
	local c port out v1 v2 v3
	[ $# = 0 ] && set -- akgateway nginx haproxy
	for c in "$@"; do
		[ -n "${TLS_PROBED[$c]:-}" ] && continue
		TLS_PROBED[$c]=1
		port=${TBASE[$c]#https://127.0.0.1:}
		port=${port%%/*}
		out=$(echo | timeout 5 openssl s_client -connect "127.0.0.1:$port" 2>/dev/null </dev/null)
		v1=$(printf '%s\n' "$out" | sed -n 's/^New, \(.*\)$/\1/p' | head -n 1)
		if echo | OPENSSL_CONF=/dev/null timeout 5 openssl s_client -connect "127.0.0.1:$port" \
		    -tls1_3 -ciphersuites TLS_AES_256_GCM_SHA384 </dev/null 2>/dev/null | grep -q '^New, TLS'; then
			v2="accepted"
		else
			v2="refused"
		fi
		if echo | OPENSSL_CONF=/dev/null timeout 5 openssl s_client -connect "127.0.0.1:$port" \
		    -tls1_2 </dev/null 2>/dev/null | grep -q '^New, TLS'; then
			v3="accepted"
		else
			v3="refused"
		fi
		meta "tls:$c" "load tools negotiate: ${v1:-?}; a client offering only TLS_AES_256_GCM_SHA384: $v2; a TLS 1.2 client: $v3"
	done
}

# ---------------------------------------------------------------- load runs

# Pin and optionally enter the namespace: LOADPFX is set per workload.
LOADNS=()

# wrk_run MODE W CELL METRIC C ROUND URL CONNS [wrk args...]
wrk_run() {
	local mode=$1 w=$2 cell=$3 metric=$4 c=$5 round=$6 url=$7 conns=$8
	shift 8
	local out="$T/out/wrk.txt" b a cpu parsed req secs rps p50 p99 prob status
	local cmd=("${LOADNS[@]}" "${PINL[@]}" wrk -t1 -c"$conns" -d"${DURATION}s" --timeout 10s --latency "$@" "$url")
	logcmd "${cmd[@]}"
	b=$(cpu_ticks ${ROOTS[$c]})
	runfg timeout $((DURATION + 30)) "${cmd[@]}" >"$out" 2>&1
	a=$(cpu_ticks ${ROOTS[$c]})
	cpu=$(cpu_secs "$b" "$a")
	parsed=$(util wrk "$out")
	IFS=$'\t' read -r req secs rps p50 p99 prob <<<"$parsed"
	status=ok
	[ -n "$prob" ] && status="FAILED($prob)"
	# A workload's own check of the run (WRK_CHECK C REQUESTS sets
	# CK_STATUS, empty when good, and CK_NOTE).
	CK_STATUS=""
	CK_NOTE=""
	[ -n "${WRK_CHECK:-}" ] && "$WRK_CHECK" "$c" "${req:-0}"
	[ "$status" = ok ] && [ -n "$CK_STATUS" ] && status=$CK_STATUS
	rec "$mode" "$w" "$cell" "$metric" "$c" "$round" "$rps" "$p50" "$p99" "$req" "$cpu" "$status" "$CK_NOTE"
	say "$w $mode $cell $c #$round: $rps $metric p50=${p50}us p99=${p99}us cpu=${cpu}s $status${CK_NOTE:+ ($CK_NOTE)}"
	[ "$status" = ok ] || { echo "--- $c $cell" >>"$T/failures.txt"; cat "$out" >>"$T/failures.txt"; }
}

wrk_warm() { # URL CONNS [wrk args]
	local url=$1 conns=$2
	shift 2
	logcmd "${LOADNS[@]}" "${PINL[@]}" wrk -t1 -c"$conns" -d"${WARMUP}s" --timeout 10s "$@" "$url"
	runfg timeout $((WARMUP + 20)) "${LOADNS[@]}" "${PINL[@]}" wrk -t1 -c"$conns" -d"${WARMUP}s" --timeout 10s "$@" "$url" >/dev/null 2>&1
}

# curl_run MODE W CELL C ROUND DIR URL [curl args]: DIR is down or up
curl_run() {
	local mode=$1 w=$2 cell=$3 c=$4 round=$5 dir=$6 url=$7
	shift 7
	local out="$T/out/curl.txt" body="$T/out/curl.body" b a cpu code size speed ttot hver status mbs
	local cmd
	if [ "$dir" = down ]; then
		cmd=("${LOADNS[@]}" "${PINL[@]}" curl -sS --max-time 600 -H 'Expect:' "$@" -o /dev/null
		    -w '%{http_code} %{size_download} %{speed_download} %{time_total} %{http_version}\n' "$url")
	else
		cmd=("${LOADNS[@]}" "${PINL[@]}" curl -sS --max-time 600 -H 'Expect:' "$@" -T "$T/zeros" -o "$body"
		    -w '%{http_code} %{size_upload} %{speed_upload} %{time_total} %{http_version}\n' "$url")
	fi
	logcmd "${cmd[@]}"
	rm -f "$body"
	b=$(cpu_ticks ${ROOTS[$c]})
	runfg timeout 660 "${cmd[@]}" >"$out" 2>&1
	a=$(cpu_ticks ${ROOTS[$c]})
	cpu=$(cpu_secs "$b" "$a")
	read -r code size speed ttot hver <<<"$(tail -n 1 "$out")"
	status=ok
	# CURL_HTTP_VERSION (workload 9): the HTTP version the run must have used.
	if [ -n "${CURL_HTTP_VERSION:-}" ] && [ "${hver:-}" != "$CURL_HTTP_VERSION" ]; then
		status="FAILED(HTTP version ${hver:-?}, not $CURL_HTTP_VERSION; HTTP ${code:-?})"
	elif [ "${code:-}" != 200 ]; then
		status="FAILED(HTTP ${code:-?}: $(head -c 100 "$out" | tr '\n\t' '  '))"
	elif [ "${size:-}" != "$BULK_BYTES" ]; then
		status="FAILED(moved ${size:-?} of $BULK_BYTES bytes)"
	elif [ "$dir" = up ] && [ "$(tr -d ' \r\n' <"$body" 2>/dev/null)" != "$BULK_BYTES" ]; then
		status="FAILED(backend counted $(head -c 40 "$body" | tr -d '\r\n'))"
	fi
	mbs=$(awk -v s="${speed:-0}" 'BEGIN { printf "%.1f", s / 1e6 }')
	rec "$mode" "$w" "$cell" "MB/s" "$c" "$round" "$mbs" - - "${size:-0}" "$cpu" "$status"
	say "$w $mode $cell $c #$round: $mbs MB/s cpu=${cpu}s $status"
	[ "$status" = ok ] || { echo "--- $c $cell" >>"$T/failures.txt"; cat "$out" >>"$T/failures.txt"; }
}

curl_warm() { # URL [curl args]
	local url=$1
	shift
	logcmd "${LOADNS[@]}" "${PINL[@]}" curl -sS --max-time 30 "$@" -o /dev/null "${url%/size/*}/size/16777216"
	runfg timeout 60 "${LOADNS[@]}" "${PINL[@]}" curl -sS --max-time 30 "$@" -o /dev/null "${url%/size/*}/size/16777216" 2>/dev/null
}

# ws_run MODE W CELL METRIC C ROUND URL CONNS SIZE
ws_run() {
	local mode=$1 w=$2 cell=$3 metric=$4 c=$5 round=$6 url=$7 conns=$8 size=$9
	local out="$T/out/ws.txt" b a cpu msgs secs mps mbps p50 p99 prob status val work
	local cmd=("${PINL[@]}" "$WSLOAD" --url "$url" --connections "$conns" --size "$size" --duration "$DURATION")
	logcmd "${cmd[@]}"
	b=$(cpu_ticks ${ROOTS[$c]})
	runfg timeout $((DURATION + 30)) "${cmd[@]}" >"$out" 2>&1
	a=$(cpu_ticks ${ROOTS[$c]})
	cpu=$(cpu_secs "$b" "$a")
	IFS=$'\t' read -r msgs secs mps mbps p50 p99 prob <<<"$(util ws "$out")"
	status=ok
	[ -n "$prob" ] && status="FAILED($prob)"
	if [ "$metric" = "MB/s" ]; then
		val=$mbps
		work=$(awk -v m="${msgs:-0}" -v s="$size" 'BEGIN { printf "%.0f", m * s }')
	else
		val=$mps
		work=$msgs
	fi
	rec "$mode" "$w" "$cell" "$metric" "$c" "$round" "$val" "$p50" "$p99" "$work" "$cpu" "$status"
	say "$w $mode $cell $c #$round: $val $metric cpu=${cpu}s $status"
	[ "$status" = ok ] || { echo "--- $c $cell" >>"$T/failures.txt"; cat "$out" >>"$T/failures.txt"; }
}

ws_warm() { # URL CONNS SIZE
	logcmd "${PINL[@]}" "$WSLOAD" --url "$1" --connections "$2" --size "$3" --duration "$WARMUP"
	runfg timeout $((WARMUP + 20)) "${PINL[@]}" "$WSLOAD" --url "$1" --connections "$2" --size "$3" --duration "$WARMUP" >/dev/null 2>&1
}

# h2_run MODE W CELL C ROUND URL [h2load args...]: h2load -c H2_CONNS -m
# H2_STREAMS; requests per second, the mean request time in the note.  Any
# failed, errored or timed-out request, any answer other than 2xx, or no
# request at all fails the run.  h2load 1.52's timed mode (-D) sometimes
# never stops over TLS (both it and the proxy keep going at full speed), so
# a run asks for a number of requests instead (-n): what the warm-up's rate
# does in DURATION seconds.
H2_CONNS=64
H2_STREAMS=100
declare -A H2_RATE
h2_run() {
	local mode=$1 w=$2 cell=$3 c=$4 round=$5 url=$6
	shift 6
	local out="$T/out/h2load.txt" b a cpu req secs rps mean prob status n
	n=$(awk -v r="${H2_RATE[$c|$cell]:-20000}" -v d="$DURATION" -v c="$H2_CONNS" \
	    -v m="$H2_STREAMS" 'BEGIN { n = int(r * d / c + 1) * c; if (n < c * m) n = c * m; print n }')
	local cmd=("${PINL[@]}" h2load -t1 -c"$H2_CONNS" -m"$H2_STREAMS" -n"$n" "$@" "$url")
	logcmd "${cmd[@]}"
	b=$(cpu_ticks ${ROOTS[$c]})
	runfg timeout $((DURATION * 3 + 30)) "${cmd[@]}" >"$out" 2>&1
	a=$(cpu_ticks ${ROOTS[$c]})
	cpu=$(cpu_secs "$b" "$a")
	IFS=$'\t' read -r req secs rps mean prob <<<"$(util h2load "$out")"
	status=ok
	[ -n "$prob" ] && status="FAILED($prob)"
	[ "$status" = ok ] && [ "$req" != "$n" ] && status="FAILED($req of $n requests done)"
	rec "$mode" "$w" "$cell" "req/s" "$c" "$round" "$rps" - - "$req" "$cpu" "$status" "${secs}s, mean request ${mean}us"
	say "$w $mode $cell $c #$round: $rps req/s in ${secs}s mean=${mean}us cpu=${cpu}s $status"
	[ "$status" = ok ] || { echo "--- $c $cell"; cat "$out"; } >>"$T/failures.txt"
}

# h2_warm C CELL URL [h2load args]: a warm-up of 2 x WARMUP x 6400
# requests, whose rate sizes the runs of C in CELL.
h2_warm() {
	local c=$1 cell=$2 url=$3 n out="$T/out/h2warm.txt" rps
	shift 3
	n=$((H2_CONNS * H2_STREAMS * 2 * (WARMUP > 0 ? WARMUP : 1)))
	logcmd "${PINL[@]}" h2load -t1 -c"$H2_CONNS" -m"$H2_STREAMS" -n"$n" "$@" "$url"
	runfg timeout $((WARMUP * 5 + 30)) "${PINL[@]}" h2load -t1 -c"$H2_CONNS" -m"$H2_STREAMS" -n"$n" "$@" "$url" >"$out" 2>&1
	rps=$(util h2load "$out" | cut -f 3)
	case $rps in '' | - | 0) ;; *) H2_RATE[$c|$cell]=$rps ;; esac
}

na() { # MODE W CELL METRIC C REASON
	rec "$1" "$2" "$3" "$4" "$5" - - - - - - "n/a($6)"
}

# ---------------------------------------------------------------- workloads

HTTP_CS="direct akgateway nginx haproxy"

hsize() {
	case $1 in
	0) echo "0 B" ;;
	*) if [ $(($1 % 1073741824)) = 0 ]; then echo "$(($1 / 1073741824)) GiB"; elif [ $(($1 % 1048576)) = 0 ]; then echo "$(($1 / 1048576)) MiB"; elif [ $(($1 % 1024)) = 0 ]; then echo "$(($1 / 1024)) KiB"; else echo "$1 B"; fi ;;
	esac
}

w1() {
	local size conns cell round c
	say "workload 1 ($MODE): HTTP/1.1 keep-alive"
	start_http_contenders
	for size in $W1_SIZES; do
		for conns in $W1_CONNS; do
			cell="$(hsize "$size") x $conns conns"
			for round in $(seq 1 "$RUNS"); do
				for c in $HTTP_CS; do
					[ "$round" = 1 ] && wrk_warm "${BASE[$c]}/size/$size" "$conns"
					wrk_run "$MODE" 1 "$cell" "req/s" "$c" "$round" "${BASE[$c]}/size/$size" "$conns"
				done
			done
		done
	done
	stop_all
}

w2() {
	local cell round c DURATION=$SIDE_DURATION
	say "workload 2 ($MODE): a new connection per request"
	start_http_contenders
	cell="0 B x 64 conns, Connection: close"
	for round in $(seq 1 "$RUNS"); do
		for c in $HTTP_CS; do
			[ "$round" = 1 ] && wrk_warm "${BASE[$c]}/size/0" 64 -H 'Connection: close'
			wrk_run "$MODE" 2 "$cell" "conn/s" "$c" "$round" "${BASE[$c]}/size/0" 64 -H 'Connection: close'
		done
	done
	stop_all
}

w3() {
	local round c hs
	hs=$(hsize "$BULK_BYTES")
	say "workload 3 ($MODE): bulk $hs download and upload"
	start_http_contenders
	for round in $(seq 1 "$RUNS"); do
		for c in $HTTP_CS; do
			[ "$round" = 1 ] && curl_warm "${BASE[$c]}/size/0"
			curl_run "$MODE" 3 "$hs download" "$c" "$round" down "${BASE[$c]}/size/$BULK_BYTES"
		done
	done
	for round in $(seq 1 "$RUNS"); do
		for c in $HTTP_CS; do
			curl_run "$MODE" 3 "$hs upload" "$c" "$round" up "${BASE[$c]}/upload"
		done
	done
	stop_all
}

TLS_CURL=(--tlsv1.3 --tls13-ciphers TLS_AES_128_GCM_SHA256 --cacert "$CERTS/ca.crt")

w4() {
	local round c hs cell
	hs=$(hsize "$BULK_BYTES")
	say "workload 4 ($MODE): TLS terminated by the proxy"
	start_http_contenders
	tls_probe
	cell="TLS 1 KiB x 64 conns"
	na "$MODE" 4 "$cell" "req/s" direct "no TLS"
	for round in $(seq 1 "$RUNS"); do
		for c in akgateway nginx haproxy; do
			[ "$round" = 1 ] && wrk_warm "${TBASE[$c]}/size/1024" 64
			wrk_run "$MODE" 4 "$cell" "req/s" "$c" "$round" "${TBASE[$c]}/size/1024" 64
		done
	done
	na "$MODE" 4 "TLS $hs download" "MB/s" direct "no TLS"
	na "$MODE" 4 "TLS $hs upload" "MB/s" direct "no TLS"
	for round in $(seq 1 "$RUNS"); do
		for c in akgateway nginx haproxy; do
			[ "$round" = 1 ] && curl_warm "${TBASE[$c]}/size/0" "${TLS_CURL[@]}"
			curl_run "$MODE" 4 "TLS $hs download" "$c" "$round" down "${TBASE[$c]}/size/$BULK_BYTES" "${TLS_CURL[@]}"
		done
	done
	for round in $(seq 1 "$RUNS"); do
		for c in akgateway nginx haproxy; do
			curl_run "$MODE" 4 "TLS $hs upload" "$c" "$round" up "${TBASE[$c]}/upload" "${TLS_CURL[@]}"
		done
	done
	stop_all
}

wsurl() { local b=${BASE[$1]}; echo "ws://${b#http://}/ws"; }

w5() {
	local round c DURATION=$SIDE_DURATION
	say "workload 5 ($MODE): WebSocket echo"
	start_http_contenders
	for round in $(seq 1 "$RUNS"); do
		for c in $HTTP_CS; do
			[ "$round" = 1 ] && ws_warm "$(wsurl "$c")" 64 64
			ws_run "$MODE" 5 "WS 64 B x 64 conns" "msg/s" "$c" "$round" "$(wsurl "$c")" 64 64
		done
	done
	for round in $(seq 1 "$RUNS"); do
		for c in $HTTP_CS; do
			[ "$round" = 1 ] && ws_warm "$(wsurl "$c")" 8 65536
			ws_run "$MODE" 5 "WS 64 KiB x 8 conns" "MB/s" "$c" "$round" "$(wsurl "$c")" 8 65536
		done
	done
	stop_all
}

# ---------------------------------------------------------------- HTTP/2

H2_PROXIES="akgateway nginx h2o haproxy"

# gw_h2_probe: does this akgateway answer h2?  One request with prior
# knowledge on the plain listener, one with ALPN h2 on the TLS listener.
# GW_H2[h2c] and GW_H2[tls] are empty when it does, else why not (its
# cells are then n/a rather than failed).
declare -A GW_H2
gw_h2_probe() {
	local r1 r2
	r1=$(curl -s --http2-prior-knowledge --max-time 5 -o /dev/null \
	    -w '%{http_code} %{http_version}' "${BASE[akgateway]}/size/0" 2>/dev/null)
	r2=$(curl -s --http2 "${TLS_CURL[@]}" --max-time 5 -o /dev/null \
	    -w '%{http_code} %{http_version}' "${TBASE[akgateway]}/size/0" 2>/dev/null)
	GW_H2[h2c]=""
	GW_H2[tls]=""
	[ "$r1" = "200 2" ] || GW_H2[h2c]="gateway h2 not built"
	if [ "$r2" != "200 2" ]; then
		if [ -n "${GW_H2[h2c]}" ]; then
			GW_H2[tls]="gateway h2 not built"
		else
			GW_H2[tls]="gateway TLS listener does not offer ALPN h2"
		fi
	fi
	meta "h2:akgateway" "curl --http2-prior-knowledge: ${r1:-no answer}; curl --http2 over TLS: ${r2:-no answer} (HTTP status, HTTP version)"
}

# h2_skip C PROTO: why C has no PROTO (h2c or tls) cells, or nothing.
h2_skip() {
	[ "$1" = akgateway ] && printf '%s' "${GW_H2[$2]}"
	return 0
}

w9() {
	local size cell round c hs proto url why pre
	local -a args
	hs=$(hsize "$BULK_BYTES")
	say "workload 9 ($MODE): HTTP/2 to the proxy (h2load; TLS with ALPN h2, h2c)"
	# Each proxy gets a backend (and port) of its own: with 6400 requests
	# in flight each one keeps about 6400 connections to it, and all of
	# them to one port would run out of ephemeral ports (connect(2) then
	# burns the proxy's CPU looking for one).
	start_backend
	start_akgateway
	start_backend
	NGX_H2="http2 " start_nginx nginx off "h2, $MODE"
	start_backend
	start_h2o
	start_backend
	HAP_H2C=" proto h2" HAP_ALPN="h2,http/1.1" start_haproxy "h2, $MODE"
	gw_h2_probe
	tls_probe $H2_PROXIES
	for proto in h2c tls; do
		if [ $proto = tls ]; then
			pre="h2 TLS"
			args=(--npn-list h2)
		else
			pre="h2c"
			args=()
		fi
		for size in $W9_SIZES; do
			cell="$pre $(hsize "$size") x $H2_CONNS conns x $H2_STREAMS streams"
			na "$MODE" 9 "$cell" "req/s" direct "akbench-backend speaks HTTP/1.1 only"
			for round in $(seq 1 "$RUNS"); do
				for c in $H2_PROXIES; do
					why=$(h2_skip "$c" "$proto")
					if [ -n "$why" ]; then
						[ "$round" = 1 ] && na "$MODE" 9 "$cell" "req/s" "$c" "$why"
						continue
					fi
					if [ $proto = tls ]; then url=${TBASE[$c]}; else url=${BASE[$c]}; fi
					[ "$round" = 1 ] && h2_warm "$c" "$cell" "$url/size/$size" "${args[@]}"
					h2_run "$MODE" 9 "$cell" "$c" "$round" "$url/size/$size" "${args[@]}"
				done
			done
		done
	done
	# Bulk: one large body over h2c, over h2 on TLS and, for the goal's
	# HTTP/1.1 reference on the same listener, over HTTP/1.1 on TLS.
	for cell in "h2c $hs download" "h2 TLS $hs download" "HTTP/1.1 TLS $hs download"; do
		na "$MODE" 9 "$cell" "MB/s" direct "akbench-backend speaks HTTP/1.1 only"
		for round in $(seq 1 "$RUNS"); do
			for c in $H2_PROXIES; do
				case $cell in
				h2c*) proto=h2c url=${BASE[$c]} args=(--http2-prior-knowledge) hver=2 ;;
				h2*) proto=tls url=${TBASE[$c]} args=(--http2 "${TLS_CURL[@]}") hver=2 ;;
				*) proto=h1 url=${TBASE[$c]} args=(--http1.1 "${TLS_CURL[@]}") hver=1.1 ;;
				esac
				why=""
				[ $proto = h1 ] || why=$(h2_skip "$c" "$proto")
				if [ -n "$why" ]; then
					[ "$round" = 1 ] && na "$MODE" 9 "$cell" "MB/s" "$c" "$why"
					continue
				fi
				[ "$round" = 1 ] && curl_warm "$url/size/0" "${args[@]}"
				CURL_HTTP_VERSION=$hver curl_run "$MODE" 9 "$cell" "$c" "$round" down \
				    "$url/size/$BULK_BYTES" "${args[@]}"
			done
		done
	done
	stop_all
}

# ---------------------------------------------------------------- gRPC

GRPC_PATH=/akbench.Echo/Unary
# One gRPC message: not compressed, 12 bytes of protobuf (field 1, a
# 10-byte string).
grpc_request() { printf '\000\000\000\000\014\012\012hello grpc' >"$1"; }

# grpc_check C URL: one call with nghttp must end in the trailer
# grpc-status: 0 (h2load counts only HTTP statuses).  Sets GRPC_BAD.
grpc_check() {
	local out="$T/out/grpc-check.txt"
	logcmd nghttp -v -d "$T/grpc-req.bin" -H 'content-type: application/grpc' -H 'te: trailers' "$2"
	timeout 10 nghttp -v -d "$T/grpc-req.bin" -H 'content-type: application/grpc' \
	    -H 'te: trailers' "$2" >"$out" 2>&1
	GRPC_BAD=""
	if ! grep -aq 'recv (stream_id=[0-9]*) grpc-status: 0' "$out"; then
		GRPC_BAD="no trailer grpc-status: 0 from one call with nghttp"
		{ echo "--- $1 gRPC check"; cat -v "$out"; } >>"$T/failures.txt"
	fi
}

# Workload 10: gRPC unary calls (h2c with prior knowledge) through the
# proxies to akbench-grpc, HTTP/2 both ways (akgateway: a port with
# protocol: h2c, by its path form).  h2o 2.2 proxies to HTTP/1.1 only.
w10() {
	local round c cell gp gn gh sbf="$T/grpc-sandboxes.yaml"
	local -a args
	say "workload 10 ($MODE): gRPC unary (h2load, h2c)"
	start_backend
	read -r gp gn gh <<<"$(util ports 3)"
	spawn grpc "${PINL[@]}" "$GRPCBK" --listen "127.0.0.1:$gp" --threads "$BTHREADS"
	wait_port "$gp" || die "akbench-grpc did not start: $(tail -n 5 "$T/logs/grpc.log")"
	cat >"$sbf" <<EOF
  - id: grpc
    address: 127.0.0.1
    ports:
      - {port: $gp, protocol: h2c}
EOF
	start_akgateway "$sbf" akgateway "" "gRPC, $MODE"
	NGX_GRPC="
    # Workload 10: gRPC (h2c) to akbench-grpc, HTTP/2 both ways.
    upstream grpc_backend {
        server 127.0.0.1:$gp;
        keepalive 8192;
        keepalive_requests 100000000;
        keepalive_timeout 300s;
    }

    server {
        listen 127.0.0.1:$gn http2 backlog=4096;

        location / {
            grpc_pass grpc://grpc_backend;
            grpc_read_timeout 3600s;
            grpc_send_timeout 3600s;
        }
    }" start_nginx nginx off "gRPC, $MODE"
	local HAP_GRPC="
# Workload 10: gRPC (h2c) to akbench-grpc, HTTP/2 both ways.
frontend grpc
    bind 127.0.0.1:$gh backlog 4096 proto h2
    default_backend grpc_be

backend grpc_be
    server grpc 127.0.0.1:$gp proto h2"
	start_haproxy "gRPC, $MODE"
	wait_port "$gn" && wait_port "$gh" || die "the gRPC listeners of nginx or HAProxy did not start"
	BASE[direct]="http://127.0.0.1:$gp"
	BASE[akgateway]="http://127.0.0.1:$GW_PORT/grpc/$gp"
	BASE[nginx]="http://127.0.0.1:$gn"
	BASE[haproxy]="http://127.0.0.1:$gh"
	ROOTS[direct]=""
	grpc_request "$T/grpc-req.bin"
	args=(-d "$T/grpc-req.bin" -H 'content-type: application/grpc' -H 'te: trailers')
	cell="gRPC unary 12 B message x $H2_CONNS conns x $H2_STREAMS streams"
	na "$MODE" 10 "$cell" "req/s" h2o "h2o 2.2 proxies to HTTP/1.1 only"
	declare -A bad
	for c in direct akgateway nginx haproxy; do
		grpc_check "$c" "${BASE[$c]}$GRPC_PATH"
		bad[$c]=$GRPC_BAD
	done
	for round in $(seq 1 "$RUNS"); do
		for c in direct akgateway nginx haproxy; do
			if [ -n "${bad[$c]}" ]; then
				rec "$MODE" 10 "$cell" "req/s" "$c" "$round" - - - - - "FAILED(${bad[$c]})"
				continue
			fi
			[ "$round" = 1 ] && h2_warm "$c" "$cell" "${BASE[$c]}$GRPC_PATH" "${args[@]}"
			h2_run "$MODE" 10 "$cell" "$c" "$round" "${BASE[$c]}$GRPC_PATH" "${args[@]}"
		done
	done
	stop_all
}

# ---------------------------------------------------------------- tunnels

make_ns() {
	[ $NS_MADE = 1 ] && return
	logcmd ip netns add "$NS"
	ip netns add "$NS" || die "cannot create network namespace $NS"
	NS_MADE=1
	logcmd ip -n "$NS" link set lo up
	ip -n "$NS" link set lo up || die "cannot bring up lo in $NS"
}

ssh_setup() {
	[ -f "$T/ssh/id_ed25519" ] && return
	logcmd ssh-keygen -q -t ed25519 -N '' -C akbench-host -f "$T/ssh/host_ed25519"
	ssh-keygen -q -t ed25519 -N '' -C akbench-host -f "$T/ssh/host_ed25519" || die "ssh-keygen failed"
	logcmd ssh-keygen -q -t ed25519 -N '' -C akbench-user -f "$T/ssh/id_ed25519"
	ssh-keygen -q -t ed25519 -N '' -C akbench-user -f "$T/ssh/id_ed25519" || die "ssh-keygen failed"
	cp "$T/ssh/id_ed25519.pub" "$T/ssh/authorized_keys"
	util render "$BENCH/conf/sshd_config.in" "$T/ssh/sshd_config" TMP="$T" SSH_CIPHER="$SSH_CIPHER"
	if [ ! -d /run/sshd ]; then
		mkdir -p /run/sshd && chmod 755 /run/sshd && MADE_RUN_SSHD=1
	fi
	save_conf "sshd_config" "$T/ssh/sshd_config"
	/usr/sbin/sshd -t -f "$T/ssh/sshd_config" 2>"$T/logs/sshd-t.log" ||
	    die "sshd refused its config: $(cat "$T/logs/sshd-t.log")"
}

# Port numbers inside the namespace (the "sandbox"): each contender gets its
# own so that all of them can run at once and alternate run by run.
NS_DIRECT=8966
NS_AK_WS=8766
NS_AK_WSS=8776
NS_SSH=8866

# A request from inside the namespace answers 200.
ns_ok() { # PORT
	[ "$(ip netns exec "$NS" curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$1/size/0" 2>/dev/null)" = 200 ]
}
wait_ns_ok() { # PORT WHAT
	local i=0
	while [ $i -lt 100 ]; do
		ns_ok "$1" && return 0
		sleep 0.2
		i=$((i + 1))
	done
	die "$2: http://127.0.0.1:$1 in $NS does not answer 200"
}

start_tunnel_contenders() {
	local sbf="$T/tunnel-sandboxes.yaml" tpid spid proxycmd
	make_ns
	ssh_setup
	start_backend
	# direct: a second backend of the same build inside the namespace.
	spawn backend-ns ip netns exec "$NS" "${PINL[@]}" "$BK" --listen "127.0.0.1:$NS_DIRECT" --threads "$BTHREADS"
	wait_port "$NS_DIRECT" "$NS" || die "backend in $NS did not start"
	ROOTS[direct]=""
	# akgateway terminate mode: two sandboxes in the namespace, one for a
	# plain ws:// tunnel, one for wss:// (TLS 1.3, AES-128-GCM).
	cat >"$sbf" <<EOF
  - id: tunws
    netns: /run/netns/$NS
    tunnel: {listen_port: $NS_AK_WS, token: "$TUNNEL_TOKEN"}
  - id: tunwss
    netns: /run/netns/$NS
    tunnel: {listen_port: $NS_AK_WSS, token: "$TUNNEL_TOKEN"}
EOF
	start_akgateway "$sbf"
	spawn aktunnel-ws env YR_TUNNEL_MAX_BODY_SIZE=1073741824 YR_TUNNEL_MAX_INFLIGHT="$TUNNEL_INFLIGHT" \
	    "${PINP[@]}" "$AKTUN" --gateway "127.0.0.1:$GW_PORT" --sandbox tunws \
	    --target "http://127.0.0.1:$BK_PORT" --token "$TUNNEL_TOKEN" --allow-plaintext-token --log-level warn
	tpid=$LAST_PID
	ROOTS[akgw-ws]="$GW_PID $tpid"
	spawn aktunnel-wss env YR_TUNNEL_MAX_BODY_SIZE=1073741824 YR_TUNNEL_MAX_INFLIGHT="$TUNNEL_INFLIGHT" \
	    "${PINP[@]}" "$AKTUN" --gateway "https://127.0.0.1:$GW_TLS_PORT" --sandbox tunwss \
	    --target "http://127.0.0.1:$BK_PORT" --token "$TUNNEL_TOKEN" --ca-file "$CERTS/ca.crt" --log-level warn
	tpid=$LAST_PID
	ROOTS[akgw-wss]="$GW_PID $tpid"
	# ssh -R: sshd in the namespace, ssh on the host.
	spawn sshd ip netns exec "$NS" "${PINP[@]}" /usr/sbin/sshd -D -e -f "$T/ssh/sshd_config"
	spid=$LAST_PID
	wait_port 2222 "$NS" || die "sshd did not start: $(tail -n 5 "$T/logs/sshd.log")"
	if [ "$SSH_PROXY" = socat ]; then
		proxycmd="ip netns exec $NS socat - TCP:127.0.0.1:2222"
	else
		proxycmd="ip netns exec $NS $PY $UTILPY pass_fd 127.0.0.1 2222"
	fi
	spawn ssh "${PINP[@]}" ssh -F /dev/null -N -T -i "$T/ssh/id_ed25519" -p 2222 \
	    -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
	    -o LogLevel=ERROR -o Ciphers="$SSH_CIPHER" -o Compression=no \
	    -o ExitOnForwardFailure=yes -o ServerAliveInterval=30 \
	    -o ProxyCommand="$proxycmd" $([ "$SSH_PROXY" = socat ] || echo -o ProxyUseFdpass=yes) \
	    -R "127.0.0.1:$NS_SSH:127.0.0.1:$BK_PORT" root@127.0.0.1
	ROOTS[ssh]="$spid $LAST_PID"
	wait_ns_ok "$NS_DIRECT" "direct backend"
	wait_ns_ok "$NS_AK_WS" "akgateway tunnel (ws)"
	wait_ns_ok "$NS_AK_WSS" "akgateway tunnel (wss)"
	wait_ns_ok "$NS_SSH" "ssh -R"
	TURL[direct]="http://127.0.0.1:$NS_DIRECT"
	TURL[akgw-ws]="http://127.0.0.1:$NS_AK_WS"
	TURL[akgw-wss]="http://127.0.0.1:$NS_AK_WSS"
	TURL[ssh]="http://127.0.0.1:$NS_SSH"
}
declare -A TURL

TUN_CS="direct akgw-ws akgw-wss ssh"

w6() {
	local round c hs
	hs=$(hsize "$BULK_BYTES")
	say "workload 6 ($MODE): reverse tunnels"
	start_tunnel_contenders
	LOADNS=(ip netns exec "$NS")
	for round in $(seq 1 "$RUNS"); do
		for c in $TUN_CS; do
			[ "$round" = 1 ] && wrk_warm "${TURL[$c]}/size/1024" 64
			wrk_run "$MODE" 6 "tunnel 1 KiB x 64 conns" "req/s" "$c" "$round" "${TURL[$c]}/size/1024" 64
		done
	done
	for round in $(seq 1 "$RUNS"); do
		for c in $TUN_CS; do
			[ "$round" = 1 ] && curl_warm "${TURL[$c]}/size/0"
			curl_run "$MODE" 6 "tunnel $hs download" "$c" "$round" down "${TURL[$c]}/size/$BULK_BYTES"
		done
	done
	for round in $(seq 1 "$RUNS"); do
		for c in $TUN_CS; do
			curl_run "$MODE" 6 "tunnel $hs upload" "$c" "$round" up "${TURL[$c]}/upload"
		done
	done
	LOADNS=()
	stop_all
}

# ---------------------------------------------------------------- access log

# Workload 8, per-core only (as the goal is): akgateway with its default
# access log (level info, text), written to a file, against the log off
# (level warn); nginx with access_log FILE buffer=64k against access_log off.
declare -A ALOG
AL_CS="akgw-nolog akgw-log nginx-nolog nginx-log"

# al_check C REQUESTS: C's access log (if it has one) holds a line for each
# request of the run, and the gateway dropped none (it logs a "dropped N log
# lines" warning when it did).  nginx may still hold up to 64 KiB of lines
# in its buffer, hence 99 %.  Waits up to 5 s for the gateway's log writer.
al_check() {
	local f=${ALOG[$1]:-} n i=0 want drop sz
	[ -n "$f" ] || return 0
	want=$(($2 * 99 / 100))
	n=$(wc -l <"$f")
	while [ "$n" -lt "$want" ] && [ $i -lt 50 ]; do
		sleep 0.1
		n=$(wc -l <"$f")
		i=$((i + 1))
	done
	sz=$(stat -c %s "$f")
	drop=$(grep -m 1 'dropped [0-9]* log line' "$f" | head -c 120)
	CK_NOTE="$n log lines, $((sz / 1048576)) MiB"
	if [ -n "$drop" ]; then
		CK_STATUS="FAILED(log lines dropped: $drop)"
	elif [ "$n" -lt "$want" ]; then
		CK_STATUS="FAILED(only $n log lines for $2 requests)"
	fi
}

w8() {
	local round c f cell="1 KiB x 64 conns, access log"
	set_mode percore
	say "workload 8 (percore): access log on and off"
	ALOG[akgw-log]="$T/logs/access-akgateway.log"
	ALOG[nginx-log]="$T/logs/access-nginx.log"
	start_backend
	start_akgateway /dev/null akgw-nolog "log: {level: warn}" "access log off"
	start_akgateway /dev/null akgw-log "log: {file: ${ALOG[akgw-log]}}" "access log on"
	start_nginx nginx-nolog off "access log off"
	start_nginx nginx-log "${ALOG[nginx-log]} combined buffer=64k" "access log on"
	meta "access log" "akgateway: log.level info (the default), text, log.file ${ALOG[akgw-log]}; nginx: access_log (combined) ${ALOG[nginx-log]} buffer=64k; off: log.level warn, access_log off; files emptied before each run"
	WRK_CHECK=al_check
	for round in $(seq 1 "$RUNS"); do
		for c in $AL_CS; do
			[ "$round" = 1 ] && wrk_warm "${BASE[$c]}/size/1024" 64
			for f in "${ALOG[@]}"; do : >"$f"; done
			wrk_run percore 8 "$cell" "req/s" "$c" "$round" "${BASE[$c]}/size/1024" 64
		done
	done
	WRK_CHECK=""
	stop_all
	rm -f "${ALOG[@]}"
}

# ---------------------------------------------------------------- memory

rss_of() { util rss "$@"; }

# idle_run C KIND N URL [idle args]: RSS growth of ROOTS[C] per connection.
idle_run() {
	local c=$1 kind=$2 n=$3 url=$4
	shift 4
	local before after ipid i got per status note
	before=$(rss_of ${ROOTS[$c]})
	spawn idle "$IDLE" --url "$url" --connections "$n" --mode "$kind" --hold 600 "$@"
	ipid=$LAST_PID
	i=0
	got=""
	while [ $i -lt 600 ]; do
		got=$(sed -n 's/^ready \([0-9]*\).*/\1/p' "$T/logs/idle.log" | head -n 1)
		[ -n "$got" ] && break
		kill -0 "$ipid" 2>/dev/null || break
		sleep 0.1
		i=$((i + 1))
	done
	sleep 1
	after=$(rss_of ${ROOTS[$c]})
	status=ok
	if [ -z "$got" ]; then
		status="FAILED(akbench-idle: $(tail -n 2 "$T/logs/idle.log" | tr '\n\t' '  ' | head -c 120))"
	elif [ "$got" != "$n" ]; then
		status="FAILED(only $got of $n connections open)"
	fi
	stop_pid "$ipid"
	i=$(sed -n 's/.*closed_by_peer=\([0-9]*\).*/\1/p' "$T/logs/idle.log" | tail -n 1)
	if [ "$status" = ok ] && [ -n "$i" ] && [ "$i" != 0 ]; then
		status="FAILED($i connections closed by the proxy while idle)"
	fi
	per=$(awk -v a="$after" -v b="$before" -v n="$n" 'BEGIN { printf "%.2f", (a - b) / n }')
	note="RSS ${before} -> ${after} KiB"
	rec mem 7 "$kind" "KiB/conn" "$c" 1 "$per" - - "$n" - "$status" "$note"
	say "7 idle $kind $c: $per KiB per connection ($note, n=$n) $status"
	[ "$status" = ok ] || { echo "--- idle $c $kind" >>"$T/failures.txt"; cat "$T/logs/idle.log" >>"$T/failures.txt"; }
}

w7() {
	local c nh nw nt base sbf i
	set_mode both
	WORKERS=1
	nh=$(fit_idle "$IDLE_HTTP")
	nw=$(fit_idle "$IDLE_WS")
	nt=$IDLE_TUNNEL
	meta "idle connections" "keep-alive $nh (asked $IDLE_HTTP), WebSocket $nw (asked $IDLE_WS), tunnel $nt; ulimit -n $NOFILE"
	say "workload 7: memory per idle connection (http $nh, ws $nw, tunnel $nt)"
	for c in akgateway nginx haproxy; do
		for kind in http ws; do
			start_backend
			"start_$c"
			# A few requests first, so the baseline is a warmed process.
			logcmd wrk -t1 -c8 -d1s "${BASE[$c]}/size/1024"
			timeout 20 wrk -t1 -c8 -d1s "${BASE[$c]}/size/1024" >/dev/null 2>&1
			sleep 0.5
			if [ $kind = http ]; then
				idle_run "$c" http "$nh" "${BASE[$c]}/size/0"
			else
				idle_run "$c" ws "$nw" "$(wsurl "$c")"
			fi
			stop_all
		done
	done
	# Idle tunnels: nt sandboxes, each with its own terminate-mode tunnel.
	start_backend
	base=$(util portrange "$nt" 20000 32000)
	sbf="$T/idle-sandboxes.yaml"
	: >"$sbf"
	for i in $(seq 0 $((nt - 1))); do
		printf '  - id: sb%d\n    address: 127.0.0.1\n    tunnel: {listen_port: %d, token: "%s"}\n' \
		    "$i" $((base + i)) "$TUNNEL_TOKEN" >>"$sbf"
	done
	start_akgateway "$sbf"
	wait_port $((base + nt - 1)) || die "Port B $((base + nt - 1)) of sb$((nt - 1)) is not listening"
	sleep 0.5
	idle_run akgateway tunnel "$nt" "ws://127.0.0.1:$GW_PORT/tunnel/sb%d" --header "X-Auth: $TUNNEL_TOKEN"
	for c in nginx haproxy; do na mem 7 tunnel "KiB/conn" "$c" "no tunnels"; done
	stop_all
}

# ---------------------------------------------------------------- main

say "akbench: results in $RESULTS_DIR, temp $T, modes: $MODES, runs: $RUNS, workloads: $ONLY"
for m in $MODES; do
	set_mode "$m"
	want 1 && w1
	want 2 && w2
	want 3 && w3
	want 4 && w4
	want 5 && w5
	want 6 && w6
	want 9 && w9
	want 10 && w10
done
want 8 && w8
want 7 && w7

meta "duration" "$(elapsed) s"
mkdir -p "$RESULTS_DIR"
stem="$(date +%Y-%m-%d)-$host"
[ $QUICK = 1 ] && stem="$stem-quick"
out="$RESULTS_DIR/$stem"
i=2
while [ -e "$out.md" ]; do
	out="$RESULTS_DIR/$stem-$i"
	i=$((i + 1))
done
awk '!seen[$0]++' "$CMDS" >"$T/commands.uniq"
$PY "$BENCH/lib/report.py" --results "$RES" --meta "$META" --commands "$T/commands.uniq" \
    --failures "$T/failures.txt" --md "$out.md" --datadir "$T/plot" --png "$out.png" \
    --plot "$BENCH/plot.gp" --configs "$T/configs" || die "report failed"
say "done in $(elapsed) s: $out.md, $out.png"
