"""A gRPC server and client for the end-to-end tests (grpc_upstream.sh).

Built on python3-grpcio with generic handlers: requests and responses are
raw bytes, so there is no .proto file and no generated code.  The service
is akgw.test.Peer:

  Unary         returns the request; initial metadata x-peer-initial, and
                trailing metadata echo-KEY for every x-* field it got
  ServerStream  request "N" or "N:SIZE": N messages "I:" padded to SIZE
                bytes, trailing x-count
  ClientStream  answers "count=N bytes=B sha256=H" for what it received
  Bidi          echoes each message as it arrives
  Slow          request "MS": sends its head (x-peer-initial), then sleeps
                MS milliseconds unless the call ends first, then one
                message; logs the cancellation.  Server-streaming, so a
                client sees the head before the end (a unary call's head
                reaches a Python client only with its status)
  Gather        request "N": answers once N calls with its x-tag are in
                progress at the same time (at most 20 s), so N concurrent
                calls prove they were multiplexed, not queued
  Fail          request JSON {"code", "message", "trailers"}: sets the
                trailers and aborts with that status and message
  Big           answers x-size bytes (metadata); trailing x-sha256 of the
                answer, x-req-sha256 and x-req-len of the request

  grpc_peer.py serve --port P --log FILE [--tls CERT KEY] [--max-streams N]
      prints "listening P" once it accepts, and writes to FILE one line a
      call ("call METHOD tag=T peer=P deadline=S|none"), one a cancelled
      Slow call ("cancelled Slow tag=T reason=cancel|deadline") and one a
      Slow call that ran to its end ("finished Slow tag=T"), and how far
      a ServerStream call got ("progress ServerStream tag=T sent=I",
      every 16 messages and at the end).  With
      --max-streams it allows N streams at once on a connection
      (SETTINGS_MAX_CONCURRENT_STREAMS).

  grpc_peer.py call --target HOST:PORT [--authority A] [--ca FILE]
      [--tag T] [--n N] [--size B] [--timeout S] SCENARIO
      runs one scenario (unary, server-stream, client-stream, bidi, fail,
      big, deadline, cancel, concurrent, parallel --n N --ms MS: N
      Slow calls of MS ms at once, slow-reader --n N --size B --release
      FILE: reads one message, prints "paused", reads on once FILE
      exists; refused --path P --code C
      --gw-error E: a call the gateway answers itself) and exits 1 with
      one line saying what was wrong.  --authority is the :authority sent
      (the gateway's host form) and with --ca (TLS) also the name the
      certificate is checked against.

  grpc_peer.py raw-timeout --port P --authority A --path PATH
      [--grpc-timeout 300m]
      a python3-h2 client on cleartext HTTP/2 that sends one gRPC request
      with grpc-timeout and never cancels it: prints the grpc-status, where
      it came (head: trailers-only, or trailers), grpc-message, the seconds
      it waited and the body bytes; exits 1 unless the answer ended within
      10 s.

Only loopback addresses are used.
"""
import argparse
import base64
import concurrent.futures
import hashlib
import json
import os
import queue
import socket
import sys
import threading
import time

import grpc

SERVICE = "akgw.test.Peer"
MAX_MSG = 16 << 20
# The client never goes through a proxy from the environment.
COMMON_OPTS = [("grpc.max_receive_message_length", MAX_MSG),
               ("grpc.max_send_message_length", MAX_MSG),
               ("grpc.enable_http_proxy", 0)]


class Log:
    """Lines for the test to wait on, flushed at once, one writer at a time."""

    def __init__(self, path):
        self.f = open(path, "a")
        self.lock = threading.Lock()

    def write(self, line):
        with self.lock:
            self.f.write(line + "\n")
            self.f.flush()


LOG = None
GATHER = {}
GATHER_COND = threading.Condition()


def md_get(ctx, key, default=None):
    for k, v in ctx.invocation_metadata():
        if k == key:
            return v
    return default


def log_call(ctx, method):
    """Log the call; return its tag."""
    tag = md_get(ctx, "x-tag", "-")
    left = ctx.time_remaining()
    LOG.write("call %s tag=%s peer=%s deadline=%s" % (
        method, tag, ctx.peer(),
        "none" if left is None else "%.3f" % left))
    return tag


