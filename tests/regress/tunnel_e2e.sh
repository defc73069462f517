#!/bin/sh
# The whole reverse tunnel with the real programs: code in a sandbox (a
# network namespace the test makes) calls http://127.0.0.1:8766; akgateway
# terminates the tunnel; aktunnel on the "developer machine" (the host)
# sends each request to a target on the host's loopback and streams the
# answer back.  Plain and TLS tunnel WebSocket, a token, byte-exact 100 MiB
# both ways, SSE, an HTTPS target verified with the dev CA (and refused
# with the reason without it), an application WebSocket, and a request
# made while aktunnel restarts.
. "$(dirname "$0")/lib.sh"

NS="akgw-e2e-$$"
netns_add "$NS"
nsc() { ip netns exec "$NS" curl -sS --max-time 60 "$@"; }

GW=$(free_port)
GWS=$(free_port)
TARGET=$(free_port)
FILES=$(free_port)
TOKEN=tunnel-token-0123456789abcdef

mkdir -p "$T/www"
head -c 104857600 /dev/urandom >"$T/www/big.bin"
want=$(sha256sum <"$T/www/big.bin" | cut -d' ' -f1)
WSTARGET=$(free_port)
TLSTARGET=$(free_port)
spawn target $PY "$TOP/tests/regress/backend.py" --port "$TARGET" --log "$T/target.jsonl"
spawn wstarget $PY "$TOP/tests/regress/ws_echo.py" server "$WSTARGET"
spawn tlstarget $PY "$TOP/tests/regress/backend.py" --port "$TLSTARGET" \
	--log "$T/tls.jsonl" --tls "$CERTS/server.crt" "$CERTS/server.key"
wait_port "$WSTARGET"
wait_port "$TLSTARGET"
spawn files sh -c "cd '$T/www' && exec $PY -m http.server $FILES --bind 127.0.0.1"
wait_port "$TARGET"
wait_port "$FILES"

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
  - address: 127.0.0.1:$GWS
    tls:
      cert: $CERTS/server.crt
      key: $CERTS/server.key
sandboxes:
  - id: dev@box/one
    netns: /run/netns/$NS
    tunnel:
      listen_port: 8766
      token: $TOKEN
      client_wait: 5s
  - id: files
    netns: /run/netns/$NS
    tunnel:
      listen_port: [9766, 7766, 6766, 5766, 4766]
      token: $TOKEN
EOF
wait_port "$GWS"

# aktunnel over TLS to the gateway, with the token, to the echo target.
spawn tun "$AKTUN" --gateway "https://localhost:$GWS" --sandbox dev@box/one \
	--target "http://127.0.0.1:$TARGET" --token "$TOKEN" --ca-file "$CERTS/ca.crt"
