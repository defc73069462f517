#!/usr/bin/env python3
"""Small helpers for bench/run.bash.

  util.py ports N [LO HI]         N distinct free TCP ports on 127.0.0.1
  util.py portrange N [LO HI]     first port P with P-1 .. P+N-1 all free
  util.py waitport PORT [SECS]    wait until 127.0.0.1:PORT accepts (exit 1 on timeout)
  util.py cpu PID...              utime+stime clock ticks of PIDs and all their
                                  descendants (/proc/PID/stat fields 14 and 15)
  util.py rss PID...              VmRSS in KiB of PIDs and all their descendants
  util.py tree PID...             the PIDs and all their descendants
  util.py render TEMPLATE OUT K=V...   replace @K@ by V (V=@file reads a file)
  util.py wrk FILE                parse wrk --latency output
  util.py ws FILE                 parse akbench-ws output
  util.py h2load FILE             parse h2load output
  util.py pass_fd HOST PORT       connect and pass the socket on fd 1 (ssh
                                  ProxyUseFdpass); the connect happens in the
                                  caller's network namespace
"""
import os
import random
import re
import socket
import sys
import time


def port_free(p):
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()


def cmd_ports(n, lo=15000, hi=30000):
    got = []
    tries = 0
    while len(got) < n:
        tries += 1
        if tries > 100000:
            sys.exit("no free ports")
        p = random.randint(lo, hi)
        if p in got or (p + 1) in got or (p - 1) in got:
            continue
        if port_free(p):
            got.append(p)
    print(" ".join(map(str, got)))


def cmd_portrange(n, lo=20000, hi=30000):
    start = lo + 1
    while start + n < hi:
        bad = None
        for p in range(start - 1, start + n):
            if not port_free(p):
                bad = p
                break
        if bad is None:
            print(start)
            return
        start = bad + 2
    sys.exit("no free port range of %d" % n)


def cmd_waitport(port, secs=10.0):
    end = time.time() + secs
    while time.time() < end:
        s = socket.socket()
        s.settimeout(0.2)
        try:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return 0
        finally:
            s.close()
        time.sleep(0.05)
    return 1


