#!/bin/sh
# aktunnel performing sandbox requests against a plain HTTP target
# (backend.py), driven by the scripted sandbox (tunnel_mock.py): fast-path
# GET and POST byte-exact, the request header rules (scenario 8), cookies
# untouched (19-21), bodiless answers, chunked and close-delimited bodies
# streamed, server-sent events one by one (13), the target's base path, a
# target that is down (10), max_inflight (17), the body limit (11), the
# V1 fallback when the sandbox says no hello, -v request lines, and the
# pool of target connections (--target-connections).
. "$(dirname "$0")/lib.sh"

[ -x "$AKTUN" ] || fail "$AKTUN is not built"
MOCK="$TOP/tests/regress/tunnel_mock.py"
$PY -c 'import websockets' || fail "python3-websockets is missing"

BE=$(free_port)
spawn backend $PY "$TOP/tests/regress/backend.py" --port "$BE" --log "$T/up.jsonl"
wait_port "$BE"

# run_case NAME SCRIPT [AKTUNNEL ARGS]: a mock with SCRIPT, an aktunnel
# to the backend (unless ARGS give --target), both must end well.
run_case() {
	name=$1 script=$2; shift 2
	MP=$(free_port)
	printf '%s\n' "$script" >"$T/$name.script"
	spawn "$name" $PY "$MOCK" --port "$MP" --script "$T/$name.script"
	mock=$LAST_PID
	wait_port "$MP"
	own=0
	for a in "$@"; do
		[ "$a" = --target ] && own=1
	done
	if [ $own = 1 ]; then
		spawn "$name-tun" "$AKTUN" --gateway "127.0.0.1:$MP" \
		    --sandbox sbx1 -v "$@"
	else
		spawn "$name-tun" "$AKTUN" --gateway "127.0.0.1:$MP" \
		    --sandbox sbx1 --target "http://127.0.0.1:$BE" -v "$@"
	fi
	tun=$LAST_PID
	wait "$mock" || fail "mock $name failed: $(grep 'mock:' "$T/$name.log")"
	kill -TERM "$tun"
	wait "$tun"
	assert_eq "aktunnel exit status ($name)" 0 "$?"
}

# resp NAME N: the N-th response event of mock NAME, as JSON.
resp() {
	grep '"event": "response"' "$T/$1.log" | sed -n "${2}p"
}

# field JSON EXPR: a Python expression over the event o.
field() {
	$PY -c "import json,sys; o=json.loads(sys.argv[1]); print($2)" "$1"
}

# 1. Fast path: GET, and POST with scenario 8's headers and a binary body.
printf 'twelve bytes' >"$T/body12"
head -c 60000 /dev/urandom >"$T/body60k"
sha12=$(sha256sum <"$T/body12" | cut -d' ' -f1)
sha60=$(sha256sum <"$T/body60k" | cut -d' ' -f1)
run_case fast "accept
fetch new GET /echo expect=fast status=200
fetch new POST /echo?x=1 body=@$T/body12 expect=fast status=200 h=Connection:close,X-First-Hop h=Connection:X-Second-Hop h=X-First-Hop:1 h=X-Second-Hop:2 h=Transfer-Encoding:chunked h=Content-Length:999 h=X-Tag:a h=X-Tag:b h=Authorization:Bearer-t h=Content-Type:text/plain h=Expect:100-continue h=Proxy-Authorization:Basic-x
fetch new PUT /echo body=@$T/body60k expect=fast status=200"
r=$(resp fast 2)
assert_contains "POST body reached the target" "\\\"body_sha256\\\": \\\"$sha12\\\"" "$r"
line=$(grep '"path": "/echo?x=1"' "$T/up.jsonl")
assert_contains "X-Tag in order" '["X-Tag", "a"], ["X-Tag", "b"]' "$line"
assert_contains "Authorization kept" '["Authorization", "Bearer-t"]' "$line"
assert_contains "Content-Type kept" '["Content-Type", "text/plain"]' "$line"
assert_contains "Content-Length recomputed" '["Content-Length", "12"]' "$line"
assert_contains "Host is the target" "[\"Host\", \"127.0.0.1:$BE\"]" "$line"
for h in X-First-Hop X-Second-Hop Transfer-Encoding Expect Proxy-Authorization Connection; do
	case "$line" in *"\"$h\""*) fail "$h reached the target: $line" ;; esac
