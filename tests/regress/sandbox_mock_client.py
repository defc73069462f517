#!/usr/bin/env python3
"""A scripted reverse-tunnel CLIENT (tunnel-protocol.md, the client role) for
testing the gateway's sandbox role without the real aktunnel.

It dials the tunnel WebSocket, sends a V2 hello (resume:true and a session_id
unless --no-session), answers pings, pings every --ping-interval seconds, and
serves requests itself, chosen by path (no real target):

  /hello                 fast http_resp 200 "pong"
  /echo                  JSON: method, path, headers, body length and sha256
                         (streamed back when the request was streamed)
  /sha256                same as /echo
  /bytes?n=N             N pattern bytes, streamed with content_length
         &cl=0           ... with content_length null (chunked downstream)
         &drop=M         ... drop the link once M bytes went out (first time),
                         reconnect with the same session and resume
  /sse?n=K&gap_ms=G      K events "data: event-i", G ms apart, no length
  /error?msg=TEXT        error{id, TEXT}
  /slow?ms=N             http_resp 200 "slow-ok" after N ms
  /hang                  never answers
         ?unless=NAME    ... except on the mock named NAME: its name, 200
  /status?code=C         empty response with status C
  /whoami                http_resp 200 with --name
  /short                 announces content_length 3, sends 2 bytes
  /flood?n=N             first N frames of each kind (http_resp, window,
                         http_resp_end, ws_message, ws_close) for ids the
                         gateway never gave, and an http_resp again for each
                         finished id, then 200 "flooded N"
  /replay-once           first time: drop the link without answering; the
                         replayed request (same id) gets "resume-ok"
  POST ...?drop=M        streamed upload: drop the link once M bytes arrived
                         (first time); ?slow=1 consumes chunks slowly so some
                         are held unacknowledged when the link drops
  WebSocket (ws_connect) echo: text and binary messages come back unchanged;
                         the text "close CODE" is answered with ws_close
                         CODE "closed by the target"

Events go to --log as JSON lines (connected, closed with code, requests,
errors received, ...).  SIGUSR1 drops the link (a reconnect blip).

  sandbox_mock_client.py pattern N   prints the N pattern bytes (for sha256)
"""
import argparse
import asyncio
import base64
import hashlib
import json
import os
import random
import signal
import sys
import time
import urllib.parse
import uuid

CHUNK = 65536
FAST_PATH = 65536
MAGIC = b"YD"
K_REQ, K_RESP, K_WS = 1, 2, 3
F_END, F_OFFSET = 1, 2

_BLOCK = random.Random(42).randbytes(1 << 20)


def pattern(off, n):
    """n bytes of the test pattern starting at offset off."""
    out = bytearray()
    while n > 0:
        o = off % len(_BLOCK)
        take = min(n, len(_BLOCK) - o)
        out += _BLOCK[o:o + take]
        off += take
        n -= take
    return bytes(out)


def env_encode(kind, sid, payload, flags=0, offset=None):
    """Encode a binary envelope (§3.2)."""
    idb = uuid.UUID(sid).bytes
    body = payload
    if offset is not None:
        flags |= F_OFFSET
        body = offset.to_bytes(8, "big") + payload
    return (MAGIC + bytes([1, kind, 16]) + idb + bytes([flags]) +
            len(body).to_bytes(4, "big") + body)


def env_decode(b):
    """Decode a binary envelope; raises ValueError."""
    if len(b) < 26 or b[0:2] != MAGIC or b[2] != 1 or b[4] != 16:
        raise ValueError("bad envelope header")
    kind, flags = b[3], b[21]
    sid = str(uuid.UUID(bytes=bytes(b[5:21])))
    wire = int.from_bytes(b[22:26], "big")
    body = b[26:]
    if len(body) != wire:
        raise ValueError("envelope length mismatch")
    off = None
    if flags & F_OFFSET:
        off = int.from_bytes(body[:8], "big")
        body = body[8:]
    return kind, sid, flags, off, bytes(body)


