#!/bin/sh
# Run every unit test binary given as an argument, then every end-to-end
# script in tests/regress/, and print one closing line "N passed, N failed".
# A failing test's output is shown; a passing one's is kept in the log dir.
#
# TESTS=pattern limits the regress scripts to names matching the pattern.
#
# The scripts in H2_PASS run a second time as "NAME@h2" with AKT_H2=1:
# their curl speaks HTTP/2 (prior knowledge) to the gateway's plain
# listeners (tests/regress/lib.sh), so each case that applies to HTTP/2
# is checked over it too.  Over https:// curl negotiates h2 in both passes.

BUILD=${BUILD:-build}
LOGDIR=$BUILD/test-logs
CERTS_DIR=$BUILD/certs
export BUILD CERTS_DIR
mkdir -p "$LOGDIR"
H2_PASS="proxy_basic port_urls private_ports bulk host_form_orders \
	refusals_logged response_trailers path_prefix_apps cross_origin_cookie \
	secret_rotation"
# One space between names: a name after a line break follows a tab, which
# the " $n " match below would miss (refusals_logged ran once only).
H2_PASS=$(echo $H2_PASS)
pass=0
fail=0
failed=""

run_one() {
	name=$1; shift
	log="$LOGDIR/$(echo "$name" | tr / -).log"
	start=$(date +%s)
	if "$@" >"$log" 2>&1; then
		pass=$((pass + 1))
		echo "PASS  $name ($(( $(date +%s) - start ))s)"
	else
		fail=$((fail + 1))
		failed="$failed $name"
		echo "FAIL  $name ($(( $(date +%s) - start ))s)"
		tail -n 60 "$log" | sed 's/^/    | /'
	fi
}

for t in "$@"; do
	run_one "unit/$(basename "$t")" "$t"
done

for s in tests/regress/*.sh; do
	[ -f "$s" ] || continue
	n=$(basename "$s" .sh)
	case "$n" in lib) continue ;; esac
	if [ -n "$TESTS" ]; then
		# TESTS may hold alternatives: TESTS='tls|netns'.
		eval "case \"\$n\" in $TESTS) ;; *) continue ;; esac"
	fi
	run_one "regress/$n" env BUILD="$BUILD" timeout 600 sh "$s"
	case " $H2_PASS " in
	*" $n "*) run_one "regress/$n@h2" env BUILD="$BUILD" AKT_H2=1 \
	    timeout 600 sh "$s" ;;
	esac
done

[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
