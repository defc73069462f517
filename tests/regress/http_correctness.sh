#!/bin/sh
# Issue 16, section 3: what the upstream and the client see of a relayed
# exchange.  An absolute-form target's authority replaces Host (it used to
# keep the client's Host); an upstream status line without a reason phrase
# gets the registered one (it became "200 Error"); interim responses keep
# their fields and their own reason (103 lost Link, 102 became "Early
# Hints"); "Connection: Host" cannot take Host away from the upstream; and
# a malformed chunked body that arrived with its head is refused before
# anything goes upstream (the upstream used to see the head, then a cut).
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
UP=$(free_port)
spawn raw $PY "$TOP/tests/regress/raw_backend.py" --port "$UP" --log "$T/up.jsonl"
wait_port "$UP"
spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
domains: [localhost]
log:
  level: info
sandboxes:
  - id: local
    address: 127.0.0.1
    ports:
      - port: $UP
  - id: other
    address: 127.0.0.1
    ports:
      - port: 1
EOF

# Send raw bytes ($1, printf-style) to the gateway; print what comes back.
raw() { raw_send "$GW" "$1"; }

# Lines the upstream has logged so far.
nup() { wc -l <"$T/up.jsonl" | tr -d ' '; }
# The last head the upstream read, as text.
last_head() { tail -n 1 "$T/up.jsonl" | $PY -c 'import json,sys; print(json.load(sys.stdin)["head"])'; }

# 1. Absolute form: routed by the authority, and the upstream's Host is it.
out=$(raw "GET http://$UP-local.localhost/head HTTP/1.1\r\nHost: 1-other.localhost\r\nConnection: close\r\n\r\n")
assert_contains "absolute-form answer" "HTTP/1.1 200 OK" "$out"
h=$(last_head)
hl=$(printf '%s\n' "$h" | tr -d '\r' | grep -i '^host:')
assert_eq "upstream Host is the authority" "Host: $UP-local.localhost" "$hl"
case "$h" in *"1-other"*) fail "the client's Host reached the upstream: $h" ;; esac
ok "absolute-form target: the authority replaces Host"

# 2. No reason phrase upstream: the client gets the registered one.
out=$(raw "GET /noreason HTTP/1.1\r\nHost: $UP-local.localhost\r\nConnection: close\r\n\r\n")
first=$(printf '%s' "$out" | head -n 1 | tr -d '\r')
assert_eq "status line" "HTTP/1.1 200 OK" "$first"
ok "a status line without a reason gets the registered one"

# 3. Interim responses keep their fields; hop-by-hop ones are dropped.
out=$(raw "GET /interim HTTP/1.1\r\nHost: $UP-local.localhost\r\nConnection: close\r\n\r\n")
assert_contains "103 status line" "HTTP/1.1 103 Early Hints" "$out"
assert_contains "103 Link field" "Link: </style.css>; rel=preload; as=style" "$out"
assert_contains "102 status line" "HTTP/1.1 102 Processing" "$out"
assert_contains "final answer" "HTTP/1.1 200 OK" "$out"
case "$out" in *X-Hop*|*Keep-Alive*) fail "hop-by-hop fields of a 103 were forwarded: $out" ;; esac
n=$(printf '%s' "$out" | grep -c 'Early Hints')
assert_eq "one 103" 1 "$n"
# An HTTP/1.0 client gets no interim responses (RFC 9110 section 15.2).
out=$(raw "GET /interim HTTP/1.0\r\nHost: $UP-local.localhost\r\n\r\n")
case "$out" in *" 103 "*|*" 102 "*) fail "an HTTP/1.0 client got an interim response: $out" ;; esac
assert_contains "HTTP/1.0 final answer" "HTTP/1.1 200 OK" "$out"
ok "interim responses keep their fields and reasons"

# 4. "Connection: Host" does not leave the upstream without Host.
out=$(raw "GET /head HTTP/1.1\r\nHost: $UP-local.localhost\r\nConnection: Host, X-Drop, close\r\nX-Drop: 1\r\nX-Keep: 1\r\n\r\n")
h=$(last_head)
hl=$(printf '%s\n' "$h" | tr -d '\r' | grep -i '^host:')
assert_eq "Host survives Connection: Host" "Host: $UP-local.localhost" "$hl"
assert_contains "an end-to-end field survives" "X-Keep: 1" "$h"
case "$h" in *X-Drop*) fail "a field named in Connection reached the upstream: $h" ;; esac
ok "Connection: Host keeps Host"

# 5. A malformed chunked body sent with its head never reaches upstream.
before=$(nup)
out=$(raw "POST /body HTTP/1.1\r\nHost: $UP-local.localhost\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n\r\n")
first=$(printf '%s' "$out" | head -n 1 | tr -d '\r')
assert_eq "malformed chunked refused" "HTTP/1.1 400 Bad Request" "$first"
assert_contains "error code" '"code":"bad_chunk' "$out"
assert_eq "nothing reached the upstream" "$before" "$(nup)"
# A well-formed one with its head still goes through, whole.
out=$(raw "POST /body HTTP/1.1\r\nHost: $UP-local.localhost\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
assert_contains "chunked upload relayed" "HTTP/1.1 200 OK" "$out"
body=$(printf '%s' "$out" | tail -c 2)
assert_eq "body length upstream" 11 "$body"
ok "a malformed chunked body with its head is refused before the upstream"

echo "all http correctness checks passed"
