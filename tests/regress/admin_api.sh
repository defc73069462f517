#!/bin/sh
# The admin API end to end: health and readiness, the bearer token, the
# sandbox directory (list, get, put, replace, delete) with the exact errors a
# client gets, /metrics counting the proxied requests, and a directory
# change under traffic that no request notices.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
ADM=$(free_port)
ECHO=$(free_port)
TOKEN="adm-$(date +%s)-secret-token"

spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" --log "$T/upstream.jsonl"
wait_port "$ECHO"

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
admin:
  address: 127.0.0.1:$ADM
  token: $TOKEN
domains: [localhost]
sandboxes:
  - id: sbx@v1/one
    address: 127.0.0.1
    ports:
      - port: $ECHO
EOF
wait_port "$ADM"

A="http://127.0.0.1:$ADM"
C="curl -sS --max-time 20"
# Proxied requests made so far, by status class, for /metrics.
N2XX=0
N4XX=0

# call METHOD PATH [curl args...]: an authorised admin request; sets STATUS,
# BODY and HEADERS.
call() {
	m=$1 p=$2
	shift 2
	STATUS=$($C -X "$m" -H "Authorization: Bearer $TOKEN" -D "$T/headers" \
		-o "$T/body" -w '%{http_code}' "$@" "$A$p") || fail "curl $m $p"
	BODY=$(cat "$T/body")
	HEADERS=$(tr -d '\r' <"$T/headers")
}

# expect_error WHAT STATUS CODE MESSAGE: the last call was refused so.
expect_error() {
	assert_eq "$1: status" "$2" "$STATUS"
	assert_eq "$1: body" "{\"status\":$2,\"code\":\"$3\",\"message\":\"$4\"}" "$BODY"
}

# proxied URL: a request through the gateway; sets PCODE and PBODY and
# counts it.
proxied() {
	PCODE=$($C -o "$T/proxied" -w '%{http_code}' "$1") || fail "curl $1"
	case "$PCODE" in 2*) N2XX=$((N2XX + 1)) ;; 4*) N4XX=$((N4XX + 1)) ;; esac
	PBODY=$(cat "$T/proxied")
}

# Health and readiness need no token.
out=$($C -i "$A/healthz" | tr -d '\r')
assert_contains "healthz status" "HTTP/1.1 200 OK" "$out"
assert_contains "healthz type" "Content-Type: application/json" "$out"
assert_contains "healthz body" '{"status":"ok"}' "$out"
out=$($C "$A/readyz")
assert_eq "readyz body" '{"status":"ready"}' "$out"
code=$($C -o /dev/null -w '%{http_code}' -X POST "$A/healthz")
assert_eq "POST /healthz" "405" "$code"
ok "healthz and readyz"

