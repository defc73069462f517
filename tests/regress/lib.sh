# Shared helpers for end-to-end tests; sourced by each tests/regress/*.sh.
#
# Each test runs in its own scratch directory $T, starts real processes on
# loopback, and everything it started is killed on exit.

set -u
BUILD=${BUILD:-build}
TOP=$(cd "$(dirname "$0")/../.." && pwd)
case "$BUILD" in /*) ;; *) BUILD="$TOP/$BUILD" ;; esac
AKGW="$BUILD/akgateway"
AKTUN="$BUILD/aktunnel"
CERTS="$BUILD/certs"
if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=python3; fi
T=$(mktemp -d "${TMPDIR:-/tmp}/akgw-test.XXXXXX")
PIDS=""
NETNS=""

cleanup() {
	for p in $PIDS; do kill "$p" 2>/dev/null; done
	for p in $PIDS; do
		i=0
		while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do
			sleep 0.1; i=$((i + 1))
		done
		kill -9 "$p" 2>/dev/null
	done
	for n in $NETNS; do ip netns del "$n" 2>/dev/null; done
	rm -rf "$T"
}
trap cleanup EXIT
trap 'cleanup; trap - EXIT; exit 1' INT TERM

# Make network namespace $1 with its loopback up; it is deleted at exit.
# Needs root (CI runs as root); anything else is a hard failure.
netns_add() {
	[ "$(id -u)" = 0 ] || fail "$(basename "$0") must run as root (it creates a network namespace)"
	command -v ip >/dev/null 2>&1 || fail "ip (iproute2) is needed for this test"
	ip netns add "$1" || fail "cannot create network namespace $1"
	NETNS="$NETNS $1"
	ip -n "$1" link set lo up || fail "cannot bring up lo in $1"
}

# Wait until 127.0.0.1:$1 accepts inside namespace $NS (5 s at most).
wait_port_ns() {
	i=0
	while [ $i -lt 100 ]; do
		if ip netns exec "$NS" $PY -c "import socket,sys; s=socket.socket(); s.settimeout(0.2); sys.exit(s.connect_ex(('127.0.0.1',$1)))" 2>/dev/null; then
			return 0
		fi
		sleep 0.05; i=$((i + 1))
	done
	fail "nothing listens on port $1 in namespace $NS"
}

# Wait until file $1 has a line matching $2 (10 s at most).
wait_log() {
	i=0
	while [ $i -lt 200 ]; do
		grep -q "$2" "$1" 2>/dev/null && return 0
		sleep 0.05; i=$((i + 1))
	done
	fail "no line matching '$2' in $1"
}

# Stop a process and wait for it (5 s at most).
stop() {
	kill "$1" 2>/dev/null
	i=0
	while kill -0 "$1" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
}

fail() {
	echo "FAIL: $*" >&2
	for f in "$T"/*.log; do
		[ -f "$f" ] || continue
		echo "--- $f" >&2; tail -n 30 "$f" >&2
	done
	exit 1
}

ok() { echo "ok: $*"; }

# A free TCP port on 127.0.0.1, never the same one twice in a test: the
# kernel may hand out again a port nothing listens on yet, and two servers
# would then fight over it (workers.sh once got its HTTPS port twice).
free_port() {
	while :; do
		_fp=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
		if ! grep -qx "$_fp" "$T/.ports" 2>/dev/null; then
			echo "$_fp" >>"$T/.ports"
			echo "$_fp"
			return
		fi
	done
}

# Wait until something listens on 127.0.0.1:$1 (5 s at most).
wait_port() {
	i=0
	while [ $i -lt 100 ]; do
		if $PY -c "import socket,sys; s=socket.socket(); s.settimeout(0.2); sys.exit(s.connect_ex(('127.0.0.1',$1)))" 2>/dev/null; then
			return 0
		fi
		sleep 0.05; i=$((i + 1))
	done
	fail "nothing listens on port $1"
}

# Start a command in the background, remember its pid, log to $T/$1.log.
spawn() {
	name=$1; shift
	"$@" >"$T/$name.log" 2>&1 &
	PIDS="$PIDS $!"
	LAST_PID=$!
}

# Which HTTP the tests' curl speaks to the gateway's own listeners (the
# ports spawn_gateway found in its listen: section): HTTP/1.1, or with
# AKT_H2=1 (tests/run.sh's HTTP/2 pass) HTTP/2 -- prior knowledge on plain
# listeners, ALPN h2 on TLS ones.  Backends and the admin API are spoken to
# as the test says.  H2 is 1 in the HTTP/2 pass, for what a test expects.
H2_PORTS=""
H2=${AKT_H2:-0}
curl() {
	for _a in "$@"; do
		case "$_a" in
		http://*|https://*)
			_hp=${_a#*://}
			_hp=${_hp%%/*}
			case " $H2_PORTS " in
			*" ${_hp##*:} "*)
				case "$H2:$_a" in
				1:http://*) set -- --http2-prior-knowledge "$@" ;;
				1:https://*) set -- --http2 "$@" ;;
				0:https://*) set -- --http1.1 "$@" ;;
				esac
				;;
			esac
			break
			;;
		esac
	done
	command curl "$@"
}

# The ports of a gateway YAML's listen: entries, for the HTTP/2 pass.
listen_ports() {
	awk '/^[a-z_]+:/ { inl = ($1 == "listen:") }
	    inl && /address:/ { gsub(/"/, "", $NF); n = split($NF, a, ":"); print a[n] }' "$1"
}

# Start akgateway with the YAML on stdin; waits for port $1.
spawn_gateway() {
	port=$1
	cat >"$T/gateway.yaml"
	H2_PORTS="$H2_PORTS $(listen_ports "$T/gateway.yaml" | tr '\n' ' ')"
	spawn gateway "$AKGW" -c "$T/gateway.yaml"
	GW_PID=$LAST_PID
	wait_port "$port"
}

# In the HTTP/2 pass a head is compared as HTTP/2 shows it: "HTTP/1.1 303
# See Other" is "HTTP/2 303" (no reason phrase), field names are lower
# case, and the gateway's own Via is "2 akgateway".  What a test reads
# from a raw HTTP/1.1 socket still matches exactly first.
h2_needle() {
	printf '%s' "$1" | sed -E 's#HTTP/1\.1 ([0-9]{3})( [A-Za-z -]*)?#HTTP/2 \1#g; s#1\.1 akgateway#2 akgateway#g'
}

# assert_eq WHAT EXPECTED ACTUAL
assert_eq() {
	[ "$2" = "$3" ] && return 0
	if [ "$H2" = 1 ]; then
		_w=$(h2_needle "$2" | tr 'A-Z' 'a-z')
		_g=$(printf '%s' "$3" | tr 'A-Z' 'a-z')
		[ "$_w" = "$_g" ] && return 0
	fi
	fail "$1: expected '$2', got '$3'"
}

# assert_contains WHAT NEEDLE HAYSTACK
assert_contains() {
	case "$3" in *"$2"*) return 0 ;; esac
	if [ "$H2" = 1 ] &&
	    printf '%s' "$3" | grep -qiF -- "$(h2_needle "$2")"; then
		return 0
	fi
	fail "$1: '$2' not found in: $3"
}

# Send the bytes $2 (printf-style escapes: \r\n) to 127.0.0.1:$1 and print
# what comes back until the peer closes or 10 s pass.
raw_send() {
	$PY - "$1" "$2" <<'PYEOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(sys.argv[2].encode().decode("unicode_escape").encode("latin-1"))
out = b""
end = time.monotonic() + 10
while time.monotonic() < end:
    try:
        d = s.recv(65536)
    except (socket.timeout, ConnectionResetError):
        break
    if not d:
        break
    out += d
sys.stdout.write(out.decode("latin-1"))
PYEOF
}

# Every key the configuration parser knows, one "SECTION KEY" a line, asked
# of the parser itself: each probe puts 'zz_unknown' in one kind of mapping,
# and the unknown-key error lists the keys expected there.  The tls probes
# load the development certificate in $CERTS.
conf_keys() {
	[ -f "$CERTS/server.crt" ] || fail "no development certificates in $CERTS (make certs)"
	_L='listen:
  - address: 127.0.0.1:1'
	_TLS="$_L
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key"
	_SB="$_L
sandboxes:
  - id: a
    address: 127.0.0.1"
	for _probe in \
		"top|$_L
zz_unknown: 1" \
		"log|$_L
log: {zz_unknown: 1}" \
		"listen|$_L
    zz_unknown: 1" \
		"tls|$_L
    tls:
      zz_unknown: 1" \
		"sni|$_TLS
      sni:
        - zz_unknown: 1" \
		"admin|$_L
admin: {zz_unknown: 1}" \
		"domains|$_L
domains:
  - {name: x.example, zz_unknown: 1}" \
		"timeouts|$_L
timeouts: {zz_unknown: 1}" \
		"limits|$_L
limits: {zz_unknown: 1}" \
		"auth|$_L
auth: {zz_unknown: 1}" \
		"sandboxes|$_SB
    zz_unknown: 1" \
		"ports|$_SB
    ports:
      - {port: 1, zz_unknown: 1}" \
		"tunnel|$_SB
    tunnel: {listen_port: 8766, zz_unknown: 1}"; do
		printf '%s\n' "${_probe#*|}" >"$T/probe.yaml"
		_msg=$("$AKGW" -c "$T/probe.yaml" --check 2>&1)
		case "$_msg" in
		*"unknown key 'zz_unknown'"*"(expected one of: "*")") ;;
		*) fail "no unknown-key error for the ${_probe%%|*} probe: $_msg" ;;
		esac
		for _k in $(echo "$_msg" |
		    sed 's/.*(expected one of: \(.*\))$/\1/' | tr -d ','); do
			echo "${_probe%%|*} $_k"
		done
	done
}
