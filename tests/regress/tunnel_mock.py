"""A scripted sandbox-role tunnel server for testing aktunnel.

Accepts the tunnel WebSocket on any path of 127.0.0.1:--port (wss:// with
--tls CERT KEY), records the
handshake headers, sends the sandbox hello and runs a script of commands,
one per line (from --script FILE, -e 'cmd; cmd', or stdin). Every wait is
bounded; any unmet expectation prints "mock: FAIL: ..." and exits 1. Events
are printed as JSON lines on stdout.

Commands:
  reject STATUS [N]        answer the next N handshakes with STATUS (before accept)
  hello [off] [k=v ...]    the hello sent on later accepts (off: none, V1);
                           k=v override fields, e.g. max_inflight=1
  pyhello [noheader]       act as the Python V2 sandbox: say hello at accept
                           only when the upgrade carried
                           X-YR-Tunnel-Protocol: 2 (noheader: never), else
                           after the client's hello, and after replaying
                           pending requests (a resumed upload's begin)
  accept [SECONDS]         wait for the next tunnel connection; check the
                           client's hello (V2, resume, the same session_id as
                           the first connection)
  header NAME [VALUE]      the handshake had header NAME (with VALUE)
  noheader NAME            the handshake did not have header NAME
  path PATH                the handshake asked for PATH
  fetch ID METHOD PATH [opts]    send http_req and collect the response
  req ID METHOD PATH [h=...]     send http_req only (no body), collect nothing
  upload ID METHOD PATH FILE [opts]  send http_req_begin + data + end, collect
      opts: body=@FILE | body=TEXT (fetch), h=Name:Value (repeatable),
            window=N (credits granted for the response, default 16),
            chunk=N (upload chunk size, default 65536), nocl (upload without
            content_length), drop=BYTES (drop the connection once BYTES of
            the response (fetch) or request (upload) went through, accept
            the reconnect and resume), out=FILE (write the body),
            expect=fast|stream|error, status=N, grep=TEXT (error message)
  wsconnect ID PATH [h=Name:Value ...] [expect=connected|error] [grep=TEXT]
                           open an application WebSocket channel
  wsecho ID text=TEXT | size=N [b64] [chunk=N]
                           send a text or an N-byte binary message (envelopes
                           of chunk bytes, or base64 with b64) and expect the
                           target's echo byte for byte
  wsclose ID CODE [REASON] send ws_close and expect the same ws_close back
  send JSON                send a raw control frame
  sendbin ID KIND HEX      send a raw envelope (offset-less) for ID
  expect TYPE [ID] [SECONDS]  wait for a control frame of TYPE (for ID)
  pings N [SECONDS]        wait until N pings came on this connection
  nopong                   stop answering pings
  closed [SECONDS]         wait until the client closes this connection
  noframe SECONDS          no frame (pings aside) may come for SECONDS
  drop                     abort this connection (no close frame)
  close [CODE [REASON]]    close this connection with a close frame
  sleep SECONDS
"""
import argparse
import asyncio
import base64
import hashlib
import http
import json
import shlex
import ssl
import struct
import sys
import time
import uuid

import websockets

WAIT = 20.0
HELLO = {"type": "hello", "protocol_version": 2, "max_stream_chunk": 65536,
         "max_inflight": 16, "stream_window_frames": 16,
         "max_body_size": 536870912, "max_ws_message_size": 8388608,
         "resume": True, "session_id": None}


class Fail(Exception):
    pass


def emit(**kw):
    print(json.dumps(kw), flush=True)


def env_encode(kind, id_, payload, offset=None, flags=0):
    body = payload
    if offset is not None:
        flags |= 2
        body = struct.pack(">Q", offset) + payload
    return (b"YD" + bytes([1, kind, 16]) + uuid.UUID(id_).bytes +
            bytes([flags]) + struct.pack(">I", len(body)) + body)


