#!/bin/sh
# Bulk transfers through the gateway: a 1 GiB download and 1 GiB uploads
# (Content-Length and chunked) checked with sha256, and a slow consumer
# downloading 1 GiB at 20 MB/s while the gateway's RSS is sampled every
# 0.5 s: backpressure must keep it within 16 MiB of where it started.  The
# full-speed download and the Content-Length upload must move with
# splice(2): the gateway's own reads (rchar in /proc/PID/io) stay under
# 16 MiB of the 1 GiB.
#
# Time on 2 cores: ~7 s to make the file, ~6 s to hash it, ~54 s for the
# throttled download, ~10 s for each full-speed transfer; under 2 minutes.
. "$(dirname "$0")/lib.sh"

SIZE=1073741824		# 1 GiB
SLOW_RATE=20M		# curl --limit-rate for the slow consumer
RSS_SLACK_KB=16384	# 16 MiB

GW=$(free_port)
FILES=$(free_port)
SINK=$(free_port)

mkdir -p "$T/www"
head -c $SIZE /dev/urandom >"$T/www/big.bin" || fail "cannot write 1 GiB into $T"
want=$(sha256sum <"$T/www/big.bin" | cut -d' ' -f1)

spawn files sh -c "cd '$T/www' && exec $PY -m http.server $FILES --bind 127.0.0.1"
spawn backend $PY "$TOP/tests/regress/backend.py" --port "$SINK" --log "$T/upstream.jsonl"
wait_port "$FILES"
wait_port "$SINK"

# Under AddressSanitizer freed memory sits in a quarantine (256 MiB by
# default) that would read as growth; keep it small so RSS means something.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=1"
export ASAN_OPTIONS

spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
timeouts:
  idle: 60s
sandboxes:
  - id: bulk
    address: 127.0.0.1
    ports:
      - port: $FILES
      - port: $SINK
EOF

C="curl -sS --max-time 150"
DL="http://$FILES-bulk.localhost:$GW/big.bin"
UPL="http://$SINK-bulk.localhost:$GW/sink"

# The gateway's resident set size in KiB.
rss() {
	sed -n 's/^VmRSS:[^0-9]*\([0-9]*\) kB/\1/p' "/proc/$GW_PID/status"
}

# Bytes the gateway has read with read(2)-like calls (splice(2) is not
# counted): a spliced body leaves this nearly unchanged.
rchar() {
	sed -n 's/^rchar: *//p' "/proc/$GW_PID/io"
}
# The gateway read at most SPLICE_SLACK of a body of $SIZE bytes itself.
SPLICE_SLACK=16777216	# 16 MiB
assert_spliced() {
	read_by_us=$(($(rchar) - $2))
	# HTTP/2 carries bodies in frames: splice(2) is for HTTP/1.1 only.
	[ "$H2" = 1 ] && return 0
	[ $read_by_us -lt $SPLICE_SLACK ] ||
		fail "$1: the gateway read $read_by_us bytes itself; the body should move with splice(2)"
}

# Sample the gateway's RSS every 0.5 s into $T/rss.txt until $T/rss.stop
# appears (5 minutes at most).
start_sampler() {
	rm -f "$T/rss.stop"
	: >"$T/rss.txt"
	(
		i=0
		while [ ! -f "$T/rss.stop" ] && [ $i -lt 600 ]; do
			rss >>"$T/rss.txt"
			sleep 0.5; i=$((i + 1))
		done
	) &
	SAMPLER=$!
}
stop_sampler() {
	touch "$T/rss.stop"
	wait $SAMPLER
}
max_rss() {
	sort -n "$T/rss.txt" | tail -n 1
}

# Warm up (first connection, first pooled upstream), then take the base.
$C -o /dev/null "http://$SINK-bulk.localhost:$GW/echo" || fail "warm-up request failed"
base=$(rss)
[ -n "$base" ] || fail "cannot read the gateway's VmRSS"

# --- Slow consumer: 1 GiB at 20 MB/s --------------------------------------------
start_sampler
got=$($C --max-time 120 --limit-rate $SLOW_RATE "$DL" | sha256sum | cut -d' ' -f1)
stop_sampler
assert_eq "slow consumer download checksum" "$want" "$got"
peak=$(max_rss)
samples=$(wc -l <"$T/rss.txt" | tr -d ' ')
[ "$samples" -ge 20 ] || fail "only $samples RSS samples during the slow download"
grow=$((peak - base))
[ $grow -lt $RSS_SLACK_KB ] ||
	fail "gateway RSS grew by ${grow} KiB (from $base to $peak KiB) with a slow consumer"
ok "slow consumer: 1 GiB at $SLOW_RATE/s, RSS $base -> peak $peak KiB (+$grow KiB, $samples samples)"

# --- 1 GiB download at full speed ---------------------------------------------
start_sampler
r0=$(rchar)
got=$($C "$DL" | sha256sum | cut -d' ' -f1)
stop_sampler
assert_eq "1 GiB download checksum" "$want" "$got"
assert_spliced "1 GiB download" "$r0"
peak=$(max_rss)
grow=$((peak - base))
[ $grow -lt $RSS_SLACK_KB ] ||
	fail "gateway RSS grew by ${grow} KiB (from $base to $peak KiB) during a 1 GiB download"
ok "1 GiB download, RSS peak $peak KiB (+$grow KiB), $read_by_us bytes read by the gateway"

# --- 1 GiB uploads: Content-Length, then chunked ------------------------------------
start_sampler
r0=$(rchar)
out=$($C -T "$T/www/big.bin" "$UPL?mode=length") || fail "1 GiB upload failed: $out"
assert_contains "1 GiB upload checksum" "\"body_sha256\": \"$want\"" "$out"
assert_contains "1 GiB upload length" "\"body_len\": $SIZE" "$out"
assert_spliced "1 GiB Content-Length upload" "$r0"
out=$($C -T - -H 'Transfer-Encoding: chunked' "$UPL?mode=chunked" <"$T/www/big.bin") ||
	fail "1 GiB chunked upload failed: $out"
assert_contains "1 GiB chunked upload checksum" "\"body_sha256\": \"$want\"" "$out"
assert_contains "1 GiB chunked upload length" "\"body_len\": $SIZE" "$out"
stop_sampler
peak=$(max_rss)
grow=$((peak - base))
[ $grow -lt $RSS_SLACK_KB ] ||
	fail "gateway RSS grew by ${grow} KiB (from $base to $peak KiB) during 1 GiB uploads"
ok "1 GiB uploads, Content-Length and chunked, RSS peak $peak KiB (+$grow KiB)"

grep -q 'mode=length' "$T/upstream.jsonl" || fail "the upstream did not record the upload"
kill -0 "$GW_PID" 2>/dev/null || fail "the gateway died"
