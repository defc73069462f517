"""HTTP/2 attacks on the gateway, written as raw frames (python3-h2's
hyperframe and hpack), for h2_defences.sh.

  h2_attack.py PORT AUTHORITY CASE

Each case opens one connection, misbehaves, and reads until the gateway
sends GOAWAY or closes (10 s at most).  It prints one JSON line:
{"case": ..., "goaway": error code or null, "closed": bool, "refused":
streams reset with REFUSED_STREAM, "resets": {stream: code}, "statuses":
{stream: status}, "bytes_in": bytes read}.
"""
import json
import socket
import sys
import time

import hpack
from hyperframe.frame import (ContinuationFrame, DataFrame, Frame,
                              GoAwayFrame, HeadersFrame, PingFrame,
                              RstStreamFrame, SettingsFrame,
                              WindowUpdateFrame)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class Peer:
    def __init__(self, port, authority):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.authority = authority
        self.enc = hpack.Encoder()
        self.dec = hpack.Decoder()
        self.buf = b""
        self.goaway = None
        self.closed = False
        self.resets = {}
        self.statuses = {}
        self.bytes_in = 0
        self.send(PREFACE + SettingsFrame(0).serialize())

    def send(self, data):
        try:
            self.s.sendall(data)
        except OSError:
            self.closed = True

    def headers(self, sid, path="/", end_stream=True, extra=()):
        block = self.enc.encode([(":method", "GET"), (":scheme", "http"),
                                 (":authority", self.authority),
                                 (":path", path)] + list(extra))
        f = HeadersFrame(sid, block)
        f.flags.add("END_HEADERS")
        if end_stream:
            f.flags.add("END_STREAM")
        return f.serialize()

    def read(self, until, limit=10.0):
        """Read frames until until(self) is true, the peer closes, or limit."""
        end = time.monotonic() + limit
        self.s.settimeout(0.2)
        while not until(self) and not self.closed and time.monotonic() < end:
            try:
                chunk = self.s.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                self.closed = True
                break
            if not chunk:
                self.closed = True
                break
            self.bytes_in += len(chunk)
            self.buf += chunk
            self.parse()

    def parse(self):
        while len(self.buf) >= 9:
            f, length = Frame.parse_frame_header(self.buf[:9])
            if len(self.buf) < 9 + length:
                return
            f.parse_body(memoryview(self.buf[9:9 + length]))
            self.buf = self.buf[9 + length:]
            if isinstance(f, GoAwayFrame):
                self.goaway = f.error_code
            elif isinstance(f, RstStreamFrame):
                self.resets[f.stream_id] = f.error_code
            elif isinstance(f, HeadersFrame):
                try:
                    for k, v in self.dec.decode(f.data):
                        if k in (":status", b":status"):
                            self.statuses[f.stream_id] = int(v)
                except Exception:
                    pass
            elif isinstance(f, SettingsFrame) and "ACK" not in f.flags:
                self.send(SettingsFrame(0, flags=["ACK"]).serialize())
            elif isinstance(f, DataFrame) and f.flow_controlled_length:
                self.send(WindowUpdateFrame(0, f.flow_controlled_length)
                          .serialize() +
                          WindowUpdateFrame(f.stream_id,
                                            f.flow_controlled_length)
                          .serialize())


def gone(p):
    return p.goaway is not None


def case_rapid_reset(p):
    # HEADERS then RST_STREAM at once, over and over (CVE-2023-44487).
    out = b""
    for i in range(2000):
        sid = 1 + 2 * i
        out += p.headers(sid) + RstStreamFrame(sid, 8).serialize()
        if len(out) > 32768:
            p.send(out)
            out = b""
    p.send(out)
    p.read(gone)


def case_continuation_flood(p):
    # A header block that never ends (CVE-2024-27316).
    block = p.enc.encode([(":method", "GET"), (":scheme", "http"),
                          (":authority", p.authority), (":path", "/")])
    p.send(HeadersFrame(1, block).serialize())
    for i in range(5000):
        p.send(ContinuationFrame(1, p.enc.encode([("x-a", "b" * 8)]))
               .serialize())
        if p.closed:
            break
    p.read(gone)


def case_settings_flood(p):
    p.send(SettingsFrame(0, settings={4: 65535}).serialize() * 20000)
    p.read(gone)


def case_ping_flood(p):
    # PINGs while never reading: the gateway must not queue every ACK.
    for i in range(200):
        p.send(PingFrame(0, opaque_data=b"12345678").serialize() * 500)
        if p.closed:
            break
    p.read(gone)


def case_empty_data(p):
    p.send(p.headers(1, "/slow?ms=5000", end_stream=False))
    p.send(DataFrame(1, b"").serialize() * 20000)
    p.read(gone)


def case_header_bomb(p):
    # One stream whose header list is far over the gateway's limit.
    big = [("x-big-%d" % i, "v" * 4000) for i in range(40)]
    block = p.enc.encode([(":method", "GET"), (":scheme", "http"),
                          (":authority", p.authority), (":path", "/")] + big)
    step = 16000
    first = HeadersFrame(1, block[:step])
    first.flags.add("END_STREAM")
    frames = [first]
    for i in range(step, len(block), step):
        frames.append(ContinuationFrame(1, block[i:i + step]))
    frames[-1].flags.add("END_HEADERS")
    p.send(b"".join(f.serialize() for f in frames))
    p.read(lambda q: 1 in q.statuses or 1 in q.resets or gone(q))


def case_too_many_streams(p):
    # More streams at once than SETTINGS_MAX_CONCURRENT_STREAMS allows.
    out = b""
    for i in range(300):
        out += p.headers(1 + 2 * i, "/slow?ms=3000")
    p.send(out)
    p.read(lambda q: len(q.resets) >= 100 or gone(q), 5.0)


def case_lifetime(p):
    # Streams one after another, past h2_max_requests.
    for i in range(420):
        sid = 1 + 2 * i
        p.send(p.headers(sid))
        p.read(lambda q: sid in q.statuses or gone(q), 3.0)
        if gone(p):
            break
    p.read(lambda q: q.closed, 3.0)


def case_idle(p):
    p.read(lambda q: q.closed, 8.0)


CASES = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}


def main():
    port, authority, case = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    p = Peer(port, authority)
    CASES[case](p)
    refused = sum(1 for c in p.resets.values() if c == 7)
    print(json.dumps({"case": case, "goaway": p.goaway, "closed": p.closed,
                      "refused": refused,
                      "resets": {str(k): v for k, v in p.resets.items()},
                      "statuses": {str(k): v for k, v in p.statuses.items()},
                      "bytes_in": p.bytes_in}))


main()
