#!/bin/sh
# aktunnel toward an https:// target (tunnel-protocol.md §9.5): verified
# with --target-ca-file, refused with the reason when the CA is unknown or
# the name does not match (never a silent fallback), and --target-insecure
# with its warning. The target is backend.py behind Python's TLS with the
# development certificates.
. "$(dirname "$0")/lib.sh"

[ -x "$AKTUN" ] || fail "$AKTUN is not built"
[ -f "$CERTS/ca.crt" ] || fail "no test certificates in $CERTS (make certs)"
MOCK="$TOP/tests/regress/tunnel_mock.py"
$PY -c 'import websockets' || fail "python3-websockets is missing"

# A TLS backend: backend.py's handler on a TLS socket.
cat >"$T/tlsbe.py" <<'EOF'
import ssl, sys
sys.path.insert(0, sys.argv[4])
import backend
from http.server import ThreadingHTTPServer
srv = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), backend.Handler)
srv.daemon_threads = True
srv.logpath = sys.argv[5]
srv.nparts = 3
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[2], sys.argv[3])
if len(sys.argv) > 6:
    # Mutual TLS: a client certificate from this CA is required.
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(sys.argv[6])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
EOF
GOOD=$(free_port)
OTHER=$(free_port)
spawn good $PY "$T/tlsbe.py" "$GOOD" "$CERTS/server.crt" "$CERTS/server.key" \
    "$TOP/tests/regress" "$T/good.jsonl"
spawn other $PY "$T/tlsbe.py" "$OTHER" "$CERTS/other.crt" "$CERTS/other.key" \
    "$TOP/tests/regress" "$T/other.jsonl"
MTLS=$(free_port)
spawn mtls $PY "$T/tlsbe.py" "$MTLS" "$CERTS/server.crt" "$CERTS/server.key" \
    "$TOP/tests/regress" "$T/mtls.jsonl" "$CERTS/ca.crt"
wait_port "$GOOD"
wait_port "$OTHER"
wait_port "$MTLS"
head -c 1048576 /dev/urandom >"$T/1m.bin"
SHA=$(sha256sum <"$T/1m.bin" | cut -d' ' -f1)

run_case() {
	name=$1 script=$2; shift 2
	MP=$(free_port)
	printf '%s\n' "$script" >"$T/$name.script"
	spawn "$name" $PY "$MOCK" --port "$MP" --script "$T/$name.script"
	mock=$LAST_PID
	wait_port "$MP"
	spawn "$name-tun" "$AKTUN" --gateway "127.0.0.1:$MP" --sandbox sbx1 "$@"
	tun=$LAST_PID
	wait "$mock" || fail "mock $name failed: $(grep 'mock:' "$T/$name.log")"
	kill -TERM "$tun"
	wait "$tun"
	assert_eq "aktunnel exit status ($name)" 0 "$?"
}

resp() {
	grep '"event": "response"' "$T/$1.log" | sed -n "${2}p"
}

# The right CA: requests and a streamed 1 MiB upload and SSE work, over
# the IP address and over the name.
run_case good "accept
fetch new GET /echo expect=fast status=200
upload new POST /sink $T/1m.bin expect=stream status=200
fetch new GET /sse?n=2&delay=0.1 expect=stream" \
    --target "https://127.0.0.1:$GOOD" --target-ca-file "$CERTS/ca.crt"
assert_contains "TLS upload sha256" "\\\"body_sha256\\\": \\\"$SHA\\\"" "$(resp good 2)"
run_case goodname "accept
fetch new GET /echo expect=fast status=200" \
    --target "https://localhost:$GOOD" --target-ca-file "$CERTS/ca.crt"
grep -q "\"Host\", \"localhost:$GOOD\"" "$T/good.jsonl" ||
    fail "the target did not get Host: localhost:$GOOD"
ok "https target verified with --target-ca-file"

# No CA for it: the system store does not know the development CA.
before=$(wc -l <"$T/good.jsonl" | tr -d ' ')
run_case noca "accept
fetch new GET /echo expect=error grep=unable\\ to\\ get\\ local\\ issuer\\ certificate
pings 1 30" --target "https://127.0.0.1:$GOOD" --ping-interval 0.2
assert_contains "reason names the target" \
    "TLS certificate verification of the target 127.0.0.1:$GOOD failed: unable to get local issuer certificate" \
    "$(resp noca 1)"
assert_eq "requests that reached the target" "$before" "$(wc -l <"$T/good.jsonl" | tr -d ' ')"
ok "unknown CA: error with the reason, nothing sent"

# The certificate is for another name.
run_case mismatch "accept
fetch new GET /echo expect=error grep=hostname\\ mismatch" \
    --target "https://localhost:$OTHER" --target-ca-file "$CERTS/ca.crt"
assert_contains "mismatch reason" \
    "TLS certificate verification of the target localhost:$OTHER failed: hostname mismatch" \
    "$(resp mismatch 1)"
run_case mismatchip "accept
fetch new GET /echo expect=error grep=mismatch" \
    --target "https://127.0.0.1:$OTHER" --target-ca-file "$CERTS/ca.crt"
[ -s "$T/other.jsonl" ] && fail "a request reached the mismatching target"
ok "hostname and IP mismatch: error with the reason, nothing sent"

# --target-insecure: works, and says loudly that it is unsafe.
run_case insecure "accept
fetch new GET /echo expect=fast status=200" \
    --target "https://localhost:$OTHER" --target-insecure
assert_contains "insecure warning" "TLS verification of the target is DISABLED" \
    "$(cat "$T/insecure-tun.log")"
ok "--target-insecure connects and warns"

# Mutual TLS: with --target-cert/--target-key the target that requires a
# client certificate answers; without them the request fails.
run_case mtls "accept
fetch new GET /echo expect=fast status=200" \
    --target "https://127.0.0.1:$MTLS" --target-ca-file "$CERTS/ca.crt" \
    --target-cert "$CERTS/client.crt" --target-key "$CERTS/client.key"
[ -s "$T/mtls.jsonl" ] || fail "the mTLS target saw no request"
run_case nomtls "accept
fetch new GET /echo expect=error" \
    --target "https://127.0.0.1:$MTLS" --target-ca-file "$CERTS/ca.crt"
"$AKTUN" --gateway 127.0.0.1:1 --sandbox s --target "https://127.0.0.1:$MTLS" \
    --target-cert "$T/missing.crt" --target-key "$CERTS/client.key" \
    >"$T/mtlsbad.log" 2>&1
assert_eq "missing client certificate exit status" 1 "$?"
assert_contains "missing client certificate message" \
    "cannot load client certificate $T/missing.crt" "$(cat "$T/mtlsbad.log")"
ok "mutual TLS to the target with --target-cert/--target-key"
