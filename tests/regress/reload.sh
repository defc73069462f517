#!/bin/sh
# Reloading the configuration file (SIGHUP, POST /v1/reload) with two event
# loops, each check made on new connections so that both loops are asked:
# a sandbox added, one whose port changed and one removed; a broken file
# refused whole (file:line:column in the log and in the 422, the running
# configuration serving as before, the reload metrics); a listener added
# and one removed while a keep-alive connection on it still gets answers;
# limits.max_body_size and a domain; and the admin API's changes kept over
# reloads as gateway/reload.c's header says.  Requests refused by the
# gateway must never reach a backend.
. "$(dirname "$0")/lib.sh"

GW1=$(free_port)
GW2=$(free_port)
ADM=$(free_port)
ECHO=$(free_port)
ECHO2=$(free_port)
TOKEN="reload-$(date +%s)-admin-token"
C="curl -sS --max-time 20"
UP="$T/upstream.jsonl"
UP2="$T/upstream2.jsonl"

spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" --log "$UP"
spawn backend2 $PY "$TOP/tests/regress/backend.py" --port "$ECHO2" --log "$UP2"
wait_port "$ECHO"
wait_port "$ECHO2"

# What the file says; conf prints it, write_conf replaces the file whole.
L1=1            # listener GW1
L2=0            # listener GW2
DOMAINS=localhost
MAXBODY=""      # limits.max_body_size when set
ADDED=0         # sandbox "added"
MOVING=$ECHO    # the port of sandbox "moving"
GONE=1          # sandbox "gone"
DELME=1         # sandbox "delme"
BROKEN=0        # an unknown key, and a sandbox "halfway" that never comes
conf() {
	echo "workers: 2"
	echo "listen:"
	[ $L1 = 1 ] && echo "  - address: 127.0.0.1:$GW1"
	[ $L2 = 1 ] && echo "  - address: 127.0.0.1:$GW2"
	cat <<EOF
admin:
  address: 127.0.0.1:$ADM
  token: $TOKEN
domains: [$DOMAINS]
EOF
	[ -n "$MAXBODY" ] && printf 'limits:\n  max_body_size: %s\n' "$MAXBODY"
	cat <<EOF
sandboxes:
  - id: keep
    address: 127.0.0.1
    ports:
      - port: $ECHO
EOF
	[ $BROKEN = 1 ] && echo "        bogus: 1"
	[ $ADDED = 1 ] && printf '  - id: added\n    address: 127.0.0.1\n    ports:\n      - port: %s\n' "$ECHO"
	[ $BROKEN = 1 ] && printf '  - id: halfway\n    address: 127.0.0.1\n    ports:\n      - port: %s\n' "$ECHO"
	printf '  - id: moving\n    address: 127.0.0.1\n    ports:\n      - port: %s\n' "$MOVING"
	[ $GONE = 1 ] && printf '  - id: gone\n    address: 127.0.0.1\n    ports:\n      - port: %s\n' "$ECHO"
	printf '  - id: filerep\n    address: 127.0.0.1\n    ports:\n      - port: %s\n' "$ECHO"
	[ $DELME = 1 ] && printf '  - id: delme\n    address: 127.0.0.1\n    ports:\n      - port: %s\n' "$ECHO"
	return 0
}
write_conf() {
	conf >"$T/next.yaml" || fail "conf"
	mv "$T/next.yaml" "$T/gateway.yaml"
}

conf >"$T/initial.yaml"
spawn_gateway "$GW1" <"$T/initial.yaml"
wait_port "$ADM"
GW=$GW1         # a listener the file has

