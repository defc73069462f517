#!/bin/sh
# timeouts.idle (1 s here) ends an exchange that moves no byte in a
# direction it owes, and nothing else:
#   - a response that keeps streaming for longer than the idle time, to a
#     client that sends nothing, arrives whole (SSE after GET and POST);
#   - a large download read slowly (spliced, 4 s at 12 MB/s) arrives whole;
#   - an upstream silent for longer than the idle time gets 504
#     upstream_timeout;
#   - a client that stops sending its body mid-way is closed, whether the
#     body is small or large enough to be spliced.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
ECHO=$(free_port)
FILES=$(free_port)

spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" --log "$T/upstream.jsonl"
mkdir -p "$T/www"
head -c 50331648 /dev/urandom >"$T/www/48m.bin" || fail "cannot write 48 MiB into $T"
want=$(sha256sum <"$T/www/48m.bin" | cut -d' ' -f1)
spawn files sh -c "cd '$T/www' && exec $PY -m http.server $FILES --bind 127.0.0.1"
wait_port "$ECHO"
wait_port "$FILES"

spawn_gateway "$GW" <<EOF
workers: 1
listen:
  - address: 127.0.0.1:$GW
timeouts:
  idle: 1s
sandboxes:
  - id: sbx
    address: 127.0.0.1
    ports:
      - port: $ECHO
      - port: $FILES
EOF

C="curl -sS --max-time 20"
BASE="http://127.0.0.1:$GW/sbx/$ECHO"

# A stream with 0.4 s between events, 3.2 s in all, to a silent client.
n=$($C "$BASE/sse?n=8&delay=0.4" | grep -c '^data:')
assert_eq "SSE events after GET, idle 1 s" 8 "$n"
n=$($C -d 'hello' "$BASE/sse?n=5&delay=0.4" | grep -c '^data:')
assert_eq "SSE events after POST, idle 1 s" 5 "$n"
ok "a response streaming longer than the idle time reaches a silent client"

# 48 MiB at 12 MB/s: about 4 s, moved with splice(2), never idle.
got=$($C --limit-rate 12M "http://127.0.0.1:$GW/sbx/$FILES/48m.bin" | sha256sum | cut -d' ' -f1)
assert_eq "slow 48 MiB download checksum" "$want" "$got"
ok "a download read slowly for longer than the idle time arrives whole"

# An upstream that answers after 2.5 s: 504 after about 1 s.
start=$(date +%s%N)
out=$($C -w ' %{http_code}' "$BASE/slow?ms=2500")
ms=$((($(date +%s%N) - start) / 1000000))
assert_contains "silent upstream status" " 504" "$out"
assert_contains "silent upstream code" '"code":"upstream_timeout"' "$out"
[ $ms -ge 900 ] && [ $ms -lt 2400 ] || fail "504 after $ms ms, expected about 1000"
ok "an upstream silent for the idle time gets 504 upstream_timeout ($ms ms)"

# A client that sends SENT of LEN body bytes and stops: closed after ~1 s
# (a large body is spliced by then, and the splice has the same deadline).
stall() {
	$PY - "$GW" "$ECHO" "$1" "$2" <<'PYEOF'
import socket, sys, time
gw, port, length, sent = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = socket.create_connection(("127.0.0.1", gw), timeout=5)
s.sendall(("POST /sbx/%s/echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
           % (port, length)).encode() + b"x" * sent)
t = time.monotonic()
data = b""
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
except socket.timeout:
    print("no close within 5 s")
    sys.exit(0)
print("closed after %d ms" % ((time.monotonic() - t) * 1000))
PYEOF
}
for sizes in "1000 10" "4194304 524288"; do
	out=$(stall $sizes)
	case "$out" in
	"closed after "*) ;;
	*) fail "stalled upload ($sizes): $out" ;;
	esac
	ms=${out#closed after }
	ms=${ms% ms}
	[ "$ms" -ge 900 ] && [ "$ms" -lt 3000 ] ||
		fail "stalled upload ($sizes) closed after $ms ms"
	ok "a client that stops sending its body ($sizes) is closed ($ms ms)"
done

kill -0 "$GW_PID" 2>/dev/null || fail "the gateway died"
