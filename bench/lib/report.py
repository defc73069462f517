#!/usr/bin/env python3
"""Turn the runs bench/run.bash recorded into tables, a Markdown report and a
gnuplot chart.

The results file has one line per run, tab-separated:
  mode workload cell metric contender round value p50_us p99_us work cpu_s
  status note
status is "ok", "FAILED(reason)" or "n/a(reason)".  A cell shows the median
of its good runs with min and max; a cell with a failed run says so.
"""
import argparse
import os
import statistics
import subprocess
import sys

MODES = {
    "percore": "per-core: each proxy 1 worker pinned to CPU 0 (taskset -c 0); "
               "load tool and backend pinned to CPU 1",
    "both": "both cores: nothing pinned; each proxy 2 workers (nginx "
            "worker_processes 2, HAProxy nbthread 2, h2o num-threads 2, akgateway "
            "workers: 2 when it has the key), backend 2 threads",
    "mem": "memory: 1 worker each, nothing pinned",
}
WORKLOADS = {
    "1": "1. HTTP/1.1 keep-alive (wrk -t1, GET /size/N)",
    "2": "2. A new connection per request (wrk -t1, Connection: close)",
    "3": "3. Bulk transfer (curl, one connection)",
    "4": "4. TLS terminated by the proxy (TLS 1.3, TLS_AES_128_GCM_SHA256; backend plain HTTP)",
    "5": "5. WebSocket echo (akbench-ws)",
    "6": "6. Reverse tunnel: a caller in a network namespace reaches a host backend",
    "7": "7. Memory per idle connection (VmRSS growth / connections)",
    "8": "8. Access log on against off (wrk -t1, GET /size/1024)",
    "9": "9. HTTP/2 to the proxy, HTTP/1.1 to the backend (h2load -c64 -m100; curl for bulk)",
    "10": "10. gRPC unary over h2c (h2load -c64 -m100, a 17-byte gRPC message, akbench-grpc)",
}
NAMES = {
    "direct": "direct",
    "akgateway": "akgateway",
    "nginx": "nginx",
    "haproxy": "HAProxy",
    "h2o": "h2o",
    "akgw-ws": "akgateway tunnel (ws)",
    "akgw-wss": "akgateway tunnel (wss)",
    "ssh": "ssh -R",
    "akgw-nolog": "akgateway, log off",
    "akgw-log": "akgateway, access log on",
    "nginx-nolog": "nginx, log off",
    "nginx-log": "nginx, access log on",
}
HTTP_CS = ["direct", "akgateway", "nginx", "haproxy"]
H2_CS = ["direct", "akgateway", "nginx", "h2o", "haproxy"]
H2_WS = ("9", "10")
TUN_CS = ["direct", "akgw-ws", "akgw-wss", "ssh"]
MEM_CS = ["akgateway", "nginx", "haproxy"]
AL_CS = ["akgw-nolog", "akgw-log", "nginx-nolog", "nginx-log"]
# Workload 8: each contender with its log on, and the same with it off.
AL_PAIRS = [("akgateway", "akgw-log", "akgw-nolog"), ("nginx", "nginx-log", "nginx-nolog")]


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def fmt(v, unit=""):
    if v is None:
        return "-"
    a = abs(v)
    if a >= 100:
        s = "%.0f" % v
    elif a >= 10:
        s = "%.1f" % v
    else:
        s = "%.2f" % v
    return s


def fmt_ms(us):
    if us is None:
        return "-"
    ms = us / 1000.0
    return "%.2f" % ms if ms < 10 else "%.1f" % ms