TUN_PID=$LAST_PID
out=$(nsc http://127.0.0.1:8766/echo -d 'hello tunnel')
assert_contains "fast path through the tunnel" '"body_len": 12' "$out"
assert_contains "path" '"path": "/echo"' "$out"
out=$(nsc --data-binary "@$T/www/big.bin" http://127.0.0.1:8766/sink)
assert_contains "100 MiB upload through the tunnel" "$want" "$out"
out=$(nsc -H 'Transfer-Encoding: chunked' --data-binary "@$T/www/big.bin" http://127.0.0.1:8766/sink)
assert_contains "100 MiB chunked upload through the tunnel" "$want" "$out"
ok "requests and 100 MiB uploads through gateway and aktunnel (wss, token)"

# Plain ws for the second tunnel; the token over plaintext needs the flag.
spawn tun2 "$AKTUN" --gateway "127.0.0.1:$GW" --sandbox files \
	--target "http://127.0.0.1:$FILES" --token "$TOKEN" --allow-plaintext-token
got=$(nsc http://127.0.0.1:9766/big.bin | sha256sum | cut -d' ' -f1)
assert_eq "100 MiB download through the tunnel" "$want" "$got"
ok "100 MiB download through a plain ws tunnel"

# Uploads over plain ws too: there the gateway's frames share their payload
# with the buffer it keeps for a resume instead of copying it.
spawn tun3 "$AKTUN" --gateway "127.0.0.1:$GW" --sandbox files --listen-port 4766 \
	--target "http://127.0.0.1:$TARGET" --token "$TOKEN" --allow-plaintext-token
out=$(nsc --data-binary "@$T/www/big.bin" http://127.0.0.1:4766/sink)
assert_contains "100 MiB upload through a plain ws tunnel" "$want" "$out"
out=$(nsc -H 'Transfer-Encoding: chunked' --data-binary "@$T/www/big.bin" http://127.0.0.1:4766/sink)
assert_contains "100 MiB chunked upload through a plain ws tunnel" "$want" "$out"
ok "100 MiB uploads through a plain ws tunnel, byte-exact"

# An HTTPS target, verified with the development CA; without it the
# sandbox caller gets 502 with the reason, and nothing reaches the target.
spawn tun4 "$AKTUN" --gateway "127.0.0.1:$GW" --sandbox files --listen-port 7766 \
	--target "https://localhost:$TLSTARGET" --target-ca-file "$CERTS/ca.crt" \
	--token "$TOKEN" --allow-plaintext-token
out=$(nsc http://127.0.0.1:7766/echo)
assert_contains "HTTPS target" '"path": "/echo"' "$out"
n=$(wc -l <"$T/tls.jsonl")
spawn tun5 "$AKTUN" --gateway "127.0.0.1:$GW" --sandbox files --listen-port 6766 \
	--target "https://localhost:$TLSTARGET" --token "$TOKEN" --allow-plaintext-token
out=$(nsc -i http://127.0.0.1:6766/echo)
assert_contains "unknown CA status" "HTTP/1.1 502" "$out"
assert_contains "unknown CA reason" "unable to get local issuer certificate" "$out"
assert_eq "requests at the target after the refused one" "$n" "$(wc -l <"$T/tls.jsonl")"
ok "HTTPS target verified; an unknown CA gives 502 with the reason"

# An application WebSocket from the sandbox to a WebSocket target.
spawn tun6 "$AKTUN" --gateway "127.0.0.1:$GW" --sandbox files --listen-port 5766 \
	--target "http://127.0.0.1:$WSTARGET" --token "$TOKEN" --allow-plaintext-token
i=0
until ip netns exec "$NS" $PY "$TOP/tests/regress/ws_echo.py" client \
    ws://127.0.0.1:5766/chat --count 20 --size 70000 >"$T/ws.out" 2>&1; do
	i=$((i + 1))
	[ $i -lt 20 ] || fail "websocket echo: $(cat "$T/ws.out")"
	sleep 0.25
done
assert_eq "websocket echo through the tunnel" "ok 20" "$(cat "$T/ws.out")"
ok "application WebSocket through the tunnel"

# SSE: the first event arrives before the stream ends.
ip netns exec "$NS" $PY - "http://127.0.0.1:8766/sse?n=3&delay=0.5" <<'EOF' >"$T/sse.txt"
import sys, time, urllib.request
t0 = time.time()
with urllib.request.urlopen(sys.argv[1], timeout=30) as r:
    for line in r:
        if line.startswith(b"data:"):
            print("%.2f" % (time.time() - t0))
EOF
first=$(head -n 1 "$T/sse.txt")
last=$(tail -n 1 "$T/sse.txt")
assert_eq "SSE events" "3" "$(wc -l <"$T/sse.txt" | tr -d ' ')"
$PY -c "import sys; sys.exit(0 if $last - $first >= 0.8 else 1)" ||
	fail "SSE events arrived together ($first .. $last)"
ok "SSE events arrive one by one through the tunnel"

# aktunnel restarts: a request made meanwhile waits (client_wait) and succeeds.
kill "$TUN_PID"
wait "$TUN_PID" 2>/dev/null
nsc http://127.0.0.1:8766/echo -o "$T/blip.out" &
CURL=$!
sleep 1
spawn tun3 "$AKTUN" --gateway "https://localhost:$GWS" --sandbox dev@box/one \
	--target "http://127.0.0.1:$TARGET" --token "$TOKEN" --ca-file "$CERTS/ca.crt"
wait "$CURL" || fail "the request made during the restart failed"
assert_contains "request during the restart" '"path": "/echo"' "$(cat "$T/blip.out")"
ok "a request made while aktunnel restarts succeeds"

# The target saw the requests without our credentials or hop-by-hop fields.
if grep -q "$TOKEN" "$T/target.jsonl"; then fail "the tunnel token reached the target"; fi
if grep -q "$TOKEN" "$T/gateway.log"; then fail "the tunnel token was logged"; fi
ok "the token never reaches the target or the log"
