#!/bin/sh
# Issue 16, section 2: an upstream that floods interim (1xx) responses.
# To a client that does not read, they used to pile up in the client's
# output with no watermark (224 MB of RSS for 190 MiB of 103s); now they
# stop at the output watermark.  To a client that reads, they stop at a
# per-request cap: the upstream is cut off and the client gets 502
# bad_upstream_response.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
UP=$(free_port)
spawn raw $PY "$TOP/tests/regress/raw_backend.py" --port "$UP" --log "$T/up.jsonl"
wait_port "$UP"
spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
domains: [localhost]
workers: 1
log:
  level: info
sandboxes:
  - id: local
    address: 127.0.0.1
    ports:
      - port: $UP
EOF

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$GW_PID/status"; }

# A client that asks for the flood and never reads: the gateway's RSS
# stays near where it started while the upstream keeps sending for 4 s.
start=$(rss_kb)
max=$($PY - "$GW" "$UP" "$GW_PID" <<'PYEOF'
import socket, sys, time
gw, up, pid = int(sys.argv[1]), sys.argv[2], sys.argv[3]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(("127.0.0.1", gw))
s.sendall(("GET /flood?s=6 HTTP/1.1\r\nHost: %s-local.localhost\r\n\r\n" % up).encode())
def rss():
    for line in open("/proc/%s/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
peak = 0
end = time.monotonic() + 4
while time.monotonic() < end:
    peak = max(peak, rss())
    time.sleep(0.1)
print(peak)
s.close()
PYEOF
)
grow=$((max - start))
echo "RSS at start ${start} KiB, peak ${max} KiB while flooded"
[ "$grow" -lt 20480 ] || fail "the gateway grew by $grow KiB under a 1xx flood to a client that does not read"
ok "a 1xx flood to a client that does not read stays within the output watermark ($grow KiB)"

# A client that reads: past the cap the upstream is cut off with a 502.
out=$($PY - "$GW" "$UP" <<'PYEOF'
import socket, sys
gw, up = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", gw), timeout=20)
s.sendall(("GET /flood?n=100000 HTTP/1.1\r\nHost: %s-local.localhost\r\nConnection: close\r\n\r\n" % up).encode())
data = b""
while True:
    d = s.recv(1 << 16)
    if not d:
        break
    data += d
n103 = data.count(b"HTTP/1.1 103 Early Hints\r\n")
i = data.rfind(b"HTTP/1.1 5")
print(n103, data[i:i + 600].decode("latin-1").replace("\r\n", " | "))
PYEOF
)
echo "$out"
n=${out%% *}
[ "$n" -ge 1 ] && [ "$n" -le 1024 ] || fail "interim responses relayed: $n (want 1..1024)"
assert_contains "502 after the cap" "HTTP/1.1 502 Bad Gateway" "$out"
assert_contains "error code" '"code":"bad_upstream_response"' "$out"
wait_log "$T/gateway.log" '"status":502\|status=502'
grep -q 'error=bad_upstream_response\|"error":"bad_upstream_response"' "$T/gateway.log" || fail "no access line for the 502"
ok "past the cap the client gets 502 bad_upstream_response"

# The gateway still serves.
out=$(curl -sS --max-time 10 "http://$UP-local.localhost:$GW/")
assert_eq "served after the floods" "ok" "$out"
ok "still serving"