class Cell:
    def __init__(self):
        self.runs = []  # dicts

    def good(self):
        return [r for r in self.runs if r["status"] == "ok" and r["value"] is not None]

    def failed(self):
        return [r for r in self.runs if r["status"].startswith("FAILED")]

    def na(self):
        return [r for r in self.runs if r["status"].startswith("n/a")]

    def med(self, key="value"):
        vals = [r[key] for r in self.good() if r[key] is not None]
        return statistics.median(vals) if vals else None

    def lo(self):
        vals = [r["value"] for r in self.good()]
        return min(vals) if vals else None

    def hi(self):
        vals = [r["value"] for r in self.good()]
        return max(vals) if vals else None

    def by_round(self):
        return {r["round"]: r["value"] for r in self.good()}

    def efficiency(self, metric):
        """req (msg, conn) per CPU-second, or CPU-seconds per GiB."""
        vals = []
        for r in self.good():
            if r["cpu"] is None or r["work"] is None or r["work"] <= 0:
                continue
            if metric == "MB/s":
                vals.append(r["cpu"] / (r["work"] / 2.0 ** 30))
            elif r["cpu"] > 0:
                vals.append(r["work"] / r["cpu"])
        return statistics.median(vals) if vals else None

    def show(self):
        """The value as shown in a table: median, or FAILED / n/a."""
        if self.na() and not self.good():
            return self.na()[0]["status"]
        f = self.failed()
        m = self.med()
        if f:
            why = f[0]["status"][len("FAILED("):-1]
            if m is None:
                return "FAILED(%s)" % why
            return "%s FAILED(%d/%d runs: %s)" % (fmt(m), len(f), len(self.runs), why)
        if m is None:
            return "-"
        return fmt(m)


def ratio(a, b):
    """Median over rounds of a/b, both measured in the same round."""
    if a is None or b is None:
        return None
    ra, rb = a.by_round(), b.by_round()
    rs = [ra[k] / rb[k] for k in ra if k in rb and rb[k]]
    return statistics.median(rs) if rs else None


def fmt_ratio(x):
    return "-" if x is None else "%.2f" % x


def fmt_eff_ratio(a, b, metric):
    """a's efficiency over b's (work per CPU-second; for MB/s, b's CPU-s
    per GiB over a's, so that above 1 is better for a too)."""
    ea = a.efficiency(metric) if a else None
    eb = b.efficiency(metric) if b else None
    if ea is None or not eb:
        return "-"
    return fmt_ratio(eb / ea if metric == "MB/s" else ea / eb)


def load(path):
    data = {}  # (mode, w, cell) -> {"metric":, "cs": {c: Cell}}
    order = []
    with open(path) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) < 12:
                continue
            while len(p) < 13:
                p.append("")
            mode, w, cell, metric, c, rnd, val, p50, p99, work, cpu, status, note = p[:13]
            key = (mode, w, cell)
            if key not in data:
                data[key] = {"metric": metric, "cs": {}}
                order.append(key)
            d = data[key]["cs"].setdefault(c, Cell())
            d.runs.append({
                "round": rnd, "value": num(val), "p50": num(p50), "p99": num(p99),
                "work": num(work), "cpu": num(cpu), "status": status, "note": note,
            })
    return data, order


def md_table(head, rows):
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        out.append("| " + " | ".join(r) + " |")
    return "\n".join(out)


def eff_name(metric):
    if metric == "MB/s":
        return "proxy CPU-s per GiB"
    return "%s per proxy CPU-s" % metric.split("/")[0]


