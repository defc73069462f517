#!/bin/sh
# Issue 17, section 3: apps under a path prefix.  "/{id}/{port}" without
# the slash used to fail; it is a 308 to the slash form, query kept.  An
# upstream redirect "Location: /sub/" (python http.server does it for
# directories) used to end at 404 no_route; Location and Content-Location
# that point into the sandbox (an absolute path, or the sandbox's own
# host) and Set-Cookie Path now move under the prefix, as nginx's
# proxy_redirect and proxy_cookie_path do.  The host form is unchanged.
. "$(dirname "$0")/lib.sh"

GW=$(free_port)
FILES=$(free_port)
UP=$(free_port)
mkdir -p "$T/www/sub"
echo "inside sub" >"$T/www/sub/index.html"
spawn files sh -c "cd '$T/www' && exec $PY -m http.server $FILES --bind 127.0.0.1"
spawn raw $PY "$TOP/tests/regress/raw_backend.py" --port "$UP" --log "$T/up.jsonl"
wait_port "$FILES"
wait_port "$UP"
spawn_gateway "$GW" <<EOF2
listen:
  - address: 127.0.0.1:$GW
domains: [localhost]
sandboxes:
  - id: local
    address: 127.0.0.1
    ports:
      - port: $FILES
      - port: $UP
EOF2

C="curl -sS --max-time 10"
B="http://127.0.0.1:$GW"
# The value of field $1 in the head curl wrote to $T/h.
field() { tr -d '\r' <"$T/h" | awk -v f="$1" 'BEGIN { IGNORECASE = 1 } tolower($0) ~ "^" tolower(f) ":" { sub(/^[^:]*: */, ""); print }'; }

# 1. No slash after the port: 308 to the slash form, the query kept.
code=$($C -o /dev/null -D "$T/h" -w '%{http_code}' "$B/local/$FILES")
assert_eq "no-slash status" 308 "$code"
assert_eq "no-slash Location" "/local/$FILES/" "$(field Location)"
code=$($C -o /dev/null -D "$T/h" -w '%{http_code}' "$B/local/$FILES?a=1&b=2")
assert_eq "no-slash with query" 308 "$code"
assert_eq "no-slash Location keeps the query" "/local/$FILES/?a=1&b=2" "$(field Location)"
body=$($C -L "$B/local/$FILES/sub/")
assert_eq "the slash form serves" "inside sub" "$body"
ok "/{id}/{port} without a slash is a 308 to the slash form"

# 2. python http.server's directory redirect stays under the prefix.
code=$($C -o /dev/null -D "$T/h" -w '%{http_code}' "$B/local/$FILES/sub")
assert_eq "directory redirect" 301 "$code"
assert_eq "directory Location under the prefix" "/local/$FILES/sub/" "$(field Location)"
# Followed by hand: curl 7.88 cannot reuse a prior-knowledge connection
# for -L (curl issue 10634), which the HTTP/2 pass would meet.
body=$($C "$B$(field Location)")
assert_eq "following it serves the directory" "inside sub" "$body"
ok "an upstream redirect to /sub/ stays under the prefix"

# 3. Absolute URLs naming the sandbox's own host, Content-Location and
# Set-Cookie Path; URLs elsewhere and paths already under the prefix stay.
P="$B/local/$UP/fields"
$C -o /dev/null -D "$T/h" "$P?loc=http://127.0.0.1:$GW/a?x=1&cloc=/b" >/dev/null
assert_eq "own host Location" "/local/$UP/a?x=1" "$(field Location)"
assert_eq "Content-Location" "/local/$UP/b" "$(field Content-Location)"
$C -o /dev/null -D "$T/h" "$P?loc=http://localhost:$UP/c" >/dev/null
assert_eq "sandbox address Location" "/local/$UP/c" "$(field Location)"
$C -o /dev/null -D "$T/h" "$P?loc=https://example.org/d" >/dev/null
assert_eq "another site's Location stays" "https://example.org/d" "$(field Location)"
$C -o /dev/null -D "$T/h" "$P?loc=/local/$UP/e" >/dev/null
assert_eq "a prefixed Location stays" "/local/$UP/e" "$(field Location)"
$C -o /dev/null -D "$T/h" "$P?loc=//cdn.example.org/f" >/dev/null
assert_eq "a scheme-relative Location stays" "//cdn.example.org/f" "$(field Location)"
$C -o /dev/null -D "$T/h" --data-urlencode "cookie=s=1; Path=/; HttpOnly" -G "$P" >/dev/null
assert_eq "cookie Path=/" "s=1; Path=/local/$UP/; HttpOnly" "$(field Set-Cookie)"
$C -o /dev/null -D "$T/h" --data-urlencode "cookie=t=2; path=/app" -G "$P" >/dev/null
assert_eq "cookie path=/app" "t=2; path=/local/$UP/app" "$(field Set-Cookie)"
$C -o /dev/null -D "$T/h" --data-urlencode "cookie=u=3; Max-Age=5" -G "$P" >/dev/null
assert_eq "cookie without Path" "u=3; Max-Age=5" "$(field Set-Cookie)"
ok "Location, Content-Location and Set-Cookie Path move under the prefix"

# 4. The host form is left alone.
$C -o /dev/null -D "$T/h" "http://$UP-local.localhost:$GW/fields?loc=/a&cookie=s=1;%20Path=/" >/dev/null
assert_eq "host form Location" "/a" "$(field Location)"
assert_eq "host form cookie" "s=1; Path=/" "$(field Set-Cookie)"
ok "the host form keeps the upstream's fields"

# 5. In headless Chromium: the address without a slash and python
# http.server's directory redirect both land under the prefix.
command -v chromium >/dev/null 2>&1 || fail "chromium is needed (Debian package chromium; make deps)"
out=$(timeout 50 $PY "$TOP/tests/regress/chromium.py" \
	--step "open $B/local/$FILES" \
	--step "open $B/local/$FILES/sub" \
	2>"$T/chromium.log") || fail "chromium.py failed: $(tail -n 5 "$T/chromium.log")"
printf "%s\n" "$out" >"$T/browser.out"
first=$(sed -n 1p "$T/browser.out")
second=$(sed -n 2p "$T/browser.out")
assert_contains "browser: slash form reached" "\"url\": \"$B/local/$FILES/\"" "$first"
assert_contains "browser: listing shown" "sub/" "$first"

assert_contains "browser: directory redirect under the prefix" "\"url\": \"$B/local/$FILES/sub/\"" "$second"
assert_contains "browser: directory served" "inside sub" "$second"
ok "Chromium follows both redirects under the prefix"