def sha(b):
    return hashlib.sha256(b).hexdigest()


def pattern(n):
    """n reproducible bytes that do not compress."""
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(b"%d" % i).digest()
        i += 1
    return bytes(out[:n])


def do_unary(req, ctx):
    log_call(ctx, "Unary")
    ctx.send_initial_metadata((("x-peer-initial", "unary"),))
    trailers = [("x-peer-method", "Unary")]
    for k, v in ctx.invocation_metadata():
        if k.startswith("x-"):
            trailers.append(("echo-" + k, v))
    ctx.set_trailing_metadata(tuple(trailers))
    return req


def do_server_stream(req, ctx):
    tag = log_call(ctx, "ServerStream")
    spec = req.decode().split(":")
    n = int(spec[0])
    size = int(spec[1]) if len(spec) > 1 else 0
    ctx.set_trailing_metadata((("x-count", str(n)),))
    for i in range(n):
        # A yield returns once gRPC took the message: how far the
        # client's reading lets it go.
        if i % 16 == 0:
            LOG.write("progress ServerStream tag=%s sent=%d" % (tag, i))
        m = b"%d:" % i
        yield m + b"." * max(0, size - len(m))
    LOG.write("progress ServerStream tag=%s sent=%d" % (tag, n))


def do_client_stream(it, ctx):
    log_call(ctx, "ClientStream")
    h = hashlib.sha256()
    n = total = 0
    for m in it:
        n += 1
        total += len(m)
        h.update(m)
    return b"count=%d bytes=%d sha256=%s" % (n, total, h.hexdigest().encode())


def do_bidi(it, ctx):
    log_call(ctx, "Bidi")
    for m in it:
        yield m


def do_slow(req, ctx):
    tag = log_call(ctx, "Slow")
    ms = int(req or b"10000")
    ctx.send_initial_metadata((("x-peer-initial", "slow"),))
    lock = threading.Lock()
    state = {"over": False}

    def ended(how):
        with lock:
            if state["over"]:
                return
            state["over"] = True
        if how == "finished":
            LOG.write("finished Slow tag=%s" % tag)
            return
        left = ctx.time_remaining()
        reason = "deadline" if left is not None and left <= 0.05 else "cancel"
        LOG.write("cancelled Slow tag=%s reason=%s via=%s" % (tag, reason, how))

    # The callback runs when the call ends however it ends; is_active()
    # notices a cancellation while we sleep.  Whichever is first logs it.
    if not ctx.add_callback(lambda: ended("callback")):
        ended("callback")
    end = time.monotonic() + ms / 1000.0
    while time.monotonic() < end:
        if not ctx.is_active():
            ended("is_active")
            return
        time.sleep(0.02)
    ended("finished")
    yield b"slept %d" % ms


def do_gather(req, ctx):
    tag = log_call(ctx, "Gather")
    n = int(req)
    with GATHER_COND:
        GATHER[tag] = GATHER.get(tag, 0) + 1
        GATHER_COND.notify_all()
        met = GATHER_COND.wait_for(lambda: GATHER[tag] >= n, timeout=20)
        have = GATHER[tag]
    if not met:
        ctx.abort(grpc.StatusCode.FAILED_PRECONDITION,
                  "only %d of %d calls were in progress together" % (have, n))
    return b"gathered %d" % n


def do_fail(req, ctx):
    log_call(ctx, "Fail")
    spec = json.loads(req)
    trailers = []
    for k, v in spec.get("trailers", []):
        trailers.append((k, base64.b64decode(v) if k.endswith("-bin") else v))
    ctx.set_trailing_metadata(tuple(trailers))
    ctx.abort(grpc.StatusCode[spec["code"]], spec["message"])


def do_big(req, ctx):
    log_call(ctx, "Big")
    out = pattern(int(md_get(ctx, "x-size", "0")))
    ctx.set_trailing_metadata((("x-sha256", sha(out)),
                               ("x-req-sha256", sha(req)),
                               ("x-req-len", str(len(req)))))
    return out