class RespStream:
    """A streamed response we send, resumable from the sandbox's ack."""

    def __init__(self, client, sid, status, headers, total, get, cl=True,
                 drop_at=None, gaps=None):
        self.c, self.id, self.status, self.headers = client, sid, status, headers
        self.total, self.get, self.cl = total, get, cl
        self.sent = 0          # next offset to send
        self.credits = 0
        self.window_seen = False
        self.drop_at = drop_at
        self.gaps = gaps or {}  # offset -> seconds to wait before it
        self.ended = False
        self.chunker = None    # offset -> chunk length, else CHUNK
        self.wake = asyncio.Event()

    def begin_frame(self):
        return {"type": "http_resp_begin", "id": self.id,
                "status": self.status, "headers": self.headers,
                "content_length": self.total if self.cl else None}

    def on_window(self, credits, ack):
        if ack is not None and not self.window_seen and ack < self.sent:
            self.sent = ack  # resend from where the sandbox stands (§8.6)
        self.window_seen = True
        self.credits = min(self.credits + credits, self.c.window)
        self.wake.set()

    def on_disconnect(self):
        self.credits = 0
        self.window_seen = False
        self.wake.set()

    async def run(self):
        c = self.c
        while True:
            while not (c.ws is not None and self.window_seen and
                       (self.credits > 0 or self.sent >= self.total)):
                self.wake.clear()
                await self.wake.wait()
            ws = c.ws
            if self.sent >= self.total:
                if await c.send({"type": "http_resp_end", "id": self.id}, ws):
                    self.ended = True
                    c.resp_streams.pop(self.id, None)
                    return
                await asyncio.sleep(0.01)
                continue
            if self.sent in self.gaps:
                await asyncio.sleep(self.gaps.pop(self.sent))
            n = self.chunker(self.sent) if self.chunker else CHUNK
            n = min(n, self.total - self.sent)
            data = self.get(self.sent, n)
            ok = await c.send_bin(env_encode(K_RESP, self.id, data,
                                             offset=self.sent), ws)
            if not ok:
                await asyncio.sleep(0.01)
                continue
            self.sent += n
            self.credits -= 1
            if self.drop_at is not None and self.sent >= self.drop_at:
                self.drop_at = None
                c.log(event="drop", reason="response", id=self.id,
                      sent=self.sent)
                await c.drop()


class ReqStream:
    """A streamed request body we receive (§4.6)."""

    def __init__(self, client, sid, msg, query):
        self.c, self.id, self.msg = client, sid, msg
        self.received = 0
        self.consumed = 0
        self.queue = []
        self.hasher = hashlib.sha256()
        self.ended = False
        self.cl = msg.get("content_length")
        self.drop_at = int(query["drop"]) if "drop" in query else None
        self.slow = query.get("slow") == "1"
        self.wake = asyncio.Event()
        self.task = asyncio.ensure_future(self.consume())

    async def consume(self):
        while True:
            while not self.queue:
                if self.ended and self.consumed == self.received:
                    await self.c.finish_upload(self)
                    return
                self.wake.clear()
                await self.wake.wait()
            if self.slow:
                # A stalled target: nothing is consumed while the link is
                # down, so the sandbox must resend from our ack (§8.6).
                await asyncio.sleep(0.01)
                while self.c.ws is None:
                    await asyncio.sleep(0.01)
            off, data = self.queue.pop(0)
            self.hasher.update(data)
            self.consumed = off + len(data)
            await self.c.send({"type": "window", "id": self.id, "credits": 1,
                               "ack_offset": self.consumed})

    def on_data(self, off, data, flags):
        c = self.c
        if off is None:
            c.log(event="protocol_error", why="request chunk without offset")
            return None
        if off + len(data) <= self.received and len(data) > 0:
            c.dups += 1
            return {"type": "window", "id": self.id, "credits": 0,
                    "ack_offset": self.received}
        if off != self.received:
            c.log(event="protocol_error", why="request chunk gap/overlap",
                  off=off, received=self.received)
            return None
        if len(self.queue) >= c.window:
            c.log(event="protocol_error", why="request window exceeded")
        self.queue.append((off, data))
        self.received += len(data)
        if flags & F_END:
            self.ended = True
        self.wake.set()
        if self.drop_at is not None and self.received >= self.drop_at:
            self.drop_at = None
            c.log(event="drop", reason="upload", id=self.id,
                  received=self.received, consumed=self.consumed)
            asyncio.ensure_future(c.drop())
        return None

    def on_end(self):
        if self.cl is not None and self.cl != self.received:
            return {"type": "error", "id": self.id,
                    "message": "request content length mismatch"}
        self.ended = True
        self.wake.set()
        return None


