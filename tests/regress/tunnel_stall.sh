#!/bin/sh
# A stalled transfer through the tunnel costs no CPU, and completes
# byte-exact once it moves again.  libevent 2.1 runs a read callback again
# whenever it returns with the input at the high watermark and reading on;
# input that could not move on (the body buffer full, no credits) made the
# gateway and aktunnel spin at 100 % of a core while the other side was
# slow.  Here the target reads nothing of a 16 MiB upload for 4 s, then
# the sandbox caller reads nothing of a 16 MiB download for 4 s; meanwhile
# the gateway and that tunnel's aktunnel must each use less than a quarter
# of a core.
. "$(dirname "$0")/lib.sh"

NS="akgw-stall-$$"
netns_add "$NS"
GW=$(free_port)
TARGET=$(free_port)
FILES=$(free_port)
TOKEN=tunnel-token-0123456789abcdef
HZ=$(getconf CLK_TCK)

mkdir -p "$T/www"
head -c 16777216 /dev/urandom >"$T/www/big.bin"
want=$(sha256sum <"$T/www/big.bin" | cut -d' ' -f1)
spawn target $PY "$TOP/tests/regress/backend.py" --port "$TARGET" --log "$T/target.jsonl"
spawn files sh -c "cd '$T/www' && exec $PY -m http.server $FILES --bind 127.0.0.1"
wait_port "$TARGET"
wait_port "$FILES"

spawn_gateway "$GW" <<EOC
listen:
  - address: 127.0.0.1:$GW
sandboxes:
  - id: up
    netns: /run/netns/$NS
    tunnel:
      listen_port: 8766
      token: $TOKEN
  - id: down
    netns: /run/netns/$NS
    tunnel:
      listen_port: 9766
      token: $TOKEN
EOC
spawn tun-up "$AKTUN" --gateway "127.0.0.1:$GW" --sandbox up \
	--target "http://127.0.0.1:$TARGET" --token "$TOKEN" --allow-plaintext-token
UP_PID=$LAST_PID
spawn tun-down "$AKTUN" --gateway "127.0.0.1:$GW" --sandbox down --listen-port 9766 \
	--target "http://127.0.0.1:$FILES" --token "$TOKEN" --allow-plaintext-token
DOWN_PID=$LAST_PID
for p in 8766 9766; do
	for _ in $(seq 100); do
		ip netns exec "$NS" curl -s -o /dev/null "http://127.0.0.1:$p/" && break
		sleep 0.1
	done
done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# busy WHEN PID...: fail if any PID used a quarter of a core or more over
# the same 2 s.
busy() {
	when=$1; shift
	for p in "$@"; do ticks "$p" >"$T/ticks.$p"; done
	sleep 2
	for p in "$@"; do
		used=$(($(ticks "$p") - $(cat "$T/ticks.$p")))
		who="$(cat "/proc/$p/comm") ($when)"
		[ $((used * 4)) -lt $((HZ * 2)) ] ||
			fail "$who used $used of $((HZ * 2)) ticks (2 s) while the transfer was stalled"
		echo "$who: $used ticks in 2 s while stalled"
	done
}

# 1. Upload: the target sleeps 4 s before reading the body.
ip netns exec "$NS" curl -sS --max-time 60 --data-binary "@$T/www/big.bin" \
	-o "$T/up.out" "http://127.0.0.1:8766/sink?wait=4000" &
CURL=$!
sleep 1
busy upload "$GW_PID" "$UP_PID"
wait "$CURL" || fail "the stalled upload failed"
assert_contains "stalled upload, byte-exact" "\"body_sha256\": \"$want\"" "$(cat "$T/up.out")"
ok "a 16 MiB upload the target does not read for 4 s: no spin, byte-exact"

# 2. Download: the caller sleeps 4 s before reading the response.
cat >"$T/lazy.py" <<'EOP'
import hashlib, socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET /big.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
time.sleep(4)
data = b""
while True:
    b = s.recv(1 << 20)
    if not b:
        break
    data += b
head, _, body = data.partition(b"\r\n\r\n")
print(head.split(b"\r\n")[0].decode(), len(body), hashlib.sha256(body).hexdigest())
EOP
ip netns exec "$NS" $PY "$T/lazy.py" 9766 >"$T/down.out" &
LAZY=$!
sleep 1
busy download "$GW_PID" "$DOWN_PID"
wait "$LAZY" || fail "the stalled download failed"
assert_eq "stalled download, byte-exact" "HTTP/1.1 200 OK 16777216 $want" "$(cat "$T/down.out")"
ok "a 16 MiB download the caller does not read for 4 s: no spin, byte-exact"