# probe.py N URL [HOST [BODY_BYTES]]: N requests to URL, each on a new
# connection (so the kernel spreads them over the loops); GET, or POST
# with BODY_BYTES bytes.  One line each: the status and the error code of
# a JSON error body ("-" for any other body).
cat >"$T/probe.py" <<'PYEOF'
import http.client, json, sys, urllib.parse
n, url = int(sys.argv[1]), urllib.parse.urlsplit(sys.argv[2])
host = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else None
body = b"x" * int(sys.argv[4]) if len(sys.argv) > 4 else None
target = url.path + ("?" + url.query if url.query else "")
for i in range(n):
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    hdrs = {"Connection": "close"}
    if host:
        hdrs["Host"] = host
    c.request("POST" if body is not None else "GET", target, body, hdrs)
    r = c.getresponse()
    data = r.read()
    c.close()
    code = "-"
    if r.status != 200:
        try:
            code = json.loads(data)["code"]
        except Exception:
            pass
    print(r.status, code)
PYEOF

# expect WHAT WANT URL [HOST [BODY_BYTES]]: 10 requests on new connections
# all get WANT ("200 -", "404 sandbox_not_found", ...).
expect() {
	what=$1 want=$2
	shift 2
	out=$(timeout 60 $PY "$T/probe.py" 10 "$@" 2>&1) || fail "$what: $out"
	got=$(printf '%s\n' "$out" | sort | uniq -c | sed 's/^ *//' | tr '\n' ';')
	assert_eq "$what" "10 $want;" "$got"
}

# settle WANT URL [HOST [BODY_BYTES]]: what a loop takes when its channel
# wakes it (limits, domains, listeners) may lag the reload's log line by a
# moment; ask until one request gets WANT (2 s at most).
settle() {
	sw=$1
	shift
	si=0
	until [ "$($PY "$T/probe.py" 1 "$@" 2>&1)" = "$sw" ]; do
		si=$((si + 1))
		[ $si -lt 40 ] || fail "no '$sw' from $1 within 2 s of the reload"
		sleep 0.05
	done
}

# reached TAG LOG: how many requests with ?t=TAG backend LOG got.
reached() {
	grep -c "[?&]t=$1\"" "$2"
}

# The value of metric $1 (labels included) on /metrics.
metric() {
	$C -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$ADM/metrics" >"$T/metrics" ||
		fail "GET /metrics"
	awk -v m="$1" '$1 == m { print $2 }' "$T/metrics"
}

# call METHOD PATH [curl args]: an admin API request; sets STATUS and BODY.
call() {
	m=$1 p=$2
	shift 2
	STATUS=$($C -X "$m" -H "Authorization: Bearer $TOKEN" -o "$T/body" \
		-w '%{http_code}' "$@" "http://127.0.0.1:$ADM$p") || fail "curl $m $p"
	BODY=$(cat "$T/body")
}

# hup: SIGHUP, and wait until the gateway says it reloaded (10 s at most);
# a refusal fails the test.
NOK=0           # reloads applied
hup() {
	hn=$(grep -c 'configuration reloaded from' "$T/gateway.log")
	he=$(grep -c 'configuration not reloaded' "$T/gateway.log")
	kill -HUP "$GW_PID"
	hi=0
	while [ "$(grep -c 'configuration reloaded from' "$T/gateway.log")" -le "$hn" ]; do
		[ "$(grep -c 'configuration not reloaded' "$T/gateway.log")" -gt "$he" ] &&
			fail "reload refused: $(grep 'configuration not reloaded' "$T/gateway.log" | tail -n 1)"
		hi=$((hi + 1))
		[ $hi -lt 200 ] || fail "SIGHUP: no 'configuration reloaded' within 10 s"
		sleep 0.05
	done
	NOK=$((NOK + 1))
	LAST_RELOAD=$(grep 'configuration reloaded from' "$T/gateway.log" | tail -n 1)
}

