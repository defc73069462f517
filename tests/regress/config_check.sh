#!/bin/sh
# Command line and --check: a broken configuration is refused with
# file:line:column and exit 1; a good one passes; the built-in default
# works as the README says.
. "$(dirname "$0")/lib.sh"

out=$("$AKGW" --version)
assert_eq "--version exit" "0" "$?"
assert_contains "--version" "akgateway " "$out"
out=$("$AKGW" --help)
assert_contains "--help" "--check" "$out"
"$AKGW" --bogus >/dev/null 2>&1
assert_eq "unknown option exit" "2" "$?"
ok "version, help and usage errors"

cat >"$T/good.yaml" <<EOF
listen:
  - address: 127.0.0.1:18080
sandboxes:
  - id: a
    address: 127.0.0.1
    ports: [{port: 3000}]
EOF
out=$("$AKGW" -c "$T/good.yaml" --check 2>&1)
assert_eq "--check good exit" "0" "$?"
assert_contains "--check good" "configuration is valid" "$out"

cat >"$T/bad.yaml" <<EOF
listen:
  - address: 127.0.0.1:18080
sandboxes:
  - id: a
    address: 127.0.0.1
    ports:
      - port: 3000
        acces: public
EOF
out=$("$AKGW" -c "$T/bad.yaml" --check 2>&1)
assert_eq "--check bad exit" "1" "$?"
assert_eq "--check bad message" "akgateway: $T/bad.yaml:8:9: unknown key 'acces' in a port (expected one of: port, access, host_rewrite, protocol)" "$out"

printf 'listen:\n  - address: [127.0.0.1:80\n' >"$T/syntax.yaml"
out=$("$AKGW" -c "$T/syntax.yaml" --check 2>&1)
assert_eq "--check syntax exit" "1" "$?"
assert_contains "--check syntax position" "$T/syntax.yaml:3:1: " "$out"

printf 'listen:\n  - address: 127.0.0.1:80\ntimeouts:\n  connect: soon\n' >"$T/type.yaml"
out=$("$AKGW" -c "$T/type.yaml" --check 2>&1)
assert_eq "--check type message" "akgateway: $T/type.yaml:4:12: timeouts.connect must be a duration such as 500ms, 10s, 5m or 1h, not 'soon'" "$out"

out=$("$AKGW" -c "$T/missing.yaml" --check 2>&1)
assert_eq "--check missing exit" "1" "$?"
assert_eq "--check missing message" "akgateway: $T/missing.yaml: No such file or directory" "$out"

# Starting (not --check) with a bad file fails the same way, before listening.
out=$("$AKGW" -c "$T/bad.yaml" 2>&1)
assert_eq "start with bad config exit" "1" "$?"
assert_contains "start with bad config message" "$T/bad.yaml:8:9:" "$out"
ok "--check reports file:line:column"

out=$("$AKGW" --check 2>&1)
assert_eq "--check built-in exit" "0" "$?"
assert_contains "--check built-in" "<built-in>: configuration is valid" "$out"
ok "built-in default is valid"

# A listener that cannot bind is a clear error.
P=$(free_port)
spawn blocker $PY -c "import socket,time; s=socket.socket(); s.bind(('127.0.0.1',$P)); s.listen(); time.sleep(60)"
wait_port "$P"
printf 'listen:\n  - address: 127.0.0.1:%s\n' "$P" >"$T/busy.yaml"
out=$(timeout 10 "$AKGW" -c "$T/busy.yaml" 2>&1)
assert_eq "busy port exit" "1" "$?"
assert_contains "busy port message" "cannot listen on 127.0.0.1:$P: Address already in use" "$out"
ok "bind failure is reported"
