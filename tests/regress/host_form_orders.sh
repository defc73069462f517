#!/bin/sh
# Issue 17, section 2: AKernel's host form.  AKernel's e2e test sends
# Host: {sandbox_id}-{port}.{domain}, which used to get 404 no_route; both
# orders are read now.  A host that reads both ways, with both readings
# naming a published port, is refused with 400 ambiguous_host; a domain's
# host_format pins one order; a 63-byte first label (the DNS limit AKernel
# checks) routes.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
UP=$(free_port)
spawn backend $PY "$TOP/tests/regress/backend.py" --port "$UP" --log "$T/up.jsonl"
wait_port "$UP"
# A sandbox id that makes "{id}-{UP}" exactly 63 bytes.
LONG=$($PY -c "import sys; print('l' * (63 - 1 - len(sys.argv[1])))" "$UP")
spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
domains:
  - localhost
  - name: pinned.localhost
    host_format: port-id
  - name: ak.localhost
    host_format: id-port
log:
  format: json
sandboxes:
  - id: sbx1-abc123
    address: 127.0.0.1
    ports: [{port: $UP}]
  - id: s-9
    address: 127.0.0.1
    ports: [{port: $UP}]
  - id: $UP-s
    address: 127.0.0.1
    ports: [{port: 9}]
  - id: $LONG
    address: 127.0.0.1
    ports: [{port: $UP}]
EOF

C="curl -sS --max-time 10"
# Status, error code and the sandbox of the last access line for Host $1.
get() {
	$C -o "$T/body" -w '%{http_code}' -H "Host: $1" "http://127.0.0.1:$GW/echo"
}
last_sandbox() {
	grep '"msg":"access"' "$T/gateway.log" | tail -n 1 | $PY -c 'import json,sys; print(json.load(sys.stdin)["sandbox"])'
}

# AKernel's order.
assert_eq "id-first status" 200 "$(get "sbx1-abc123-$UP.localhost")"
assert_contains "id-first reached the backend" '"path": "/echo"' "$(cat "$T/body")"
wait_log "$T/gateway.log" '"sandbox":"sbx1-abc123"'
assert_eq "id-first sandbox" sbx1-abc123 "$(last_sandbox)"
# The order we had.
assert_eq "port-first status" 200 "$(get "$UP-sbx1-abc123.localhost:$GW")"
assert_eq "port-first sandbox" sbx1-abc123 "$(last_sandbox)"
ok "both orders route: {id}-{port} and {port}-{id}"

# Both readings name a published port: refused before any upstream.
before=$(wc -l <"$T/up.jsonl")
assert_eq "ambiguous status" 400 "$(get "$UP-s-9.localhost")"
assert_contains "ambiguous code" '"code":"ambiguous_host"' "$(cat "$T/body")"
assert_contains "ambiguous names both" "sandbox 's-9'" "$(cat "$T/body")"
assert_contains "ambiguous names both" "sandbox '$UP-s'" "$(cat "$T/body")"
assert_eq "nothing reached the upstream" "$before" "$(wc -l <"$T/up.jsonl")"
ok "a host that routes both ways is 400 ambiguous_host"

# A pinned order reads one way only.
assert_eq "pinned port-id" 200 "$(get "$UP-s-9.pinned.localhost")"
assert_eq "pinned port-id sandbox" s-9 "$(last_sandbox)"
assert_eq "pinned id-port" 200 "$(get "sbx1-abc123-$UP.ak.localhost")"
assert_eq "pinned id-port sandbox" sbx1-abc123 "$(last_sandbox)"
code=$(get "$UP-sbx1-abc123.ak.localhost")
[ "$code" != 200 ] || fail "an id-port domain read a port-first host"
ok "host_format pins one order"

# A 63-byte first label.
label="$LONG-$UP"
assert_eq "label length" 63 "${#label}"
assert_eq "63-byte label status" 200 "$(get "$label.localhost")"
assert_eq "63-byte label sandbox" "$LONG" "$(last_sandbox)"
ok "a 63-byte label routes"

# --check refuses an unknown host_format with file:line:column.
cat >"$T/bad.yaml" <<EOF
listen:
  - address: 127.0.0.1:$GW
domains:
  - name: x.localhost
    host_format: sideways
EOF
out=$("$AKGW" --check -c "$T/bad.yaml" 2>&1) && fail "--check accepted host_format: sideways"
assert_contains "bad host_format located" "bad.yaml:5:18" "$out"
ok "a bad host_format is refused with its place"