def serve(a):
    global LOG
    LOG = Log(a.log)
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(do_unary),
        "ServerStream": grpc.unary_stream_rpc_method_handler(do_server_stream),
        "ClientStream": grpc.stream_unary_rpc_method_handler(do_client_stream),
        "Bidi": grpc.stream_stream_rpc_method_handler(do_bidi),
        "Slow": grpc.unary_stream_rpc_method_handler(do_slow),
        "Gather": grpc.unary_unary_rpc_method_handler(do_gather),
        "Fail": grpc.unary_unary_rpc_method_handler(do_fail),
        "Big": grpc.unary_unary_rpc_method_handler(do_big),
    }
    # Enough threads for Gather's 50 calls plus the Slow ones at once.
    server = grpc.server(
        concurrent.futures.ThreadPoolExecutor(max_workers=160),
        handlers=[grpc.method_handlers_generic_handler(SERVICE, handlers)],
        options=COMMON_OPTS + [("grpc.so_reuseport", 0)] +
        ([("grpc.max_concurrent_streams", a.max_streams)]
         if a.max_streams else []))
    addr = "127.0.0.1:%d" % a.port
    if a.tls:
        with open(a.tls[0], "rb") as f:
            cert = f.read()
        with open(a.tls[1], "rb") as f:
            key = f.read()
        got = server.add_secure_port(
            addr, grpc.ssl_server_credentials([(key, cert)]))
    else:
        got = server.add_insecure_port(addr)
    if got != a.port:
        sys.exit("cannot listen on %s" % addr)
    server.start()
    print("listening", a.port, flush=True)
    server.wait_for_termination()


class Failed(Exception):
    pass


def expect(what, want, got):
    if want != got:
        raise Failed("%s: expected %r, got %r" % (what, want, got))


def md_find(md, key):
    for k, v in md or ():
        if k == key:
            return v
    return None


def method(ch, name, kind):
    full = "/%s/%s" % (SERVICE, name)
    return getattr(ch, kind)(full)


def rpc_error(fn):
    """Call fn; return the grpc.RpcError it raised, or fail."""
    try:
        r = fn()
    except grpc.RpcError as e:
        return e
    raise Failed("expected an error, the call succeeded: %r" % (r,))


def sc_unary(ch, a):
    req = b"hello " + os.urandom(32)
    md = (("x-tag", a.tag), ("x-akgw-req", "value 1"),
          ("x-bin-bin", b"\x00\x01\xfe\xff"))
    resp, call = method(ch, "Unary", "unary_unary").with_call(
        req, metadata=md, timeout=a.timeout)
    expect("response", req, resp)
    expect("initial metadata x-peer-initial", "unary",
           md_find(call.initial_metadata(), "x-peer-initial"))
    tr = call.trailing_metadata()
    expect("trailer x-peer-method", "Unary", md_find(tr, "x-peer-method"))
    expect("metadata echoed", "value 1", md_find(tr, "echo-x-akgw-req"))
    expect("binary metadata echoed", b"\x00\x01\xfe\xff",
           md_find(tr, "echo-x-bin-bin"))
    expect("status", grpc.StatusCode.OK, call.code())
    return "echo and metadata both ways"


def sc_server_stream(ch, a):
    call = method(ch, "ServerStream", "unary_stream")(
        b"%d:%d" % (a.n, a.size), metadata=(("x-tag", a.tag),),
        timeout=a.timeout)
    got = list(call)
    expect("message count", a.n, len(got))
    for i, m in enumerate(got):
        if not m.startswith(b"%d:" % i) or len(m) < a.size:
            raise Failed("message %d is %r" % (i, m[:40]))
    expect("trailer x-count", str(a.n),
           md_find(call.trailing_metadata(), "x-count"))
    return "%d messages in order" % a.n


