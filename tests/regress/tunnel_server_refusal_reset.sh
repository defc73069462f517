#!/bin/sh
# "akgateway tunnel-server" refuses an upgrade request (a wrong token, no
# upgrade at all) while the client has sent more after its head, as a
# client that writes its first frames at once does.  The refusal must
# arrive: the server shuts its side and drains the rest a moment instead
# of closing a socket with unread input, which sends a reset that destroys
# the answer before the client reads it.
. "$(dirname "$0")/lib.sh"

WS=$(free_port)
LP=$(free_port)
spawn tsrv "$AKGW" tunnel-server --ws "127.0.0.1:$WS" --listen "127.0.0.1:$LP" \
	--token right-token -v
wait_port "$WS"

# refused HEAD: send head plus 256 KiB after it, wait, then read.
refused() {
	$PY - "$WS" "$1" <<'PYEOF'
import socket, sys, time
port, head = int(sys.argv[1]), sys.argv[2].encode().decode("unicode_escape")
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(head.encode() + b"x" * (256 * 1024))
# Let the server answer and close while the extra bytes are unread.
time.sleep(1)
out = b""
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
except ConnectionResetError:
    out += b"<reset>"
sys.stdout.write(out.decode("latin-1"))
PYEOF
}

out=$(refused 'GET /tunnel HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nX-Auth: wrong-token\r\n\r\n')
assert_contains "wrong token: status" "HTTP/1.1 403 Forbidden" "$out"
assert_contains "wrong token: body" '{"status":403,"code":"forbidden","message":"The token does not open this tunnel."}' "$out"
case "$out" in *"<reset>"*) fail "wrong token: the connection was reset: $out" ;; esac
ok "403 arrives whole although the client sent 256 KiB after its head"

out=$(refused 'POST /tunnel HTTP/1.1\r\nHost: x\r\nX-Auth: right-token\r\nContent-Length: 262144\r\n\r\n')
assert_contains "no upgrade: status" "HTTP/1.1 400 Bad Request" "$out"
assert_contains "no upgrade: code" '"code":"bad_websocket_upgrade"' "$out"
case "$out" in *"<reset>"*) fail "no upgrade: the connection was reset: $out" ;; esac
ok "400 bad_websocket_upgrade arrives whole before its unread body"
wait_log "$T/tsrv.log" 'refused 400 bad_websocket_upgrade'
