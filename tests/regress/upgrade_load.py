"""Steady load for the reload and upgrade tests, until a stop file exists.

  upgrade_load.py http  URL_PREFIX --threads N --stop FILE --out FILE
      N threads, each on one keep-alive connection, GET URL_PREFIX?id=...
      in a loop; every answer must be 200 with the body the backend's
      /echo gives for that path.  A request whose connection the server
      closed before any byte of the answer, on a reused connection, is
      sent again once on a new one, as HTTP clients do for idempotent
      requests (RFC 9110 9.2.2); those are counted as "retried".
  upgrade_load.py ws    URL --stop FILE --out FILE [--cafile F]
      one WebSocket echoing a numbered message every 50 ms; writes how it
      ended (close code and reason, and when) and how many echoes matched.

The result is one JSON line in --out: counts of ok, failed (with the
first few errors), retried, and the ids sent.
"""
import argparse
import asyncio
import http.client
import json
import os
import threading
import time
import urllib.parse
import uuid


def http_load(args):
    url = urllib.parse.urlsplit(args.url)
    lock = threading.Lock()
    res = {"ok": 0, "failed": 0, "retried": 0, "errors": [], "ids": []}

    def worker(n):
        conn = None
        reused = False
        while not os.path.exists(args.stop):
            rid = "%d-%s" % (n, uuid.uuid4().hex[:12])
            path = "%s?id=%s" % (url.path, rid)
            tries = 0
            while True:
                tries += 1
                if conn is None:
                    conn = http.client.HTTPConnection(
                        url.hostname, url.port, timeout=30)
                    reused = False
                try:
                    conn.request("GET", path)
                    r = conn.getresponse()
                    body = r.read()
                    reused = True
                    if r.getheader("Connection", "").lower() == "close":
                        conn.close()
                        conn = None
                    err = None
                    if r.status != 200:
                        err = "status %d: %r" % (r.status, body[:200])
                    elif args.check_id and rid.encode() not in body:
                        err = "body without the id: %r" % body[:200]
                    break
                except (http.client.RemoteDisconnected,
                        ConnectionResetError, BrokenPipeError) as e:
                    conn.close()
                    conn = None
                    if reused and tries == 1:
                        with lock:
                            res["retried"] += 1
                        continue
                    err = "%s: %s" % (type(e).__name__, e)
                    break
                except Exception as e:  # noqa: BLE001 - any failure counts
                    if conn is not None:
                        conn.close()
                    conn = None
                    err = "%s: %s" % (type(e).__name__, e)
                    break
            with lock:
                res["ids"].append(rid)
                if err is None:
                    res["ok"] += 1
                else:
                    res["failed"] += 1
                    if len(res["errors"]) < 10:
                        res["errors"].append(err)
            if args.pause:
                time.sleep(args.pause)

    threads = [threading.Thread(target=worker, args=(i,))
               for i in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return res


async def ws_load(args):
    import websockets
    res = {"ok": 0, "failed": 0, "errors": [], "close": None}
    ctx = None
    if args.cafile:
        import ssl
        ctx = ssl.create_default_context(cafile=args.cafile)
    try:
        async with websockets.connect(args.url, max_size=None,
                                      ssl=ctx) as ws:
            print("open", flush=True)
            n = 0
            while True:
                msg = "msg %d" % n
                try:
                    await ws.send(msg)
                    got = await asyncio.wait_for(ws.recv(), 10)
                except websockets.ConnectionClosed as e:
                    res["close"] = [e.code, e.reason]
                    res["at"] = time.time()
                    break
                if got == msg:
                    res["ok"] += 1
                else:
                    res["failed"] += 1
                    res["errors"].append("echo %r for %r" % (got, msg))
                n += 1
                if os.path.exists(args.stop):
                    await ws.close()
                    res["close"] = ["by us"]
                    break
                await asyncio.sleep(0.05)
    except Exception as e:  # noqa: BLE001
        res["failed"] += 1
        res["errors"].append("%s: %s" % (type(e).__name__, e))
    return res


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["http", "ws"])
    p.add_argument("url")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--stop", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--pause", type=float, default=0.0)
    p.add_argument("--check-id", action="store_true")
    p.add_argument("--cafile", help="trust file for a wss:// URL")
    p.add_argument("--limit", type=float, default=300,
                   help="seconds at most, stop file or not")
    args = p.parse_args()
    # Bounded in time whatever happens to the test.
    timer = threading.Timer(args.limit, lambda: open(args.stop, "a").close())
    timer.daemon = True
    timer.start()
    if args.mode == "http":
        res = http_load(args)
    else:
        res = asyncio.run(ws_load(args))
    with open(args.out, "w") as f:
        f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
