"""WebSockets over HTTP/2 (RFC 8441) for h2_websocket.sh: a backend and
an HTTP/2 client (python3-h2) that frames and masks WebSocket frames
itself.

  h2_ws.py server PORT --log FILE
      a WebSocket backend (python3-websockets) on 127.0.0.1:PORT that
      offers the subprotocol "chat" and permessage-deflate.  Each
      connection is a JSON line {"open": path, "headers": [...]} when it
      opens and {"closed": path, "code": N} when it ends.  Paths:
        /flood?n=N  sends N bytes in 64 KiB binary messages (their count
                    so far in FILE.sent, the sha256 of them all in a
                    {"flood_sha256": ...} line at the end)
        /close      echoes one message, then closes (1000)
        /drop       echoes one message, then drops the connection
                    without a close frame
        /deny       answers 403 "denied by the app" (no WebSocket)
        /noread     reads nothing for 10 s
        anything    echoes each message

  h2_ws.py CASE --port PORT --authority A [--tls --ca FILE] [options]
      one HTTP/2 connection (prior knowledge, or TLS with ALPN h2) to the
      gateway; exits 0 and prints "ok ..." when the case holds, else
      prints why and exits 1.  Every wait is bounded (30 s).  Cases:
        settings   the server's SETTINGS has ENABLE_CONNECT_PROTOCOL=1
        echo       messages of many sizes (text, binary, fragmented, a
                   ping) echo byte for byte, then the closing handshake
        deflate    permessage-deflate and the subprotocol pass through
        bulk       --mib MiB in 1 MiB messages, sha256 both ways
        slow       /flood: the client takes nothing for a while, then a
                   little at a time, while the gateway's RSS (--pid) and
                   what the backend could send (--sent FILE) stay bounded
        push       /noread: the client sends for --stall seconds to a
                   backend that reads nothing, and can send only what the
                   buffers on the way hold, the gateway's RSS bounded
        multi      two WebSockets and --get requests on one connection
        refused    --expect STATUS [--code C] [--body TEXT], with
                   --protocol P, or --plain-connect (no :protocol)
        rst        a message, then RST_STREAM; the connection goes on
        upclose    /close and /drop: the stream ends after the upstream
        halfclose  the client's END_STREAM: the backend sees the end,
                   the stream then ends
        idle       quiet for --quiet seconds, still open; then quiet
                   until the gateway's idle timeout resets it
        drain      for drain_sigterm.sh: once open, --ready FILE is
                   made; the gateway's GOAWAY comes (SIGTERM) and the
                   WebSocket still echoes; then its close frame 1001
                   comes (the drain's deadline) and the stream ends.
                   With --mid N the backend is in the middle of a frame
                   at the deadline: no echo then, but that whole frame
                   (N bytes), then the close
    echo takes --header "name: value" (more fields), --early (a message
    sent right after the HEADERS, before the 200) and --hold FILE (once
    open, the WebSocket waits until FILE is removed before its echoes).
"""
import argparse
import asyncio
import hashlib
import http
import json
import os
import socket
import ssl
import sys
import time
import urllib.parse
import zlib

WAIT = 30.0


# --- the backend -------------------------------------------------------------

