#!/bin/sh
# Several event loops (workers: 4 on fewer CPUs, so every loop gets
# connections): the startup line and workers: auto under taskset, the
# counts --check refuses, 200 requests each on a new connection with /metrics
# summed over the loops, a second gateway refused on a port in use, admin
# PUT and DELETE seen by every loop at once, SIGHUP certificates taken by
# every loop, terminate-mode tunnels whose WebSocket lands on any loop
# (plain and TLS, aktunnel restarted 8 times), and a clean SIGTERM.
. "$(dirname "$0")/lib.sh"

for tool in curl openssl taskset ss; do
	command -v $tool >/dev/null 2>&1 || fail "$tool is needed for this test"
done
[ -f "$CERTS/ca.crt" ] || fail "no development certificates in $CERTS (make certs)"

GW=$(free_port)
GWS=$(free_port)
ADM=$(free_port)
ECHO=$(free_port)
LP=$(free_port)
TOKEN="workers-$(date +%s)-admin-token"
C="curl -sS --max-time 20"
N2XX=0

# The listener's files are copies, so the test can replace them.
mkdir -p "$T/tls"
cp "$CERTS/server.crt" "$CERTS/server.key" "$T/tls/"

# backend.py's /chunked is 150000 parts, 1688890 bytes: the big download.
spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" \
	--log "$T/upstream.jsonl" --n 150000
wait_port "$ECHO"
BIG_SHA=$($PY -c '
import hashlib
print(hashlib.sha256(b"".join(b"part %d\n" % i for i in range(150000))).hexdigest())')
OK_SHA=$(printf 'ok\n' | sha256sum | cut -c1-64)

# conns.py PROTO HOW PORT HOST PATH N: N new connections to 127.0.0.1:PORT
# (PROTO http or https, the certificate not verified), one GET PATH each
# with Host: HOST; "{i}" in PATH is the request's number.  HOW is seq (one
# connection after another) or together (all open before the first
# request).  One line per connection: status, sha256 of the body, and the
# sha256 fingerprint of the certificate presented ("-" for http).
cat >"$T/conns.py" <<'PYEOF'
import hashlib, http.client, ssl, sys
proto, how, port, host, path, n = sys.argv[1:7]
port, n = int(port), int(n)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE

def connect():
    if proto == "https":
        c = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ctx)
        c.connect()
        fp = hashlib.sha256(c.sock.getpeercert(binary_form=True)).hexdigest()
    else:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.connect()
        fp = "-"
    return c, fp

def ask(c, fp, i):
    c.request("GET", path.replace("{i}", str(i)), headers={"Host": host})
    r = c.getresponse()
    body = r.read()
    c.close()
    return "%d %s %s" % (r.status, hashlib.sha256(body).hexdigest(), fp)

if how == "together":
    cs = [connect() for i in range(n)]
    for i, (c, fp) in enumerate(cs):
        print(ask(c, fp, i))
else:
    for i in range(n):
        c, fp = connect()
        print(ask(c, fp, i))
PYEOF

# conns WHAT EXPECTED PROTO HOW PORT HOST PATH N: run conns.py; every one of
# the N connections must print EXPECTED.
conns() {
	what=$1 want=$2
	shift 2
	timeout 120 $PY "$T/conns.py" "$@" >"$T/conns.out" 2>&1 ||
		fail "$what: $(tail -n 5 "$T/conns.out")"
	n=$(wc -l <"$T/conns.out" | tr -d ' ')
	assert_eq "$what: connections" "$6" "$n"
	bad=$(grep -vcxF "$want" "$T/conns.out")
	assert_eq "$what: connections not answered '$want' (first: $(grep -vxF "$want" "$T/conns.out" | head -n 1))" "0" "$bad"
}

# The value of metric $1 (with its labels) on /metrics.
metric() {
	$C -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$ADM/metrics" >"$T/metrics" ||
		fail "GET /metrics"
	awk -v m="$1" '$1 == m { print $2 }' "$T/metrics"
}

# The listening sockets on 127.0.0.1:$1.
listeners() {
	ss -Hltn "sport = :$1" | wc -l | tr -d ' '
}

# SHA-256 fingerprint of a PEM certificate on stdin, as conns.py prints it.
cert_fp() {
	openssl x509 -outform DER | sha256sum | cut -c1-64
}

