#!/bin/sh
# aktunnel's CPU for a download from an https:// target over HTTP/2 and
# over HTTP/1.1 (--target-http2 off), same target (tests/regress/h2_target.py),
# same gateway, alternating rounds; prints aktunnel's CPU time per round
# (utime + stime from /proc) and the h2/h1 ratio of the sums, with the load
# average before and after. Needs root (a network namespace for the
# sandbox side), a build (make all certs), python3-h2.
#
#   sh bench/aktunnel-h2.sh [ROUNDS [MIB]]     (default 5 rounds of 64 MiB)
ROUNDS=${1:-5}
MIB=${2:-64}
BUILD0=${BUILD:-build}
. "$(dirname "$0")/../tests/regress/lib.sh"
# lib.sh takes the tree from its caller's place: this one is in bench/.
TOP=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$BUILD0
case "$BUILD" in /*) ;; *) BUILD="$TOP/$BUILD" ;; esac
AKGW="$BUILD/akgateway"
AKTUN="$BUILD/aktunnel"
CERTS="$BUILD/certs"

NS="akgw-bh2-$$"
netns_add "$NS"
GW=$(free_port)
H2T=$(free_port)
TOKEN=tunnel-token-0123456789abcdef
mkdir -p "$T/www"
head -c $((MIB * 1048576)) /dev/urandom >"$T/www/big.bin"
spawn h2t $PY "$TOP/tests/regress/h2_target.py" --port "$H2T" \
    --cert "$CERTS/server.crt" --key "$CERTS/server.key" --log "$T/h2t.jsonl" \
    --root "$T/www"
wait_port "$H2T"
spawn_gateway "$GW" <<YAML
listen:
  - address: 127.0.0.1:$GW
sandboxes:
  - id: b
    netns: /run/netns/$NS
    tunnel:
      listen_port: [8766, 7766]
      token: $TOKEN
YAML
for p in 8766 7766; do
	mode=auto
	[ $p = 7766 ] && mode=off
	spawn "tun$p" "$AKTUN" --gateway "127.0.0.1:$GW" --sandbox b \
	    --listen-port $p --target "https://localhost:$H2T" --token "$TOKEN" \
	    --allow-plaintext-token --target-ca-file "$CERTS/ca.crt" \
	    --target-http2 $mode
	eval "PID$p=\$LAST_PID"
	wait_log "$T/tun$p.log" ready
done

# cpu PID: utime + stime in clock ticks.
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
sum8766=0
sum7766=0
r=1
while [ $r -le "$ROUNDS" ]; do
	for p in 8766 7766; do
		eval "pid=\$PID$p"
		a=$(cpu "$pid")
		ip netns exec "$NS" curl -sS -o /dev/null --max-time 120 \
		    "http://127.0.0.1:$p/files/big.bin" || fail "download failed"
		b=$(cpu "$pid")
		eval "sum$p=\$((sum$p + b - a))"
		echo "round $r $( [ $p = 8766 ] && echo h2 || echo h1 ): $(( (b - a) * 1000 / hz )) ms CPU for $MIB MiB"
	done
	r=$((r + 1))
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "h2 total $((sum8766 * 1000 / hz)) ms, h1 total $((sum7766 * 1000 / hz)) ms"
$PY -c "import sys; print('h2/h1 CPU ratio: %.2f' % (int(sys.argv[1]) / max(1, int(sys.argv[2]))))" "$sum8766" "$sum7766"
grep -q '"alpn": "h2"' "$T/h2t.jsonl" || fail "no h2 connection at the target"