# --- Sandboxes added, changed and removed by the file. -------------------
expect "keep" "200 -" "http://127.0.0.1:$GW/keep/$ECHO/echo?t=keep0"
expect "added, before" "404 sandbox_not_found" "http://127.0.0.1:$GW/added/$ECHO/echo?t=added0"
expect "moving, on its first port" "200 -" "http://127.0.0.1:$GW/moving/$ECHO/echo?t=moving0"
expect "moving, on its next port" "404 port_not_published" "http://127.0.0.1:$GW/moving/$ECHO2/echo?t=moving0"
expect "gone, before" "200 -" "http://127.0.0.1:$GW/gone/$ECHO/echo?t=gone0"
assert_eq "refused before the reload: reached the backends" "0 0" \
	"$(reached added0 "$UP") $(reached moving0 "$UP2")"

ADDED=1 MOVING=$ECHO2 GONE=0
write_conf
hup
assert_contains "reload line" "configuration reloaded from $T/gateway.yaml: 1 listener, 5 sandboxes (1 added, 1 changed, 1 removed, 3 unchanged, 0 from the admin API kept)" "$LAST_RELOAD"
expect "added, after" "200 -" "http://127.0.0.1:$GW/added/$ECHO/echo?t=added1"
out=$($C "http://127.0.0.1:$GW/added/$ECHO/echo?t=added2")
assert_contains "added: the backend's answer" '"path": "/echo?t=added2"' "$out"
assert_contains "added: the prefix" "[\"X-Forwarded-Prefix\", \"/added/$ECHO\"]" "$out"
expect "moving, on its old port" "404 port_not_published" "http://127.0.0.1:$GW/moving/$ECHO/echo?t=moving1"
expect "moving, on its new port" "200 -" "http://127.0.0.1:$GW/moving/$ECHO2/echo?t=moving2"
expect "gone, after" "404 sandbox_not_found" "http://127.0.0.1:$GW/gone/$ECHO/echo?t=gone1"
expect "keep, after" "200 -" "http://127.0.0.1:$GW/keep/$ECHO/echo?t=keep1"
assert_eq "the answered ones reached their backend" "10 1 10 10" \
	"$(reached added1 "$UP") $(reached added2 "$UP") $(reached moving2 "$UP2") $(reached keep1 "$UP")"
assert_eq "refused after the reload: reached the backends" "0 0 0" \
	"$(reached moving1 "$UP") $(reached moving1 "$UP2") $(reached gone1 "$UP")"
ok "SIGHUP: a sandbox added (404 then 200), a port changed, one removed (200 then 404), on every loop"

# --- A broken file is refused whole. ------------------------------------
# It has an unknown key, and also drops "added" and adds "halfway": none
# of that may happen.
BROKEN=1 ADDED=0
write_conf
bl=$(grep -n 'bogus' "$T/gateway.yaml" | cut -d: -f1)
bc=$(awk -v l="$bl" 'NR == l { print index($0, "bogus") }' "$T/gateway.yaml")
where="$T/gateway.yaml:$bl:$bc: unknown key 'bogus'"
kill -HUP "$GW_PID"
wait_log "$T/gateway.log" 'SIGHUP: configuration not reloaded'
line=$(grep 'SIGHUP: configuration not reloaded' "$T/gateway.log")
assert_contains "refusal logged with file:line:column" \
	"error SIGHUP: configuration not reloaded, the running one stays: $where" "$line"
expect "added, after the refusal" "200 -" "http://127.0.0.1:$GW/added/$ECHO/echo?t=added3"
expect "halfway, after the refusal" "404 sandbox_not_found" "http://127.0.0.1:$GW/halfway/$ECHO/echo?t=halfway"
expect "moving, after the refusal" "200 -" "http://127.0.0.1:$GW/moving/$ECHO2/echo?t=moving3"
expect "gone, after the refusal" "404 sandbox_not_found" "http://127.0.0.1:$GW/gone/$ECHO/echo?t=gone2"
assert_eq "refused after the refusal: reached the backend" "0 0" \
	"$(reached halfway "$UP") $(reached gone2 "$UP")"
assert_eq "metric: reloads refused" "1" "$(metric 'akgw_config_reloads_total{result="error"}')"
assert_eq "metric: reloads applied" "$NOK" "$(metric 'akgw_config_reloads_total{result="ok"}')"
assert_eq "metric: last reload successful" "0" "$(metric akgw_config_last_reload_successful)"
ok "SIGHUP with a broken file: refused with $where, the running configuration serves, metrics count it"

