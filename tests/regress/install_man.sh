#!/bin/sh
# "make install" copied the two programs and nothing else: no systemd
# units, no example configuration, no documentation, no man pages, so an
# installed akgateway had neither "man akgateway" nor a unit that named the
# installed binary.  This test installs into a scratch PREFIX, and once
# more under DESTDIR with another PREFIX, and checks every file; that the
# units' ExecStart= names the installed programs and that they run; that
# each man page renders with no groff warning and that man finds it by
# name; that the pages name every option of --help and every key the
# configuration parser knows; and that make uninstall removes it all.
. "$(dirname "$0")/lib.sh"

for tool in make man lexgrog nroff cmp; do
	command -v $tool >/dev/null 2>&1 ||
	    fail "$tool is needed (make deps: make, man-db, groff-base)"
done
MANWIDTH=80
LC_ALL=C.UTF-8
export MANWIDTH LC_ALL
unset MANPATH MANOPT

# make_in ARGS...: make in the tree, with this test's build.
make_in() {
	make -C "$TOP" -s --no-print-directory BUILD="$BUILD" "$@" \
	    >"$T/make.log" 2>&1 ||
	    fail "make $* failed: $(tail -n 20 "$T/make.log")"
}

# check_tree ROOT PREFIX: the files of an install at PREFIX, written under
# ROOT (DESTDIR, or empty), are all there and name PREFIX's paths.
check_tree() {
	R=$1$2
	P=$2
	for f in bin/akgateway bin/aktunnel; do
		[ -x "$R/$f" ] || fail "$R/$f is not installed, or not executable"
	done
	for f in lib/systemd/system/akgateway.service \
	    lib/systemd/user/aktunnel.service \
	    share/akgateway/examples/akgateway.yaml \
	    share/akgateway/examples/akgateway-https.yaml \
	    share/man/man8/akgateway.8 share/man/man1/aktunnel.1 \
	    share/man/man5/akgateway.yaml.5; do
		[ -f "$R/$f" ] || fail "$R/$f is not installed"
	done
	cmp -s "$TOP/config/gateway.yaml" \
	    "$R/share/akgateway/examples/akgateway.yaml" ||
	    fail "the installed akgateway.yaml is not config/gateway.yaml"
	cmp -s "$TOP/config/gateway-https.yaml" \
	    "$R/share/akgateway/examples/akgateway-https.yaml" ||
	    fail "the installed akgateway-https.yaml is not config/gateway-https.yaml"
	for d in "$TOP/README.md" "$TOP"/docs/*.md; do
		cmp -s "$d" "$R/share/doc/akgateway/${d##*/}" ||
		    fail "${d#"$TOP"/} is not installed as $R/share/doc/akgateway/${d##*/}"
	done

	# The units start the installed programs, and nothing names
	# /usr/local when the prefix is another.
	U="$R/lib/systemd/system/akgateway.service"
	assert_eq "akgateway.service ExecStart" \
	    "ExecStart=$P/bin/akgateway -c /etc/akgateway/gateway.yaml" \
	    "$(grep '^ExecStart=' "$U")"
	assert_eq "akgateway.service ExecStartPre" \
	    "ExecStartPre=$P/bin/akgateway -c /etc/akgateway/gateway.yaml --check" \
	    "$(grep '^ExecStartPre=' "$U")"
	assert_contains "akgateway.service Documentation" \
	    "Documentation=file:$P/share/doc/akgateway/operations.md" "$(cat "$U")"
	UU="$R/lib/systemd/user/aktunnel.service"
	assert_eq "aktunnel.service ExecStart" \
	    "ExecStart=$P/bin/aktunnel \$AKTUNNEL_ARGS" \
	    "$(grep '^ExecStart=' "$UU")"
	if [ "$P" != /usr/local ]; then
		left=$(grep -l /usr/local "$U" "$UU" "$R"/share/man/man*/* 2>/dev/null)
		[ -z "$left" ] || fail "installed with PREFIX=$P, still naming /usr/local: $left"
	fi
	assert_contains "akgateway.8 FILES" \
	    "$P/share/akgateway/examples/akgateway.yaml" \
	    "$(cat "$R/share/man/man8/akgateway.8")"
}

# One install at a scratch PREFIX: what the units start is what was built.
P1="$T/usr"
make_in install PREFIX="$P1"
check_tree "" "$P1"
want=$("$AKGW" --version)
exe=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$P1/lib/systemd/system/akgateway.service")
assert_eq "the unit's akgateway --version" "$want" "$("$exe" --version 2>&1)"
exe=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$P1/lib/systemd/user/aktunnel.service")
assert_eq "the unit's aktunnel --version" "aktunnel ${want#akgateway }" \
    "$("$exe" --version 2>&1)"
out=$("$P1/bin/akgateway" -c "$P1/share/akgateway/examples/akgateway.yaml" --check 2>&1)
assert_contains "the installed example passes --check" "configuration is valid" "$out"
ok "make install PREFIX=$P1: every file, the units start the installed programs"

# Each page renders without a warning, has its sections, and man finds it
# by name in the installed tree.
for page in man8/akgateway.8 man1/aktunnel.1 man5/akgateway.yaml.5; do
	f="$P1/share/man/$page"
	man --warnings -l "$f" >"$T/page.txt" 2>"$T/page.err"
	[ -s "$T/page.err" ] && fail "man --warnings -l $page: $(head -n 5 "$T/page.err")"
	man --warnings=w -l "$f" >/dev/null 2>"$T/page.err"
	[ -s "$T/page.err" ] && fail "every groff warning, $page: $(head -n 5 "$T/page.err")"
	[ "$(wc -l <"$T/page.txt")" -gt 50 ] || fail "$page renders to almost nothing"
	sections="NAME SYNOPSIS DESCRIPTION FILES EXAMPLES SEE_ALSO"
	case "$page" in
	*.8) sections="$sections OPTIONS SIGNALS ENVIRONMENT EXIT_STATUS" ;;
	*.1) sections="$sections OPTIONS ENVIRONMENT EXIT_STATUS" ;;
	*.5) sections="$sections KEYS" ;;
	esac
	for s in $sections; do
		s=$(echo "$s" | tr _ ' ')
		grep -qx "$s" "$T/page.txt" || fail "$page has no $s section"
	done
	# The page's version is the programs'.
	assert_contains "$page .TH" "\"${want}\"" "$(grep '^\.TH' "$f")"
	lexgrog "$f" >/dev/null 2>&1 || fail "lexgrog cannot read the NAME of $page"
	name=${page#*/}
	name=${name%.*}
	got=$(MANPATH="$P1/share/man" man -w "$name" 2>&1)
	assert_eq "man -w $name" "$f" "$got"
