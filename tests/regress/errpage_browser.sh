#!/bin/sh
# The gateway's error pages were plain serif HTML with the status, the
# sentence and the code.  Each is now a page of its own style (inline CSS,
# nothing loaded from elsewhere, light and dark by prefers-color-scheme)
# with the status, the sentence, what to do next, the code, the sandbox,
# the port and the request id.  Headless Chromium opens each refusal,
# reads what it shows, and takes a screenshot in light and in dark; the
# screenshots must not be blank, the light one light and the dark one dark.
# They are kept in $BUILD/test-logs/errpages/ for a person to look at.
. "$(dirname "$0")/lib.sh"

command -v chromium >/dev/null 2>&1 || fail "chromium is needed (Debian package chromium; make deps)"
$PY -c 'import PIL' 2>/dev/null || fail "python3-pil is needed (make deps)"

GW=$(free_port)
ADMIN=$(free_port)
UP=$(free_port)
CLOSED=$(free_port)
PRIV=$(free_port)
spawn backend $PY -m http.server "$UP" --bind 127.0.0.1
wait_port "$UP"
spawn_gateway "$GW" <<EOT
listen:
  - address: 127.0.0.1:$GW
admin:
  address: 127.0.0.1:$ADMIN
auth:
  secret: "0123456789abcdef0123456789abcdef"
sandboxes:
  - id: web
    address: 127.0.0.1
    ports:
      - port: $UP
      - port: $CLOSED
      - port: $PRIV
        access: private
EOT

SHOTS="$BUILD/test-logs/errpages"
rm -rf "$SHOTS"
mkdir -p "$SHOTS" || fail "cannot make $SHOTS"

# name URL status code sandbox port: each page the browser opens.
cat >"$T/pages" <<EOT
no_route http://127.0.0.1:$GW/ 404 no_route - -
sandbox_not_found http://$UP-nobody.localhost:$GW/ 404 sandbox_not_found - $UP
port_not_published http://web-1.localhost:$GW/ 404 port_not_published web 1
port_not_listening http://127.0.0.1:$GW/web/$CLOSED/ 502 port_not_listening web $CLOSED
unauthorized http://$PRIV-web.localhost:$GW/ 401 unauthorized web $PRIV
bad_host http://99999-web.localhost:$GW/ 400 bad_host - -
EOT

# What the page shows, its colours, and whether it loaded anything else.
PROBE='(() => { const b = getComputedStyle(document.body);
  const m = document.querySelector("main");
  return {bg: b.backgroundColor, card: m ? getComputedStyle(m).backgroundColor : null,
    font: b.fontFamily, text: document.body.innerText,
    resources: performance.getEntriesByType("resource").length,
    sheets: document.styleSheets.length,
    h: m ? m.getBoundingClientRect().height : 0}; })()'
set -- --step 'cdp Emulation.setDeviceMetricsOverride {"width":900,"height":640,"deviceScaleFactor":1,"mobile":false}'
while read -r name url rest; do
	set -- "$@" \
	    --step 'cdp Emulation.setEmulatedMedia {"features":[{"name":"prefers-color-scheme","value":"light"}]}' \
	    --step "open $url" \
	    --step "eval $PROBE" \
	    --step 'cdp Page.captureScreenshot {"format":"png"}' \
	    --step 'cdp Emulation.setEmulatedMedia {"features":[{"name":"prefers-color-scheme","value":"dark"}]}' \
	    --step "eval $PROBE" \
	    --step 'cdp Page.captureScreenshot {"format":"png"}'
done <"$T/pages"
timeout 55 $PY "$TOP/tests/regress/chromium.py" --timeout 50 "$@" \
	>"$T/chromium.out" 2>"$T/chromium.log" ||
	fail "chromium.py failed: $(tail -n 5 "$T/chromium.log")"

$PY - "$T/pages" "$T/chromium.out" "$SHOTS" <<'EOT' || fail "an error page does not render as it should"
import base64, io, json, re, sys
from PIL import Image, ImageStat

pages = [l.split() for l in open(sys.argv[1]) if l.strip()]
out = [json.loads(l) for l in open(sys.argv[2])]
shots = sys.argv[3]
steps = iter(out[1:])  # after the viewport
bad = []

def lum(rgb):
    v = [int(x) for x in re.findall(r"\d+", rgb)[:3]]
    return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]

def shot(step, path):
    png = base64.b64decode(step["value"]["data"])
    open(path, "wb").write(png)
    im = Image.open(io.BytesIO(png)).convert("RGB")
    colours = im.getcolors(1 << 20) or []
    return im.size, len(colours), ImageStat.Stat(im.convert("L")).mean[0]

for name, url, status, code, sandbox, port in pages:
    next(steps)  # light
    opened = next(steps)
    light = next(steps)["value"]
    lshot = shot(next(steps), "%s/%s-light.png" % (shots, name))
    next(steps)  # dark
    dark = next(steps)["value"]
    dshot = shot(next(steps), "%s/%s-dark.png" % (shots, name))
    def check(what, cond):
        if not cond:
            bad.append("%s: %s" % (name, what))
    check("status %s, not %s" % (status, opened["status"]),
          str(opened["status"]) == status)
    text = light["text"]
    check("the status in the text", re.search("error " + status, text, re.I))
    check("the code %s in the text" % code, code in text)
    check("a next step", len(text.split("\n")) >= 4)
    check("the request id", re.search(r"Request id\s+[0-9a-f]{32}", text))
    if sandbox != "-":
        check("the sandbox", re.search(r"Sandbox\s+" + sandbox, text))
    if port != "-":
        check("the port", re.search(r"Port\s+" + port + r"\b", text))
    check("no resource loaded", light["resources"] == 0)
    check("one inline sheet", light["sheets"] == 1)
    check("a sans-serif font, not %s" % light["font"],
          "sans-serif" in light["font"])
    check("a card of some height", light["h"] > 150)
    check("light background is light: %s" % light["bg"], lum(light["bg"]) > 200)
    check("dark background is dark: %s" % dark["bg"], lum(dark["bg"]) < 60)
    check("the card differs from the page", light["card"] != light["bg"])
    for kind, (size, ncol, mean) in (("light", lshot), ("dark", dshot)):
        check("%s screenshot is 900x640, not %s" % (kind, size), size == (900, 640))
        check("%s screenshot is not blank (%d colours)" % (kind, ncol), ncol > 30)
    check("light screenshot is light (%.0f)" % lshot[2], lshot[2] > 180)
    check("dark screenshot is dark (%.0f)" % dshot[2], dshot[2] < 70)
    print("page %s: %s %s, light %.0f, dark %.0f, %d/%d colours" %
          (name, opened["status"], code, lshot[2], dshot[2], lshot[1], dshot[1]))
for b in bad:
    print("FAIL:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOT
ok "every error page renders in Chromium, light and dark (screenshots in $SHOTS)"
