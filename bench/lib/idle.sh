# Shared by bench/idle-http.sh and bench/idle-tunnel.sh (sourced after T,
# UTIL and BUILD are set): cleanup, waiting for a port, malloc's figures,
# waiting for akbench-idle, and the per-connection report.
gw=""
bk=""
idle=""
cleanup() {
	set +e
	[ -n "$idle" ] && kill "$idle" 2>/dev/null
	[ -n "$gw" ] && kill "$gw" 2>/dev/null
	[ -n "$bk" ] && kill "$bk" 2>/dev/null
	wait 2>/dev/null || true
	rm -rf "$T"
}
trap cleanup EXIT INT TERM PIPE

# Waits on a port with a bounded number of tries.
wait_port() {
	i=0
	while [ $i -lt 300 ]; do
		python3 -c "import socket,sys; s=socket.socket(); s.settimeout(0.2); sys.exit(s.connect_ex(('127.0.0.1', $1)))" && return 0
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# Bytes malloc has in use, from malloc_stats() (it prints to the log).
inuse() {
	gdb -q -batch -p "$gw" -ex 'call (void)malloc_stats()' >/dev/null 2>&1
	sleep 0.2
	sed -n 's/^in use bytes *= *//p' "$T/gw.log" | tail -n 1
}
# malloc's heap (system bytes): in use, plus what is free inside it.
heap() {
	sed -n 's/^system bytes *= *//p' "$T/gw.log" | tail -n 1
}

# Wait (60 s at most) for akbench-idle ($idle) to say all N are up.
wait_idle_ready() {
	i=0
	while [ $i -lt 600 ] && ! grep -q '^ready' "$T/idle.log"; do
		kill -0 "$idle" 2>/dev/null || break
		sleep 0.1
		i=$((i + 1))
	done
	grep -q "^ready $N" "$T/idle.log" || {
		echo "akbench-idle: $(tail -n 3 "$T/idle.log")"
		exit 1
	}
}

# The report: "$1: X KiB per $2 (RSS ...)", and malloc's with INUSE=1.
idle_report() {
	awk -v a="$after" -v b="$before" -v n="$N" -v w="$1" -v u="$2" 'BEGIN {
		printf "%s: %.2f KiB per %s (RSS %d -> %d KiB, n=%d)\n",
		    w, (a - b) / n, u, b, a, n }'
	[ -z "${INUSE:-}" ] || awk -v a="$iafter" -v b="$ibefore" -v n="$N" \
	    -v u="$2" 'BEGIN {
		printf "malloc in use: %.0f bytes per %s (%d -> %d)\n",
		    (a - b) / n, u, b, a }'
	[ -z "${INUSE:-}" ] || awk -v a="$hafter" -v b="$hbefore" -v n="$N" \
	    -v u="$2" 'BEGIN {
		printf "malloc heap: %.0f bytes per %s (%d -> %d)\n",
		    (a - b) / n, u, b, a }'
}