# term_wait PID WHAT: SIGTERM, then wait for PID to exit (5 s at most);
# sets RC to its exit status.
term_wait() {
	kill -TERM "$1"
	tw=0
	while kill -0 "$1" 2>/dev/null && [ $tw -lt 50 ]; do sleep 0.1; tw=$((tw + 1)); done
	kill -0 "$1" 2>/dev/null && fail "$2 still running 5 s after SIGTERM"
	wait "$1"
	RC=$?
}

# --- workers: in --check ------------------------------------------------------
check_workers() {
	printf 'workers: %s\nlisten:\n  - address: 127.0.0.1:%s\n' "$1" "$GW" >"$T/check.yaml"
	out=$("$AKGW" -c "$T/check.yaml" --check 2>&1)
	rc=$?
}
# The wording between "workers" and the value is the configuration
# reference's; the position, the key and the refused value are checked.
for v in 0 300 "'many'"; do
	check_workers "$(echo "$v" | tr -d "'")"
	assert_eq "--check workers: $v exit" "1" "$rc"
	case "$out" in
	"akgateway: $T/check.yaml:1:10: workers "*" not $v") ;;
	*) fail "--check workers: $v: expected 'akgateway: $T/check.yaml:1:10: workers ... not $v', got '$out'" ;;
	esac
	assert_eq "--check workers: $v: lines" "1" "$(printf '%s\n' "$out" | wc -l | tr -d ' ')"
done
for v in auto 2; do
	check_workers $v
	assert_eq "--check workers: $v exit" "0" "$rc"
	assert_eq "--check workers: $v" "akgateway: $T/check.yaml: configuration is valid" "$out"
done
ok "workers: 0, 300 and many refused with file:line:column; auto and 2 accepted"

# --- workers: auto --------------------------------------------------------------
# start_auto NAME [PREFIX...]: start a gateway with workers: auto on a port
# of its own, wait for its startup line and stop it; sets STARTED.
start_auto() {
	name=$1
	shift
	p=$(free_port)
	printf 'workers: auto\nlisten:\n  - address: 127.0.0.1:%s\n' "$p" >"$T/$name.yaml"
	spawn "$name" "$@" "$AKGW" -c "$T/$name.yaml"
	pid=$LAST_PID
	wait_log "$T/$name.log" 'started with'
	STARTED=$(sed -n 's/.* started with //p' "$T/$name.log" | sed 's/, pid [0-9]*)$/)/')
	term_wait "$pid" "$name"
	assert_eq "$name: exit status after SIGTERM" "0" "$RC"
}
start_auto auto1 taskset -c 0
assert_eq "workers: auto under taskset -c 0" "$T/auto1.yaml (0 sandboxes, 1 worker)" "$STARTED"
ncpu=$(nproc)
if [ "$ncpu" -eq 1 ]; then want="1 worker"; else want="$ncpu workers"; fi
start_auto autoall
assert_eq "workers: auto on $ncpu CPUs" "$T/autoall.yaml (0 sandboxes, $want)" "$STARTED"
ok "workers: auto is one loop under taskset -c 0 and $want otherwise"

# --- The gateway under test -----------------------------------------------------
spawn_gateway "$GW" <<EOF
workers: 4
listen:
  - address: 127.0.0.1:$GW
  - address: 127.0.0.1:$GWS
    tls:
      cert: $T/tls/server.crt
      key: $T/tls/server.key
admin:
  address: 127.0.0.1:$ADM
  token: $TOKEN
domains: [localhost]
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $ECHO
  - id: tun
    address: 127.0.0.1
    tunnel:
      listen_port: $LP
      client_wait: 5s
EOF
wait_port "$GWS"
wait_port "$ADM"
wait_port "$LP"
wait_log "$T/gateway.log" "started with $T/gateway.yaml (2 sandboxes, 4 workers, pid "
assert_eq "listening sockets on the plain port" "4" "$(listeners "$GW")"
assert_eq "listening sockets on the TLS port" "4" "$(listeners "$GWS")"
assert_eq "listening sockets on the admin port" "1" "$(listeners "$ADM")"
assert_eq "listening sockets on Port B" "1" "$(listeners "$LP")"
ok "4 workers: four listeners on each port, one admin listener and one Port B"