def env_decode(b):
    if len(b) < 26 or b[:2] != b"YD" or b[2] != 1 or b[4] != 16:
        raise Fail("bad envelope from the client: %r" % b[:26])
    flags = b[21]
    n = struct.unpack(">I", b[22:26])[0]
    body = b[26:]
    if len(body) != n:
        raise Fail("envelope length mismatch")
    off = None
    if flags & 2:
        off = struct.unpack(">Q", body[:8])[0]
        body = body[8:]
    return {"kind": b[3], "id": str(uuid.UUID(bytes=b[5:21])),
            "flags": flags, "offset": off, "payload": body}


class Conn:
    """One tunnel WebSocket from the client."""

    def __init__(self, ws, path, headers, n):
        self.ws = ws
        self.path = path
        self.headers = headers
        self.n = n
        self.frames = asyncio.Queue()
        self.pings = []
        self.answer_pings = True
        self.closed = asyncio.Event()
        self.done = asyncio.Event()

    async def read(self):
        try:
            async for msg in self.ws:
                if isinstance(msg, bytes):
                    await self.frames.put(("bin", msg))
                    continue
                o = json.loads(msg)
                if o.get("type") == "ping":
                    self.pings.append(time.monotonic())
                    if self.answer_pings:
                        await self.ws.send(json.dumps(
                            {"type": "pong", "id": o.get("id"),
                             "timestamp": o.get("timestamp")}))
                    continue
                await self.frames.put(("json", o))
        except websockets.ConnectionClosed:
            pass
        finally:
            self.closed.set()
            await self.frames.put(("closed", None))

    async def get(self, timeout=WAIT):
        try:
            kind, v = await asyncio.wait_for(self.frames.get(), timeout)
        except asyncio.TimeoutError:
            raise Fail("no frame within %g s" % timeout)
        if kind == "closed":
            await self.frames.put(("closed", None))
            raise Fail("the client closed the tunnel connection")
        if kind == "bin":
            return ("bin", env_decode(v))
        return ("json", v)

    async def send(self, o):
        await self.ws.send(json.dumps(o))

    async def sendbin(self, b):
        await self.ws.send(b)

    def drop(self):
        self.ws.transport.abort()
        self.done.set()