def sc_slow_reader(ch, a):
    """ServerStream of --n messages of --size bytes; after the first one
    print "paused" and read nothing more until the file --release exists
    (60 s at most), then read the rest."""
    call = method(ch, "ServerStream", "unary_stream")(
        b"%d:%d" % (a.n, a.size), metadata=(("x-tag", a.tag),),
        timeout=a.timeout)
    it = iter(call)
    first = next(it)
    if not first.startswith(b"0:"):
        raise Failed("first message is %r" % first[:40])
    print("paused", flush=True)
    end = time.monotonic() + 60
    while not os.path.exists(a.release):
        if time.monotonic() > end:
            raise Failed("%s never appeared" % a.release)
        time.sleep(0.05)
    rest = list(it)
    expect("message count", a.n, 1 + len(rest))
    return "%d messages of %d bytes, read slowly" % (a.n, a.size)


def sc_client_stream(ch, a):
    msgs = [pattern(1 + (i * 997) % (a.size or 4096)) for i in range(a.n)]
    h = hashlib.sha256()
    for m in msgs:
        h.update(m)
    want = b"count=%d bytes=%d sha256=%s" % (
        len(msgs), sum(map(len, msgs)), h.hexdigest().encode())
    resp = method(ch, "ClientStream", "stream_unary")(
        iter(msgs), metadata=(("x-tag", a.tag),), timeout=a.timeout)
    expect("summary", want, resp)
    return want.decode()


def sc_bidi(ch, a):
    """Ping-pong: each message is sent only once the previous one came
    back, which fails unless both directions stream."""
    q = queue.Queue()
    first = b"ping 0"

    def requests():
        m = first
        while m is not None:
            yield m
            m = q.get(timeout=a.timeout)

    call = method(ch, "Bidi", "stream_stream")(
        requests(), metadata=(("x-tag", a.tag),), timeout=a.timeout)
    want = first
    n = 0
    try:
        for got in call:
            expect("echo %d" % n, want, got)
            n += 1
            if n == a.n:
                q.put(None)
                continue
            want = b"ping %d " % n + b"x" * (n * 37)
            q.put(want)
    except grpc.RpcError as e:
        raise Failed("after %d echoes: %s %s" % (n, e.code(), e.details()))
    expect("echoes", a.n, n)
    expect("status", grpc.StatusCode.OK, call.code())
    return "%d messages ping-pong" % n


def sc_fail(ch, a):
    spec = {"code": "NOT_FOUND", "message": "no such thing: caf\u00e9 100%",
            "trailers": [["x-why", "because"],
                         ["x-detail-bin",
                          base64.b64encode(b"\x00\xff detail").decode()]]}
    e = rpc_error(lambda: method(ch, "Fail", "unary_unary")(
        json.dumps(spec).encode(), metadata=(("x-tag", a.tag),),
        timeout=a.timeout))
    expect("status", grpc.StatusCode.NOT_FOUND, e.code())
    expect("message", spec["message"], e.details())
    tr = e.trailing_metadata()
    expect("trailer x-why", "because", md_find(tr, "x-why"))
    expect("trailer x-detail-bin", b"\x00\xff detail",
           md_find(tr, "x-detail-bin"))
    return "NOT_FOUND with message and trailers"


def sc_big(ch, a):
    req = os.urandom(a.size)
    resp, call = method(ch, "Big", "unary_unary").with_call(
        req, metadata=(("x-tag", a.tag), ("x-size", str(a.size))),
        timeout=a.timeout)
    tr = call.trailing_metadata()
    expect("request length at the server", str(a.size),
           md_find(tr, "x-req-len"))
    expect("request sha256 at the server", sha(req),
           md_find(tr, "x-req-sha256"))
    expect("response length", a.size, len(resp))
    expect("response sha256", md_find(tr, "x-sha256"), sha(resp))
    return "%d bytes each way, sha256 %s" % (a.size, sha(resp)[:16])


def sc_deadline(ch, a):
    start = time.monotonic()
    e = rpc_error(lambda: list(method(ch, "Slow", "unary_stream")(
        b"10000", metadata=(("x-tag", a.tag),), timeout=a.timeout)))
    took = time.monotonic() - start
    expect("status", grpc.StatusCode.DEADLINE_EXCEEDED, e.code())
    if took < a.timeout * 0.9 or took > a.timeout + 5:
        raise Failed("DEADLINE_EXCEEDED after %.2f s, deadline %.2f s"
                     % (took, a.timeout))
    return "DEADLINE_EXCEEDED after %.2f s" % took


