#!/bin/sh
# The built-in default that `make run` starts: port URLs on 127.0.0.1:8080
# for the sandbox 'local' reach local ports, with clear errors otherwise.
# It needs ports 8080, 9090 and 8000 free on 127.0.0.1.
. "$(dirname "$0")/lib.sh"

for p in 8080 9090 8000; do
	if $PY -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1',$p))!=0)"; then
		fail "port $p is in use; the default-config test needs it free"
	fi
done
mkdir -p "$T/www"
echo "served on 8000" >"$T/www/index.html"
spawn files sh -c "cd '$T/www' && exec $PY -m http.server 8000 --bind 127.0.0.1"
wait_port 8000
spawn gateway "$AKGW"
GW_PID=$LAST_PID
wait_port 8080

out=$(curl -sS --max-time 10 http://8000-local.localhost:8080/)
assert_eq "default host form" "served on 8000" "$out"
out=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' http://8000-nobody.localhost:8080/)
assert_eq "unknown sandbox" "404" "$out"
out=$(curl -sS --max-time 10 http://8001-local.localhost:8080/)
assert_contains "port not listening" '"code":"port_not_listening"' "$out"
out=$(curl -sS --max-time 10 http://8080-local.localhost:8080/)
assert_contains "own listener refused" '"code":"port_not_published"' "$out"
out=$(curl -sS --max-time 10 http://9090-local.localhost:8080/)
assert_contains "admin port refused" '"code":"port_not_published"' "$out"
out=$(curl -sS --max-time 10 http://8766-local.localhost:8080/)
assert_contains "tunnel port refused" '"code":"port_not_published"' "$out"
ok "built-in default serves port URLs for 'local'"

wait_port 9090
out=$(curl -sS --max-time 10 http://127.0.0.1:9090/healthz)
assert_eq "admin healthz on the default" '{"status":"ok"}' "$out"
out=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' http://127.0.0.1:9090/v1/sandboxes)
assert_eq "default admin API open on loopback" "200" "$out"
ok "built-in default serves the admin API on 127.0.0.1:9090"