class Mock:
    def __init__(self, port):
        self.port = port
        self.incoming = asyncio.Queue()
        self.rejects = []
        self.hello = dict(HELLO)
        self.conn = None
        self.session = None
        self.nconn = 0
        self.pyhello = None  # None, "header" or "noheader"
        self.replay = []  # frames sent right after the client's hello

    async def process_request(self, path, headers):
        if self.rejects:
            status = self.rejects.pop(0)
            emit(event="reject", status=status, path=path)
            return (http.HTTPStatus(status), [("Content-Type", "text/plain")],
                    b"refused\n")
        return None

    async def handler(self, ws, path):
        self.nconn += 1
        c = Conn(ws, path, ws.request_headers, self.nconn)
        reader = asyncio.ensure_future(c.read())
        await self.incoming.put(c)
        await asyncio.wait([reader, asyncio.ensure_future(c.done.wait())],
                           return_when=asyncio.FIRST_COMPLETED)
        if not c.closed.is_set():
            await ws.close()
        await reader

    async def accept(self, timeout=WAIT):
        try:
            c = await asyncio.wait_for(self.incoming.get(), timeout)
        except asyncio.TimeoutError:
            raise Fail("no tunnel connection within %g s" % timeout)
        if self.conn is not None and not self.conn.closed.is_set():
            self.conn.drop()
        self.conn = c
        hdr = c.headers.get("X-YR-Tunnel-Protocol") == "2"
        early = self.hello is not None and (
            self.pyhello is None or (self.pyhello == "header" and hdr))
        if early:
            await c.send(self.hello)
        kind, h = await c.get(5)
        if kind != "json" or h.get("type") != "hello":
            raise Fail("first frame is not the client's hello: %r" % (h,))
        sid = h.get("session_id")
        try:
            ok = str(uuid.UUID(sid)) == sid
        except (TypeError, ValueError):
            ok = False
        if not ok or h.get("resume") is not True:
            raise Fail("hello without resume and a UUID session_id: %r" % h)
        if self.session is None:
            self.session = sid
        elif sid != self.session:
            raise Fail("session_id changed: %s -> %s" % (self.session, sid))
        for f in self.replay:
            emit(event="replay", type=f["type"], id=f.get("id"),
                 before_hello=not early and self.hello is not None)
            await c.send(f)
        self.replay = []
        if self.hello is not None and not early:
            await c.send(self.hello)
        emit(event="accept", n=c.n, path=c.path, session_id=sid,
             hello=h, headers=[[k, v] for k, v in c.headers.raw_items()],
             hello_first=early)
        return c

    async def collect(self, xid, opts, upload=None):
        """Run one exchange until its response is complete."""
        c = self.conn
        window = int(opts.get("window", 16))
        drop = int(opts["drop"]) if "drop" in opts else None
        dropped = False
        resp = {"id": xid, "kind": None, "status": None, "headers": None,
                "content_length": None}
        body = bytearray()
        outstanding = 0
        chunk_times = []
        dups = 0
        # Upload state.
        up_off = 0
        up_credits = 0
        up_end_sent = False
        up_acks = []
        first_window = None
        while True:
            if upload is not None:
                data, chunk = upload
                while up_credits > 0 and up_off < len(data):
                    piece = data[up_off:up_off + chunk]
                    await c.sendbin(env_encode(1, xid, piece, up_off))
                    up_off += len(piece)
                    up_credits -= 1
                    if (drop is not None and not dropped and
                            up_off >= drop):
                        break
                if (drop is not None and not dropped and up_off >= drop):
                    dropped = True
                    emit(event="drop", at=up_off)
                    c.drop()
                    self.replay = [self.begin_frame]
                    c = await self.accept()
                    up_credits = 0
                    kind, w = await c.get()
                    if (kind != "json" or w.get("type") != "window" or
                            w.get("id") != xid):
                        raise Fail("replayed begin got %r" % (w,))
                    emit(event="resume_window", credits=w["credits"],
                         ack_offset=w.get("ack_offset"))
                    up_off = w.get("ack_offset") or 0
                    up_credits = w["credits"]
                    continue
                if (up_off >= len(data) and not up_end_sent and
                        first_window is not None):
                    await c.send({"type": "http_req_end", "id": xid})
                    up_end_sent = True
            kind, f = await c.get()
            if kind == "bin":
                if f["id"] != xid or f["kind"] != 2:
                    raise Fail("unexpected envelope %r" % (
                        {k: f[k] for k in ("kind", "id", "flags")},))
                if f["flags"] & 1:
                    raise Fail("END flag on response data")
                if f["offset"] is None:
                    raise Fail("response data without offset")
                n = len(f["payload"])
                if f["offset"] + n <= len(body) and n > 0:
                    dups += 1
                    await c.send({"type": "window", "id": xid,
                                  "credits": 0, "ack_offset": len(body)})
                    continue
                if f["offset"] != len(body):
                    raise Fail("response chunk at %d, expected %d" %
                               (f["offset"], len(body)))
                outstanding -= 1
                if outstanding < 0:
                    raise Fail("the client sent data beyond its credits")
                body += f["payload"]
                chunk_times.append(time.monotonic())
                outstanding += 1
                await c.send({"type": "window", "id": xid, "credits": 1,
                              "ack_offset": len(body)})
                if drop is not None and upload is None and not dropped \
                        and len(body) >= drop:
                    dropped = True
                    emit(event="drop", at=len(body))
                    c.drop()
                    c = await self.accept()
                    outstanding = window
                    await c.send({"type": "window", "id": xid,
                                  "credits": window,
                                  "ack_offset": len(body)})
                continue
            t = f.get("type")
            if f.get("id") != xid:
                emit(event="other_frame", frame=f)
                continue
            if t == "window":
                if first_window is None:
                    first_window = f
                    emit(event="first_window", credits=f["credits"],
                         ack_offset=f.get("ack_offset"))
                up_credits += f["credits"]
                up_acks.append(f.get("ack_offset"))
                continue
            if t == "http_resp":
                resp.update(kind="fast", status=f["status"],
                            headers=f.get("headers", []))
                body = bytearray(base64.b64decode(f.get("body", "")))
                break
            if t == "error":
                resp.update(kind="error", message=f["message"])
                break
            if t == "http_resp_begin":
                resp.update(kind="stream", status=f["status"],
                            headers=f.get("headers", []),
                            content_length=f.get("content_length"))
                outstanding = window
                await c.send({"type": "window", "id": xid,
                              "credits": window, "ack_offset": 0})
                continue
            if t == "http_resp_end":
                cl = resp["content_length"]
                await c.send({"type": "window", "id": xid, "credits": 0,
                              "ack_offset": len(body), "complete": True})
                resp["ended"] = True
                break
            raise Fail("unexpected frame %r" % f)
        gaps = [round(b - a, 3) for a, b in zip(chunk_times, chunk_times[1:])]
        resp.update(body_len=len(body),
                    sha256=hashlib.sha256(bytes(body)).hexdigest(),
                    chunks=len(chunk_times), gaps=gaps, dups=dups,
                    up_acks=up_acks[-3:])
        if resp["kind"] != "error":
            try:
                resp["body_text"] = bytes(body[:512]).decode()
            except UnicodeDecodeError:
                pass
        if "out" in opts:
            with open(opts["out"], "wb") as fh:
                fh.write(body)
        emit(event="response", **resp)
        want = opts.get("expect")
        if want and resp["kind"] != want:
            raise Fail("expected a %s response, got %r" % (want, resp))
        if "status" in opts and str(resp["status"]) != opts["status"]:
            raise Fail("expected status %s, got %r" % (opts["status"], resp))
        if "grep" in opts and opts["grep"] not in resp.get("message", ""):
            raise Fail("error %r lacks %r" % (resp.get("message"),
                                               opts["grep"]))
        self.conn = c
        return resp

    async def run(self, lines):
        for line in lines:
            words = shlex.split(line, comments=True)
            if not words:
                continue
            emit(event="cmd", line=line.strip()[:200])
            if words[0] == "send":
                await self.conn.send(json.loads(line.strip()[4:]))
                continue
            await self.command(words[0], words[1:])

    @staticmethod
    def options(words):
        pos, opts, hdrs = [], {}, []
        for w in words:
            if w.startswith("h="):
                name, _, value = w[2:].partition(":")
                hdrs.append([name, value.lstrip()])
            elif "=" in w and not w.startswith("/"):
                k, _, v = w.partition("=")
                opts[k] = v
            elif w == "nocl":
                opts["nocl"] = True
            else:
                pos.append(w)
        return pos, opts, hdrs

    async def command(self, cmd, args):
        c = self.conn
        if cmd == "reject":
            self.rejects += [int(args[0])] * (int(args[1]) if len(args) > 1
                                              else 1)
        elif cmd == "hello":
            if args[:1] == ["off"]:
                self.hello = None
                return
            self.hello = dict(HELLO)
            for a in args:
                k, _, v = a.partition("=")
                self.hello[k] = json.loads(v)
        elif cmd == "pyhello":
            self.pyhello = "noheader" if args[:1] == ["noheader"] else "header"
        elif cmd == "accept":
            await self.accept(float(args[0]) if args else WAIT)
        elif cmd == "header":
            got = c.headers.get_all(args[0])
            if not got:
                raise Fail("handshake lacks header %s" % args[0])
            if len(args) > 1 and args[1] not in got:
                raise Fail("header %s is %r, not %r" % (args[0], got, args[1]))
        elif cmd == "noheader":
            if c.headers.get_all(args[0]):
                raise Fail("handshake has header %s" % args[0])
        elif cmd == "path":
            if c.path != args[0]:
                raise Fail("handshake path %r, not %r" % (c.path, args[0]))
        elif cmd in ("fetch", "upload", "req"):
            pos, opts, hdrs = self.options(args)
            xid = pos[0]
            if xid == "new":
                xid = str(uuid.uuid4())
            if cmd == "fetch":
                body = b""
                b = opts.get("body", "")
                if b.startswith("@"):
                    with open(b[1:], "rb") as fh:
                        body = fh.read()
                else:
                    body = b.encode()
                await c.send({"type": "http_req", "id": xid,
                              "method": pos[1], "path": pos[2],
                              "headers": hdrs,
                              "body": base64.b64encode(body).decode()})
                await self.collect(xid, opts)
            elif cmd == "req":
                await c.send({"type": "http_req", "id": xid,
                              "method": pos[1], "path": pos[2],
                              "headers": hdrs, "body": ""})
            else:
                with open(pos[3], "rb") as fh:
                    data = fh.read()
                self.begin_frame = {
                    "type": "http_req_begin", "id": xid, "method": pos[1],
                    "path": pos[2], "headers": hdrs,
                    "content_length": None if opts.get("nocl") else len(data)}
                await c.send(self.begin_frame)
                await self.collect(xid, opts,
                                   (data, int(opts.get("chunk", 65536))))
        elif cmd == "wsconnect":
            pos, opts, hdrs = self.options(args)
            await c.send({"type": "ws_connect", "id": pos[0], "path": pos[1],
                          "headers": {k: v for k, v in hdrs}})
            while True:
                kind, f = await c.get()
                if kind == "json" and f.get("id") == pos[0]:
                    break
                emit(event="skipped", frame=f if kind == "json" else
                     {"bin": f["id"]})
            emit(event="ws", frame=f)
            want = opts.get("expect", "connected")
            got = "connected" if f["type"] == "ws_connected" else f["type"]
            if got != want:
                raise Fail("ws_connect answered %r" % f)
            if "grep" in opts and opts["grep"] not in f.get("message", ""):
                raise Fail("error %r lacks %r" % (f, opts["grep"]))
        elif cmd == "wsecho":
            pos, opts, _ = self.options(args)
            xid = pos[0]
            b64 = "b64" in pos
            if "text" in opts:
                await c.send({"type": "ws_message", "id": xid,
                              "data": opts["text"], "binary": False})
                want, binary = opts["text"].encode(), False
            else:
                import os
                want, binary = os.urandom(int(opts["size"])), True
                chunk = int(opts.get("chunk", 65536))
                if b64:
                    await c.send({"type": "ws_message", "id": xid,
                                  "data": base64.b64encode(want).decode(),
                                  "binary": True})
                else:
                    off = 0
                    while True:
                        piece = want[off:off + chunk]
                        off += len(piece)
                        await c.sendbin(env_encode(
                            3, xid, piece, flags=1 if off >= len(want) else 0))
                        if off >= len(want):
                            break
            got, pieces = bytearray(), []
            while True:
                kind, f = await c.get()
                if kind == "bin":
                    if f["kind"] != 3 or f["id"] != xid:
                        raise Fail("unexpected envelope for %s" % f["id"])
                    got += f["payload"]
                    pieces.append(len(f["payload"]))
                    if f["flags"] & 1:
                        gbin = True
                        break
                    continue
                if f.get("id") != xid:
                    emit(event="skipped", frame=f)
                    continue
                if f["type"] != "ws_message":
                    raise Fail("expected the echo, got %r" % f)
                gbin = f.get("binary", False)
                got = (base64.b64decode(f["data"]) if gbin
                       else f["data"].encode())
                pieces.append("b64" if gbin else "text")
                break
            emit(event="wsecho", id=xid, len=len(got), pieces=pieces[:8],
                 npieces=len(pieces))
            if bytes(got) != want or gbin != binary:
                raise Fail("echo differs (%d bytes, binary %s)" %
                           (len(got), gbin))
        elif cmd == "wsclose":
            code = int(args[1])
            reason = args[2] if len(args) > 2 else ""
            await c.send({"type": "ws_close", "id": args[0], "code": code,
                          "reason": reason})
            while True:
                kind, f = await c.get()
                if kind == "json" and f.get("id") == args[0]:
                    break
            emit(event="ws", frame=f)
            if (f["type"] != "ws_close" or f.get("code") != code or
                    f.get("reason", "") != reason):
                raise Fail("ws_close answered %r" % f)
        elif cmd == "sendbin":
            await c.sendbin(env_encode(int(args[1]), args[0],
                                       bytes.fromhex(args[2])))
        elif cmd == "expect":
            timeout = float(args[2]) if len(args) > 2 else WAIT
            end = time.monotonic() + timeout
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    raise Fail("no %s frame" % args[0])
                kind, f = await c.get(left)
                if kind == "json" and f.get("type") == args[0] and (
                        len(args) < 2 or args[1] == "-" or
                        f.get("id") == args[1]):
                    emit(event="frame", frame=f)
                    break
                emit(event="skipped", frame=f if kind == "json" else
                     {"bin": f["id"]})
        elif cmd == "pings":
            n = int(args[0])
            timeout = float(args[1]) if len(args) > 1 else WAIT
            end = time.monotonic() + timeout
            while len(c.pings) < n:
                if time.monotonic() > end:
                    raise Fail("%d pings, wanted %d" % (len(c.pings), n))
                await asyncio.sleep(0.01)
            p = c.pings
            emit(event="pings", n=len(p),
                 gaps=[round(b - a, 3) for a, b in zip(p, p[1:])])
        elif cmd == "nopong":
            c.answer_pings = False
        elif cmd == "closed":
            timeout = float(args[0]) if args else WAIT
            try:
                await asyncio.wait_for(c.closed.wait(), timeout)
            except asyncio.TimeoutError:
                raise Fail("the client did not close within %g s" % timeout)
            emit(event="closed", code=c.ws.close_code)
        elif cmd == "noframe":
            try:
                kind, f = await c.get(float(args[0]))
                raise Fail("unexpected frame %r" % (f,))
            except Fail as e:
                if not str(e).startswith("no frame"):
                    raise
        elif cmd == "drop":
            c.drop()
        elif cmd == "close":
            await c.ws.close(int(args[0]) if args else 1000,
                             " ".join(args[1:]))
        elif cmd == "sleep":
            await asyncio.sleep(float(args[0]))
        else:
            raise Fail("unknown command %r" % cmd)