def summary(data, order):
    """Compact tables: one row per workload cell, one column per contender."""
    parts = []
    for mode in ("percore", "both"):
        keys = [k for k in order if k[0] == mode and k[1] not in ("6", "8") + H2_WS]
        if keys:
            rows = []
            for k in keys:
                d = data[k]
                cs = d["cs"]
                row = ["%s. %s" % (k[1], k[2]), d["metric"]]
                for c in HTTP_CS:
                    row.append(cs[c].show() if c in cs else "-")
                ak = cs.get("akgateway")
                row.append(fmt_ratio(ratio(ak, cs.get("haproxy"))))
                row.append(fmt_ratio(ratio(ak, cs.get("direct"))))
                rows.append(row)
            parts.append("### Proxies, %s\n\n" % MODES[mode] + md_table(
                ["workload", "unit", "direct", "akgateway", "nginx", "HAProxy",
                 "akgw/HAProxy", "akgw/direct"], rows))
        keys = [k for k in order if k[0] == mode and k[1] in H2_WS]
        if keys:
            rows = []
            for k in keys:
                d = data[k]
                cs = d["cs"]
                row = ["%s. %s" % (k[1], k[2]), d["metric"]]
                for c in H2_CS:
                    row.append(cs[c].show() if c in cs else "-")
                ak = cs.get("akgateway")
                for ref in ("nginx", "h2o"):
                    row.append(fmt_ratio(ratio(ak, cs.get(ref))))
                row.append(fmt_eff_ratio(ak, cs.get("nginx"), d["metric"]))
                rows.append(row)
            parts.append("### HTTP/2 and gRPC, %s\n\n" % MODES[mode] + md_table(
                ["workload", "unit", "direct", "akgateway", "nginx", "h2o", "HAProxy",
                 "akgw/nginx", "akgw/h2o", "akgw/nginx per CPU-s"], rows))
        keys = [k for k in order if k[0] == mode and k[1] == "6"]
        if keys:
            rows = []
            for k in keys:
                d = data[k]
                cs = d["cs"]
                row = [k[2], d["metric"]]
                for c in TUN_CS:
                    row.append(cs[c].show() if c in cs else "-")
                row.append(fmt_ratio(ratio(cs.get("akgw-ws"), cs.get("ssh"))))
                row.append(fmt_ratio(ratio(cs.get("akgw-wss"), cs.get("ssh"))))
                row.append(fmt_ratio(ratio(cs.get("akgw-ws"), cs.get("direct"))))
                rows.append(row)
            parts.append("### Reverse tunnels, %s\n\n" % MODES[mode] + md_table(
                ["workload", "unit", "direct", "akgw tunnel ws", "akgw tunnel wss",
                 "ssh -R", "akgw ws/ssh", "akgw wss/ssh", "akgw ws/direct"], rows))
    keys = [k for k in order if k[1] == "8"]
    if keys:
        rows = []
        for k in keys:
            cs = data[k]["cs"]
            for name, on, off in AL_PAIRS:
                rows.append(access_row(k[2], name, cs.get(on), cs.get(off)))
        parts.append("### Access log, %s\n\n" % MODES["percore"] + md_table(
            ["workload", "proxy", "log off req/s", "log on req/s", "cost (1 - on/off)",
             "log off req per CPU-s", "log on req per CPU-s", "CPU cost (1 - on/off)"], rows))
    keys = [k for k in order if k[0] == "mem"]
    if keys:
        rows = []
        for k in keys:
            cs = data[k]["cs"]
            n = "-"
            for c in MEM_CS:
                if c in cs and cs[c].runs and cs[c].runs[0]["work"]:
                    n = "%d" % cs[c].runs[0]["work"]
            row = [{"http": "idle keep-alive connection", "ws": "idle WebSocket",
                    "tunnel": "idle tunnel"}.get(k[2], k[2]), n]
            for c in MEM_CS:
                row.append(cs[c].show() if c in cs else "-")
            rows.append(row)
        parts.append("### Memory: gateway RSS growth per idle connection (KiB)\n\n" + md_table(
            ["per", "connections", "akgateway", "nginx", "HAProxy"], rows))
    return "\n\n".join(parts)


def access_cost(on, off):
    """1 - on/off: the median over rounds of per-round ratios (req/s), and
    the ratio of the efficiency medians (requests per CPU-second)."""
    r = ratio(on, off)
    cost = None if r is None else 1.0 - r
    eon = on.efficiency("req/s") if on else None
    eoff = off.efficiency("req/s") if off else None
    ecost = 1.0 - eon / eoff if eon is not None and eoff else None
    return cost, ecost, eon, eoff


def fmt_pct(x):
    return "-" if x is None else "%.1f %%" % (100.0 * x)


def access_row(cell, name, on, off):
    cost, ecost, eon, eoff = access_cost(on, off)
    return [cell, name, off.show() if off else "-", on.show() if on else "-", fmt_pct(cost),
            fmt(eoff), fmt(eon), fmt_pct(ecost)]


# The goals of issue 18, per core.  Workload 1's cells as the goals name them.
GOAL_W1_CELLS = ["%s x %d conns" % (size, conns)
                 for size in ("0 B", "1 KiB", "16 KiB") for conns in (64, 256)]


