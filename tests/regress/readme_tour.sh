#!/bin/sh
# The README's tour, pasted on a fresh clone, failed: "make run &" was still
# compiling when the curls ran ("Couldn't connect"), and it called
# "aktunnel" although the binaries are in ./build/.  This test takes the
# tour's shell blocks from README.md as they are written and runs them in a
# network namespace of its own (so the tour's fixed ports 8000, 8080, 9090
# and 8766 are free), with "make" slowed down by 3 s to stand for the first
# build, and checks what each curl of the tour says it shows.
. "$(dirname "$0")/lib.sh"

for tool in curl make timeout; do
	command -v $tool >/dev/null 2>&1 || fail "$tool is needed (make deps)"
done

# The sh blocks of the tour section, in order.
awk '/^## A five-line tour/ { on = 1; next } /^## / { on = 0 }
	on && /^```sh$/ { code = 1; next } on && /^```$/ { code = 0; next }
	on && code' "$TOP/README.md" >"$T/tour.sh"
[ -s "$T/tour.sh" ] || fail "no sh block in README.md's tour section"
grep -q '^make run &' "$T/tour.sh" || fail "the tour does not start the gateway with make run"
grep -Eq '^(aktunnel|akgateway) ' "$T/tour.sh" && fail "the tour calls a program that is only in ./build/: $(grep -E '^(aktunnel|akgateway) ' "$T/tour.sh")"

NS="akgw-tour-$$"
netns_add "$NS"
# Run the tour at the top of the tree, as the README says, with ./build/
# meaning this test's build, and a first build that takes its time.
cat >"$T/run.sh" <<EOT
cd "$TOP" || exit 1
make() { sleep 3; command make -s --no-print-directory BUILD="$BUILD" "\$@"; }
EOT
sed "s|\./build/|$BUILD/|g" "$T/tour.sh" >>"$T/run.sh"
start=$(date +%s)
# Into files: the jobs the tour leaves in the background keep its output
# open, so a $(...) would wait for them.
timeout 50 ip netns exec "$NS" sh "$T/run.sh" >"$T/tour.out" 2>"$T/tour.err"
rc=$?
secs=$(( $(date +%s) - start ))
# Everything the tour left running is in the namespace: stop it.
for p in $(ip netns pids "$NS"); do kill "$p" 2>/dev/null; done
out=$(cat "$T/tour.out")
[ $rc -eq 0 ] || fail "the tour failed (exit $rc): $(tail -n 5 "$T/tour.err")"
case "$out$(cat "$T/tour.err")" in
*"Couldn't connect"* | *"curl: ("* | *"not found"*)
	fail "a tour command failed: $(grep -h -e "curl: (" -e "not found" "$T/tour.out" "$T/tour.err" | head -3)" ;;
esac
assert_contains "readiness" '{"status":"ready"}' "$out"
n=$(echo "$out" | grep -c "<h1>Directory listing for /</h1>")
assert_eq "listings (through the gateway, through the tunnel)" 2 "$n"
assert_contains "unknown sandbox" "HTTP/1.1 404 Not Found" "$out"
assert_contains "unknown sandbox code" '"code":"sandbox_not_found"' "$out"
assert_contains "closed port" "HTTP/1.1 502 Bad Gateway" "$out"
assert_contains "closed port code" '"code":"port_not_listening"' "$out"
ok "the README tour works as pasted, first build included (${secs}s)"