call POST /v1/reload
assert_eq "POST /v1/reload, broken file: status" "422" "$STATUS"
assert_eq "POST /v1/reload, broken file: body" \
	"{\"status\":422,\"code\":\"invalid_config\",\"message\":\"The configuration was not reloaded and the running one stays: $where in a port (expected one of: port, access, host_rewrite, protocol)\"}" "$BODY"
wait_log "$T/gateway.log" 'the admin API: configuration not reloaded'
expect "halfway, after the refused POST" "404 sandbox_not_found" "http://127.0.0.1:$GW/halfway/$ECHO/echo?t=halfway"
assert_eq "metric: reloads refused, after POST" "2" "$(metric 'akgw_config_reloads_total{result="error"}')"

BROKEN=0 ADDED=1
write_conf
call POST /v1/reload
assert_eq "POST /v1/reload, fixed file: status" "200" "$STATUS"
NOK=$((NOK + 1))
assert_eq "POST /v1/reload, fixed file: body" \
	"{\"status\":\"reloaded\",\"file\":\"$T/gateway.yaml\",\"reloads\":$NOK,\"sandboxes\":5}" "$BODY"
wait_log "$T/gateway.log" 'admin .*"POST /v1/reload" 200'
assert_eq "metric: reloads applied, after POST" "$NOK" "$(metric 'akgw_config_reloads_total{result="ok"}')"
assert_eq "metric: reloads refused, after the fix" "2" "$(metric 'akgw_config_reloads_total{result="error"}')"
assert_eq "metric: last reload successful, after the fix" "1" "$(metric akgw_config_last_reload_successful)"
now=$(date +%s)
ts=$(metric akgw_config_last_reload_success_timestamp_seconds)
[ $((now - ts)) -ge 0 ] && [ $((now - ts)) -le 10 ] ||
	fail "last reload success timestamp $ts, now $now"
expect "added, after the fix" "200 -" "http://127.0.0.1:$GW/added/$ECHO/echo?t=added4"
ok "POST /v1/reload: 422 invalid_config with $where, then 200 once the file is fixed"

# --- Listeners: one added, then the first removed. ----------------------
L2=1
write_conf
hup
wait_port "$GW2"
settle "200 -" "http://127.0.0.1:$GW2/keep/$ECHO/echo?t=gw2a"
expect "the new listener" "200 -" "http://127.0.0.1:$GW2/keep/$ECHO/echo?t=gw2"
expect "the first listener, kept" "200 -" "http://127.0.0.1:$GW1/keep/$ECHO/echo?t=gw1"
ok "a listener added by SIGHUP serves; the kept one too"

# ka.py PORT GO ECHO: a keep-alive connection to PORT; one request, "first
# STATUS", then once file GO exists (30 s at most) two more on the same
# connection, "then STATUS STATUS".
cat >"$T/ka.py" <<'PYEOF'
import http.client, os, sys, time
port, go, echo = int(sys.argv[1]), sys.argv[2], sys.argv[3]
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
c.request("GET", "/keep/%s/echo?t=ka1" % echo)
r = c.getresponse()
r.read()
print("first", r.status, flush=True)
end = time.monotonic() + 30
while not os.path.exists(go) and time.monotonic() < end:
    time.sleep(0.05)
sock = c.sock
got = []
for t in ("ka2", "ka3"):
    c.request("GET", "/keep/%s/echo?t=%s" % (echo, t))
    r = c.getresponse()
    r.read()
    got.append(str(r.status))
assert c.sock is sock, "the connection was opened again"
print("then", " ".join(got), flush=True)
PYEOF
spawn ka $PY "$T/ka.py" "$GW1" "$T/go" "$ECHO"
KA_PID=$LAST_PID
wait_log "$T/ka.log" '^first'
assert_eq "keep-alive connection, before" "first 200" "$(cat "$T/ka.log")"