# --- 200 requests, each on a new connection; /metrics sums the loops -----------
conns "200 new connections" "200 $OK_SHA -" http seq "$GW" "$ECHO-sbx.localhost:$GW" "/seq?i={i}" 200
N2XX=$((N2XX + 200))
n=$(grep -c '"path": "/seq?i=' "$T/upstream.jsonl")
assert_eq "requests at the upstream" "200" "$n"
assert_eq "akgw_requests_total 2xx" "$N2XX" "$(metric 'akgw_requests_total{class="2xx"}')"
assert_eq "akgw_requests_total 4xx" "0" "$(metric 'akgw_requests_total{class="4xx"}')"
acc=$(metric akgw_connections_accepted_total)
[ -n "$acc" ] && [ "$acc" -ge 200 ] || fail "akgw_connections_accepted_total is '$acc', not at least 200"
ok "200 requests on 200 connections, all 200 'ok'; /metrics counts $N2XX and $acc connections"

# --- A second gateway on a port in use --------------------------------------------
printf 'workers: 2\nlisten:\n  - address: 127.0.0.1:%s\n' "$GW" >"$T/second.yaml"
out=$(timeout 10 "$AKGW" -c "$T/second.yaml" 2>&1)
rc=$?
assert_eq "second gateway exit status" "1" "$rc"
assert_contains "second gateway: cannot listen" "cannot listen on 127.0.0.1:$GW" "$out"
assert_contains "second gateway: in use" "in use" "$out"
assert_eq "listening sockets after the second gateway" "4" "$(listeners "$GW")"
conns "after the second gateway" "200 $OK_SHA -" http seq "$GW" "$ECHO-sbx.localhost:$GW" "/after?i={i}" 40
N2XX=$((N2XX + 40))
ok "a second gateway (workers: 2) on the same port is refused; the first still serves"

# --- Admin PUT and DELETE reach every loop at once ----------------------------------
NOTFOUND="{\"status\":404,\"code\":\"sandbox_not_found\",\"message\":\"No sandbox 'dyn' is known to this gateway.\"}"
code=$($C -o "$T/nf.out" -w '%{http_code}' "http://$ECHO-dyn.localhost:$GW/x")
assert_eq "before PUT: status" "404" "$code"
assert_eq "before PUT: body" "$NOTFOUND" "$(cat "$T/nf.out")"
NF_SHA=$(sha256sum <"$T/nf.out" | cut -c1-64)
N4XX=1
round=1
while [ $round -le 3 ]; do
	code=$($C -X PUT -H "Authorization: Bearer $TOKEN" -o "$T/put.out" -w '%{http_code}' \
		--data-binary "{\"address\": \"127.0.0.1\", \"ports\": [{\"port\": $ECHO}]}" \
		"http://127.0.0.1:$ADM/v1/sandboxes/dyn")
	assert_eq "PUT dyn ($round): status" "201" "$code"
	conns "40 connections after PUT ($round)" "200 $OK_SHA -" http together "$GW" \
		"$ECHO-dyn.localhost:$GW" "/dyn?i={i}" 40
	code=$($C -X DELETE -H "Authorization: Bearer $TOKEN" -o "$T/del.out" -w '%{http_code}' \
		"http://127.0.0.1:$ADM/v1/sandboxes/dyn")
	assert_eq "DELETE dyn ($round): status" "204" "$code"
	conns "40 connections after DELETE ($round)" "404 $NF_SHA -" http together "$GW" \
		"$ECHO-dyn.localhost:$GW" "/gone?i={i}" 40
	N2XX=$((N2XX + 40))
	N4XX=$((N4XX + 40))
	round=$((round + 1))
done
assert_eq "akgw_requests_total 2xx after the directory changes" "$N2XX" \
	"$(metric 'akgw_requests_total{class="2xx"}')"
assert_eq "akgw_requests_total 4xx after the directory changes" "$N4XX" \
	"$(metric 'akgw_requests_total{class="4xx"}')"
assert_eq "sandbox_not_found count" "$N4XX" \
	"$(metric 'akgw_gateway_errors_total{code="sandbox_not_found"}')"
ok "3 rounds: after PUT 40 connections at once are 200, after DELETE all 404 sandbox_not_found"