def sc_cancel(ch, a):
    """Start Slow without a deadline, cancel once its head arrived."""
    fut = method(ch, "Slow", "unary_stream")(
        b"30000", metadata=(("x-tag", a.tag),), timeout=60)
    head = []
    t = threading.Thread(target=lambda: head.append(fut.initial_metadata()),
                         daemon=True)
    t.start()
    t.join(a.timeout)
    if not head:
        fut.cancel()
        raise Failed("no response head within %.1f s" % a.timeout)
    expect("initial metadata x-peer-initial", "slow",
           md_find(head[0], "x-peer-initial"))
    if not fut.cancel():
        raise Failed("the call ended before it could be cancelled: %s"
                     % fut.code())
    expect("status", grpc.StatusCode.CANCELLED, fut.code())
    return "cancelled after the head arrived"


def sc_concurrent(ch, a):
    stub = method(ch, "Gather", "unary_unary")
    futs = [stub.future(b"%d" % a.n, metadata=(("x-tag", a.tag),),
                        timeout=a.timeout) for _ in range(a.n)]
    bad = []
    for f in futs:
        try:
            r = f.result()
            if r != b"gathered %d" % a.n:
                bad.append(repr(r))
        except grpc.RpcError as e:
            bad.append("%s %s" % (e.code(), e.details()))
    if bad:
        raise Failed("%d of %d calls failed, first: %s"
                     % (len(bad), a.n, bad[0]))
    return "%d calls in progress together on one channel" % a.n


def sc_parallel(ch, a):
    """--n Slow calls of --ms at once on one channel, all answered."""
    stub = method(ch, "Slow", "unary_stream")
    start = time.monotonic()
    calls = [stub(b"%d" % a.ms, metadata=(("x-tag", a.tag),),
                  timeout=a.timeout) for _ in range(a.n)]
    bad = []
    for c in calls:
        try:
            got = list(c)
            if got != [b"slept %d" % a.ms]:
                bad.append(repr(got))
        except grpc.RpcError as e:
            bad.append("%s %s" % (e.code(), e.details()))
    if bad:
        raise Failed("%d of %d calls failed, first: %s"
                     % (len(bad), a.n, bad[0]))
    return "%d calls of %d ms in %.2f s" % (a.n, a.ms,
                                            time.monotonic() - start)


def sc_refused(ch, a):
    """A unary call to --path that the gateway refuses: the status --code
    and X-Gateway-Error --gw-error, read as a gRPC client reads them."""
    e = rpc_error(lambda: ch.unary_unary(a.path)(
        b"x", metadata=(("x-tag", a.tag),), timeout=a.timeout))
    expect("status", grpc.StatusCode[a.code], e.code())
    got = (md_find(e.trailing_metadata(), "x-gateway-error") or
           md_find(e.initial_metadata(), "x-gateway-error"))
    expect("x-gateway-error", a.gw_error, got)
    if not e.details():
        raise Failed("no grpc-message")
    return "%s %s: %s" % (a.code, got, e.details())


SCENARIOS = {
    "unary": sc_unary, "server-stream": sc_server_stream,
    "client-stream": sc_client_stream, "bidi": sc_bidi, "fail": sc_fail,
    "big": sc_big, "deadline": sc_deadline, "cancel": sc_cancel,
    "concurrent": sc_concurrent, "parallel": sc_parallel,
    "slow-reader": sc_slow_reader,
    "refused": sc_refused,
}