def goal_result(value, target, higher, unit="x"):
    """met, or missed by how much: relative to the target for ratios and
    KiB, in percentage points for a cost in %."""
    if value is None:
        return "not measured"
    ok = value >= target if higher else value <= target
    if ok:
        return "met"
    if unit == "%":
        return "missed by %.1f points" % (100.0 * abs(value - target))
    return "missed by %.1f %%" % (100.0 * abs(value - target) / target)


def goals(data, order, quick):
    """The goals table: one row per goal and per cell, from this run's
    medians.  Returns (markdown, met, missed, unmeasured)."""
    rows = []
    missing = []

    def cell(mode, w, name):
        d = data.get((mode, w, name))
        return d["cs"] if d else None

    def find(mode, w, suffix):
        for k in order:
            if k[0] == mode and k[1] == w and k[2].endswith(suffix):
                return k[2], data[k]["cs"]
        return None, None

    def note_failed(*cells):
        n = sum(len(c.failed()) for c in cells if c)
        return " (%d failed run%s left out)" % (n, "" if n == 1 else "s") if n else ""

    def add(goal, where, target, value, higher, shown, source, unit="x", present=True,
            why=None):
        """A row; a cell this run did not have gets none, only a mention
        below the table.  why: the n/a reason of a cell that does not apply
        yet."""
        res = goal_result(value, target, higher, unit)
        if value is None:
            missing.append((goal.split(".")[0], where))
            if not present:
                return
            res = "not measured: %s" % (why or "no good run")
        rows.append([goal, where, target_text(target, higher, unit), shown, res, source])

    def target_text(t, higher, unit):
        op = "≥" if higher else "≤"
        if unit == "%":
            return "%s %.0f %%" % (op, 100 * t)
        if unit == "KiB":
            return "%s %.1f KiB" % (op, t)
        return "%s %.2f×" % (op, t)

    def eff_pair(cs, ref, name, target, goal):
        ak = cs.get("akgateway") if cs else None
        rf = cs.get(ref) if cs else None
        ea = ak.efficiency("req/s") if ak else None
        er = rf.efficiency("req/s") if rf else None
        v = ea / er if ea is not None and er else None
        add(goal, name, target, v, True, fmt_ratio(v) + (note_failed(ak, rf) if v else ""),
            "%s vs %s req per CPU-s" % (fmt(ea), fmt(er)) if v else "-", present=cs is not None)

    def rps_pair(cs, ref, name, target, goal, w="1"):
        ak = cs.get("akgateway") if cs else None
        rf = cs.get(ref) if cs else None
        ma = ak.med() if ak else None
        mr = rf.med() if rf else None
        v = ma / mr if ma is not None and mr else None
        add(goal, name, target, v, True, fmt_ratio(v) + (note_failed(ak, rf) if v else ""),
            "%s vs %s req/s" % (fmt(ma), fmt(mr)) if v else "-", present=cs is not None)

    for ref, target in (("haproxy", 1.15), ("nginx", 1.1)):
        for name in GOAL_W1_CELLS:
            eff_pair(cell("percore", "1", name), ref, name, target,
                     "1. req per proxy CPU-s, akgateway / %s" % NAMES[ref])
    for ref in ("haproxy", "nginx"):
        for name in GOAL_W1_CELLS:
            rps_pair(cell("percore", "1", name), ref, name, 1.0,
                     "1. req/s, akgateway / %s" % NAMES[ref])
    for dirn in ("download", "upload"):
        name, cs = find("percore", "3", " " + dirn)
        ak = cs.get("akgateway") if cs else None
        best, bname = None, None
        for ref in ("nginx", "haproxy"):
            m = cs[ref].med() if cs and ref in cs else None
            if m is not None and (best is None or m > best):
                best, bname = m, NAMES[ref]
        ma = ak.med() if ak else None
        v = ma / best if ma is not None and best else None
        add("3. bulk %s MB/s, akgateway / the better of nginx and HAProxy" % dirn,
            name or "bulk %s" % dirn, 1.0, v, True,
            fmt_ratio(v) + (note_failed(ak, cs.get("nginx"), cs.get("haproxy")) if v else ""),
            "%s vs %s (%s) MB/s" % (fmt(ma), fmt(best), bname) if v else "-",
            present=cs is not None)
    cs = cell("percore", "4", "TLS 1 KiB x 64 conns")
    for ref in ("nginx", "haproxy"):
        rps_pair(cs, ref, "TLS 1 KiB x 64 conns", 1.0,
                 "4. TLS req/s, akgateway / %s" % NAMES[ref])
    for kind, target, label in (("http", 1.7, "idle keep-alive connection"),
                                ("tunnel", 6.0, "idle tunnel")):
        cs = cell("mem", "7", kind)
        ak = cs.get("akgateway") if cs else None
        v = ak.med() if ak else None
        n = ak.runs[0]["work"] if ak and ak.runs and ak.runs[0]["work"] else None
        add("7. KiB per %s, akgateway" % label, label, target, v, False,
            "%s KiB" % fmt(v) if v is not None else "-",
            "%d connections" % n if v is not None and n else "-", "KiB", present=cs is not None)
    cs = None
    for k in order:
        if k[1] == "8":
            cs = data[k]["cs"]
    cost = ecost = None
    if cs:
        cost, ecost, _, _ = access_cost(cs.get("akgw-log"), cs.get("akgw-nolog"))
    src = "-"
    if cs and cost is not None:
        ncost, _, _, _ = access_cost(cs.get("nginx-log"), cs.get("nginx-nolog"))
        src = "CPU cost %s; nginx (buffer=64k): %s" % (fmt_pct(ecost), fmt_pct(ncost))
    add("8. access log (info, to a file) cost in req/s, akgateway", "1 KiB x 64 conns",
        0.10, cost, False, fmt_pct(cost) + (note_failed(cs.get("akgw-log"), cs.get("akgw-nolog"))
                                            if cost is not None else ""), src, "%",
        present=cs is not None)

    # Issue 19: HTTP/2 (workload 9), per core.
    def na_why(*cells):
        for c in cells:
            if c and c.na() and not c.good():
                return c.na()[0]["status"]
        return None

    h2_cells = [k[2] for k in order if k[0] == "percore" and k[1] == "9" and
                data[k]["metric"] == "req/s"]
    for ref, target in (("nginx", 1.1), ("h2o", 1.0)):
        for name in h2_cells:
            cs = cell("percore", "9", name)
            ak, rf = cs.get("akgateway"), cs.get(ref)
            ea = ak.efficiency("req/s") if ak else None
            er = rf.efficiency("req/s") if rf else None
            v = ea / er if ea is not None and er else None
            add("9. h2 req per proxy CPU-s, akgateway / %s" % NAMES[ref], name, target, v, True,
                fmt_ratio(v) + (note_failed(ak, rf) if v else ""),
                "%s vs %s req per CPU-s" % (fmt(ea), fmt(er)) if v else "-",
                why=na_why(ak, rf))
    # h2 bulk against HTTP/1.1 through the same gateway: h2c against
    # workload 3's download, h2 on TLS against workload 9's HTTP/1.1 on the
    # same TLS listener.
    for h2, h1w, h1suffix in (("h2c ", "3", " download"), ("h2 TLS ", "9", " download")):
        name, cs = None, None
        for k in order:
            if k[0] == "percore" and k[1] == "9" and k[2].startswith(h2) and \
                    k[2].endswith(" download"):
                name, cs = k[2], data[k]["cs"]
        if h1w == "3":
            h1name, h1cs = find("percore", "3", h1suffix)
        else:
            h1name, h1cs = None, None
            for k in order:
                if k[0] == "percore" and k[1] == "9" and k[2].startswith("HTTP/1.1 TLS"):
                    h1name, h1cs = k[2], data[k]["cs"]
        ak = cs.get("akgateway") if cs else None
        ak1 = h1cs.get("akgateway") if h1cs else None
        m2 = ak.med() if ak else None
        m1 = ak1.med() if ak1 else None
        v = m2 / m1 if m2 is not None and m1 else None
        why = na_why(ak)
        if why is None and cs is not None and h1cs is None:
            why = "workload %s not in this run" % h1w
        add("9. h2 bulk download MB/s, akgateway h2 / akgateway HTTP/1.1",
            name or (h2 + "bulk download"), 0.9, v, True,
            fmt_ratio(v) + (note_failed(ak, ak1) if v else ""),
            "%s vs %s MB/s (%s)" % (fmt(m2), fmt(m1), "%s. %s" % (h1w, h1name))
            if v else "-", present=cs is not None, why=why)

    met = sum(1 for r in rows if r[4] == "met")
    missed = sum(1 for r in rows if r[4].startswith("missed"))
    total = met + missed + len(missing)
    text = [md_table(["goal", "cell", "target", "measured", "result", "from"], rows)]
    text.append("\n%d of %d goals met, %d missed, %d not measured in this run."
                % (met, total, missed, len(missing)))
    if quick:
        text.append("This is a quick run (QUICK=1): one short run per contender, so the "
                    "numbers are indicative only; bulk transfers are 256 MiB and idle counts "
                    "1000 / 100 instead of the full run's 1 GiB and 10 000 / 1000.")
    if missing:
        byw = {}
        for w, where in missing:
            if where not in byw.setdefault(w, []):
                byw[w].append(where)
        text.append("Not measured by this run (%sleft out by ONLY, MODES or W1_SIZES / "
                    "W1_CONNS, or without a good run): %s." % (
                        "a quick run has only workload 1's 1 KiB x 64 cell; or "
                        if quick else "",
                        "; ".join("workload %s: %s" % (w, ", ".join(c)) for w, c in byw.items())))
    return "\n".join(text), met, missed, len(missing)


