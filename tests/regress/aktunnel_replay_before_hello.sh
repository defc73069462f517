#!/bin/sh
# aktunnel against a sandbox that replays a streamed request before its
# hello (issue 17 §1).  The Python V2 in-sandbox server says hello at
# accept only when the upgrade carries X-YR-Tunnel-Protocol: 2; otherwise
# it answers the client's hello, and on a resumed session it re-sends the
# pending http_req_begin first.  aktunnel sent no such header and took the
# early http_req_begin for a protocol error ("received streaming request
# before V2 negotiation"): an 8 MiB upload cut after 1 MiB got 502 and
# aktunnel dialled again every second.  Now it sends the header (§2.5
# allows it) and keeps an http_req_begin that comes before the hello until
# the hello has come.  The scripted sandbox (tunnel_mock.py pyhello) plays
# both: honouring the header, and ignoring it.
. "$(dirname "$0")/lib.sh"

[ -x "$AKTUN" ] || fail "$AKTUN is not built"
MOCK="$TOP/tests/regress/tunnel_mock.py"
$PY -c 'import websockets' || fail "python3-websockets is missing"

head -c 8388608 /dev/urandom >"$T/8m.bin"
SHA=$(sha256sum <"$T/8m.bin" | cut -d' ' -f1)
BE=$(free_port)
spawn backend $PY "$TOP/tests/regress/backend.py" --port "$BE" --log "$T/up.jsonl"
wait_port "$BE"

# run_case NAME SCRIPT: the mock runs SCRIPT against aktunnel.
run_case() {
	name=$1 script=$2
	MP=$(free_port)
	printf '%s\n' "$script" >"$T/$name.script"
	spawn "$name" $PY "$MOCK" --port "$MP" --script "$T/$name.script"
	mock=$LAST_PID
	wait_port "$MP"
	spawn "$name-tun" "$AKTUN" --gateway "127.0.0.1:$MP" --sandbox sbx1 \
	    --target "http://127.0.0.1:$BE" -v
	tun=$LAST_PID
	wait "$mock" || fail "mock $name failed: $(grep 'mock:' "$T/$name.log")"
	kill -INT "$tun"
	wait "$tun"
	assert_eq "aktunnel exit status ($name)" 0 "$?"
}

# 1. The header is sent, so the Python V2 sandbox says hello at once.
run_case header "pyhello
accept
header X-YR-Tunnel-Protocol 2
upload 31111111-2222-4333-8444-555555555555 POST /sink $T/8m.bin drop=1048576 expect=stream status=200"
assert_contains "hello first" '"hello_first": true' "$(grep '"event": "accept"' "$T/header.log" | tail -1)"
assert_contains "header: resumed" '"event": "resume_window"' "$(cat "$T/header.log")"
assert_contains "header: sha256" "\\\"body_sha256\\\": \\\"$SHA\\\"" "$(grep '"event": "response"' "$T/header.log")"
ok "aktunnel sends X-YR-Tunnel-Protocol: 2; the cut 8 MiB upload resumes byte-exact"

# 2. A sandbox that ignores the header replays the begin before its hello.
run_case early "pyhello noheader
accept
upload 41111111-2222-4333-8444-555555555555 POST /sink $T/8m.bin drop=1048576 expect=stream status=200"
assert_contains "replayed before the hello" '"before_hello": true' "$(grep '"event": "replay"' "$T/early.log")"
assert_contains "early: resumed" '"event": "resume_window"' "$(cat "$T/early.log")"
assert_contains "early: sha256" "\\\"body_sha256\\\": \\\"$SHA\\\"" "$(grep '"event": "response"' "$T/early.log")"
assert_contains "early: logged" "1 streaming request came before the sandbox's hello; handled after it" "$(cat "$T/early-tun.log")"
grep -q "before V2 negotiation" "$T/early-tun.log" && fail "aktunnel refused the early replay: $(grep 'before V2' "$T/early-tun.log")"
n=$(grep -c '"event": "accept"' "$T/early.log")
assert_eq "connections (no redial loop)" 2 "$n"
assert_eq "uploads at the target" 2 "$(grep -c '"path": "/sink"' "$T/up.jsonl")"
ok "an http_req_begin replayed before the hello waits for it; the upload resumes byte-exact, once"