def call(a):
    opts = list(COMMON_OPTS)
    if a.authority:
        opts.append(("grpc.default_authority", a.authority))
    if a.ca:
        with open(a.ca, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        if a.authority:
            name = a.authority.rsplit(":", 1)[0]
            opts.append(("grpc.ssl_target_name_override", name))
        ch = grpc.secure_channel(a.target, creds, opts)
    else:
        ch = grpc.insecure_channel(a.target, opts)
    what = "%s via %s%s" % (a.scenario, a.target,
                            " as " + a.authority if a.authority else "")
    try:
        try:
            grpc.channel_ready_future(ch).result(timeout=10)
        except grpc.FutureTimeoutError:
            raise Failed("no connection within 10 s")
        detail = SCENARIOS[a.scenario](ch, a)
    except Failed as e:
        print("FAIL %s: %s" % (what, e), flush=True)
        return 1
    except grpc.RpcError as e:
        print("FAIL %s: %s %s" % (what, e.code(), e.details()), flush=True)
        return 1
    finally:
        ch.close()
    print("ok %s: %s" % (what, detail), flush=True)
    return 0


def raw_timeout(a):
    """One gRPC request with grpc-timeout over python3-h2, never cancelled
    by us: whoever enforces the deadline must answer it."""
    import h2.config
    import h2.connection
    import h2.events

    s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    c = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    c.initiate_connection()
    msg = a.body.encode()
    frame = b"\x00" + len(msg).to_bytes(4, "big") + msg
    c.send_headers(1, [(":method", "POST"), (":scheme", "http"),
                       (":authority", a.authority), (":path", a.path),
                       ("content-type", "application/grpc"),
                       ("te", "trailers"), ("grpc-timeout", a.grpc_timeout),
                       ("x-tag", a.tag)])
    c.send_data(1, frame, end_stream=True)
    start = time.monotonic()
    s.sendall(c.data_to_send())
    head, trailers, data, reset, ended = None, None, b"", None, False
    while not ended and time.monotonic() - start < 10:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        for ev in c.receive_data(chunk):
            if isinstance(ev, h2.events.ResponseReceived):
                head = dict(ev.headers)
            elif isinstance(ev, h2.events.TrailersReceived):
                trailers = dict(ev.headers)
            elif isinstance(ev, h2.events.DataReceived):
                c.acknowledge_received_data(ev.flow_controlled_length,
                                            ev.stream_id)
                data += ev.data
            elif isinstance(ev, h2.events.StreamReset):
                reset = int(ev.error_code)
                ended = True
            elif isinstance(ev, h2.events.StreamEnded):
                ended = True
        s.sendall(c.data_to_send())
    took = time.monotonic() - start
    s.close()
    if not ended:
        print("FAIL raw-timeout: no end of stream within 10 s (head %r)"
              % (head,), flush=True)
        return 1
    # A Trailers-Only answer carries grpc-status in its head.
    st = dict(head or {})
    st.update(trailers or {})
    where = ("trailers" if "grpc-status" in (trailers or {}) else
             "head" if "grpc-status" in (head or {}) else "none")
    print("status=%s grpc-status=%s in=%s grpc-message=%s reset=%s "
          "took=%.3f body=%d" % (st.get(":status"), st.get("grpc-status"),
                                 where, json.dumps(st.get("grpc-message")),
                                 reset, took, len(data)), flush=True)
    return 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--log", required=True)
    s.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    s.add_argument("--max-streams", type=int, default=0)
    c = sub.add_parser("call")
    c.add_argument("--target", required=True)
    c.add_argument("--authority")
    c.add_argument("--ca")
    c.add_argument("--tag", default="-")
    c.add_argument("--n", type=int, default=50)
    c.add_argument("--size", type=int, default=0)
    c.add_argument("--timeout", type=float, default=30.0)
    c.add_argument("--ms", type=int, default=200)
    c.add_argument("--release", default="/nonexistent")
    c.add_argument("--path", default="/%s/Unary" % SERVICE)
    c.add_argument("--code", default="UNAVAILABLE")
    c.add_argument("--gw-error")
    c.add_argument("scenario", choices=sorted(SCENARIOS))
    r = sub.add_parser("raw-timeout")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--authority", required=True)
    r.add_argument("--path", required=True)
    r.add_argument("--grpc-timeout", default="300m")
    r.add_argument("--body", default="10000")
    r.add_argument("--tag", default="-")
    a = p.parse_args()
    if a.cmd == "serve":
        serve(a)
        return 0
    if a.cmd == "call":
        return call(a)
    return raw_timeout(a)


if __name__ == "__main__":
    sys.exit(main())