# --- Terminate-mode tunnels: the WebSocket on any loop ------------------------------
head -c 2097152 /dev/urandom >"$T/up.bin"
UP_SHA=$(sha256sum <"$T/up.bin" | cut -c1-64)
printf 'ok\n' >"$T/ok.want"
# (run, not i: the helpers of lib.sh count with i.)
run=1
while [ $run -le 8 ]; do
	case $run in
	4 | 8)
		how="wss"
		set -- --gateway "https://localhost:$GWS" --ca-file "$CERTS/ca.crt" ;;
	2 | 6)
		how="ws, /tunnel/tun/$((LP - 1))"
		set -- --gateway "127.0.0.1:$GW" --listen-port "$LP" ;;
	*)
		how="ws"
		set -- --gateway "127.0.0.1:$GW" ;;
	esac
	spawn "tun$run" "$AKTUN" "$@" --sandbox tun --target "http://127.0.0.1:$ECHO"
	tpid=$LAST_PID
	# A request waits client_wait (5 s) for the client; a few tries cover
	# the time aktunnel takes to attach.
	k=0
	while :; do
		code=$(curl -sS --max-time 10 -o "$T/tun.out" -w '%{http_code}' \
			"http://127.0.0.1:$LP/tun$run" 2>"$T/tun.err")
		[ "$code" = 200 ] && break
		k=$((k + 1))
		[ $k -lt 5 ] || fail "tunnel $run ($how): status '$code': $(cat "$T/tun.out" "$T/tun.err")"
		sleep 0.2
	done
	cmp -s "$T/ok.want" "$T/tun.out" || fail "tunnel $run ($how): body '$(cat "$T/tun.out")'"
	grep -q "\"path\": \"/tun$run\"" "$T/upstream.jsonl" || fail "tunnel $run: /tun$run did not reach the target"
	got=$(curl -sS --max-time 30 "http://127.0.0.1:$LP/chunked" | sha256sum | cut -c1-64)
	assert_eq "tunnel $run ($how): 1688890-byte download" "$BIG_SHA" "$got"
	out=$(curl -sS --max-time 30 --data-binary "@$T/up.bin" "http://127.0.0.1:$LP/sink")
	assert_eq "tunnel $run ($how): 2 MiB upload" \
		"{\"body_len\": 2097152, \"body_sha256\": \"$UP_SHA\"}" "$out"
	term_wait "$tpid" "aktunnel $run"
	assert_eq "tunnel $run: aktunnel exit status" "0" "$RC"
	ok "tunnel $run ($how): request, 1.6 MB download and 2 MiB upload byte-exact"
	run=$((run + 1))
done
kill -0 "$GW_PID" 2>/dev/null || fail "the gateway died"
assert_eq "akgw_tunnel_links_total" "8" "$(metric akgw_tunnel_links_total)"
ok "aktunnel restarted 8 times (6 ws, 2 wss); each tunnel served byte-exact"

# --- SIGHUP: every loop takes the new certificate -------------------------------
old_fp=$(cert_fp <"$CERTS/server.crt")
new_fp=$(cert_fp <"$CERTS/other.crt")
conns "40 TLS connections before SIGHUP" "200 $OK_SHA $old_fp" https seq "$GWS" \
	"127.0.0.1:$GWS" "/sbx/$ECHO/before?i={i}" 40
cp "$CERTS/other.crt" "$T/tls/server.crt"
cp "$CERTS/other.key" "$T/tls/server.key"
kill -HUP "$GW_PID"
wait_log "$T/gateway.log" 'configuration reloaded'
conns "40 TLS connections after SIGHUP" "200 $OK_SHA $new_fp" https seq "$GWS" \
	"127.0.0.1:$GWS" "/sbx/$ECHO/after-hup?i={i}" 40
conns "40 TLS connections at once after SIGHUP" "200 $OK_SHA $new_fp" https together "$GWS" \
	"127.0.0.1:$GWS" "/sbx/$ECHO/after-hup-together?i={i}" 40
ok "SIGHUP: 80 new TLS connections all present the new certificate"

# --- SIGTERM drains, then stops every loop -----------------------------------
term_wait "$GW_PID" "the gateway"
assert_eq "exit status after SIGTERM" "0" "$RC"
assert_contains "drain logged" "received SIGTERM, draining" "$(cat "$T/gateway.log")"
assert_contains "drain over" "every connection finished" "$(cat "$T/gateway.log")"
grep -q ' stopped$' "$T/gateway.log" || fail "no 'stopped' line in the gateway log"
grep -q 'AddressSanitizer\|LeakSanitizer\|ThreadSanitizer\|runtime error' "$T/gateway.log" &&
	fail "sanitizer report in the gateway log"
ok "SIGTERM: all workers stopped, exit 0"