# Everything else needs the bearer token.
out=$($C -i "$A/v1/sandboxes" | tr -d '\r')
assert_contains "no token: status" "HTTP/1.1 401 Unauthorized" "$out"
assert_contains "no token: challenge" "WWW-Authenticate: Bearer" "$out"
assert_contains "no token: code" '"code":"unauthorized"' "$out"
assert_contains "no token: sentence" "needs the header 'Authorization: Bearer <admin token>'" "$out"
code=$($C -o /dev/null -w '%{http_code}' -H "Authorization: Bearer wrong-$TOKEN" "$A/v1/sandboxes")
assert_eq "wrong token, longer" "401" "$code"
wrong=$(printf '%s' "$TOKEN" | tr 'a-z' 'A-Z')
code=$($C -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $wrong" "$A/v1/sandboxes")
assert_eq "wrong token, same length" "401" "$code"
code=$($C -o /dev/null -w '%{http_code}' -H "Authorization: Basic $TOKEN" "$A/v1/sandboxes")
assert_eq "token in another scheme" "401" "$code"
code=$($C -o /dev/null -w '%{http_code}' "$A/metrics")
assert_eq "metrics without a token" "401" "$code"
call GET /v1/sandboxes
assert_eq "right token" "200" "$STATUS"
ok "bearer token: 401 without or with a wrong one, 200 with the right one"

# The list, and one sandbox by raw (percent-encoded) and by safe id.
assert_contains "list content type" "Content-Type: application/json" "$HEADERS"
assert_contains "list generation" '{"generation":' "$BODY"
assert_contains "list entry" "\"sandboxes\":[{\"id\":\"sbx@v1/one\",\"safe_id\":\"sbx-at-v1-one\",\"address\":\"127.0.0.1\",\"generation\":" "$BODY"
assert_contains "list ports" "\"ports\":[{\"port\":$ECHO,\"access\":\"public\"}],\"connections\":0}]}" "$BODY"
call GET /v1/sandboxes/sbx%40v1%2Fone
assert_eq "get by raw id" "200" "$STATUS"
assert_contains "get by raw id: body" '"id":"sbx@v1/one"' "$BODY"
call GET /v1/sandboxes/sbx-at-v1-one
assert_eq "get by safe id" "200" "$STATUS"
assert_contains "get by safe id: body" '"id":"sbx@v1/one"' "$BODY"
call GET /v1/sandboxes/nosuch
expect_error "get unknown" 404 sandbox_not_found "No sandbox 'nosuch' is known to this gateway."
ok "list and get"

# A new sandbox is routed at once.
proxied "http://$ECHO-newid.localhost:$GW/echo"
out=$PBODY
assert_eq "before PUT" "404" "$PCODE"
assert_contains "before PUT: code" '"code":"sandbox_not_found"' "$out"
call PUT /v1/sandboxes/newid -H 'Content-Type: application/json' \
	--data-binary "{\"address\": \"127.0.0.1\", \"max_connections\": 50, \"ports\": [{\"port\": $ECHO, \"access\": \"public\"}, {\"port\": \"20000-20010\"}]}"
assert_eq "PUT new: status" "201" "$STATUS"
assert_contains "PUT new: body" "{\"id\":\"newid\",\"safe_id\":\"newid\",\"address\":\"127.0.0.1\",\"max_connections\":50,\"generation\":" "$BODY"
assert_contains "PUT new: ports" "\"ports\":[{\"port\":$ECHO,\"access\":\"public\"},{\"port\":\"20000-20010\",\"access\":\"public\"}],\"connections\":0}" "$BODY"
proxied "http://$ECHO-newid.localhost:$GW/echo"
out=$PBODY
assert_eq "through the new sandbox" "200" "$PCODE"
assert_contains "Host kept" "[\"Host\", \"$ECHO-newid.localhost:$GW\"]" "$out"
proxied "http://127.0.0.1:$GW/newid/$ECHO/echo"
out=$PBODY
assert_eq "path form through the new sandbox" "200" "$PCODE"
ok "PUT creates a sandbox that is routed at once"

# PUT again replaces it: the upstream sees the rewritten Host.
gen1=$(printf '%s' "$BODY" | sed 's/.*"generation":\([0-9]*\).*/\1/')
call PUT /v1/sandboxes/newid -H 'Content-Type: application/json' \
	--data-binary "{\"id\": \"newid\", \"address\": \"127.0.0.1\", \"ports\": [{\"port\": $ECHO, \"host_rewrite\": \"localhost:\${port}\"}]}"
assert_eq "PUT replace: status" "200" "$STATUS"
assert_contains "PUT replace: host_rewrite" '"host_rewrite":"localhost:${port}"' "$BODY"
proxied "http://$ECHO-newid.localhost:$GW/echo"
out=$PBODY
assert_contains "Host rewritten after replace" "[\"Host\", \"localhost:$ECHO\"]" "$out"
call GET /v1/sandboxes/newid
assert_eq "get replaced" "200" "$STATUS"
assert_contains "get replaced: host_rewrite" '"host_rewrite":"localhost:${port}"' "$BODY"
gen2=$(printf '%s' "$BODY" | sed 's/.*"generation":\([0-9]*\).*/\1/')
[ "$gen2" -gt "$gen1" ] || fail "generation did not grow: $gen1 then $gen2"
ok "PUT replaces a sandbox"

# A chunked body, and one large enough that curl asks for 100-continue.
pad=$(head -c 3000 /dev/zero | tr '\0' ' ')
printf '{"address": "127.0.0.1",%s "ports": [{"port": %s}]}' "$pad" "$ECHO" >"$T/padded.json"
call PUT /v1/sandboxes/chunky -H 'Transfer-Encoding: chunked' --data-binary "@$T/padded.json"
assert_eq "chunked PUT" "201" "$STATUS"
call PUT /v1/sandboxes/chunky -H 'Expect: 100-continue' --data-binary "@$T/padded.json"
assert_eq "PUT with 100-continue" "200" "$STATUS"
call DELETE /v1/sandboxes/chunky
assert_eq "delete chunky" "204" "$STATUS"
ok "chunked and 100-continue bodies"

# Refusals, each with its status, code and exact sentence.
call PUT /v1/sandboxes/bad --data-binary '{"address": "127.0.0.1", "x": 1}'
expect_error "unknown key" 400 invalid_sandbox \
	"request body at /x: unknown key 'x' in a sandbox (expected one of: id, address, netns, max_connections, ports, tunnel)"
call PUT /v1/sandboxes/bad --data-binary '{"address": "127.0.0.1", "ports": {"port": 1}}'
expect_error "ports not a list" 400 invalid_sandbox "request body at /ports: ports must be a list, not a mapping"
call PUT /v1/sandboxes/bad --data-binary '{"address": "127.0.0.1", "ports": [{"port": "99999"}]}'
expect_error "bad port" 400 invalid_sandbox \
	"request body at /ports/0/port: port must be a port (1-65535) or a range such as 3000-3999, not '99999'"
call PUT /v1/sandboxes/bad --data-binary '{"address": "localhost"}'
expect_error "bad address" 400 invalid_sandbox \
	"request body at /address: address must be a literal IPv4 or IPv6 address, not 'localhost'"
call PUT /v1/sandboxes/bad --data-binary '{"address": "127.0.0.1", "netns": "/run/netns/x"}'
expect_error "address and netns" 400 invalid_sandbox \
	"request body at /netns: sandbox 'bad' needs exactly one of address and netns"
call PUT /v1/sandboxes/bad --data-binary '{"address": "127.0.0.1",'
expect_error "not JSON" 400 invalid_json \
	"The request body is not valid JSON: string or '}' expected near end of file (line 1, column 24)."
call PUT /v1/sandboxes/bad --data-binary '{"address": "127.0.0.1", "address": "::1"}'
assert_eq "duplicate key" "400" "$STATUS"
assert_contains "duplicate key: code" '"code":"invalid_json"' "$BODY"
call PUT /v1/sandboxes/bad
expect_error "no body" 400 invalid_json \
	"PUT needs a JSON body describing the sandbox, in the shape of a sandboxes: entry of the configuration."
call PUT /v1/sandboxes/bad --data-binary '{"id": "other", "address": "127.0.0.1"}'
expect_error "id mismatch" 400 id_mismatch \
	"The body is for sandbox 'other' but the path names 'bad'; omit id or make them the same."
call PUT /v1/sandboxes/sbx%40v1.one --data-binary '{"address": "127.0.0.1"}'
expect_error "safe-id conflict" 409 id_conflict \
	"Sandbox 'sbx@v1.one' would have the safe id 'sbx-at-v1-one', which sandbox 'sbx@v1/one' already has in URLs; choose another id or delete 'sbx@v1/one' first."
head -c 1100000 /dev/zero | tr '\0' ' ' >"$T/big.json"
call PUT /v1/sandboxes/bad --data-binary "@$T/big.json"
expect_error "body too large" 413 body_too_large \
	"The request body of 1100000 bytes is larger than the 1048576 bytes the admin API accepts."
call PUT /v1/sandboxes/bad -H 'Transfer-Encoding: chunked' --data-binary "@$T/big.json"
expect_error "chunked body too large" 413 body_too_large \
	"The request body is larger than the 1048576 bytes the admin API accepts."
call GET /v1/sandboxes/bad
assert_eq "nothing was stored" "404" "$STATUS"
call POST /v1/sandboxes
expect_error "POST list" 405 method_not_allowed "/v1/sandboxes does not allow POST; use GET, HEAD."
assert_contains "POST list: Allow" "Allow: GET, HEAD" "$HEADERS"
call PATCH /v1/sandboxes/newid
assert_eq "PATCH one" "405" "$STATUS"
assert_contains "PATCH one: Allow" "Allow: GET, HEAD, PUT, DELETE" "$HEADERS"
call GET /v1/nothing
expect_error "unknown path" 404 not_found \
	"The admin API has no /v1/nothing; see /v1/sandboxes, /v1/reload, /metrics, /healthz and /readyz."
call GET /v1/sandboxes/a%zz
expect_error "bad escape" 400 bad_path "The sandbox id in the path is not valid percent-encoding."
ok "refusals with status, code and sentence"

# A sandbox that omits its id takes the one the path names, by safe id too.
call PUT /v1/sandboxes/sbx-at-v1-one --data-binary "{\"address\": \"127.0.0.1\", \"ports\": [{\"port\": $ECHO}]}"
assert_eq "PUT by safe id replaces" "200" "$STATUS"
assert_contains "PUT by safe id keeps the raw id" '"id":"sbx@v1/one"' "$BODY"
ok "PUT by safe id"

# DELETE: the port URL is refused at once; a second DELETE is 404.
call DELETE /v1/sandboxes/newid
assert_eq "DELETE" "204" "$STATUS"
assert_eq "DELETE body" "" "$BODY"
proxied "http://$ECHO-newid.localhost:$GW/echo"
out=$PBODY
assert_eq "after DELETE" "404" "$PCODE"
assert_contains "after DELETE: code" '"code":"sandbox_not_found"' "$out"
call DELETE /v1/sandboxes/newid
expect_error "DELETE again" 404 sandbox_not_found "No sandbox 'newid' is known to this gateway."
call GET /v1/sandboxes
case "$BODY" in *'"newid"'*) fail "newid still listed: $BODY" ;; esac
ok "DELETE"

