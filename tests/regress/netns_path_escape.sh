#!/bin/sh
# A sandbox's netns path could lead out of /run/netns (issue 16, section 5):
# `netns: /run/netns/../../proc/1/ns/net` was accepted with 201, and a
# symbolic link planted in /run/netns was followed into any namespace.
# Now only a plain name in netns_dir is accepted, and what is there must
# be a network namespace file, checked again on every use.  The admin API
# answers 400 with the JSON pointer, `akgateway --check` with
# file:line:column, and no refused sandbox ever reaches a backend.
. "$(dirname "$0")/lib.sh"

NS=akgw-nsesc-$$
LINK=/run/netns/akgw-nsesc-link-$$
FILE=/run/netns/akgw-nsesc-file-$$
FIFO=/run/netns/akgw-nsesc-fifo-$$
LATER=/run/netns/akgw-nsesc-later-$$
trap 'rm -f "$LINK" "$FILE" "$FIFO" "$LATER"; cleanup' EXIT
netns_add "$NS"
# The namespace of this shell, where the host backend listens.
HOSTNS=/proc/$$/ns/net

GW=$(free_port)
ADM=$(free_port)
PORT=$(free_port)
spawn host_backend $PY "$TOP/tests/regress/backend.py" --port "$PORT" --log "$T/host.jsonl"
spawn ns_backend ip netns exec "$NS" $PY "$TOP/tests/regress/backend.py" --port "$PORT" --log "$T/ns.jsonl"
wait_port "$PORT"
wait_port_ns "$PORT"

ln -s "$HOSTNS" "$LINK" || fail "cannot make $LINK"
: >"$FILE" || fail "cannot make $FILE"
mkfifo "$FIFO" || fail "cannot make $FIFO"

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
admin:
  address: 127.0.0.1:$ADM
sandboxes:
  - id: inns
    netns: /run/netns/$NS
    ports:
      - port: $PORT
EOF
wait_port "$ADM"

A="http://127.0.0.1:$ADM"
C="curl -sS --max-time 10"
n() { wc -l <"$1" | tr -d ' '; }
DIRMSG="netns must name a namespace directly in /run/netns (netns_dir), as /run/netns/NAME with no '/', '.' or '..' in NAME"

# put_refused WHAT NETNS MESSAGE: PUT a sandbox at NETNS; expect 400
# invalid_sandbox with "request body at /netns: MESSAGE", nothing stored.
put_refused() {
	body="{\"netns\": \"$2\", \"ports\": [{\"port\": $PORT}]}"
	status=$($C -X PUT -o "$T/body" -w '%{http_code}' --data-binary "$body" "$A/v1/sandboxes/bad") ||
		fail "$1: curl"
	assert_eq "$1: status" "400" "$status"
	assert_eq "$1: body" \
		"{\"status\":400,\"code\":\"invalid_sandbox\",\"message\":\"request body at /netns: $3\"}" \
		"$(cat "$T/body")"
	status=$($C -o /dev/null -w '%{http_code}' "$A/v1/sandboxes/bad")
	assert_eq "$1: nothing stored" "404" "$status"
}

put_refused "dot-dot" "/run/netns/../../proc/1/ns/net" \
	"$DIRMSG, not '/run/netns/../../proc/1/ns/net'"
put_refused "dot-dot name" "/run/netns/.." "$DIRMSG, not '/run/netns/..'"
put_refused "subdirectory" "/run/netns/a/b" "$DIRMSG, not '/run/netns/a/b'"
put_refused "outside netns_dir" "$HOSTNS" \
	"netns must be a path in /run/netns (netns_dir), such as /run/netns/NAME, not '$HOSTNS'"
put_refused "symbolic link" "$LINK" \
	"network namespace $LINK is a symbolic link, which is not followed"
put_refused "regular file" "$FILE" "$FILE is not a network namespace file"
# A FIFO nobody writes to would block an open(2) for reading forever.
put_refused "FIFO" "$FIFO" "$FIFO is not a network namespace file"
kill -0 "$GW_PID" 2>/dev/null || fail "the gateway died"
ok "admin API: '..', a path outside netns_dir, a link, a file and a FIFO are 400 at /netns"

