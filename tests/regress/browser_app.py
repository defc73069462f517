"""A sandbox's web application for the browser tests (python3-websockets).

  browser_app.py PORT NAME --log FILE

Serves on 127.0.0.1:PORT, on one port as a real application would:

  /ws        a WebSocket that answers each message with "NAME:" + message
  /whoami    JSON {"sandbox": NAME}
  anything   an HTML page "sandbox NAME"

Every request (the WebSocket's handshake included) is one JSON line in
FILE: path, Origin, Sec-Fetch-Site, Sec-Fetch-Mode, so a test can show
what reached the application and that refused requests never did.
"""
import argparse
import asyncio
import http
import json

import websockets


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("name")
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    log = open(a.log, "a", buffering=1)

    def record(path, headers):
        log.write(json.dumps({
            "path": path, "origin": headers.get("Origin"),
            "site": headers.get("Sec-Fetch-Site"),
            "mode": headers.get("Sec-Fetch-Mode"),
            "upgrade": headers.get("Upgrade")}) + "\n")

    async def page(path, headers):
        record(path, headers)
        if path == "/ws":
            return None  # the WebSocket handshake goes on
        if path == "/whoami":
            return (http.HTTPStatus.OK,
                    [("Content-Type", "application/json"),
                     ("Cache-Control", "no-store")],
                    json.dumps({"sandbox": a.name}).encode())
        body = ("<!DOCTYPE html><html><head><title>%s</title></head>"
                "<body><p>sandbox %s</p></body></html>" % (a.name, a.name))
        return (http.HTTPStatus.OK,
                [("Content-Type", "text/html; charset=utf-8"),
                 ("Cache-Control", "no-store")], body.encode())

    async def echo(ws, path=None):
        try:
            async for msg in ws:
                await ws.send("%s:%s" % (a.name, msg))
        except websockets.ConnectionClosed:
            pass

    async def serve():
        async with websockets.serve(echo, "127.0.0.1", a.port,
                                    process_request=page,
                                    ping_interval=None):
            print("ready", flush=True)
            await asyncio.Future()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
