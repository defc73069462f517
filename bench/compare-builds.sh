#!/bin/bash
# Compare two builds of akgateway and aktunnel, alternating run by run: what
# an optimisation bought, measured before and after (docs/performance.md).
#
#   bench/compare-builds.sh OLD_BUILD_DIR NEW_BUILD_DIR [RUNS]
#
# CELLS=rps runs only the 1 KiB keep-alive cell (short runs, so more of
# them fit where the machine is not quiet).
#
# For example, to compare HEAD with an older commit:
#   git worktree add /tmp/old 27e769a && make -C /tmp/old BUILD=/tmp/old/build
#   make && make bench-tools && bench/compare-builds.sh /tmp/old/build build 3
#
# Each gateway is pinned to CPU 0, the load and the backend (build/bench's
# akbench-backend from NEW) to CPU 1.  Loopback only, plus a network
# namespace for the tunnel caller, deleted at exit.  Needs root, wrk, curl.
set -u
OLD=${1:?usage: $0 OLD_BUILD_DIR NEW_BUILD_DIR [RUNS]}
NEW=${2:?usage: $0 OLD_BUILD_DIR NEW_BUILD_DIR [RUNS]}
RUNS=${3:-3}
TMP=$(mktemp -d /tmp/akcompare.XXXXXX)
NS=akcompare-$$
PIDS=""
TOKEN=tunnel-token-0123456789abcdef

cleanup() {
	for p in $PIDS; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	ip netns del "$NS" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_port() {
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.05
	done
	echo "nothing listens on port $1" >&2
	exit 1
}
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }

for b in "$OLD" "$NEW"; do
	[ -x "$b/akgateway" ] && [ -x "$b/aktunnel" ] ||
		{ echo "$b has no akgateway or aktunnel" >&2; exit 1; }
done
[ -x "$NEW/bench/akbench-backend" ] ||
	{ echo "$NEW/bench/akbench-backend is missing: make bench-tools" >&2; exit 1; }

BE=$(free_port)
GW=$(free_port)
taskset -c 1 "$NEW/bench/akbench-backend" --listen "127.0.0.1:$BE" >"$TMP/be.log" 2>&1 &
PIDS="$PIDS $!"
wait_port "$BE"
ip netns add "$NS" && ip -n "$NS" link set lo up || exit 1
cat >"$TMP/gw.yaml" <<EOF
listen:
  - address: 127.0.0.1:$GW
log:
  level: warn
sandboxes:
  - id: b
    address: 127.0.0.1
    ports:
      - port: $BE
  - id: t
    netns: /run/netns/$NS
    tunnel:
      listen_port: 8766
      token: $TOKEN
EOF
head -c 268435456 /dev/zero >"$TMP/up.bin"
URL="http://127.0.0.1:$GW/b/$BE"

hz=$(getconf CLK_TCK)
for r in $(seq 1 "$RUNS"); do
	for v in OLD NEW; do
		[ $v = OLD ] && dir=$OLD || dir=$NEW
		taskset -c 0 "$dir/akgateway" -c "$TMP/gw.yaml" 2>"$TMP/gw.err" &
		gw=$!
		wait_port "$GW"
		taskset -c 0 "$dir/aktunnel" --gateway "127.0.0.1:$GW" --sandbox t \
		    --listen-port 8766 --target "http://127.0.0.1:$BE" \
		    --token "$TOKEN" --allow-plaintext-token 2>"$TMP/tun.err" &
		tun=$!
		sleep 1
		t0=$(ticks $gw)
		rps=$(timeout 30 taskset -c 1 wrk -t1 -c64 -d5s "$URL/size/1024" |
		    awk '/Requests\/sec/{print $2}')
		t1=$(ticks $gw)
		if [ "${CELLS:-all}" = rps ]; then
			printf '%s run %d: 1 KiB %s req/s, %s req/CPU-s\n' "$v" "$r" \
			    "${rps:-?}" "$(python3 -c "print(int(${rps:-0} * 5 / max(($t1 - $t0) / $hz, 0.01)))")"
			kill $tun $gw 2>/dev/null
			wait $tun $gw 2>/dev/null
			continue
		fi
		down=$(timeout 60 taskset -c 1 curl -sS -o /dev/null \
		    -w '%{speed_download}' "$URL/size/1073741824")
		t2=$(ticks $gw)
		up=$(timeout 60 taskset -c 1 curl -sS -o /dev/null \
		    -w '%{speed_upload}' --data-binary "@$TMP/up.bin" "$URL/sink")
		ws=$(timeout 30 taskset -c 1 "$NEW/bench/akbench-ws" \
		    --url "ws://127.0.0.1:$GW/b/$BE/ws" --connections 8 \
		    --size 65536 --duration 4 |
		    sed 's/.*mbytes_per_s=\([0-9.]*\).*/\1/')
		a0=$(($(ticks $gw) + $(ticks $tun)))
		tdown=$(timeout 60 ip netns exec "$NS" taskset -c 1 curl -sS \
		    -o /dev/null -w '%{speed_download}' \
		    http://127.0.0.1:8766/size/268435456)
		a1=$(($(ticks $gw) + $(ticks $tun)))
		printf '%s run %d: 1 KiB %s req/s, %s req/CPU-s | 1 GiB down %d MB/s, %s CPU-s/GiB | up %d MB/s | ws 64 KiB %s MB/s | tunnel down %d MB/s, %s CPU-s/GiB both ends\n' \
		    "$v" "$r" "${rps:-?}" \
		    "$(python3 -c "print(int(${rps:-0} * 5 / max(($t1 - $t0) / $hz, 0.01)))")" \
		    $((${down%.*} / 1000000)) \
		    "$(python3 -c "print(round(($t2 - $t1) / $hz, 2))")" \
		    $((${up%.*} / 1000000)) "${ws:-?}" $((${tdown%.*} / 1000000)) \
		    "$(python3 -c "print(round(($a1 - $a0) * 4 / $hz, 2))")"
		kill $tun $gw 2>/dev/null
		wait $tun $gw 2>/dev/null
	done
done