done
ok "the man pages render without a groff warning and man finds them"

# Every option the programs' --help shows has an entry in their page: a
# .TP tag that names it (--foo-bar is written \-\-foo\-bar in roff).
check_opts() { # PAGE HELP-TEXT
	awk 'prev == ".TP" || prev == ".TQ" { print } { prev = $0 }' "$1" \
	    >"$T/tags"
	for o in $(printf '%s\n' "$2" | grep -oE -- '(^|[ [(|,])--?[a-zA-Z][a-z0-9-]*' |
	    sed 's/^[ [(|,]//' | sort -u); do
		r=$(printf '%s' "$o" | sed 's/-/\\\\-/g')
		grep -qE -- "^\.[BIR]* (.* )?$r( |\$)" "$T/tags" ||
		    fail "${1##*/} has no entry for $o (from --help)"
	done
}
M8="$P1/share/man/man8/akgateway.8"
M1="$P1/share/man/man1/aktunnel.1"
M5="$P1/share/man/man5/akgateway.yaml.5"
check_opts "$M8" "$("$AKGW" --help)"
check_opts "$M1" "$("$AKTUN" --help)"
# ... and every variable aktunnel's --help lists.
for v in $("$AKTUN" --help | sed -n 's/^  \([A-Z][A-Z_]*\) .*/\1/p'); do
	grep -q "^\.B $v\$" "$M1" || fail "aktunnel.1 has no entry for $v"
done
ok "akgateway.8 and aktunnel.1 name every option and variable of --help"

# Every key the parser knows has its entry in akgateway.yaml.5: a tag
# ".B key", or ".SS key" for a section.
conf_keys >"$T/conf_keys"
n=0
while read -r sect k; do
	grep -Eq "^\.(BR?|SS) $k( |\$)" "$M5" ||
	    fail "akgateway.yaml.5 has no entry for '$k' (a key of $sect)"
	n=$((n + 1))
done <"$T/conf_keys"
[ $n -gt 40 ] || fail "only $n keys found: the probes no longer work"
ok "akgateway.yaml.5 has all $n keys the parser knows"

# DESTDIR: the files land under it, and name PREFIX's paths alone.
D="$T/dest"
make_in install DESTDIR="$D" PREFIX=/opt/akgw
check_tree "$D" /opt/akgw
ok "make install DESTDIR=$D PREFIX=/opt/akgw"

# make uninstall takes every file back.
make_in uninstall PREFIX="$P1"
make_in uninstall DESTDIR="$D" PREFIX=/opt/akgw
left=$(find "$P1" "$D" -type f)
[ -z "$left" ] || fail "make uninstall left: $left"
ok "make uninstall removes every file"