L1=0
write_conf
hup
GW=$GW2
# The loops close their sockets as they take the new configuration.
$PY - "$GW1" <<'PYEOF' || fail "the removed listener still accepts new connections"
import socket, sys, time
port, end, refused = int(sys.argv[1]), time.monotonic() + 5, 0
while refused < 20 and time.monotonic() < end:
    s = socket.socket()
    s.settimeout(1)
    if s.connect_ex(("127.0.0.1", port)) != 0:
        refused += 1
    else:
        refused = 0
        time.sleep(0.02)
    s.close()
sys.exit(0 if refused >= 20 else 1)
PYEOF
touch "$T/go"
wait "$KA_PID" || fail "keep-alive connection on the removed listener: $(cat "$T/ka.log")"
assert_eq "keep-alive connection, after its listener was removed" \
	"first 200
then 200 200" "$(cat "$T/ka.log")"
assert_eq "keep-alive requests at the backend" "1 1 1" \
	"$(reached ka1 "$UP") $(reached ka2 "$UP") $(reached ka3 "$UP")"
expect "the remaining listener" "200 -" "http://127.0.0.1:$GW2/keep/$ECHO/echo?t=gw2b"
ok "the first listener removed: new connections refused, a keep-alive one on it still answered"

# --- limits.max_body_size and a domain. ----------------------------------
expect "2000-byte POST, no limit" "200 -" "http://127.0.0.1:$GW/keep/$ECHO/echo?t=big0" "" 2000
expect "host form on example.test, before" "404 no_route" \
	"http://127.0.0.1:$GW/echo?t=dom0" "$ECHO-keep.example.test"
MAXBODY=1KiB DOMAINS="localhost, example.test"
write_conf
hup
settle "413 body_too_large" "http://127.0.0.1:$GW/keep/$ECHO/echo?t=big2" "" 2000
settle "200 -" "http://127.0.0.1:$GW/echo?t=dom2" "$ECHO-keep.example.test"
expect "2000-byte POST, 1 KiB limit" "413 body_too_large" "http://127.0.0.1:$GW/keep/$ECHO/echo?t=big1" "" 2000
expect "500-byte POST, 1 KiB limit" "200 -" "http://127.0.0.1:$GW/keep/$ECHO/echo?t=small1" "" 500
expect "host form on example.test, after" "200 -" \
	"http://127.0.0.1:$GW/echo?t=dom1" "$ECHO-keep.example.test"
out=$($C -H "Host: $ECHO-keep.example.test" "http://127.0.0.1:$GW/echo?t=dom3")
assert_contains "host form: Host kept" "[\"Host\", \"$ECHO-keep.example.test\"]" "$out"
assert_eq "POSTs and host-form requests at the backend" "10 0 10 0 10" \
	"$(reached big0 "$UP") $(reached big1 "$UP") $(reached small1 "$UP") $(reached dom0 "$UP") $(reached dom1 "$UP")"
ok "limits.max_body_size (200 then 413, never forwarded) and a domain added by SIGHUP"

# --- The admin API's changes and the file. ------------------------------
# A sandbox PUT through the API stays when the file does not have it.
call PUT /v1/sandboxes/apisb -H 'Content-Type: application/json' \
	--data-binary "{\"address\": \"127.0.0.1\", \"ports\": [{\"port\": $ECHO}]}"
assert_eq "PUT apisb" "201" "$STATUS"
# A file sandbox replaced through the API (its port moves to ECHO2).
call PUT /v1/sandboxes/filerep -H 'Content-Type: application/json' \
	--data-binary "{\"address\": \"127.0.0.1\", \"ports\": [{\"port\": $ECHO2}]}"