def details(data, order):
    parts = []
    for mode in ("percore", "both", "mem"):
        for w in sorted(set(k[1] for k in order if k[0] == mode), key=int):
            keys = [k for k in order if k[0] == mode and k[1] == w]
            if w == "7":
                rows = []
                for k in keys:
                    for c, cell in data[k]["cs"].items():
                        r = cell.runs[0]
                        rows.append([k[2], NAMES.get(c, c), cell.show(),
                                     "%d" % r["work"] if r["work"] else "-",
                                     r["note"] or "-"])
                parts.append("#### %s\n\n" % WORKLOADS[w] + md_table(
                    ["idle", "contender", "KiB per connection", "connections", "VmRSS"], rows))
                continue
            ref = {"6": "ssh", "8": "log off", "9": "nginx", "10": "nginx"}.get(w, "haproxy")
            rows = []
            metric = data[keys[0]]["metric"]
            for k in keys:
                d = data[k]
                cs = d["cs"]
                order_cs = {"6": TUN_CS, "8": AL_CS, "9": H2_CS, "10": H2_CS}.get(w, HTTP_CS)
                for c in order_cs + [x for x in cs if x not in order_cs]:
                    if c not in cs:
                        continue
                    cell = cs[c]
                    eff = cell.efficiency(d["metric"])
                    cpu_na = all(r["cpu"] is None for r in cell.runs)
                    rows.append([
                        k[2], NAMES.get(c, c), d["metric"], cell.show(),
                        "%s–%s" % (fmt(cell.lo()), fmt(cell.hi())) if cell.good() else "-",
                        fmt_ms(cell.med("p50")), fmt_ms(cell.med("p99")),
                        fmt_ratio(ratio(cell, cs.get(
                            c.replace("-log", "-nolog") if w == "8" else ref))),
                        fmt_ratio(ratio(cell, cs.get("direct"))),
                        ("n/a" if cpu_na and c == "direct" else
                         "%s %s" % (fmt(eff), "s/GiB" if d["metric"] == "MB/s" else "/CPU-s")
                         if eff is not None else "-"),
                        ("-" if cell.na() and not cell.good() else
                         "%d/%d" % (len(cell.good()), len(cell.runs))),
                    ])
            parts.append("#### %s — %s\n\n" % (WORKLOADS[w], MODES[mode]) + md_table(
                ["workload", "contender", "unit", "median", "min–max", "p50 ms", "p99 ms",
                 "vs %s" % NAMES.get(ref, ref), "vs direct", "efficiency", "good runs"], rows))
    return "\n\n".join(parts)


