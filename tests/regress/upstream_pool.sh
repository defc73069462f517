#!/bin/sh
# The pool of idle upstream connections: each sandbox reuses its own
# connection through the hashed index (also once the index has grown past
# its first size), limits.max_idle_upstreams caps the pool with the oldest
# idle connection closed first and counted, and 0 turns the pool off.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
ADM=$(free_port)
ECHO=$(free_port)
UP="$T/upstream.jsonl"
NSB=60

spawn backend $PY "$TOP/tests/regress/backend.py" --port "$ECHO" --log "$UP"
wait_port "$ECHO"

# One worker: one pool.
{
	cat <<EOF
listen:
  - address: 127.0.0.1:$GW
admin:
  address: 127.0.0.1:$ADM
domains: [localhost]
workers: 1
timeouts:
  upstream_idle: 1m
limits:
  max_idle_upstreams: 100
sandboxes:
EOF
	i=1
	while [ $i -le $NSB ]; do
		printf '  - id: s%d\n    address: 127.0.0.1\n    ports:\n      - port: %d\n' "$i" "$ECHO"
		i=$((i + 1))
	done
} >"$T/many.yaml"
spawn_gateway "$GW" <"$T/many.yaml"
wait_port "$ADM"
C="curl -sS --max-time 20"

# metric NAME: its value in /metrics.
metric() {
	$C "http://127.0.0.1:$ADM/metrics" | awk -v n="$1" '$1 == n { print $2 }'
}

# peers FILE: "requests distinct-peers-per-sandbox-max shared" for s1..sN,
# from the backend's log of /connection requests.
peers() {
	$PY - "$UP" <<'PYEOF'
import json, sys
by = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    sb = r["path"].split("sb=")[1].split("&")[0]
    by.setdefault(sb, set()).add(r["peer_port"])
allp = [p for s in by.values() for p in s]
print(sum(1 for _ in open(sys.argv[1])), max(len(s) for s in by.values()),
      len(allp) - len(set(allp)), len(by))
PYEOF
}

# --- 60 sandboxes, twice each, one request per client connection --------------
# The second request of each sandbox must find its own pooled connection
# among 60 (the index grows from 16 buckets past 32 entries).
: >"$UP"
for round in 1 2; do
	i=1
	while [ $i -le $NSB ]; do
		code=$($C -o /dev/null -w '%{http_code}' "http://127.0.0.1:$GW/s$i/$ECHO/connection?sb=s$i&r=$round") ||
			fail "request to s$i"
		assert_eq "status of s$i round $round" 200 "$code"
		i=$((i + 1))
	done
done
set -- $(peers)
assert_eq "requests at the upstream" "$((NSB * 2))" "$1"
assert_eq "sandboxes seen" "$NSB" "$4"
assert_eq "upstream connections per sandbox (the second reused the first)" 1 "$2"
assert_eq "upstream connections shared by two sandboxes" 0 "$3"
assert_eq "akgw_upstream_idle" "$NSB" "$(metric akgw_upstream_idle)"
assert_eq "akgw_upstream_pool_evicted_total" 0 "$(metric akgw_upstream_pool_evicted_total)"
ok "$NSB sandboxes each reused their own pooled connection"
kill "$GW_PID"; wait "$GW_PID" 2>/dev/null

# --- The cap: 2 idle connections, the oldest goes first ------------------------
GW=$(free_port)
ADM=$(free_port)
spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
admin:
  address: 127.0.0.1:$ADM
domains: [localhost]
workers: 1
timeouts:
  upstream_idle: 1m
limits:
  max_idle_upstreams: 2
sandboxes:
  - id: s1
    address: 127.0.0.1
    ports: [{ port: $ECHO }]
  - id: s2
    address: 127.0.0.1
    ports: [{ port: $ECHO }]
  - id: s3
    address: 127.0.0.1
    ports: [{ port: $ECHO }]
EOF
wait_port "$ADM"
# port SB TAG: the upstream client port that answered sandbox SB's request.
port() {
	$C "http://127.0.0.1:$GW/$1/$ECHO/connection?sb=$1&t=$2" |
		$PY -c 'import json,sys; print(json.load(sys.stdin)["port"])'
}
p1=$(port s1 a) && p2=$(port s2 a) && p3=$(port s3 a) || fail "first requests"
assert_eq "akgw_upstream_idle at the cap" 2 "$(metric akgw_upstream_idle)"
assert_eq "akgw_upstream_pool_evicted_total" 1 "$(metric akgw_upstream_pool_evicted_total)"
q3=$(port s3 b) && q2=$(port s2 b) || fail "second requests"
assert_eq "s3 reused its pooled connection" "$p3" "$q3"
assert_eq "s2 reused its pooled connection" "$p2" "$q2"
q1=$(port s1 b) || fail "s1 again"
[ "$q1" != "$p1" ] || fail "s1's connection was the oldest and should have been closed"
ok "max_idle_upstreams: 2 kept the two newest and closed the oldest"
kill "$GW_PID"; wait "$GW_PID" 2>/dev/null

# --- 0 turns the pool off ------------------------------------------------------
GW=$(free_port)
ADM=$(free_port)
spawn_gateway "$GW" <<EOF
listen:
  - address: 127.0.0.1:$GW
admin:
  address: 127.0.0.1:$ADM
domains: [localhost]
limits:
  max_idle_upstreams: 0
sandboxes:
  - id: s1
    address: 127.0.0.1
    ports: [{ port: $ECHO }]
EOF
wait_port "$ADM"
p1=$(port s1 c) && q1=$(port s1 d) || fail "requests without a pool"
[ "$q1" != "$p1" ] || fail "a connection was pooled with max_idle_upstreams: 0"
assert_eq "akgw_upstream_idle without a pool" 0 "$(metric akgw_upstream_idle)"
ok "max_idle_upstreams: 0 pools nothing"

# --- Out of range: file:line:column -------------------------------------------
cat >"$T/bad.yaml" <<EOF
listen:
  - address: 127.0.0.1:$GW
limits:
  max_idle_upstreams: 70000
EOF
out=$("$AKGW" -c "$T/bad.yaml" --check 2>&1) && fail "--check accepted max_idle_upstreams: 70000"
assert_contains "the refusal" "bad.yaml:4:23" "$out"
assert_contains "the refusal" "max_idle_upstreams" "$out"
ok "an out-of-range max_idle_upstreams is refused with file:line:column"
ok "upstream pool checks passed"
