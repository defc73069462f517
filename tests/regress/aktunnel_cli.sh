#!/bin/sh
# aktunnel's command line and environment, end to end through the built
# binary: --version, --help, the usage errors (exit 2) and an invocation made
# from the environment alone, whose configuration line must not show the
# token. Runs that get as far as dialling point at a closed port on
# localhost and are stopped with SIGTERM (exit 0).

. "$(dirname "$0")/lib.sh"

[ -x "$AKTUN" ] || fail "$AKTUN is not built"

# run_tun NAME [VAR=value ... --] ARGS...: run aktunnel in an environment
# holding only PATH and the given variables, so the caller's AKERNEL_* and
# YR_* never leak in; sets RC, OUT and ERR.
run_tun() {
	name=$1; shift
	n=$#; seen=0
	while [ "$n" -gt 0 ]; do
		a=$1; shift; n=$((n - 1))
		if [ "$seen" = 0 ] && [ "$a" = "--" ]; then
			set -- "$@" "$AKTUN"; seen=1
		else
			set -- "$@" "$a"
		fi
	done
	[ "$seen" = 1 ] || set -- "$AKTUN" "$@"
	env -i PATH="$PATH" "$@" >"$T/$name.out" 2>"$T/$name.log"
	RC=$?
	OUT=$(cat "$T/$name.out")
	ERR=$(cat "$T/$name.log")
}

# run_bg NAME [VAR=value ... --] ARGS...: as run_tun, for an invocation
# that starts dialling: wait for its configuration line, stop it with
# SIGTERM; sets RC and ERR.
run_bg() {
	name=$1; shift
	n=$#; seen=0
	while [ "$n" -gt 0 ]; do
		a=$1; shift; n=$((n - 1))
		if [ "$seen" = 0 ] && [ "$a" = "--" ]; then
			set -- "$@" "$AKTUN"; seen=1
		else
			set -- "$@" "$a"
		fi
	done
	[ "$seen" = 1 ] || set -- "$AKTUN" "$@"
	env -i PATH="$PATH" "$@" >"$T/$name.out" 2>"$T/$name.log" &
	pid=$!
	i=0
	while ! grep -q "token: " "$T/$name.log" && [ $i -lt 100 ]; do
		sleep 0.05; i=$((i + 1))
	done
	kill -TERM "$pid"
	wait "$pid"
	RC=$?
	ERR=$(cat "$T/$name.log")
}

CLOSED=$(free_port)

# --version: one line, exit 0.
run_tun version --version
assert_eq "--version exit" 0 "$RC"
case "$OUT" in
"aktunnel "[0-9]*.[0-9]*) ;;
*) fail "--version printed '$OUT'" ;;
esac
assert_eq "--version stderr" "" "$ERR"
ok "--version prints '$OUT' and exits 0"

# --help: exit 0, names the flags and the variables.
run_tun help --help
assert_eq "--help exit" 0 "$RC"
for word in --gateway --sandbox --target --listen-port --token \
    --allow-plaintext-token --ca-file --verify-tls --no-verify-tls \
    --log-level --log-format --verbose --version --ping-interval \
    --ping-timeout AKERNEL_GATEWAY_ADDRESS \
    YR_GATEWAY_ADDRESS AKERNEL_TOKEN AKERNEL_VERIFY_TLS SSL_CERT_FILE \
    YR_TUNNEL_SSL_VERIFY YR_TUNNEL_CA_BUNDLE YR_TUNNEL_TOKEN_QUERY_FALLBACK \
    YR_TUNNEL_PROTOCOL_VERSION YR_TUNNEL_MAX_BODY_SIZE \
    YR_TUNNEL_MAX_WS_MESSAGE_SIZE YR_TUNNEL_STREAM_CHUNK_BYTES \
    YR_TUNNEL_MAX_INFLIGHT YR_TUNNEL_STREAM_WINDOW_FRAMES \
    YR_TUNNEL_FAST_PATH_BODY_BYTES YR_TUNNEL_HTTP_TIMEOUT; do
	assert_contains "--help" "$word" "$OUT"
done
ok "--help exits 0 and lists every flag and variable"

# A gateway with a scheme we do not speak: exit 2, the exact message.
run_tun badscheme --gateway ftp://gw.example --sandbox sbx1 \
    --target http://127.0.0.1:8000
assert_eq "bad scheme exit" 2 "$RC"
want="aktunnel: invalid --gateway 'ftp://gw.example': unsupported scheme"
want="$want 'ftp' (use ws://, wss://, http:// or https://, or no scheme"
want="$want for plain ws)
Try 'aktunnel --help'."
assert_eq "bad scheme message" "$want" "$ERR"
assert_eq "bad scheme stdout" "" "$OUT"
ok "a bad gateway scheme exits 2 with the exact message"

