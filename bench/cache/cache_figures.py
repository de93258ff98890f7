"""Figures both cache benchmarks (bench/cache/cache_fill.py, bench/cache/cache_bench.py) report per
case, from what their writers and the servers said: stores dropped by cause, the
slowest puts, each writer's own clocks, the shared clock's round trips, NSUP's
refusals per node (from each node's log), and the JSON summary a driver
(bench/cache/cluster_cases.py) puts in one table.
"""

import calendar
import json
import math
import os
import re
import time

# The engine's drop counters by cause (lmca_stats_t); an older engine lacks some.
DROPS = ("dropped_full", "dropped_busy", "dropped_unsent", "dropped_unreachable",
         "dropped_paced")


def summed(engines, names):
    """{name: sum over the writers' engine counters}, 0 where a build lacks one."""
    return {n: sum(int(e.get(n, 0)) for e in engines) for n in names}


def percentile(values, q):
    """The q-th percentile (0..100), nearest rank; None for no values."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def put_times(by_writer):
    """{writer: [seconds each put took]} -> the slowest per writer and overall, and
    the overall p99."""
    every = [t for ts in by_writer.values() for t in ts]
    return {"max_per_writer": {str(w): round(max(ts), 3) if ts else None
                               for w, ts in sorted(by_writer.items())},
            "max": round(max(every), 3) if every else None,
            "p99": round(percentile(every, 99), 3) if every else None, "n": len(every)}


def clocks(engines_by_writer, stores, seconds):
    """Each writer's own clocks (clock_local: places made with no clock record
    reachable; clock_fallbacks: reservations a fallback record served), the round trips
    a clock record answered key busy (clock_busy, summed), and the shared
    clock's round trips summed over the writers, per store and per second."""
    trips = sum(int(e.get("clock_reservations", 0)) for e in engines_by_writer.values())
    return {"clock_local": {str(w): int(e.get("clock_local", 0))
                            for w, e in sorted(engines_by_writer.items())},
            "clock_fallbacks": {str(w): int(e.get("clock_fallbacks", 0))
                                for w, e in sorted(engines_by_writer.items())},
            "clock_busy": sum(int(e.get("clock_busy", 0)) for e in engines_by_writer.values()),
            "clock_reservations": trips,
            "per_store": round(trips / stores, 3) if stores else None,
            "per_second": round(trips / seconds, 2) if seconds else None}


def count(names):
    out = {}
    for name in names:
        out[name] = out.get(name, 0) + 1
    return out


# ------------------------------------------------------------------ NSUP, by the logs

_STAMP = re.compile(r"^(\w{3} \d{2} \d{4} \d{2}:\d{2}:\d{2})")


def nsup_refusals(path, ns, since):
    """NSUP cycles that refused to evict since `since` (unix time), and the longest
    run of consecutive refusing cycles ("no records below eviction void-time"; a
    cycle that evicted ends a run)."""
    refused = run = longest = 0
    ns_tag = "{%s}" % ns
    with open(path, errors="replace") as f:
        for line in f:
            m = _STAMP.match(line)
            if not m or calendar.timegm(time.strptime(m[1], "%b %d %Y %H:%M:%S")) < since:
                continue
            if ns_tag in line and "no records below eviction void-time" in line:
                refused += 1
                run += 1
                longest = max(longest, run)
            elif ns_tag in line and (e := re.search(r"nsup-done: .* evicted \((\d+),", line)):
                run = 0 if int(e[1]) > 0 else run
    return refused, longest


def out_of_space(path, ns, since):
    """Writes the node refused since `since` because the stripe (memory) or device the
    record fell in had no free block: its "out of space" warnings, with the counts
    the log folds into "(repeated:N)"; stop_writes stays false meanwhile."""
    ns_tag, n = "{%s}" % ns, 0
    with open(path, errors="replace") as f:
        for line in f:
            if ns_tag not in line or "out of space" not in line:
                continue
            m = _STAMP.match(line)
            if m and calendar.timegm(time.strptime(m[1], "%b %d %Y %H:%M:%S")) >= since:
                folded = re.search(r"\(repeated:(\d+)\)", line)
                n += int(folded[1]) if folded else 1
    return n


def server_logs(given, names, loopback_dir=None):
    """[(node name, log path)]: --server-log's [NAME=]PATH, or else the loopback
    script's log of every named node (names: the control names of the nodes)."""
    if given:
        out = []
        for k, text in enumerate(given):
            name, sep, path = text.partition("=")
            out.append((name, path) if sep else (f"log{k}" if len(given) > 1 else "node", text))
        return out
    base = loopback_dir or os.environ.get("AEROSPIKE_LOOPBACK_DIR", "/tmp/aerospike-loopback")
    out = [(n, os.path.join(base, f"node-{n}", "aerospike.log")) for n in names]
    return [(n, p) for n, p in out if os.path.exists(p)]


def nsup_per_node(logs, ns, since):
    """{node: {"refused": cycles, "longest_run": cycles in a row, "out_of_space":
    writes refused}} from their logs."""
    out = {}
    for name, path in logs:
        try:
            refused, longest = nsup_refusals(path, ns, since)
            out[name] = {"refused": refused, "longest_run": longest,
                         "out_of_space": out_of_space(path, ns, since)}
        except OSError as e:
            out[name] = {"error": str(e)}
    return out


def nsup_line(nsup):
    if not nsup:
        return "NSUP: no server log (--server-log)"
    return "NSUP refused " + ", ".join(
        f"{n}: {v['refused']} cycles, at most {v['longest_run']} in a row"
        f"{_out_of_space(v)}" if "refused" in v
        else f"{n}: {v['error']}" for n, v in nsup.items())


def _out_of_space(v):
    return f" ({v['out_of_space']} writes out of space)" if v.get("out_of_space") else ""


def write_json(path, summary):
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(summary, f, indent=2, default=str)
            f.write("\n")