done
r=$(resp fast 3)
assert_contains "60 kB PUT byte-exact" "\\\"body_sha256\\\": \\\"$sha60\\\"" "$r"
assert_contains "-v request line" "POST /echo -> 200 (12 bytes up" "$(cat "$T/fast-tun.log")"
ok "fast path GET, POST and PUT byte-exact; request header rules"

# 2. Cookies pass untouched both ways; nothing is remembered.
run_case cookies "accept
fetch new GET /cookies expect=fast
fetch new GET /echo?after-cookies=1 expect=fast
fetch new GET /echo?caller-cookie=1 h=Cookie:caller=explicit expect=fast"
r=$(resp cookies 1)
assert_contains "two Set-Cookie in order" '["Set-Cookie", "a=1; Path=/"], ["Set-Cookie", "b=2; Path=/; HttpOnly"]' "$r"
line=$(grep 'after-cookies' "$T/up.jsonl")
case "$line" in *Cookie*) fail "a cookie was replayed: $line" ;; esac
line=$(grep 'caller-cookie' "$T/up.jsonl")
assert_contains "caller's Cookie kept" '["Cookie", "caller=explicit"]' "$line"
ok "Set-Cookie relayed, no cookie jar, the caller's Cookie forwarded"

# 3. Bodiless answers, chunked and close-delimited bodies, SSE one by one.
run_case bodies "accept
fetch new HEAD /echo expect=fast status=200
fetch new GET /status/204 expect=stream status=204
fetch new GET /status/404 expect=fast status=404
fetch new GET /chunked expect=stream
fetch new GET /eof expect=stream
fetch new GET /sse?n=4&delay=0.3 expect=stream"
r=$(resp bodies 1)
assert_eq "HEAD: no body" 0 "$(field "$r" 'o["body_len"]')"
r=$(resp bodies 2)
assert_eq "204: begin then end" "None 0" "$(field "$r" 'o["content_length"], o["body_len"]')"
r=$(resp bodies 4)
assert_eq "chunked body" "'part 0\\npart 1\\npart 2\\n'" "$(field "$r" 'repr(o["body_text"])')"
assert_contains "chunked: raw headers" '["Transfer-Encoding", "chunked"]' "$r"
r=$(resp bodies 5)
assert_eq "close-delimited body" "'until close\\n'" "$(field "$r" 'repr(o["body_text"])')"
r=$(resp bodies 6)
assert_eq "SSE: unknown length" None "$(field "$r" 'o["content_length"]')"
assert_eq "SSE: four events in four chunks" 4 "$(field "$r" 'o["chunks"]')"
assert_eq "SSE: events 0.3 s apart" True "$(field "$r" 'all(g >= 0.2 for g in o["gaps"])')"
assert_contains "SSE body" "data: event 3" "$r"
ok "HEAD, 204, 404, chunked, close-delimited, SSE event by event"

# 4. The target's base path is kept in front of the request path.
run_case base "accept
fetch new GET /v1/x?q=1 expect=fast
fetch new GET / expect=fast" --target "http://127.0.0.1:$BE/api/"
grep -q '"path": "/api/v1/x?q=1"' "$T/up.jsonl" || fail "no /api/v1/x?q=1 at the target"
grep -q '"path": "/api/"' "$T/up.jsonl" || fail "no /api/ at the target"
ok "target base path prefixed"