# A real namespace is accepted, and reached, not the host.
status=$($C -X PUT -o "$T/body" -w '%{http_code}' \
	--data-binary "{\"netns\": \"/run/netns/$NS\", \"ports\": [{\"port\": $PORT}]}" \
	"$A/v1/sandboxes/good") || fail "curl PUT good"
assert_eq "real namespace: status" "201" "$status"
out=$($C "http://$PORT-good.localhost:$GW/echo?via=good") || fail "request to good"
assert_contains "real namespace reached" '"path": "/echo?via=good"' "$out"
assert_eq "requests in the namespace" "1" "$(n "$T/ns.jsonl")"
ok "admin API: a namespace in /run/netns is accepted and reached"

# A name with nothing there yet is accepted; a link planted there later is
# not followed when the gateway connects.
status=$($C -X PUT -o "$T/body" -w '%{http_code}' \
	--data-binary "{\"netns\": \"$LATER\", \"ports\": [{\"port\": $PORT}]}" \
	"$A/v1/sandboxes/later") || fail "curl PUT later"
assert_eq "a namespace not made yet: status" "201" "$status"
ln -s "$HOSTNS" "$LATER" || fail "cannot make $LATER"
out=$($C -i "http://$PORT-later.localhost:$GW/planted" | tr -d '\r')
assert_contains "planted link: status" "HTTP/1.1 502" "$out"
assert_contains "planted link: code" "X-Gateway-Error: sandbox_unreachable" "$out"
assert_eq "requests that reached the host through the link" "0" "$(grep -c '/planted' "$T/host.jsonl")"
rm -f "$LATER"
: >"$LATER"
out=$($C -i "http://$PORT-later.localhost:$GW/planted-file" | tr -d '\r')
assert_contains "planted file: status" "HTTP/1.1 502" "$out"
assert_contains "planted file: code" "X-Gateway-Error: sandbox_unreachable" "$out"
wait_log "$T/gateway.log" "$LATER is not a network namespace file"
assert_eq "requests that reached the host" "0" "$(n "$T/host.jsonl")"
ok "a link or file planted after the sandbox was accepted is never entered"

# The configuration file: the same refusals, as file:line:column.
# check_refused WHAT NETNS MESSAGE
check_refused() {
	cat >"$T/bad.yaml" <<EOF
listen:
  - address: 127.0.0.1:$GW
sandboxes:
  - id: bad
    netns: $2
EOF
	out=$("$AKGW" -c "$T/bad.yaml" --check 2>&1)
	rc=$?
	assert_eq "$1: --check exit status" "1" "$rc"
	assert_eq "$1: --check message" "akgateway: $T/bad.yaml:5:12: $3" "$out"
}
check_refused "dot-dot" "/run/netns/../../proc/1/ns/net" \
	"$DIRMSG, not '/run/netns/../../proc/1/ns/net'"
check_refused "outside netns_dir" "$HOSTNS" \
	"netns must be a path in /run/netns (netns_dir), such as /run/netns/NAME, not '$HOSTNS'"
check_refused "symbolic link" "$LINK" \
	"network namespace $LINK is a symbolic link, which is not followed"
check_refused "regular file" "$FILE" "$FILE is not a network namespace file"
cat >"$T/good.yaml" <<EOF
listen:
  - address: 127.0.0.1:$GW
netns_dir: /run/netns/
sandboxes:
  - id: good
    netns: /run/netns/$NS
EOF
out=$("$AKGW" -c "$T/good.yaml" --check 2>&1) || fail "--check refused a real namespace: $out"
cat >"$T/dir.yaml" <<EOF
listen:
  - address: 127.0.0.1:$GW
netns_dir: /run/netns/../../proc
EOF
out=$("$AKGW" -c "$T/dir.yaml" --check 2>&1)
assert_eq "netns_dir with '..'" \
	"akgateway: $T/dir.yaml:3:12: netns_dir must be an absolute path without '.', '..' or '//', such as /run/netns, not '/run/netns/../../proc'" \
	"$out"
ok "--check: the same refusals with file:line:column"