# /metrics counts exactly the proxied requests; admin requests are not in it.
call GET /metrics
assert_eq "metrics status" "200" "$STATUS"
assert_contains "metrics type" "Content-Type: text/plain; version=0.0.4" "$HEADERS"
assert_contains "2xx count" "akgw_requests_total{class=\"2xx\"} $N2XX
" "$BODY"
assert_contains "4xx count" "akgw_requests_total{class=\"4xx\"} $N4XX
" "$BODY"
assert_contains "error code count" "akgw_gateway_errors_total{code=\"sandbox_not_found\"} $N4XX" "$BODY"
assert_contains "histogram" "akgw_request_duration_seconds_count $((N2XX + N4XX))" "$BODY"
assert_contains "connections" "# TYPE akgw_connections_active gauge" "$BODY"
ok "metrics ($N2XX 2xx, $N4XX 4xx)"

# A change under traffic: 200 keep-alive requests while 20 PUTs alternate
# host_rewrite.  Every request succeeds, and both versions were used.
call PUT /v1/sandboxes/live --data-binary "{\"address\": \"127.0.0.1\", \"ports\": [{\"port\": $ECHO}]}"
assert_eq "PUT live" "201" "$STATUS"
: >"$T/upstream.jsonl"
mkdir "$T/traffic"
$C --rate 80/s -w '%{http_code} %{num_connects}\n' -o "$T/traffic/#1" \
	"http://$ECHO-live.localhost:$GW/echo?i=[1-200]" >"$T/traffic.codes" 2>"$T/traffic.err" &