assert_eq "PUT filerep (a file sandbox)" "200" "$STATUS"
# A file sandbox deleted through the API.
call DELETE /v1/sandboxes/delme
assert_eq "DELETE delme (a file sandbox)" "204" "$STATUS"
expect "delme, deleted" "404 sandbox_not_found" "http://127.0.0.1:$GW/delme/$ECHO/echo?t=delme0"
hup
assert_contains "reload line, with the admin API's" "5 sandboxes (0 added, 0 changed, 0 removed, 3 unchanged, 2 from the admin API kept)" "$LAST_RELOAD"
assert_contains "the file's filerep waits" "warn  reload: sandbox 'filerep' of the file is not applied: the admin API's sandbox 'filerep' has its id in URLs; delete that one through the API to use the file's" \
	"$(grep "sandbox 'filerep' of the file" "$T/gateway.log")"
expect "apisb, PUT through the API, not in the file" "200 -" "http://127.0.0.1:$GW/apisb/$ECHO/echo?t=apisb1"
expect "filerep, the API's version" "200 -" "http://127.0.0.1:$GW/filerep/$ECHO2/echo?t=filerep1"
expect "filerep, the file's port" "404 port_not_published" "http://127.0.0.1:$GW/filerep/$ECHO/echo?t=filerep2"
expect "delme, deleted through the API, still in the file" "404 sandbox_not_found" "http://127.0.0.1:$GW/delme/$ECHO/echo?t=delme1"
call GET /v1/sandboxes/filerep
assert_contains "filerep through the API" "\"ports\":[{\"port\":$ECHO2," "$BODY"
assert_eq "refused ones at the backends" "0 0 0 10" \
	"$(reached delme0 "$UP") $(reached delme1 "$UP") $(reached filerep2 "$UP") $(reached filerep1 "$UP2")"
ok "after SIGHUP: a sandbox PUT through the API stays, an API replacement stays, an API deletion stays"

# delme leaves the file, then comes back: the file's again.
DELME=0
write_conf
hup
expect "delme, out of the file" "404 sandbox_not_found" "http://127.0.0.1:$GW/delme/$ECHO/echo?t=delme2"
DELME=1
write_conf
hup
expect "delme, back in the file" "200 -" "http://127.0.0.1:$GW/delme/$ECHO/echo?t=delme3"
expect "apisb, still" "200 -" "http://127.0.0.1:$GW/apisb/$ECHO/echo?t=apisb2"
expect "filerep, still the API's" "200 -" "http://127.0.0.1:$GW/filerep/$ECHO2/echo?t=filerep3"
assert_eq "delme at the backend" "0 10" "$(reached delme2 "$UP") $(reached delme3 "$UP")"
ok "a sandbox deleted through the API comes back once the file drops it and declares it again"

# The API's filerep deleted through the API: the file's, which waited,
# is used from the next reload (gateway/reload.c: "a file entry with that
# id waits until the API deletes it"; the warning above says so too).
call DELETE /v1/sandboxes/filerep
assert_eq "DELETE filerep (the API's)" "204" "$STATUS"
hup
out=$(timeout 60 $PY "$T/probe.py" 10 "http://127.0.0.1:$GW/filerep/$ECHO/echo?t=filerep4" 2>&1)
got=$(printf '%s\n' "$out" | sort | uniq -c | sed 's/^ *//' | tr '\n' ';')
assert_eq "filerep, the file's after the API's was deleted" "10 200 -;" "$got"
ok "a file sandbox replaced through the API: the file's comes back once the API deletes its own"

assert_eq "metric: reloads applied, at the end" "$NOK" "$(metric 'akgw_config_reloads_total{result="ok"}')"
assert_eq "metric: reloads refused, at the end" "2" "$(metric 'akgw_config_reloads_total{result="error"}')"

# A clean stop: no sanitizer report.
stop "$GW_PID"
kill -0 "$GW_PID" 2>/dev/null && fail "the gateway did not stop"
grep -q 'AddressSanitizer\|LeakSanitizer\|runtime error' "$T/gateway.log" &&
	fail "sanitizer report in the gateway log"
ok "reload"