async def amain(a, lines):
    m = Mock(a.port)
    ctx = None
    if a.tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls[0], a.tls[1])
    async with websockets.serve(m.handler, "127.0.0.1", a.port,
                                process_request=m.process_request,
                                ping_interval=None, max_size=16 << 20,
                                compression=None, ssl=ctx):
        print("ready", file=sys.stderr, flush=True)
        try:
            await asyncio.wait_for(m.run(lines), a.timeout)
        except asyncio.TimeoutError:
            raise Fail("script took more than %g s" % a.timeout)
        if m.conn is not None:
            m.conn.drop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--script")
    ap.add_argument("-e", dest="expr")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"),
                    help="serve wss:// with this certificate and key")
    a = ap.parse_args()
    if a.expr is not None:
        lines = a.expr.split(";")
    elif a.script is not None:
        with open(a.script) as fh:
            lines = fh.read().splitlines()
    else:
        lines = sys.stdin.read().splitlines()
    try:
        asyncio.run(amain(a, lines))
    except Fail as e:
        print("mock: FAIL: %s" % e, file=sys.stderr, flush=True)
        return 1
    except Exception as e:  # a broken script is a failure too
        print("mock: FAIL: %s: %s" % (type(e).__name__, e), file=sys.stderr,
              flush=True)
        return 1
    print("mock: ok", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