def raw_runs(path):
    rows = []
    with open(path) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) >= 12:
                rows.append([x if x else "-" for x in (p + [""])[:13]])
    return md_table(["mode", "w", "workload", "unit", "contender", "run", "value",
                     "p50 µs", "p99 µs", "work", "proxy CPU-s", "status", "note"], rows)


def plot_data(data, order, datadir):
    """One data file per chart panel; returns their paths."""
    os.makedirs(datadir, exist_ok=True)
    files = []

    def q(s):
        return '"%s"' % s.replace('"', "'")

    for mode in ("percore", "both"):
        keys = [k for k in order if k[0] == mode and k[1] in "12345"]
        if not keys:
            continue
        path = os.path.join(datadir, "rel-%s.dat" % mode)
        with open(path, "w") as f:
            f.write("# Throughput relative to HAProxy in the same run (%s)\n" %
                    ("per-core" if mode == "percore" else "both cores"))
            f.write("workload direct akgateway nginx HAProxy\n")
            for k in keys:
                cs = data[k]["cs"]
                vals = [ratio(cs.get(c), cs.get("haproxy")) for c in HTTP_CS]
                f.write("%s %s\n" % (q("%s. %s" % (k[1], k[2])), " ".join(
                    "NaN" if v is None else "%.3f" % v for v in vals)))
        files.append(path)
    for mode in ("percore", "both"):
        keys = [k for k in order if k[0] == mode and k[1] == "6"]
        if not keys:
            continue
        path = os.path.join(datadir, "tunnel-%s.dat" % mode)
        with open(path, "w") as f:
            f.write("# Reverse tunnels relative to ssh -R in the same run (%s)\n" %
                    ("per-core" if mode == "percore" else "both cores"))
            f.write("workload direct akgw-ws akgw-wss ssh-R\n")
            for k in keys:
                cs = data[k]["cs"]
                vals = [ratio(cs.get(c), cs.get("ssh")) for c in TUN_CS]
                f.write("%s %s\n" % (q(k[2]), " ".join(
                    "NaN" if v is None else "%.3f" % v for v in vals)))
        files.append(path)
    keys = [k for k in order if k[0] == "mem"]
    if keys:
        path = os.path.join(datadir, "mem.dat")
        with open(path, "w") as f:
            f.write("# Memory per idle connection, KiB (lower is better)\n")
            f.write("idle akgateway nginx HAProxy\n")
            for k in keys:
                cs = data[k]["cs"]
                vals = [cs[c].med() if c in cs else None for c in MEM_CS]
                label = {"http": "idle keep-alive", "ws": "idle WebSocket",
                         "tunnel": "idle tunnel"}.get(k[2], k[2])
                f.write("%s %s\n" % (q(label), " ".join(
                    "NaN" if v is None else "%.3f" % v for v in vals)))
        files.append(path)
    return files


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--meta", required=True)
    ap.add_argument("--commands", required=True)
    ap.add_argument("--failures", default="")
    ap.add_argument("--md", required=True)
    ap.add_argument("--png", required=True)
    ap.add_argument("--datadir", required=True)
    ap.add_argument("--plot", required=True)
    ap.add_argument("--configs", default="")
    a = ap.parse_args()

    data, order = load(a.results)
    meta = []
    with open(a.meta) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("\t")
            meta.append((k, v))
    md = dict(meta)

    summ = summary(data, order)
    sys.stdout.write("\n" + summ + "\n\n")
    gtab, _, _, _ = goals(data, order, md.get("knob:QUICK") == "1")
    sys.stdout.write("### Goals (issues 18 and 19)\n\n" + gtab + "\n\n")

    files = plot_data(data, order, a.datadir)
    png_ok = False
    if files:
        r = subprocess.run(["gnuplot", "-e", "files='%s'; out='%s'" % (" ".join(files), a.png),
                            a.plot], capture_output=True, text=True)
        png_ok = r.returncode == 0 and os.path.exists(a.png)
        if not png_ok:
            sys.stderr.write("gnuplot failed: %s\n" % r.stderr)

    out = []
    out.append("# akgateway benchmark — %s, %s\n" % (md.get("date", "?"), md.get("host", "?")))
    out.append("Made by `bench/run.sh` (QUICK=%s). How to read this: `bench/README.md`. "
               "Higher is better except latency, CPU-s per GiB and memory; ratios are "
               "medians of per-run ratios between contenders measured in the same run, "
               "alternating run by run. `FAILED(...)` marks runs with errors (non-2xx, "
               "socket errors, short transfers); `n/a` marks what does not apply.\n"
               % md.get("knob:QUICK", "?"))
    if png_ok:
        out.append("![chart](%s)\n" % os.path.basename(a.png))
    out.append("## Machine\n")
    out.append(md_table(["", ""], [[k, v] for k, v in meta if k in (
        "host", "cpu", "cores", "hypervisor", "memory", "kernel", "os", "ulimit -n",
        "project commit", "duration", "idle connections")]))
    out.append("\n## Summary\n")
    out.append(summ)
    out.append("\n## Goals (issues 18 and 19)\n")
    out.append("Per core (the per-core table; memory from workload 7), from this run's "
               "medians: efficiency ratios are ratios of the efficiency column's medians "
               "(requests per proxy CPU-second), req/s and MB/s ratios ratios of median "
               "req/s and MB/s; the access log's cost is 1 − on/off, the median of per-run "
               "ratios of alternating runs. \"missed by X %\" is the shortfall relative "
               "to the target (in percentage points for the cost).\n")
    out.append(gtab)
    out.append("\n## Details\n")
    out.append("Efficiency is the work done per CPU-second of the proxy's processes "
               "(utime+stime from /proc/PID/stat of the process and its children, "
               "before and after each run): requests, connections or messages per "
               "CPU-second, or CPU-seconds per GiB for bulk transfers. For tunnels it "
               "counts both ends (akgateway + aktunnel; sshd + ssh). direct has no "
               "proxy: n/a.\n")
    out.append(details(data, order))
    h2 = [(k[3:], v) for k, v in meta if k.startswith("h2:")]
    if h2:
        out.append("\n## HTTP/2 check\n")
        out.append("Whether akgateway answers h2 (without it, its workload 9 cells are n/a):\n")
        out.append(md_table(["proxy", "result"], [[NAMES.get(k, k), v] for k, v in h2]))
    tls = [(k[4:], v) for k, v in meta if k.startswith("tls:")]
    if tls:
        out.append("\n## TLS check\n")
        out.append("Probed with `openssl s_client` against each TLS listener:\n")
        out.append(md_table(["proxy", "result"], [[NAMES.get(k, k), v] for k, v in tls]))
    out.append("\n## Versions\n")
    out.append(md_table(["tool", "version"], [[k[2:], v] for k, v in meta if k.startswith("v:")]))
    out.append("\n## Settings\n")
    out.append(md_table(["knob", "value"], [[k[5:], v] for k, v in meta if k.startswith("knob:")]))
    if a.failures and os.path.exists(a.failures) and os.path.getsize(a.failures):
        with open(a.failures, errors="replace") as f:
            text = f.read()
        if len(text) > 20000:
            text = text[:20000] + "\n[... cut ...]\n"
        out.append("\n## Output of failed runs\n")
        out.append("```\n" + text.rstrip("\n") + "\n```")
    out.append("\n## Every run\n")
    out.append(raw_runs(a.results))
    out.append("\n## Command lines\n")
    out.append("Every command the harness ran for the contenders, the warm-ups "
               "and the load (duplicates removed, in order; ports, the temporary "
               "directory and the throwaway tunnel token change from run to run):\n")
    with open(a.commands) as f:
        out.append("```\n" + f.read().rstrip("\n") + "\n```")
    if a.configs and os.path.isdir(a.configs):
        out.append("\n## Configurations\n")
        out.append("As rendered from `bench/conf/*.in` for this run:\n")
        for name in sorted(os.listdir(a.configs)):
            with open(os.path.join(a.configs, name), errors="replace") as f:
                out.append("<details><summary>%s</summary>\n\n```\n%s\n```\n</details>\n"
                           % (name, f.read().rstrip("\n")))
    with open(a.md, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
