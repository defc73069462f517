"""An HTTP/2 target for the HTTP/2 tests (aktunnel_h2.sh, grpc_upstream.sh,
h2c_upstream.sh).

Listens on 127.0.0.1:PORT with TLS (the development certificate) and ALPN
h2 and http/1.1, or with --plain in cleartext: HTTP/2 with prior knowledge
(RFC 9113 section 3.3) when a connection starts with the client preface,
HTTP/1.1 otherwise (an h2c sandbox port, or an auto one).  Writes one JSON
line per connection (in cleartext once it spoke: a port probe is not one),
per request and per stream the peer reset to --log, so a test can count
connections and see the protocol a request came over; an HTTP/2 request's
line has its stream id, the streams open on its connection with it
("open") and a monotonic time ("t").  --strict refuses a stream past
--max-streams with REFUSED_STREAM even before the client acknowledged the
setting, as nghttp2 and Go servers do; --settings-delay MS answers a
client's preface, and reads its frames, MS ms late, as a server a round
trip away would.  HTTP/2 uses
python3-h2 with flow control both ways; HTTP/1.1 is a minimal reader for
GET requests (enough to see --target-http2 off, an auto port's HTTP/1.1,
and /files/ for bench/aktunnel-h2.sh).

Paths:
  /echo            JSON: proto, conn, method, path, headers, body_len,
                   body_sha256
  /sink            the same (for uploads)
  /slow?ms=N       /echo after N ms
  /drip?ms=N       the head and "first\n" at once, "last\n" and the end
                   after N ms
  /files/NAME      the file NAME of --root
  /reset           RST_STREAM INTERNAL_ERROR instead of an answer
  /reset-late      the head and 1000 body bytes, then RST_STREAM
  /refuse-once     RST_STREAM REFUSED_STREAM the first time, then /echo
  /goaway          GOAWAY ENHANCE_YOUR_CALM (this stream the last), close
  /goaway-once     the first time: GOAWAY NO_ERROR with the stream before
                   this one the last (this one never processed), close;
                   then /echo
  /trailers        200, ?n= body bytes ("t" * n, 16 by default), then the
                   trailer fields x-trailer: done, grpc-status: 0
  /status/N        status N without a body (204 and 304 end on the head)
A HEAD request gets the head of its GET (content-length) and no body.
"""
import argparse
import asyncio
import hashlib
import json
import os
import ssl
import sys
import time
import urllib.parse

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

LOG = None
NCONN = 0
REFUSED = set()
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def log(obj):
    LOG.write(json.dumps(obj) + "\n")
    LOG.flush()


class Req:
    def __init__(self, headers):
        self.headers = headers
        self.sha = hashlib.sha256()
        self.len = 0
        self.open = 0  # streams open on the connection with it


