"""Drive headless Chromium over the DevTools protocol (python3-websockets).

  chromium.py [--step 'open URL'] [--step 'eval JS'] ...

Starts Debian's chromium with a fresh profile, runs the steps in order in
one tab and prints one JSON line per step:

  open URL   navigate the tab and wait for its load event:
             {"step": "open", "status": N, "statuses": [N, ...],
              "url": final URL, "text": the body's text}
             (statuses of each document response, status the last one)
  go JS      run JS in the page, which navigates (a link the page
             follows), and wait as for open: {"step": "go", ...}
  eval JS    evaluate JS in the tab's page, awaiting a promise:
             {"step": "eval", "value": the result}
  cdp M JSON call DevTools method M with params JSON in the tab:
             {"step": "cdp", "value": the result}

Certificates are not checked (the test gateway uses the dev CA) unless
--verify-tls is given: then Chromium verifies them as a browser does,
against the NSS database in $HOME/.pki/nssdb.  Every *.localhost name is
loopback inside Chromium.  A missing browser is an
error (exit 2), never a skip.  Everything is bounded in time.
"""
import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import websockets

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-dev-shm-usage",
         "--ignore-certificate-errors", "--remote-debugging-port=0",
         "about:blank"]


class Tab:
    """One page target, attached in flat mode."""

    def __init__(self, ws):
        self.ws = ws
        self.next_id = 0
        self.session = None
        self.events = []

    async def call(self, method, params=None, session=True, timeout=15):
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        await self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(method)
            m = json.loads(await asyncio.wait_for(self.ws.recv(), left))
            if m.get("id") == mid:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m.get("result", {})
            if len(self.events) < 10000:
                self.events.append(m)

    async def evaluate(self, js):
        r = await self.call("Runtime.evaluate", {
            "expression": js, "awaitPromise": True, "returnByValue": True})
        if "exceptionDetails" in r:
            return {"exception": r["exceptionDetails"].get("exception", {})
                    .get("description", r["exceptionDetails"].get("text"))}
        return r["result"].get("value")


    async def next_event(self, deadline):
        if self.events:
            return self.events.pop(0)
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no event")
        return json.loads(await asyncio.wait_for(self.ws.recv(), left))

    async def open(self, url=None, js=None):
        """Navigate to url (or run js, which navigates from the page), wait
        for the load event (and for a page that goes on by a meta refresh,
        the next one), and describe the page."""
        self.events.clear()
        statuses = []
        if url is not None:
            await self.call("Page.navigate", {"url": url})
        else:
            await self.call("Runtime.evaluate", {"expression": js})
        deadline = time.monotonic() + 15
        for _ in range(5):
            while True:
                m = await self.next_event(deadline)
                meth = m.get("method")
                if meth == "Network.responseReceived" and \
                        m["params"].get("type") == "Document":
                    statuses.append(m["params"]["response"]["status"])
                elif meth == "Page.loadEventFired":
                    break
            try:
                going_on = await self.evaluate(
                    "document.readyState != 'complete' || "
                    "!!document.querySelector('meta[http-equiv=refresh]')")
            except RuntimeError:  # the context went with its page
                going_on = True
            if going_on is False:
                break
        return {"step": "open",
                "status": statuses[-1] if statuses else None,
                "statuses": statuses,
                "url": await self.evaluate("location.href"),
                "text": await self.evaluate(
                    "document.body ? document.body.innerText.slice(0, 500)"
                    " : ''")}


async def run(url, steps):
    async with websockets.connect(url, max_size=None, ping_interval=None,
                                  open_timeout=10) as ws:
        tab = Tab(ws)
        t = await tab.call("Target.createTarget", {"url": "about:blank"},
                           session=False)
        a = await tab.call("Target.attachToTarget",
                           {"targetId": t["targetId"], "flatten": True},
                           session=False)
        tab.session = a["sessionId"]
        for m in ("Page.enable", "Network.enable", "Runtime.enable"):
            await tab.call(m)
        for kind, arg in steps:
            if kind == "open":
                out = await tab.open(url=arg)
            elif kind == "go":
                out = await tab.open(js=arg)
                out["step"] = "go"
            elif kind == "cdp":
                meth, _, params = arg.partition(" ")
                out = {"step": "cdp", "value": await tab.call(
                    meth, json.loads(params or "{}"))}
            else:
                out = {"step": "eval", "value": await tab.evaluate(arg)}
            print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--step", action="append", default=[])
    ap.add_argument("--timeout", type=float, default=40)
    ap.add_argument("--verify-tls", action="store_true")
    args = ap.parse_args()
    steps = []
    for s in args.step:
        kind, _, arg = s.partition(" ")
        if kind not in ("open", "go", "eval", "cdp"):
            ap.error("a step is 'open URL', 'go JS', 'eval JS' or "
                     "'cdp METHOD JSON': " + s)
        steps.append((kind, arg))
    exe = shutil.which("chromium")
    if exe is None:
        print("chromium is not installed (Debian package chromium; "
              "make deps)", file=sys.stderr)
        sys.exit(2)
    prof = tempfile.mkdtemp(prefix="akgw-chromium.")
    flags = [f for f in FLAGS if not (args.verify_tls and
                                      f == "--ignore-certificate-errors")]
    proc = subprocess.Popen([exe, "--user-data-dir=" + prof] + flags,
                            stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(prof, "stderr"), "w"))
    try:
        port_file = os.path.join(prof, "DevToolsActivePort")
        deadline = time.monotonic() + 20
        while True:
            try:
                with open(port_file) as f:
                    lines = f.read().split("\n")
                if len(lines) >= 2 and lines[1]:
                    break
            except FileNotFoundError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                print("chromium did not start", file=sys.stderr)
                sys.exit(2)
            time.sleep(0.05)
        url = "ws://127.0.0.1:%s%s" % (lines[0], lines[1])
        asyncio.run(asyncio.wait_for(run(url, steps), args.timeout))
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(prof, ignore_errors=True)


if __name__ == "__main__":
    main()
