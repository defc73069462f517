#!/bin/sh
# A caller on Port B that reads nothing of a streamed answer for
# http_timeout is given up: the engine's write timeout ends the exchange,
# the client is told "downstream response closed", and the tunnel serves
# the next caller.  A caller that reads slowly but steadily is not cut.
. "$(dirname "$0")/lib.sh"

$PY -c 'import websockets' 2>/dev/null || fail "python3-websockets is needed ($PY)"

GW=$(free_port)
LP=$(free_port)
MOCK="$TOP/tests/regress/sandbox_mock_client.py"

spawn_gateway "$GW" <<EOC
listen:
  - address: 127.0.0.1:$GW
sandboxes:
  - id: sbx
    address: 127.0.0.1
    tunnel:
      listen_port: $LP
      http_timeout: 1s
EOC
wait_port "$LP"
spawn mock $PY "$MOCK" --name A --log "$T/A.jsonl" --url "ws://127.0.0.1:$GW/tunnel/sbx"
wait_log "$T/A.jsonl" '"event": "connected"'

# lazy.py N PAUSE: ask for N bytes, read PAUSE seconds of nothing, then
# read it all; print how many body bytes came and whether the connection
# was cut.
cat >"$T/lazy.py" <<'PYEOF'
import socket, sys, time
port, n, pause, step = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
s.sendall(b"GET /bytes?n=%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % n)
time.sleep(pause)
data, t0 = b"", time.time()
try:
    while time.time() - t0 < 30:
        b = s.recv(65536)
        if not b:
            break
        data += b
        time.sleep(step)
except ConnectionResetError:
    pass
body = data.partition(b"\r\n\r\n")[2]
print(len(body))
PYEOF

# 1. 64 MiB asked, nothing read for 4 s: cut after http_timeout.
n=67108864
got=$(timeout 40 $PY "$T/lazy.py" "$LP" $n 4 0) || fail "lazy.py failed"
[ "$got" -lt $n ] || fail "a caller that read nothing for 4 s got the whole answer ($got bytes)"
wait_log "$T/A.jsonl" '"message": "downstream response closed"'
wait_log "$T/gateway.log" 'read nothing within the write timeout'
ok "a caller that reads nothing for http_timeout is cut ($got of $n bytes); the client is told"

# 2. The tunnel serves the next caller, which reads slowly but steadily.
n=4194304
got=$(timeout 40 $PY "$T/lazy.py" "$LP" $n 0 0.002) || fail "lazy.py failed"
assert_eq "a slow, steady reader gets the whole answer" "$n" "$got"
ok "a slow but steady reader is not cut"

stop "$GW_PID"
grep -q 'AddressSanitizer\|LeakSanitizer\|runtime error' "$T/gateway.log" && fail "sanitizer report in the gateway log"
ok "tunnel_caller_stall"