# No target: exit 2, the message names --target and its variable.
run_tun notarget --gateway 127.0.0.1:8080 --sandbox sbx1
assert_eq "missing target exit" 2 "$RC"
want="aktunnel: missing --target URL (or AKTUNNEL_TARGET)
Try 'aktunnel --help'."
assert_eq "missing target message" "$want" "$ERR"
ok "a missing target exits 2 naming --target"

# A token over plain ws without --allow-plaintext-token: exit 2.
run_tun plaintoken --gateway 127.0.0.1:8080 --sandbox sbx1 \
    --target http://127.0.0.1:8000 --token s3cret-flag
assert_eq "plaintext token exit" 2 "$RC"
want="aktunnel: refusing to send the token over plain ws://127.0.0.1:8080:"
want="$want use a TLS gateway address (https:// or wss://), or pass"
want="$want --allow-plaintext-token to send it unencrypted
Try 'aktunnel --help'."
assert_eq "plaintext token message" "$want" "$ERR"
case "$ERR" in *s3cret-flag*) fail "the refusal shows the token" ;; esac
ok "a token over plain ws is refused (exit 2) without showing it"

# Bad numeric environment: exit 2 (scenario 26).
run_tun badenv YR_TUNNEL_MAX_BODY_SIZE=not-an-integer -- \
    --gateway gw --sandbox s --target http://t
assert_eq "bad env exit" 2 "$RC"
assert_contains "bad env message" \
    "YR_TUNNEL_MAX_BODY_SIZE must be a positive integer" "$ERR"
ok "a bad YR_TUNNEL_MAX_BODY_SIZE exits 2"

# From the environment alone: resolves, logs the configuration without the
# token, dials (nothing listens) until SIGTERM, then exits 0.
run_bg envonly AKERNEL_GATEWAY_ADDRESS=https://localhost:$CLOSED \
    YR_GATEWAY_ADDRESS=ignored.example:1 AKERNEL_TOKEN=tok-9f8e7d6c5b4a \
    AKTUNNEL_SANDBOX=sandbox@v1/foo.bar_baz \
    AKTUNNEL_TARGET=http://127.0.0.1:8000/api/ --
assert_eq "env-only exit after SIGTERM" 0 "$RC"
assert_contains "env-only gateway" "gateway wss://localhost:$CLOSED" "$ERR"
assert_contains "env-only tunnel" \
    "tunnel wss://localhost:$CLOSED/tunnel/sandbox-at-v1-foo-bar-baz" "$ERR"
assert_contains "env-only target" "target http://127.0.0.1:8000/api" "$ERR"
assert_contains "env-only listen port" "listen port 8766" "$ERR"
assert_contains "env-only token state" "token: set" "$ERR"
assert_contains "env-only stop" "received SIGTERM, stopping" "$ERR"
case "$ERR" in *tok-9f8e7d6c5b4a*) fail "the log shows the token: $ERR" ;; esac
case "$ERR" in
*ignored.example*) fail "YR_GATEWAY_ADDRESS won over AKERNEL_GATEWAY_ADDRESS" ;;
esac
ok "an environment-only invocation resolves and never logs the token"

# The same in JSON: still no token.
run_bg json --gateway "https://localhost:$CLOSED" --sandbox sbx1 \
    --target https://api.example.com --token tok-json-1234 --log-format json
assert_eq "json exit" 0 "$RC"
assert_contains "json line" '"level":"info"' "$ERR"
assert_contains "json token state" 'token: set' "$ERR"
case "$ERR" in *tok-json-1234*) fail "the JSON log shows the token" ;; esac
ok "the JSON configuration line does not show the token"

# Flags win over the environment.
run_bg flagwins AKERNEL_GATEWAY_ADDRESS=localhost:1 -- \
    --gateway "127.0.0.1:$CLOSED" --sandbox s --target http://t
assert_contains "flag over env" "gateway ws://127.0.0.1:$CLOSED" "$ERR"
ok "--gateway wins over AKERNEL_GATEWAY_ADDRESS"

# A trust file that does not load is a setup error: exit 1, one sentence.
run_tun badca --gateway "https://localhost:$CLOSED" --sandbox s \
    --target http://127.0.0.1:1 --ca-file "$T/no-such-ca.pem"
assert_eq "bad CA file exit" 1 "$RC"
assert_contains "bad CA file message" "aktunnel: cannot load CA file $T/no-such-ca.pem" "$ERR"
ok "an unreadable --ca-file exits 1"

# --ping-interval is checked.
run_tun badping --gateway gw --sandbox s --target http://t --ping-interval 0
assert_eq "bad ping interval exit" 2 "$RC"
assert_contains "bad ping interval" "invalid --ping-interval '0'" "$ERR"
ok "a bad --ping-interval exits 2"