class Client:
    def __init__(self, args):
        self.a = args
        self.session = None if args.no_session else (args.session or
                                                      str(uuid.uuid4()))
        self.window = min(args.window, max(1, 480 // args.max_inflight))
        self.ws = None
        self.dropping = False
        self.connected = asyncio.Event()
        self.resp_streams = {}   # id -> RespStream
        self.req_streams = {}    # id -> ReqStream
        self.running = set()     # fast-path ids in progress
        self.done = {}           # id -> cached fast result
        self.tombs = set()
        self.seen_once = set()
        self.channels = {}       # ws channel id -> bytearray
        self.dups = 0
        self.logf = open(args.log, "a", buffering=1) if args.log else None

    def log(self, **kw):
        kw["t"] = round(time.time(), 3)
        kw["name"] = self.a.name
        line = json.dumps(kw)
        if self.logf:
            self.logf.write(line + "\n")
        if self.a.verbose:
            print(line, file=sys.stderr, flush=True)

    async def send(self, obj, ws=None):
        ws = ws or self.ws
        if ws is None:
            return False
        try:
            await ws.send(json.dumps(obj))
            return True
        except Exception:
            return False

    async def send_bin(self, b, ws=None):
        ws = ws or self.ws
        if ws is None:
            return False
        try:
            await ws.send(b)
            return True
        except Exception:
            return False

    async def drop(self):
        """Cut the link abruptly, as a network failure would."""
        ws = self.ws
        if ws is None:
            return
        self.dropping = True
        self.ws = None
        for rs in list(self.resp_streams.values()):
            rs.on_disconnect()
        ws.transport.abort()

    def hello(self):
        h = {"type": "hello", "protocol_version": 2, "max_stream_chunk": CHUNK,
             "max_inflight": self.a.max_inflight,
             "stream_window_frames": self.a.window,
             "max_body_size": 536870912, "max_ws_message_size": 8388608}
        if self.session:
            h["resume"] = True
            h["session_id"] = self.session
        return h

    # ---- responses -------------------------------------------------------

    async def fast(self, sid, status, body=b"", headers=None):
        msg = {"type": "http_resp", "id": sid, "status": status,
               "headers": headers or [["Content-Length", str(len(body))]],
               "body": base64.b64encode(body).decode()}
        self.done[sid] = msg
        self.running.discard(sid)
        await self.send(msg)

    async def stream(self, sid, status, headers, total, get, cl=True,
                     drop_at=None, gaps=None):
        rs = RespStream(self, sid, status, headers, total, get, cl, drop_at,
                        gaps)
        self.resp_streams[sid] = rs
        self.running.discard(sid)
        await self.send(rs.begin_frame())
        await rs.run()

    async def answer(self, sid, status, body, headers, streamed):
        if streamed or len(body) > FAST_PATH:
            await self.stream(sid, status, headers, len(body),
                              lambda o, n: body[o:o + n])
        else:
            await self.fast(sid, status, body, headers)

    def echo_body(self, msg, body_len, sha):
        return json.dumps({"method": msg.get("method"), "path": msg.get("path"),
                           "headers": msg.get("headers"), "len": body_len,
                           "sha256": sha, "name": self.a.name}).encode()

    # ---- requests --------------------------------------------------------

    async def handle_req(self, msg):
        sid = msg["id"]
        path = msg.get("path", "/")
        u = urllib.parse.urlsplit(path)
        q = dict(urllib.parse.parse_qsl(u.query))
        self.log(event="request", type=msg["type"], id=sid, method=msg.get("method"),
                 path=path)
        if msg["type"] == "http_req_begin":
            rs = self.resp_streams.get(sid)
            if rs is not None:
                await self.send(rs.begin_frame())
                return
            st = self.req_streams.get(sid)
            if st is not None:
                free = max(0, self.window - len(st.queue))
                await self.send({"type": "window", "id": sid, "credits": free,
                                 "ack_offset": st.consumed})
                self.log(event="replayed_begin", id=sid, consumed=st.consumed,
                         received=st.received)
                return
            if len(self.running) + len(self.req_streams) + len(self.resp_streams) >= self.a.max_inflight:
                await self.send({"type": "error", "id": sid,
                                 "message": "tunnel max_inflight limit reached"})
                return
            st = ReqStream(self, sid, msg, q)
            self.req_streams[sid] = st
            await self.send({"type": "window", "id": sid,
                             "credits": self.window, "ack_offset": 0})
            return
        # http_req (fast path)
        rs = self.resp_streams.get(sid)
        if rs is not None:
            await self.send(rs.begin_frame())
            return
        if sid in self.done:
            await self.send(self.done[sid])
            return
        if sid in self.running:
            self.log(event="replayed_running", id=sid)
            return
        self.running.add(sid)
        body = base64.b64decode(msg.get("body", ""))
        p = u.path
        if p == "/replay-once" and sid not in self.seen_once:
            self.seen_once.add(sid)
            self.running.discard(sid)
            self.log(event="drop", reason="replay-once", id=sid)
            await self.drop()
            return
        if p == "/replay-once":
            await self.fast(sid, 200, b"resume-ok")
        elif p == "/hello":
            await self.fast(sid, 200, b"pong", [["Content-Type", "text/plain"],
                                                ["Content-Length", "4"]])
        elif p in ("/echo", "/sha256"):
            b = self.echo_body(msg, len(body), hashlib.sha256(body).hexdigest())
            await self.answer(sid, 200, b, [["Content-Type", "application/json"]],
                              False)
        elif p == "/bytes":
            n = int(q.get("n", "0"))
            cl = q.get("cl", "1") != "0"
            drop = int(q["drop"]) if "drop" in q else None
            await self.stream(sid, 200, [["Content-Type",
                                          "application/octet-stream"],
                                         ["Transfer-Encoding", "chunked"]],
                              n, pattern, cl, drop)
        elif p == "/sse":
            k = int(q.get("n", "2"))
            gap = float(q.get("gap_ms", "300")) / 1000
            events = b"".join(b"data: event-%d\n\n" % i for i in range(k))
            # one event per chunk: offsets of each event
            sizes = [len(b"data: event-%d\n\n" % i) for i in range(k)]
            await self.sse(sid, events, sizes, gap)
        elif p == "/error":
            self.running.discard(sid)
            m = {"type": "error", "id": sid,
                 "message": q.get("msg", "upstream unreachable")}
            self.done[sid] = m
            await self.send(m)
        elif p == "/slow":
            await asyncio.sleep(int(q.get("ms", "100")) / 1000)
            await self.fast(sid, 200, b"slow-ok")
        elif p == "/hang":
            if q.get("unless") == self.a.name:
                await self.fast(sid, 200, self.a.name.encode())
        elif p == "/status":
            code = int(q.get("code", "204"))
            hdrs = [["X-Status", str(code)]]
            if "cl" in q:
                hdrs.append(["Content-Length", q["cl"]])
            msg2 = {"type": "http_resp", "id": sid, "status": code,
                    "headers": hdrs, "body": ""}
            self.running.discard(sid)
            await self.send(msg2)
        elif p == "/flood":
            n = int(q.get("n", "1000"))
            for _ in range(n):
                u = str(uuid.uuid4())
                await self.send({"type": "http_resp", "id": u, "status": 200,
                                 "headers": [], "body": ""})
                await self.send({"type": "window", "id": u, "credits": 8,
                                 "ack_offset": 0})
                await self.send({"type": "http_resp_end", "id": u})
                await self.send({"type": "ws_message", "id": u,
                                 "data": "x", "binary": False})
                await self.send({"type": "ws_close", "id": u, "code": 1000})
            for old, m in list(self.done.items()):
                if old != sid:
                    await self.send(m)
            await self.fast(sid, 200, b"flooded %d" % n)
        elif p == "/whoami":
            await self.fast(sid, 200, self.a.name.encode())
        elif p == "/short":
            # Announces 3 bytes, sends 2 (§4.7 "content length mismatch").
            rs = RespStream(self, sid, 200, [], 2, lambda o, n: b"ab"[o:o + n])
            self.resp_streams[sid] = rs
            self.running.discard(sid)
            begin = rs.begin_frame()
            begin["content_length"] = 3
            await self.send(begin)
            await rs.run()
        else:
            await self.fast(sid, 404, b"no such mock path")

    async def sse(self, sid, events, sizes, gap):
        """Stream SSE events, one chunk each, gap seconds apart."""
        offs, o = [], 0
        for n in sizes:
            offs.append(o)
            o += n
        size_at = dict(zip(offs, sizes))
        rs = RespStream(self, sid, 200, [["Content-Type", "text/event-stream"]],
                        len(events), lambda off, n: events[off:off + n],
                        cl=False, gaps={x: gap for x in offs[1:]})
        rs.chunker = lambda off: size_at.get(off, CHUNK)
        self.resp_streams[sid] = rs
        self.running.discard(sid)
        await self.send(rs.begin_frame())
        await rs.run()

    async def finish_upload(self, st):
        self.req_streams.pop(st.id, None)
        body = self.echo_body(st.msg, st.received, st.hasher.hexdigest())
        self.log(event="upload_done", id=st.id, len=st.received,
                 sha256=st.hasher.hexdigest(), dups=self.dups)
        await self.stream(st.id, 200, [["Content-Type", "application/json"]],
                          len(body), lambda o, n: body[o:o + n])

    # ---- frames ----------------------------------------------------------

    async def on_text(self, ws, raw):
        try:
            msg = json.loads(raw)
        except ValueError:
            self.log(event="bad_json")
            return
        t = msg.get("type")
        if t == "hello":
            self.log(event="server_hello", hello=msg)
        elif t == "ping":
            self.log(event="server_ping", id=msg.get("id"))
            await self.send({"type": "pong", "id": msg.get("id", ""),
                             "timestamp": msg.get("timestamp", 0)}, ws)
        elif t == "pong":
            self.log(event="pong", id=msg.get("id"))
        elif t in ("http_req", "http_req_begin"):
            asyncio.ensure_future(self.handle_req(msg))
        elif t == "http_req_end":
            st = self.req_streams.get(msg["id"])
            if st is not None:
                r = st.on_end()
                if r:
                    await self.send(r)
        elif t == "window":
            rs = self.resp_streams.get(msg["id"])
            if rs is not None:
                rs.on_window(msg.get("credits", 0), msg.get("ack_offset"))
            if msg.get("complete"):
                self.log(event="complete", id=msg["id"],
                         ack=msg.get("ack_offset"))
        elif t == "error":
            self.log(event="error", id=msg.get("id"), message=msg.get("message"))
            sid = msg.get("id")
            self.resp_streams.pop(sid, None)
            st = self.req_streams.pop(sid, None)
            if st is not None:
                st.task.cancel()
            self.running.discard(sid)
            self.tombs.add(sid)
        elif t == "ws_connect":
            self.log(event="ws_connect", id=msg["id"], path=msg.get("path"),
                     headers=msg.get("headers"))
            self.channels[msg["id"]] = bytearray()
            await self.send({"type": "ws_connected", "id": msg["id"]}, ws)
        elif t == "ws_message":
            sid = msg["id"]
            if sid in self.channels:
                self.log(event="ws_message", id=sid,
                         binary=msg.get("binary", False),
                         len=len(msg.get("data", "")))
                data = msg.get("data", "")
                if not msg.get("binary") and data.startswith("close "):
                    self.channels.pop(sid, None)
                    await self.send({"type": "ws_close", "id": sid,
                                     "code": int(data[6:]),
                                     "reason": "closed by the target"}, ws)
                    return
                await self.send({"type": "ws_message", "id": sid,
                                 "data": msg.get("data", ""),
                                 "binary": msg.get("binary", False)}, ws)
        elif t == "ws_close":
            sid = msg["id"]
            self.log(event="ws_close", id=sid, code=msg.get("code"),
                     reason=msg.get("reason"))
            if self.channels.pop(sid, None) is not None:
                await self.send({"type": "ws_close", "id": sid,
                                 "code": msg.get("code", 1000),
                                 "reason": msg.get("reason", "")}, ws)
        else:
            self.log(event="unknown", type=t)

    async def on_binary(self, ws, raw):
        try:
            kind, sid, flags, off, data = env_decode(raw)
        except ValueError as e:
            self.log(event="protocol_error", why=str(e))
            return
        if kind == K_REQ:
            st = self.req_streams.get(sid)
            if st is None:
                if sid not in self.tombs:
                    self.log(event="protocol_error",
                             why="request data for unknown stream", id=sid)
                return
            r = st.on_data(off, data, flags)
            if r:
                await self.send(r, ws)
        elif kind == K_WS:
            buf = self.channels.get(sid)
            if buf is None:
                return
            buf += data
            if flags & F_END:
                msg = bytes(buf)
                buf.clear()
                self.log(event="ws_binary", id=sid, len=len(msg))
                o = 0
                while True:
                    n = min(CHUNK, len(msg) - o)
                    fl = F_END if o + n == len(msg) else 0
                    await self.send_bin(env_encode(K_WS, sid, msg[o:o + n], fl), ws)
                    o += n
                    if o >= len(msg):
                        break
        else:
            self.log(event="protocol_error", why="unexpected kind %d" % kind)

    async def pinger(self, ws):
        while True:
            await asyncio.sleep(self.a.ping_interval)
            await self.send({"type": "ping", "id": uuid.uuid4().hex,
                             "timestamp": int(time.time() * 1000)}, ws)

    async def run(self):
        headers = {}
        if self.a.token:
            headers["X-Auth"] = self.a.token
        failures = 0
        while True:
            try:
                ws = await websockets.connect(
                    self.a.url, extra_headers=headers, ping_interval=None,
                    max_size=16 << 20, open_timeout=5, compression=None)
            except websockets.exceptions.InvalidStatusCode as e:
                self.log(event="handshake_status", status=e.status_code)
                failures += 1
                if self.a.once:
                    return 3
                await asyncio.sleep(self.a.reconnect_delay)
                continue
            except (OSError, asyncio.TimeoutError) as e:
                self.log(event="connect_failed", why=str(e))
                failures += 1
                if self.a.once:
                    return 3
                await asyncio.sleep(self.a.reconnect_delay)
                continue
            self.ws = ws
            self.dropping = False
            if not self.a.no_hello:
                await self.send(self.hello(), ws)
            self.log(event="connected", session=self.session)
            for rs in list(self.resp_streams.values()):
                rs.wake.set()
            ptask = asyncio.ensure_future(self.pinger(ws))
            try:
                async for raw in ws:
                    if isinstance(raw, str):
                        await self.on_text(ws, raw)
                    else:
                        await self.on_binary(ws, raw)
            except websockets.exceptions.ConnectionClosed:
                pass
            ptask.cancel()
            self.ws = None
            for rs in list(self.resp_streams.values()):
                rs.on_disconnect()
            self.log(event="closed", code=ws.close_code, reason=ws.close_reason,
                     dropped=self.dropping)
            if self.a.once and not self.dropping:
                return 0
            await asyncio.sleep(self.a.drop_pause if self.dropping
                                else self.a.reconnect_delay)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "pattern":
        n = int(sys.argv[2])
        out = sys.stdout.buffer
        o = 0
        while o < n:
            k = min(1 << 20, n - o)
            out.write(pattern(o, k))
            o += k
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--token")
    ap.add_argument("--session")
    ap.add_argument("--no-session", action="store_true")
    ap.add_argument("--no-hello", action="store_true")
    ap.add_argument("--name", default="mock")
    ap.add_argument("--max-inflight", type=int, default=16)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--ping-interval", type=float, default=20)
    ap.add_argument("--reconnect-delay", type=float, default=0.2)
    ap.add_argument("--drop-pause", type=float, default=0.3)
    ap.add_argument("--once", action="store_true",
                    help="exit when the server closes the link")
    ap.add_argument("--log")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    global websockets
    import websockets
    import websockets.exceptions
    c = Client(a)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.add_signal_handler(signal.SIGUSR1,
                            lambda: asyncio.ensure_future(c.drop()))
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    try:
        return loop.run_until_complete(c.run()) or 0
    except RuntimeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