def serve(port, logpath):
    import websockets

    log = open(logpath, "a", buffering=1)

    def record(obj):
        log.write(json.dumps(obj) + "\n")

    async def handler(ws, path=None):
        path = path if path is not None else ws.path
        record({"open": path,
                "headers": [list(h) for h in ws.request_headers.raw_items()],
                "subprotocol": ws.subprotocol})
        u = urllib.parse.urlsplit(path)
        try:
            if u.path == "/flood":
                n = int(urllib.parse.parse_qs(u.query)["n"][0])
                h = hashlib.sha256()
                sent, i = 0, 0
                while sent < n:
                    k = min(65536, n - sent)
                    msg = bytes([(i + j) & 0xff for j in range(256)]) * \
                        (k // 256) + bytes(k % 256)
                    i += 1
                    h.update(msg)
                    await ws.send(msg)
                    sent += k
                    with open(logpath + ".tmp", "w") as f:
                        f.write("%d\n" % sent)
                    os.replace(logpath + ".tmp", logpath + ".sent")
                record({"flood_sha256": h.hexdigest(), "flood_bytes": sent})
                await ws.wait_closed()
            elif u.path == "/noread":
                # Take nothing for a while: the client must wait.
                ws.transport.pause_reading()
                await asyncio.sleep(10)
                ws.transport.resume_reading()
                await ws.wait_closed()
            elif u.path in ("/close", "/drop"):
                await ws.send(await ws.recv())
                if u.path == "/close":
                    await ws.close(1000, "bye")
                else:
                    ws.transport.close()
                    await ws.wait_closed()
            else:
                async for msg in ws:
                    await ws.send(msg)
        except websockets.ConnectionClosed:
            pass
        record({"closed": path, "code": ws.close_code})

    async def page(path, headers):
        if path.startswith("/deny"):
            record({"denied": path})
            return (http.HTTPStatus.FORBIDDEN,
                    [("Content-Type", "text/plain")],
                    b"denied by the app\n")
        return None

    async def main():
        async with websockets.serve(handler, "127.0.0.1", port,
                                    subprotocols=["chat"], max_size=None,
                                    ping_interval=None,
                                    process_request=page):
            print("ready", flush=True)
            await asyncio.Future()

    asyncio.run(main())


# --- WebSocket frames ---------------------------------------------------------

def mask(data, key):
    """data XOR the 4-byte key, repeated (RFC 6455 section 5.3)."""
    n = len(data)
    if n == 0:
        return b""
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^
            int.from_bytes(k, "big")).to_bytes(n, "big")