class H2(asyncio.Protocol):
    def __init__(self, root, max_streams, plain=False, strict=False,
                 settings_delay=0.0):
        self.root = root
        self.max_streams = max_streams
        self.strict = strict
        self.settings_delay = settings_delay
        self.held = None  # the client's bytes while SETTINGS are delayed
        self.sniff = b"" if plain else None  # cleartext: the first bytes
        self.active = set()  # streams not yet answered in full
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False,
                                      header_encoding="utf-8"))
        self.reqs = {}
        self.waiters = {}
        self.h1 = None

    def connection_made(self, transport):
        global NCONN
        NCONN += 1
        self.id = NCONN
        self.transport = transport
        if self.sniff is not None:
            # Prior knowledge or HTTP/1.1: the first bytes tell, and only
            # then is it logged.
            return
        alpn = transport.get_extra_info("ssl_object").selected_alpn_protocol()
        log({"event": "conn", "conn": self.id, "alpn": alpn})
        if alpn != "h2":
            self.h1 = b""
            return
        self.start_h2()

    def start_h2(self):
        self.conn.initiate_connection()
        if self.max_streams:
            self.conn.update_settings({
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS:
                    self.max_streams})
        self.transport.write(self.conn.data_to_send())

    def connection_lost(self, exc):
        if self.sniff is not None:
            return  # never logged: nothing came
        log({"event": "closed", "conn": self.id})
        for w in self.waiters.values():
            if not w.done():
                w.cancel()

    def release(self):
        data, self.held = self.held, None
        if self.transport.is_closing():
            return
        self.start_h2()
        self.data_received(data)

    def data_received(self, data):
        if self.held is not None:
            self.held += data
            return
        if self.sniff is not None:
            self.sniff += data
            n = min(len(self.sniff), len(PREFACE))
            if self.sniff[:n] == PREFACE[:n] and n < len(PREFACE):
                return
            data, self.sniff = self.sniff, None
            h2c = data.startswith(PREFACE)
            log({"event": "conn", "conn": self.id, "alpn": None,
                 "proto": "h2c" if h2c else "http/1.1"})
            if h2c and self.settings_delay:
                # As a server one round trip away: its SETTINGS, and its
                # reading of the client's frames, come that much later.
                self.held = data
                asyncio.get_event_loop().call_later(
                    self.settings_delay, self.release)
                return
            if h2c:
                self.start_h2()
            else:
                self.h1 = b""
        if self.h1 is not None:
            return self.h1_data(data)
        try:
            events = self.conn.receive_data(data)
        except Exception as e:
            log({"event": "error", "conn": self.id, "error": str(e)})
            self.transport.close()
            return
        for ev in events:
            if isinstance(ev, h2.events.RequestReceived):
                if (self.strict and self.max_streams and
                        len(self.active) >= self.max_streams):
                    # As nghttp2 and Go servers do before the client
                    # acknowledged the limit: refused, never processed.
                    log({"event": "refused", "conn": self.id,
                         "stream": ev.stream_id})
                    self.conn.reset_stream(
                        ev.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
                    continue
                self.active.add(ev.stream_id)
                self.reqs[ev.stream_id] = Req(ev.headers)
                self.reqs[ev.stream_id].open = len(self.active)
            elif isinstance(ev, h2.events.DataReceived):
                r = self.reqs.get(ev.stream_id)
                if r is not None:
                    r.sha.update(ev.data)
                    r.len += len(ev.data)
                self.conn.acknowledge_received_data(
                    ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                r = self.reqs.get(ev.stream_id)
                if r is not None:
                    asyncio.ensure_future(self.answer(ev.stream_id, r))
            elif isinstance(ev, h2.events.StreamReset):
                log({"event": "reset", "conn": self.id,
                     "stream": ev.stream_id, "error": int(ev.error_code),
                     "remote": ev.remote_reset})
                self.active.discard(ev.stream_id)
                w = self.waiters.pop(ev.stream_id, None)
                if w is not None and not w.done():
                    w.cancel()
            elif isinstance(ev, h2.events.WindowUpdated):
                self.wake(ev.stream_id)
            elif isinstance(ev, h2.events.RemoteSettingsChanged):
                self.wake(0)
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.transport.close()
        self.transport.write(self.conn.data_to_send())

    def wake(self, sid):
        if sid == 0:
            ws = list(self.waiters.items())
            self.waiters.clear()
        else:
            w = self.waiters.pop(sid, None)
            ws = [(sid, w)] if w is not None else []
        for _, w in ws:
            if not w.done():
                w.set_result(None)

    async def send_body(self, sid, data, trailers=None):
        """Send data on sid within the flow-control windows, then the
        trailer fields if any."""
        off = 0
        while off < len(data):
            room = min(self.conn.local_flow_control_window(sid),
                       self.conn.max_outbound_frame_size)
            if room <= 0:
                w = asyncio.get_event_loop().create_future()
                self.waiters[sid] = w
                await w
                continue
            n = min(room, len(data) - off)
            self.conn.send_data(sid, data[off:off + n])
            off += n
            self.transport.write(self.conn.data_to_send())
            if self.transport.get_write_buffer_size() > 1 << 20:
                await asyncio.sleep(0.001)
        if trailers:
            self.conn.send_headers(sid, trailers, end_stream=True)
        else:
            self.conn.end_stream(sid)
        self.transport.write(self.conn.data_to_send())

    async def answer(self, sid, r):
        h = dict(r.headers)
        path = h.get(":path", "")
        u = urllib.parse.urlsplit(path)
        q = urllib.parse.parse_qs(u.query)
        log({"event": "request", "conn": self.id, "proto": "h2",
             "method": h.get(":method"), "path": path,
             "authority": h.get(":authority"),
             "headers": [[k, v] for k, v in r.headers],
             "body_len": r.len, "body_sha256": r.sha.hexdigest(),
             "stream": sid, "open": r.open,
             "t": round(time.monotonic(), 3)})
        try:
            if u.path == "/reset":
                self.conn.reset_stream(sid, h2.errors.ErrorCodes.INTERNAL_ERROR)
                self.transport.write(self.conn.data_to_send())
                return
            if u.path == "/refuse-once" and path not in REFUSED:
                REFUSED.add(path)
                self.conn.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
                self.transport.write(self.conn.data_to_send())
                return
            if u.path == "/goaway-once" and path not in REFUSED:
                REFUSED.add(path)
                self.conn.close_connection(
                    error_code=h2.errors.ErrorCodes.NO_ERROR,
                    last_stream_id=max(sid - 2, 0))
                self.transport.write(self.conn.data_to_send())
                self.transport.close()
                return
            if u.path == "/goaway":
                self.conn.close_connection(
                    error_code=h2.errors.ErrorCodes.ENHANCE_YOUR_CALM,
                    last_stream_id=sid)
                self.transport.write(self.conn.data_to_send())
                self.transport.close()
                return
            if u.path == "/reset-late":
                self.conn.send_headers(sid, [(":status", "200"),
                                             ("content-length", "100000")])
                self.conn.send_data(sid, b"x" * 1000)
                self.transport.write(self.conn.data_to_send())
                await asyncio.sleep(0.2)
                self.conn.reset_stream(sid, h2.errors.ErrorCodes.INTERNAL_ERROR)
                self.transport.write(self.conn.data_to_send())
                return
            if u.path == "/drip":
                self.conn.send_headers(sid, [(":status", "200"),
                                             ("content-type", "text/plain")])
                self.conn.send_data(sid, b"first\n")
                self.transport.write(self.conn.data_to_send())
                await asyncio.sleep(int(q.get("ms", ["1000"])[0]) / 1000)
                self.conn.send_data(sid, b"last\n", end_stream=True)
                self.transport.write(self.conn.data_to_send())
                return
            if u.path == "/slow":
                await asyncio.sleep(int(q.get("ms", ["100"])[0]) / 1000)
            if u.path.startswith("/status/"):
                code = u.path[len("/status/"):]
                fields = [(":status", code)]
                if code not in ("204", "304"):
                    fields.append(("content-length", "0"))
                self.conn.send_headers(sid, fields, end_stream=True)
                self.transport.write(self.conn.data_to_send())
                return
            trailers = None
            if u.path == "/trailers":
                body = b"t" * int(q.get("n", ["16"])[0])
                ctype = "text/plain"
                trailers = [("x-trailer", "done"), ("grpc-status", "0")]
            elif u.path.startswith("/files/"):
                name = os.path.basename(u.path)
                with open(os.path.join(self.root, name), "rb") as f:
                    body = f.read()
                ctype = "application/octet-stream"
            else:
                body = json.dumps({
                    "proto": "h2", "conn": self.id,
                    "method": h.get(":method"), "path": path,
                    "authority": h.get(":authority"),
                    "headers": [[k, v] for k, v in r.headers],
                    "body_len": r.len, "body_sha256": r.sha.hexdigest(),
                }).encode()
                ctype = "application/json"
            fields = [(":status", "200"), ("content-type", ctype),
                      ("x-target", "h2")]
            if trailers is None:
                fields.append(("content-length", str(len(body))))
            if h.get(":method") == "HEAD":
                self.conn.send_headers(sid, fields, end_stream=True)
                self.transport.write(self.conn.data_to_send())
                return
            self.conn.send_headers(sid, fields)
            self.transport.write(self.conn.data_to_send())
            await self.send_body(sid, body, trailers)
        except (asyncio.CancelledError, h2.exceptions.ProtocolError):
            # The stream was reset meanwhile (python3-h2 may have forgotten
            # it), or the connection closed.
            pass
        finally:
            self.active.discard(sid)

    def h1_data(self, data):
        self.h1 += data
        while b"\r\n\r\n" in self.h1:
            head, self.h1 = self.h1.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            method, path, version = lines[0].split(" ")
            headers = [l.split(": ", 1) for l in lines[1:]]
            log({"event": "request", "conn": self.id, "proto": version,
                 "method": method, "path": path, "headers": headers})
            if path.startswith("/files/"):
                with open(os.path.join(self.root,
                                       os.path.basename(path)), "rb") as f:
                    body = f.read()
                ctype = b"application/octet-stream"
            else:
                body = json.dumps({"proto": version, "conn": self.id,
                                   "method": method, "path": path}).encode()
                ctype = b"application/json"
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: " + ctype + b"\r\n"
                b"Content-Length: " + str(len(body)).encode() +
                b"\r\n\r\n" + body)


def main():
    global LOG
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--plain", action="store_true",
                   help="cleartext: HTTP/2 with prior knowledge, or HTTP/1.1")
    p.add_argument("--log", required=True)
    p.add_argument("--root", default=".")
    p.add_argument("--max-streams", type=int, default=0)
    p.add_argument("--strict", action="store_true",
                   help="refuse (REFUSED_STREAM) a stream past --max-streams "
                   "even before the client acknowledged the setting")
    p.add_argument("--settings-delay", type=int, default=0, metavar="MS",
                   help="--plain: answer a client's preface (SETTINGS) and "
                   "read its frames only MS ms after it came")
    a = p.parse_args()
    LOG = open(a.log, "a")
    ctx = None
    if not a.plain:
        if a.cert is None or a.key is None:
            p.error("--cert and --key are needed without --plain")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.cert, a.key)
        ctx.set_alpn_protocols(["h2", "http/1.1"])
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    srv = loop.run_until_complete(loop.create_server(
        lambda: H2(a.root, a.max_streams, a.plain, a.strict,
                   a.settings_delay / 1000), "127.0.0.1", a.port,
        ssl=ctx))
    print("listening", a.port, flush=True)
    loop.run_forever()


if __name__ == "__main__":
    main()