TRAFFIC=$!
i=0
while [ $i -lt 20 ]; do
	if [ $((i % 2)) -eq 0 ]; then
		body="{\"address\": \"127.0.0.1\", \"ports\": [{\"port\": $ECHO, \"host_rewrite\": \"localhost:\${port}\"}]}"
	else
		body="{\"address\": \"127.0.0.1\", \"ports\": [{\"port\": $ECHO}]}"
	fi
	call PUT /v1/sandboxes/live --data-binary "$body"
	assert_eq "PUT $i under traffic" "200" "$STATUS"
	sleep 0.1
	i=$((i + 1))
done
wait "$TRAFFIC" || fail "traffic curl failed: $(cat "$T/traffic.err")"
n=$(wc -l <"$T/traffic.codes")
assert_eq "requests made under traffic" "200" "$n"
bad=$(grep -vc '^200 ' "$T/traffic.codes")
assert_eq "requests under traffic that failed" "0" "$bad"
conns=$(awk '{s += $2} END {print s}' "$T/traffic.codes")
assert_eq "client connections for 200 requests" "1" "$conns"
n=$(wc -l <"$T/upstream.jsonl")
assert_eq "requests the upstream saw" "200" "$n"
grep -q "\"Host\", \"localhost:$ECHO\"" "$T/upstream.jsonl" || fail "no request used the rewritten Host"
grep -q "\"Host\", \"$ECHO-live.localhost:$GW\"" "$T/upstream.jsonl" || fail "no request kept its Host"
N2XX=$((N2XX + 200))
call GET /metrics
assert_contains "2xx count after traffic" "akgw_requests_total{class=\"2xx\"} $N2XX
" "$BODY"
ok "20 PUTs under 200 keep-alive requests, all answered 200"

# The token never reaches the log; each admin request has one line.
wait_log "$T/gateway.log" '"DELETE /v1/sandboxes/newid" 204'
wait_log "$T/gateway.log" '"GET /v1/sandboxes" 401 error=unauthorized'
if grep -q "$TOKEN" "$T/gateway.log"; then fail "the admin token was logged"; fi
if grep -q "$wrong" "$T/gateway.log"; then fail "a wrong token was logged"; fi
ok "token never logged"

# SIGTERM stops the gateway cleanly, admin listener included.
kill -TERM "$GW_PID"
i=0
while kill -0 "$GW_PID" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
kill -0 "$GW_PID" 2>/dev/null && fail "gateway still running after SIGTERM"
wait "$GW_PID"
assert_eq "exit status after SIGTERM" "0" "$?"
ok "SIGTERM stops the gateway"