def frame(opcode, payload, fin=True, rsv1=False):
    """A client's frame: masked, as RFC 6455 says a client's must be."""
    b0 = (0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode
    n = len(payload)
    if n < 126:
        hd = bytes([b0, 0x80 | n])
    elif n < 65536:
        hd = bytes([b0, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        hd = bytes([b0, 0x80 | 127]) + n.to_bytes(8, "big")
    key = os.urandom(4)
    return hd + key + mask(payload, key)


class Frames:
    """The server's frames out of a byte stream, messages reassembled."""

    def __init__(self):
        self.buf = bytearray()
        self.parts = []
        self.first = None
        self.msgs = []  # (opcode, payload, rsv1)

    def feed(self, data):
        self.buf += data
        while True:
            b = self.buf
            if len(b) < 2:
                return
            n = b[1] & 0x7f
            off = 2
            if n == 126:
                if len(b) < 4:
                    return
                n, off = int.from_bytes(b[2:4], "big"), 4
            elif n == 127:
                if len(b) < 10:
                    return
                n, off = int.from_bytes(b[2:10], "big"), 10
            if b[1] & 0x80:
                raise ValueError("the server masked a frame")
            if len(b) < off + n:
                return
            fin, op, rsv1 = b[0] & 0x80, b[0] & 0x0f, bool(b[0] & 0x40)
            payload = bytes(b[off:off + n])
            del self.buf[:off + n]
            if op >= 8:
                self.msgs.append((op, payload, False))
                continue
            if op != 0:
                self.first = (op, rsv1)
            self.parts.append(payload)
            if fin:
                self.msgs.append((self.first[0], b"".join(self.parts),
                                  self.first[1]))
                self.parts = []


# --- the HTTP/2 client --------------------------------------------------------

class Client:
    def __init__(self, a, window=1 << 20, validate=True):
        import h2.config
        import h2.connection
        import h2.settings

        s = socket.create_connection(("127.0.0.1", a.port), timeout=WAIT)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if a.tls:
            ctx = ssl.create_default_context(cafile=a.ca)
            ctx.set_alpn_protocols(["h2"])
            s = ctx.wrap_socket(s, server_hostname=a.authority.split(":")[0])
            if s.selected_alpn_protocol() != "h2":
                sys.exit("ALPN chose %r, not h2" % s.selected_alpn_protocol())
        self.s = s
        self.a = a
        self.scheme = "https" if a.tls else "http"
        self.c = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8",
            validate_outbound_headers=validate))
        self.c.local_settings = h2.settings.Settings(
            client=True, initial_values={
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.c.initiate_connection()
        self.c.increment_flow_control_window(16 << 20)
        self.st = {}
        self.settings = None
        self.goaway = None
        self.closed = False
        self.hold = set()  # streams whose data is not acknowledged
        self.flush()

    def flush(self):
        d = self.c.data_to_send()
        if d:
            self.s.sendall(d)

    def stream(self, sid):
        return self.st.setdefault(sid, {
            "headers": None, "data": bytearray(), "ended": False,
            "reset": None, "frames": Frames(), "unacked": 0, "taken": 0})

    def pump(self, timeout=0.5):
        """Read once (up to timeout) and handle what came."""
        import h2.events as E

        self.s.settimeout(timeout)
        try:
            d = self.s.recv(1 << 20)
        except (socket.timeout, ssl.SSLWantReadError):
            return
        except (ConnectionResetError, ssl.SSLError):
            d = b""
        if not d:
            self.closed = True
            return
        for ev in self.c.receive_data(d):
            if isinstance(ev, E.RemoteSettingsChanged) and \
                    self.settings is None:
                self.settings = {int(k): v.new_value
                                 for k, v in ev.changed_settings.items()}
            elif isinstance(ev, E.ResponseReceived):
                self.stream(ev.stream_id)["headers"] = dict(ev.headers)
            elif isinstance(ev, E.DataReceived):
                st = self.stream(ev.stream_id)
                st["data"] += ev.data
                if ev.stream_id in self.hold:
                    st["unacked"] += ev.flow_controlled_length
                else:
                    self.c.acknowledge_received_data(
                        ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, E.StreamEnded):
                self.stream(ev.stream_id)["ended"] = True
            elif isinstance(ev, E.StreamReset):
                self.stream(ev.stream_id)["reset"] = ev.error_code
            elif isinstance(ev, E.ConnectionTerminated):
                self.goaway = ev.error_code
        self.flush()

    def wait(self, what, pred, timeout=WAIT):
        end = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > end:
                sys.exit("timed out waiting for " + what)
            if self.closed:
                sys.exit("the connection closed waiting for " + what)
            self.pump()

    def take(self, sid, n):
        """Give the window back for n bytes of a held stream."""
        st = self.stream(sid)
        n = min(n, st["unacked"])
        if n > 0:
            st["unacked"] -= n
            self.c.acknowledge_received_data(n, sid)
            self.flush()

    def send(self, sid, data, end=False):
        """Send data on sid as the windows allow, reading meanwhile."""
        data = memoryview(data)
        while len(data) > 0:
            w = min(self.c.local_flow_control_window(sid),
                    self.c.max_outbound_frame_size, len(data))
            if w <= 0:
                self.pump(0.05)
                if self.st.get(sid, {}).get("reset") is not None:
                    sys.exit("stream %d reset while sending" % sid)
                continue
            self.c.send_data(sid, data[:w].tobytes())
            data = data[w:]
            self.flush()
        if end:
            self.c.end_stream(sid)
            self.flush()

    def connect(self, path, authority=None, protocol="websocket",
                extra=(), plain=False):
        """An extended CONNECT (or a plain one); the stream id."""
        sid = self.c.get_next_available_stream_id()
        if plain:
            hdrs = [(":method", "CONNECT"),
                    (":authority", authority or self.a.authority)]
        else:
            hdrs = [(":method", "CONNECT"), (":protocol", protocol),
                    (":scheme", self.scheme), (":path", path),
                    (":authority", authority or self.a.authority),
                    ("sec-websocket-version", "13")]
        self.c.send_headers(sid, hdrs + list(extra))
        self.flush()
        self.stream(sid)
        return sid

    def get(self, path, authority=None):
        sid = self.c.get_next_available_stream_id()
        self.c.send_headers(sid, [
            (":method", "GET"), (":scheme", self.scheme), (":path", path),
            (":authority", authority or self.a.authority)], end_stream=True)
        self.flush()
        self.stream(sid)
        return sid

    def status(self, sid):
        self.wait("the answer of stream %d" % sid,
                  lambda: self.st[sid]["headers"] is not None or
                  self.st[sid]["reset"] is not None)
        if self.st[sid]["headers"] is None:
            sys.exit("stream %d reset (%s) before an answer" %
                     (sid, self.st[sid]["reset"]))
        return int(self.st[sid]["headers"][":status"])

    def open_ws(self, path, authority=None, extra=()):
        sid = self.connect(path, authority, extra=extra)
        st = self.status(sid)
        if st != 200:
            sys.exit("CONNECT %s: status %d: %s" %
                     (path, st, bytes(self.st[sid]["data"])[:300]))
        if self.st[sid]["ended"]:
            sys.exit("the WebSocket's stream ended with its 200")
        return sid

    def message(self, sid, timeout=WAIT):
        """The next whole message from the server on sid."""
        st = self.stream(sid)
        fr = st["frames"]

        def have():
            if st["data"]:
                fr.feed(bytes(st["data"]))
                st["taken"] += len(st["data"])
                st["data"].clear()
            return bool(fr.msgs) or st["ended"] or st["reset"] is not None

        self.wait("a message on stream %d" % sid, have, timeout)
        if not fr.msgs:
            sys.exit("stream %d ended (reset %s) waiting for a message" %
                     (sid, st["reset"]))
        return fr.msgs.pop(0)

    def close_ws(self, sid):
        """The closing handshake, then the stream's end both ways."""
        self.send(sid, frame(8, (1000).to_bytes(2, "big") + b"done"))
        op, payload, _ = self.message(sid)
        if op != 8 or payload[:2] != (1000).to_bytes(2, "big"):
            sys.exit("expected the server's close 1000, got %d %r" %
                     (op, payload[:20]))
        # The server closes its connection after the handshake (RFC 6455
        # section 7.1.1): the gateway ends the stream.
        self.wait("the end of stream %d" % sid,
                  lambda: self.st[sid]["ended"] or
                  self.st[sid]["reset"] is not None)
        if not self.st[sid]["ended"]:
            sys.exit("stream %d was reset (%s), not ended" %
                     (sid, self.st[sid]["reset"]))


def echo_check(cl, sid, msgs):
    for op, payload in msgs:
        cl.send(sid, frame(op, payload))
        got = cl.message(sid)
        if got[0] != op or got[1] != payload:
            sys.exit("echo mismatch: sent %d bytes (op %d), got %d (op %d)" %
                     (len(payload), op, len(got[1]), got[0]))


# --- the cases ----------------------------------------------------------------

def case_settings(a):
    cl = Client(a)
    cl.wait("the server's SETTINGS", lambda: cl.settings is not None)
    v = cl.settings.get(8)  # SETTINGS_ENABLE_CONNECT_PROTOCOL
    if v != 1:
        sys.exit("ENABLE_CONNECT_PROTOCOL is %r in %r" % (v, cl.settings))
    print("ok settings", json.dumps(cl.settings, sort_keys=True))


def extra_fields(a):
    return [tuple(x.strip() for x in f.split(":", 1)) for f in a.header]


def case_echo(a):
    cl = Client(a)
    extra = [("origin", "%s://%s" % (cl.scheme, a.authority))] + \
        extra_fields(a)
    if a.early:
        # A message right behind the HEADERS, before the 200.
        sid = cl.connect(a.path, extra=extra)
        cl.send(sid, frame(1, b"early bird"))
        if cl.status(sid) != 200:
            sys.exit("CONNECT %s: status %d" % (a.path, cl.status(sid)))
        op, p, _ = cl.message(sid)
        if (op, p) != (1, b"early bird"):
            sys.exit("the early message came back as %d %r" % (op, p))
    else:
        sid = cl.open_ws(a.path, extra=extra)
    h = cl.st[sid]["headers"]
    if a.hold:
        # Open until the test removes the file (it reads the metrics).
        with open(a.hold, "w") as f:
            f.write("open\n")
        end = time.monotonic() + WAIT
        while os.path.exists(a.hold):
            if time.monotonic() > end:
                sys.exit("the test did not remove " + a.hold)
            cl.pump(0.05)
    for name in ("sec-websocket-accept", "upgrade", "connection"):
        if name in h:
            sys.exit("the 200 carries %s" % name)
    msgs = [(1, b"hello"), (1, "h\u00e9llo \u2603".encode()), (2, b""),
            (2, os.urandom(125)), (2, os.urandom(126)),
            (2, os.urandom(65535)), (2, os.urandom(65536)),
            (2, os.urandom(300000))]
    echo_check(cl, sid, msgs)
    # A fragmented message, and a ping between its fragments.
    cl.send(sid, frame(1, b"frag", fin=False) + frame(9, b"pi") +
            frame(0, b"ment", fin=True))
    op, p, _ = cl.message(sid)
    if (op, p) != (10, b"pi"):
        sys.exit("expected the pong, got %d %r" % (op, p))
    op, p, _ = cl.message(sid)
    if (op, p) != (1, b"fragment"):
        sys.exit("expected the fragmented message, got %d %r" % (op, p))
    cl.close_ws(sid)
    n = sum(len(m[1]) for m in msgs)
    print("ok echo %d messages, %d bytes, request id %s" %
          (len(msgs) + 1, n, h.get("x-request-id")))


def case_deflate(a):
    cl = Client(a)
    sid = cl.open_ws(a.path, extra=[
        ("sec-websocket-protocol", "superchat, chat"),
        ("sec-websocket-extensions",
         "permessage-deflate; client_max_window_bits")])
    h = cl.st[sid]["headers"]
    if h.get("sec-websocket-protocol") != "chat":
        sys.exit("subprotocol: %r" % h.get("sec-websocket-protocol"))
    if "permessage-deflate" not in h.get("sec-websocket-extensions", ""):
        sys.exit("extensions: %r" % h.get("sec-websocket-extensions"))
    # The client's window is what the server's answer allows.
    bits = 15
    for param in h["sec-websocket-extensions"].split(";"):
        k, _, v = param.strip().partition("=")
        if k == "client_max_window_bits" and v:
            bits = int(v)
    co = zlib.compressobj(wbits=-bits)
    do = zlib.decompressobj(wbits=-15)
    for i in range(3):
        text = ("compress me %d " % i).encode() * 2000
        z = co.compress(text) + co.flush(zlib.Z_SYNC_FLUSH)
        cl.send(sid, frame(1, z[:-4], rsv1=True))
        op, p, rsv1 = cl.message(sid)
        got = do.decompress(p + b"\x00\x00\xff\xff") if rsv1 else p
        if op != 1 or got != text:
            sys.exit("deflated echo %d mismatch (rsv1 %s)" % (i, rsv1))
    cl.close_ws(sid)
    print("ok deflate: subprotocol chat, %s" % h["sec-websocket-extensions"])


def case_bulk(a):
    cl = Client(a, window=4 << 20)
    sid = cl.open_ws(a.path)
    total = a.mib << 20
    hs, hr = hashlib.sha256(), hashlib.sha256()
    got = 0
    block = os.urandom(1 << 20)
    t0 = time.monotonic()
    for i in range(a.mib):
        msg = block[i:] + block[:i]
        hs.update(msg)
        cl.send(sid, frame(2, msg))
        # Read the echoes as they come, a few messages behind at most.
        while got < (i - 2) << 20:
            op, p, _ = cl.message(sid)
            hr.update(p)
            got += len(p)
    while got < total:
        op, p, _ = cl.message(sid)
        hr.update(p)
        got += len(p)
    dt = time.monotonic() - t0
    if hs.hexdigest() != hr.hexdigest():
        sys.exit("sha256 differs: sent %s, got %s" %
                 (hs.hexdigest(), hr.hexdigest()))
    cl.close_ws(sid)
    print("ok bulk %d MiB each way in %.1fs, sha256 %s" %
          (a.mib, dt, hs.hexdigest()))


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def sent_bytes(path):
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def case_slow(a):
    cl = Client(a, window=65535)
    total = a.mib << 20
    base = rss_kib(a.pid)
    peak = base
    sid = cl.connect("/flood?n=%d" % total)
    cl.hold.add(sid)
    if cl.status(sid) != 200:
        sys.exit("flood: status %d" % cl.status(sid))
    st = cl.stream(sid)
    fr = st["frames"]

    def drain():
        if st["data"]:
            fr.feed(bytes(st["data"]))
            st["taken"] += len(st["data"])
            st["data"].clear()

    # Take nothing: what the backend can send is what the buffers on the
    # way hold (the gateway's included), never the whole flood.
    end = time.monotonic() + a.stall
    while time.monotonic() < end:
        cl.pump(0.1)
        peak = max(peak, rss_kib(a.pid))
    stalled = sent_bytes(a.sent)
    held = st["taken"] + len(st["data"])
    # A slow reader: 64 KiB every 50 ms.
    end = time.monotonic() + a.stall
    while time.monotonic() < end:
        cl.take(sid, 65536)
        tick = time.monotonic() + 0.05
        while time.monotonic() < tick:
            cl.pump(max(0.001, tick - time.monotonic()))
        peak = max(peak, rss_kib(a.pid))
    slow_sent = sent_bytes(a.sent)
    # Then everything.
    cl.hold.discard(sid)
    cl.take(sid, st["unacked"])
    h = hashlib.sha256()
    got = 0
    deadline = time.monotonic() + 120
    while got < total:
        if time.monotonic() > deadline:
            sys.exit("flood: %d of %d bytes" % (got, total))
        drain()
        while fr.msgs:
            op, p, _ = fr.msgs.pop(0)
            h.update(p)
            got += len(p)
        if got < total:
            cl.pump(0.2)
            peak = max(peak, rss_kib(a.pid))
    grew = (peak - base) // 1024
    if stalled > a.max_sent << 20:
        sys.exit("the backend sent %d bytes to a client that read none "
                 "(%d MiB allowed)" % (stalled, a.max_sent))
    if grew > a.max_rss:
        sys.exit("the gateway's RSS grew by %d MiB (%d allowed)" %
                 (grew, a.max_rss))
    print("ok slow: %d MiB, stalled client held %d KiB, backend sent "
          "%.1f MiB while stalled and %.1f MiB while slow; gateway RSS "
          "%d MiB, +%d MiB at most; sha256 %s" %
          (a.mib, held // 1024, stalled / 1048576.0, slow_sent / 1048576.0,
           base // 1024, grew, h.hexdigest()))


def case_idle(a):
    cl = Client(a)
    sid = cl.open_ws(a.path)
    echo_check(cl, sid, [(1, b"before")])
    # Quiet for longer than timeouts.idle: a WebSocket has its own.
    end = time.monotonic() + a.quiet
    while time.monotonic() < end:
        cl.pump(0.1)
        if cl.st[sid]["reset"] is not None or cl.st[sid]["ended"]:
            sys.exit("the stream ended after %.1fs of quiet" %
                     (a.quiet - (end - time.monotonic())))
    echo_check(cl, sid, [(1, b"after a quiet while")])
    t0 = time.monotonic()
    cl.wait("the idle timeout", lambda: cl.st[sid]["reset"] is not None or
            cl.st[sid]["ended"])
    print("ok idle: quiet %.1fs went on; then reset (code %s) after %.1fs" %
          (a.quiet, cl.st[sid]["reset"], time.monotonic() - t0))


def case_push(a):
    import h2.errors

    cl = Client(a)
    base = rss_kib(a.pid)
    peak = base
    sid = cl.open_ws("/noread")
    msg = frame(2, os.urandom(1 << 20))
    pending = b""
    sent = 0
    end = time.monotonic() + a.stall
    while time.monotonic() < end:
        w = min(cl.c.local_flow_control_window(sid),
                cl.c.max_outbound_frame_size)
        if w > 0:
            if not pending:
                pending = msg
            cl.c.send_data(sid, pending[:w])
            cl.flush()
            sent += min(w, len(pending))
            pending = pending[w:]
        else:
            cl.pump(0.05)
        peak = max(peak, rss_kib(a.pid))
    cl.c.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
    cl.flush()
    grew = (peak - base) // 1024
    if sent > a.max_sent << 20:
        sys.exit("the client sent %d bytes to a backend that read none "
                 "(%d MiB allowed)" % (sent, a.max_sent))
    if grew > a.max_rss:
        sys.exit("the gateway's RSS grew by %d MiB (%d allowed)" %
                 (grew, a.max_rss))
    print("ok push: the client could send %.1f MiB in %.0fs to a backend "
          "that reads nothing; gateway RSS %d MiB, +%d MiB at most" %
          (sent / 1048576.0, a.stall, base // 1024, grew))


def case_multi(a):
    cl = Client(a)
    w1 = cl.connect(a.path + "?one")
    w2 = cl.connect(a.path + "?two")
    g1 = cl.get(a.get, a.get_authority)
    if cl.status(w1) != 200 or cl.status(w2) != 200:
        sys.exit("the WebSockets were not opened")
    echo_check(cl, w1, [(1, b"first")])
    g2 = cl.get(a.get, a.get_authority)
    echo_check(cl, w2, [(1, b"second")])
    cl.send(w1, frame(2, b"1" * 100000))
    cl.send(w2, frame(2, b"2" * 100000))
    for sid, ch in ((w2, b"2"), (w1, b"1")):
        op, p, _ = cl.message(sid)
        if p != ch * 100000:
            sys.exit("stream %d got another stream's bytes" % sid)
    for g in (g1, g2):
        if cl.status(g) != 200:
            sys.exit("GET on stream %d: %d" % (g, cl.status(g)))
        cl.wait("GET %d" % g, lambda: cl.st[g]["ended"])
        if b'"method": "GET"' not in bytes(cl.st[g]["data"]):
            sys.exit("GET %d body: %r" % (g, bytes(cl.st[g]["data"])[:200]))
    cl.close_ws(w1)
    echo_check(cl, w2, [(1, b"still here")])
    cl.close_ws(w2)
    print("ok multi: WebSockets on streams %d and %d, GETs on %d and %d" %
          (w1, w2, g1, g2))


def case_refused(a):
    # python3-h2 would not send a CONNECT without :path.
    cl = Client(a, validate=not a.plain_connect)
    sid = cl.connect(a.path, protocol=a.protocol, plain=a.plain_connect)
    st = cl.status(sid)
    cl.wait("the end of stream %d" % sid,
            lambda: cl.st[sid]["ended"] or cl.st[sid]["reset"] is not None)
    body = bytes(cl.st[sid]["data"]).decode("utf-8", "replace")
    if st != a.expect:
        sys.exit("status %d, expected %d: %s" % (st, a.expect, body))
    if a.code and '"code":"%s"' % a.code not in body:
        sys.exit("code %s not in %s" % (a.code, body))
    if a.body and a.body not in body:
        sys.exit("%r not in %s" % (a.body, body))
    print("ok refused %d %s" % (st, body.strip()))


def case_rst(a):
    import h2.errors

    cl = Client(a)
    sid = cl.open_ws(a.path)
    echo_check(cl, sid, [(1, b"before the reset")])
    cl.c.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
    cl.flush()
    # The connection goes on.
    g = cl.get(a.get, a.get_authority)
    if cl.status(g) != 200:
        sys.exit("GET after the reset: %d" % cl.status(g))
    print("ok rst: stream %d reset, the connection goes on" % sid)


def case_upclose(a):
    cl = Client(a)
    s1 = cl.open_ws("/close")
    echo_check(cl, s1, [(1, b"then close")])
    op, p, _ = cl.message(s1)
    if op != 8 or p[:2] != (1000).to_bytes(2, "big"):
        sys.exit("expected the server's close frame, got %d %r" % (op, p))
    cl.send(s1, frame(8, p[:2]))
    cl.wait("the end of stream %d" % s1, lambda: cl.st[s1]["ended"] or
            cl.st[s1]["reset"] is not None)
    if not cl.st[s1]["ended"]:
        sys.exit("stream %d was reset, not ended" % s1)
    s2 = cl.open_ws("/drop")
    echo_check(cl, s2, [(1, b"then drop")])
    cl.wait("the end of stream %d" % s2, lambda: cl.st[s2]["ended"] or
            cl.st[s2]["reset"] is not None)
    if not cl.st[s2]["ended"]:
        sys.exit("stream %d was reset, not ended" % s2)
    print("ok upclose: streams %d (close frame) and %d (dropped) ended" %
          (s1, s2))


def case_halfclose(a):
    cl = Client(a)
    sid = cl.open_ws(a.path)
    echo_check(cl, sid, [(1, b"last words")])
    cl.send(sid, b"", end=True)
    cl.wait("the end of stream %d" % sid, lambda: cl.st[sid]["ended"] or
            cl.st[sid]["reset"] is not None)
    if not cl.st[sid]["ended"]:
        sys.exit("stream %d was reset, not ended" % sid)
    print("ok halfclose: stream %d ended after the client's end" % sid)


def case_drain(a):
    import h2.connection

    cl = Client(a)
    sid = cl.open_ws(a.path)
    echo_check(cl, sid, [(1, b"before the drain")])
    open(a.ready, "w").close()
    cl.wait("the GOAWAY", lambda: cl.goaway is not None)
    if cl.goaway != 0:
        sys.exit("GOAWAY with error %d, not NO_ERROR" % cl.goaway)
    # python-h2 takes a GOAWAY for the end of the connection; RFC 9113
    # section 6.8 lets the streams it names go on, as this one must.
    cl.c.state_machine.state = h2.connection.ConnectionState.CLIENT_OPEN
    if a.mid:
        op, p, _ = cl.message(sid)
        if op != 2 or len(p) != a.mid:
            sys.exit("expected the frame in progress (%d bytes), got "
                     "%d %r" % (a.mid, op, p[:20]))
    else:
        echo_check(cl, sid, [(1, b"while draining")])
    op, p, _ = cl.message(sid)
    if op != 8 or len(p) < 2:
        sys.exit("expected a close frame, got %d %r" % (op, p[:20]))
    code = int.from_bytes(p[:2], "big")
    cl.wait("the end of stream %d" % sid, lambda: cl.st[sid]["ended"] or
            cl.st[sid]["reset"] is not None)
    if not cl.st[sid]["ended"]:
        sys.exit("stream %d was reset, not ended" % sid)
    print("ok drain: GOAWAY, close %d %s at %d, stream %d ended" %
          (code, p[2:].decode(), int(time.time() * 1000), sid))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "server":
        ap = argparse.ArgumentParser()
        ap.add_argument("mode")
        ap.add_argument("port", type=int)
        ap.add_argument("--log", required=True)
        a = ap.parse_args()
        serve(a.port, a.log)
        return
    cases = {"settings": case_settings, "echo": case_echo,
             "deflate": case_deflate, "bulk": case_bulk, "slow": case_slow,
             "multi": case_multi, "refused": case_refused, "rst": case_rst,
             "upclose": case_upclose, "halfclose": case_halfclose,
             "idle": case_idle, "push": case_push, "drain": case_drain}
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(cases))
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--authority", required=True)
    ap.add_argument("--path", default="/ws")
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--ca")
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--pid", type=int)
    ap.add_argument("--sent")
    ap.add_argument("--stall", type=float, default=2.0)
    ap.add_argument("--max-sent", type=int, default=32)
    ap.add_argument("--max-rss", type=int, default=32)
    ap.add_argument("--get", default="/echo")
    ap.add_argument("--get-authority")
    ap.add_argument("--expect", type=int)
    ap.add_argument("--code")
    ap.add_argument("--body")
    ap.add_argument("--protocol", default="websocket")
    ap.add_argument("--plain-connect", action="store_true")
    ap.add_argument("--header", action="append", default=[])
    ap.add_argument("--hold")
    ap.add_argument("--early", action="store_true")
    ap.add_argument("--quiet", type=float, default=2.0)
    ap.add_argument("--ready")
    ap.add_argument("--mid", type=int, default=0)
    a = ap.parse_args()
    cases[a.case](a)


if __name__ == "__main__":
    main()
