"""WebSocket helpers for the end-to-end tests (python3-websockets).

  ws_echo.py server PORT [--certfile F --keyfile F]
      an echo server on 127.0.0.1:PORT; it records each handshake's path
      and headers as a JSON line on stdout
  ws_echo.py client URL [--cafile F] [--count N] [--size BYTES]
      sends N messages of SIZE bytes (text when small, binary otherwise),
      checks every echo byte for byte, prints "ok N"
"""
import argparse
import asyncio
import json
import os
import ssl
import sys
import urllib.parse

import websockets


async def serve(port, certfile, keyfile):
    ctx = None
    if certfile:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certfile, keyfile)

    async def echo(ws, path=None):
        path = path if path is not None else ws.path
        print(json.dumps({"path": path,
                          "headers": list(ws.request_headers.raw_items())}),
              flush=True)
        async for msg in ws:
            await ws.send(msg)

    async with websockets.serve(echo, "127.0.0.1", port, ssl=ctx,
                                max_size=None, ping_interval=None):
        print("ready", flush=True)
        await asyncio.Future()


async def client(url, cafile, count, size, headers):
    ctx = None
    if url.startswith("wss:"):
        ctx = ssl.create_default_context(cafile=cafile)
    hdrs = [tuple(h.split(":", 1)) for h in headers]
    kw = {}
    u = urllib.parse.urlsplit(url)
    if u.hostname.endswith(".localhost"):
        # *.localhost is loopback; the resolver here may not know that.
        kw = {"host": "127.0.0.1", "port": u.port or (443 if ctx else 80)}
        if ctx:
            kw["server_hostname"] = u.hostname
    async with websockets.connect(url, ssl=ctx, max_size=None,
                                  ping_interval=None,
                                  extra_headers=hdrs,
                                  open_timeout=10, **kw) as ws:
        for i in range(count):
            if size <= 1024:
                msg = ("m%d-" % i + "x" * size)[:max(size, 1)]
            else:
                msg = os.urandom(size)
            await ws.send(msg)
            got = await asyncio.wait_for(ws.recv(), 30)
            if got != msg:
                print("mismatch at message %d" % i)
                return 1
    print("ok %d" % count)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["server", "client"])
    ap.add_argument("target")
    ap.add_argument("--certfile")
    ap.add_argument("--keyfile")
    ap.add_argument("--cafile")
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--header", action="append", default=[])
    a = ap.parse_args()
    if a.mode == "server":
        asyncio.run(serve(int(a.target), a.certfile, a.keyfile))
        return 0
    return asyncio.run(client(a.target, a.cafile, a.count, a.size, a.header))


if __name__ == "__main__":
    sys.exit(main())