def proc_table():
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        rest = st[st.rfind(")") + 2:].split()
        ppid = int(rest[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree(pids):
    kids = proc_table()
    out = []
    todo = list(pids)
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def cmd_cpu(pids):
    total = 0
    for p in tree(pids):
        try:
            with open("/proc/%d/stat" % p) as f:
                st = f.read()
        except OSError:
            continue
        rest = st[st.rfind(")") + 2:].split()
        # rest[0] is field 3 (state): utime is field 14, stime field 15.
        total += int(rest[11]) + int(rest[12])
    print(total)


def cmd_rss(pids):
    total = 0
    for p in tree(pids):
        try:
            with open("/proc/%d/status" % p) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            continue
    print(total)


def render(template, out, kv):
    with open(template) as f:
        text = f.read()
    for k, v in kv.items():
        if v.startswith("@") and os.path.exists(v[1:]):
            with open(v[1:]) as f:
                v = f.read().rstrip("\n")
        text = text.replace("@%s@" % k, v)
    left = re.findall(r"@[A-Z_][A-Z0-9_]*@", text)
    if left:
        sys.exit("render %s: unreplaced %s" % (template, " ".join(sorted(set(left)))))
    with open(out, "w") as f:
        f.write(text)


UNIT_US = {"us": 1.0, "ms": 1000.0, "s": 1e6, "m": 60e6, "h": 3600e6}


def to_us(tok):
    m = re.match(r"^([0-9.]+)(us|ms|s|m|h)$", tok)
    if not m:
        return None
    return float(m.group(1)) * UNIT_US[m.group(2)]


def cmd_wrk(path):
    """Print: requests seconds rps p50_us p99_us problem ('' when clean)."""
    with open(path, errors="replace") as f:
        text = f.read()
    req = secs = rps = None
    p50 = p99 = None
    problems = []
    m = re.search(r"(\d+) requests in ([0-9.]+)(us|ms|s|m),", text)
    if m:
        req = int(m.group(1))
        secs = to_us(m.group(2) + m.group(3)) / 1e6
    m = re.search(r"Requests/sec:\s+([0-9.]+)", text)
    if m:
        rps = float(m.group(1))
    m = re.search(r"^\s+50%\s+(\S+)", text, re.M)
    if m:
        p50 = to_us(m.group(1))
    m = re.search(r"^\s+99%\s+(\S+)", text, re.M)
    if m:
        p99 = to_us(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        names = ("connect", "read", "write", "timeout")
        for n, v in zip(names, m.groups()):
            if int(v):
                problems.append("%s errors %s" % (n, v))
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    if m and int(m.group(1)):
        problems.append("non-2xx %s" % m.group(1))
    if req is None or rps is None:
        problems.append("no wrk summary")
    elif req == 0:
        problems.append("0 requests")
    fmt = lambda x: "-" if x is None else ("%.0f" % x if isinstance(x, float) else str(x))
    print("\t".join([fmt(req), "-" if secs is None else "%.3f" % secs, fmt(rps),
                     fmt(p50), fmt(p99), "; ".join(problems)]))


def cmd_h2load(path):
    """Print: requests seconds rps mean_us problem ('' when clean).  A run
    is bad if any request failed, errored or timed out, if any answer was
    not 2xx, or if nothing was done (h2load says "No protocol negotiated"
    and does nothing when ALPN or the preface fails)."""
    with open(path, errors="replace") as f:
        text = f.read()
    req = secs = rps = mean = None
    problems = []
    m = re.search(r"finished in ([0-9.]+)(us|ms|s|m), ([0-9.]+) req/s", text)
    if m:
        secs = to_us(m.group(1) + m.group(2)) / 1e6
        rps = float(m.group(3))
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored, (\d+) timeout", text)
    if m:
        req = int(m.group(4))
        for name, v in zip(("failed", "errored", "timeout"), m.groups()[4:]):
            if int(v):
                problems.append("%s %s" % (name, v))
    m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
    if m:
        bad = sum(int(x) for x in m.groups()[1:])
        if bad:
            problems.append("non-2xx %d (3xx %s, 4xx %s, 5xx %s)" % ((bad,) + m.groups()[1:]))
    m = re.search(r"^time for request:\s+\S+\s+\S+\s+(\S+)", text, re.M)
    if m:
        mean = to_us(m.group(1))
    if "No protocol negotiated" in text:
        problems.append("no protocol negotiated (no h2)")
    if req is None or rps is None:
        problems.append("no h2load summary: " + " ".join(text.split())[-100:])
    elif req == 0:
        problems.append("0 requests")
    f = lambda x: "-" if x is None else "%.0f" % x
    print("\t".join([f(req), "-" if secs is None else "%.3f" % secs, f(rps), f(mean),
                     "; ".join(problems)]))


def cmd_ws(path):
    """Print: messages seconds msgs_per_s mbytes_per_s p50_us p99_us problem."""
    with open(path, errors="replace") as f:
        text = f.read()
    vals = dict(re.findall(r"(\w+)=([0-9.eE+-]+)", text))
    problems = []
    need = ("messages", "seconds", "msgs_per_s", "mbytes_per_s")
    if not all(k in vals for k in need):
        problems.append("no akbench-ws summary: " + " ".join(text.split())[:120])
    elif float(vals.get("messages", 0)) == 0:
        problems.append("0 messages")
    if float(vals.get("errors", 0) or 0) > 0:
        problems.append("errors %s" % vals["errors"])
    out = [vals.get(k, "-") for k in need + ("p50_us", "p99_us")]
    print("\t".join(out + ["; ".join(problems)]))


def cmd_pass_fd(host, port):
    s = socket.create_connection((host, port), timeout=10)
    out = socket.socket(fileno=1)
    socket.send_fds(out, [b"\0"], [s.fileno()])
    out.detach()


def main():
    a = sys.argv[1:]
    if not a:
        sys.exit(__doc__)
    c = a[0]
    if c == "ports":
        cmd_ports(int(a[1]), *map(int, a[2:4]))
    elif c == "portrange":
        cmd_portrange(int(a[1]), *map(int, a[2:4]))
    elif c == "waitport":
        sys.exit(cmd_waitport(int(a[1]), float(a[2]) if len(a) > 2 else 10.0))
    elif c == "cpu":
        cmd_cpu([int(x) for x in a[1:]])
    elif c == "rss":
        cmd_rss([int(x) for x in a[1:]])
    elif c == "tree":
        print(" ".join(map(str, tree([int(x) for x in a[1:]]))))
    elif c == "render":
        render(a[1], a[2], dict(x.split("=", 1) for x in a[3:]))
    elif c == "wrk":
        cmd_wrk(a[1])
    elif c == "ws":
        cmd_ws(a[1])
    elif c == "h2load":
        cmd_h2load(a[1])
    elif c == "pass_fd":
        cmd_pass_fd(a[1], int(a[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
