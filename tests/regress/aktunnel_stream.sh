#!/bin/sh
# Streamed bodies through aktunnel and what survives a reconnect, against
# the scripted sandbox (tunnel_mock.py): 10 MiB up (with and without
# content_length) and down with sha256, credits obeyed (window 1), HEAD with
# a large Content-Length (scenario 14), the connection dropped in the middle
# of a download and of an upload and resumed from ack_offset byte-exact
# (§8.6, scenarios 57, 58), a fast-path request replayed while it runs
# (18) and a result that became ready while disconnected (§8.5).
. "$(dirname "$0")/lib.sh"

[ -x "$AKTUN" ] || fail "$AKTUN is not built"
MOCK="$TOP/tests/regress/tunnel_mock.py"
$PY -c 'import websockets' || fail "python3-websockets is missing"

mkdir -p "$T/www"
head -c 10485760 /dev/urandom >"$T/www/big.bin"
head -c 100000 /dev/urandom >"$T/www/100k.bin"
BIG=$(sha256sum <"$T/www/big.bin" | cut -d' ' -f1)
FILES=$(free_port)
BE=$(free_port)
spawn files sh -c "cd '$T/www' && exec $PY -m http.server $FILES --bind 127.0.0.1"
spawn backend $PY "$TOP/tests/regress/backend.py" --port "$BE" --log "$T/up.jsonl"
wait_port "$FILES"
wait_port "$BE"

# run_case NAME SCRIPT TARGET [AKTUNNEL ARGS]: as in aktunnel_http.sh.
run_case() {
	name=$1 script=$2 target=$3; shift 3
	MP=$(free_port)
	printf '%s\n' "$script" >"$T/$name.script"
	spawn "$name" $PY "$MOCK" --port "$MP" --script "$T/$name.script"
	mock=$LAST_PID
	wait_port "$MP"
	spawn "$name-tun" "$AKTUN" --gateway "127.0.0.1:$MP" --sandbox sbx1 \
	    --target "$target" -v "$@"
	tun=$LAST_PID
	wait "$mock" || fail "mock $name failed: $(grep 'mock:' "$T/$name.log")"
	kill -INT "$tun"
	wait "$tun"
	assert_eq "aktunnel exit status ($name)" 0 "$?"
}

resp() {
	grep '"event": "response"' "$T/$1.log" | sed -n "${2}p"
}

field() {
	$PY -c "import json,sys; o=json.loads(sys.argv[1]); print($2)" "$1"
}

# 1. 10 MiB down, with the default window and with one credit at a time.
run_case down "accept
fetch new GET /big.bin expect=stream status=200
fetch new GET /big.bin window=1 expect=stream
fetch new HEAD /100k.bin expect=stream" "http://127.0.0.1:$FILES"
r=$(resp down 1)
assert_eq "10 MiB download sha256" "$BIG" "$(field "$r" 'o["sha256"]')"
assert_eq "announced length" 10485760 "$(field "$r" 'o["content_length"]')"
assert_eq "10 MiB download, window 1" "$BIG" "$(field "$(resp down 2)" 'o["sha256"]')"
r=$(resp down 3)
assert_eq "HEAD: begin with the length, then end" "100000 0 True" \
    "$(field "$r" 'o["content_length"], o["body_len"], o["ended"]')"
ok "10 MiB download byte-exact (window 16 and 1); HEAD with a large length"

# 2. 10 MiB up, with content_length and chunked to the target, and in
# 1000-byte chunks.
run_case up "accept
upload new POST /sink $T/www/big.bin expect=stream status=200
upload new POST /sink $T/www/big.bin nocl expect=stream status=200
upload new PUT /sink $T/www/100k.bin chunk=1000 expect=stream" "http://127.0.0.1:$BE"
for i in 1 2; do
	assert_contains "upload $i sha256" "\\\"body_sha256\\\": \\\"$BIG\\\"" "$(resp up $i)"
done
assert_eq "first window" '{"event": "first_window", "credits": 16, "ack_offset": 0}' \
    "$(grep first_window "$T/up.log" | head -n 1)"
assert_eq "uploads that reached the target" 3 "$(grep -c '"path": "/sink"' "$T/up.jsonl")"
ok "10 MiB upload byte-exact, with and without content_length"

# 3. The connection drops mid-download; the sandbox resumes with its
# ack_offset and the body completes byte-exact, once.
run_case resume_down "accept
fetch 11111111-2222-4333-8444-555555555555 GET /big.bin drop=3000000 expect=stream" \
    "http://127.0.0.1:$FILES"
assert_contains "dropped" '"event": "drop"' "$(cat "$T/resume_down.log")"
assert_eq "connections" 2 "$(grep -c '"event": "accept"' "$T/resume_down.log")"
assert_eq "resumed download sha256" "$BIG" "$(field "$(resp resume_down 1)" 'o["sha256"]')"
assert_contains "reconnected" "tunnel sbx1 reconnected" "$(cat "$T/resume_down-tun.log")"
ok "download resumed from ack_offset after a reconnect, byte-exact"

# 4. The connection drops mid-upload; the replayed http_req_begin gets the
# window with the bytes consumed, and the upload completes byte-exact.
run_case resume_up "accept
upload 21111111-2222-4333-8444-555555555555 POST /sink $T/www/big.bin drop=3000000 expect=stream" \
    "http://127.0.0.1:$BE"
assert_contains "upload resumed" '"event": "resume_window"' "$(cat "$T/resume_up.log")"
assert_contains "resumed upload sha256" "\\\"body_sha256\\\": \\\"$BIG\\\"" "$(resp resume_up 1)"
assert_eq "upload requests at the target" 4 "$(grep -c '"path": "/sink"' "$T/up.jsonl")"
ok "upload resumed from the consumed offset after a reconnect, byte-exact"

# 5. A fast-path request replayed on a new connection while it runs is
# performed once and answered once (scenario 18); a result ready while
# disconnected goes out on the next connection and answers the replay.
# The target takes 2.5 s: aktunnel dials again after 1 s plus up to 25 %
# jitter, so the replay surely arrives while the request still runs.
ID=31111111-2222-4333-8444-555555555555
run_case replay "accept
req $ID GET /slow?ms=2500&replay=1
sleep 0.3
drop
accept
fetch $ID GET /slow?ms=2500&replay=1 expect=fast status=200
noframe 0.5
req late-1 GET /slow?ms=800&replay=2
drop
sleep 1.5
accept
expect http_resp late-1 3
req late-1 GET /slow?ms=800&replay=2
expect http_resp late-1 3" "http://127.0.0.1:$BE"
assert_eq "target requests for the replayed id" 1 "$(grep -c 'replay=1' "$T/up.jsonl")"
assert_eq "target requests for the late result" 1 "$(grep -c 'replay=2' "$T/up.jsonl")"
ok "replayed requests run once; results ready while disconnected are delivered"