# 5. A target that is down: error with the reason; the tunnel stays up.
DOWN=$(free_port)
run_case down "accept
fetch new GET /x expect=error grep=Connection\\ refused
upload new POST /x $T/body12 expect=error grep=Connection\\ refused
pings 1 30" --target "http://127.0.0.1:$DOWN" --ping-interval 0.2
assert_contains "error names the target" "cannot connect to the target 127.0.0.1:$DOWN: Connection refused" "$(resp down 1)"
ok "target down: error frame with the reason, tunnel still answering"

# 6. max_inflight 1 from the sandbox's hello; the body limit.
printf 'xy' >"$T/body2"
run_case limits "hello max_inflight=1
accept
req slow-1 GET /slow?ms=1000
fetch second GET /echo expect=error grep=tunnel\\ max_inflight\\ limit\\ reached
expect http_resp slow-1 5
hello max_body_size=1
drop
accept
upload new POST /sink $T/body2 expect=error grep=exceeds
pings 1 30" --ping-interval 0.2
ok "max_inflight and max_body_size from the sandbox's hello"

# 7. A sandbox without a hello speaks V1: everything is one http_resp.
head -c 200000 /dev/urandom >"$T/body200k"
run_case v1 "hello off
accept
fetch new GET /chunked expect=fast
fetch new GET /sse?n=2&delay=0.1 expect=fast
fetch new PUT /echo body=@$T/body200k expect=fast"
r=$(resp v1 1)
assert_eq "V1 chunked body" "'part 0\\npart 1\\npart 2\\n'" "$(field "$r" 'repr(o["body_text"])')"
ok "V1: one http_resp per request"

# 8. An error from the sandbox cancels one streamed request (scenario 12):
# its late data is absorbed (tombstone), unknown data would not be, and the
# tunnel stays up on the same connection.
X=41111111-2222-4333-8444-555555555555
run_case cancel "accept
send {\"type\":\"http_req_begin\",\"id\":\"$X\",\"method\":\"POST\",\"path\":\"/sink\",\"headers\":[],\"content_length\":10}
expect window $X 5
send {\"type\":\"error\",\"id\":\"$X\",\"message\":\"downstream request closed\"}
sendbin $X 1 00
send {\"type\":\"http_req_end\",\"id\":\"$X\"}
pings 3 30
fetch new GET /echo expect=fast" --ping-interval 0.2
assert_eq "connections" 1 "$(grep -c '"event": "accept"' "$T/cancel.log")"
ok "a sandbox error cancels one stream; its late data is absorbed"

# ports TAG: the distinct client ports of the target's requests tagged TAG.
ports() {
	grep "tag=$1\"" "$T/up.jsonl" | sed 's/.*"peer_port": \([0-9]*\).*/\1/' |
	    sort -u | wc -l | tr -d ' '
}

# 9. The target pool: --target-connections 2 makes a third request wait
# for a connection, and the two are kept alive for the next one.
script="accept"
for i in 1 2 3; do
	script="$script
req pa-$i GET /slow?ms=600&tag=pa"
done
for i in 1 2 3; do
	script="$script
expect http_resp - 5"
done
script="$script
fetch new GET /slow?ms=1&tag=pa expect=fast status=200"
run_case poola "$script" --target-connections 2
assert_eq "requests at the target (pool of 2)" 4 "$(grep -c 'tag=pa"' "$T/up.jsonl")"
assert_eq "target connections (pool of 2)" 2 "$(ports pa)"

# By default as many connections as requests in flight (16), every one kept:
# two rounds of 12 at once use 12 connections (the reference client's pool
# of 10, 5 kept, would have queued two and opened new ones).
script="accept"
for r in 1 2; do
	for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
		script="$script
req pb-$r-$i GET /slow?ms=400&tag=pb"
	done
	for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
		script="$script
expect http_resp - 5"
	done
done
run_case poolb "$script"
assert_eq "requests at the target (default pool)" 24 "$(grep -c 'tag=pb"' "$T/up.jsonl")"
assert_eq "target connections (default pool)" 12 "$(ports pb)"
ok "the target pool: bounded by --target-connections, idle ones kept alive"
