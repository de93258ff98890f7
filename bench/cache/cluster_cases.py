"""bench/cache/cache_fill.py over the cluster cases of a matrix, in one markdown table: does
the tier keep taking stores and keep the newest when a node dies, stalls or comes
back full, and when writers' wall clocks are off?

Cases (--cases, each run for every --shapes entry, writers x chunk):

    plain    no event
    kill     kill:clock@0.4 and restart:clock@+30: the node that masters the shared
             clock's record killed at 40 % of the fill, started again 30 s later
             (migrations while full)
    pause    pause:clock@0.4:8: that node stopped for 8 s
    clocks   --writer-clock 1:+30s --writer-clock 2:-300s: two writers on hosts whose
             wall clocks are 30 s ahead and 5 minutes behind

Before each case every node the last one left killed or paused is started or resumed
again (the control command: scripts/aerospike-loopback.sh by default, --ctl, or the
test server's fixture-node command), and the driver waits until the cluster is whole:
every node answers `statistics` with cluster_size = --cluster-size and
migrate_partitions_remaining 0. Each case writes its figures (cache_fill.py --json)
and its output to --out; the table goes to --out/cluster_cases.md, under the commit,
machine, server build and command that made it (bench/record.py), and with every
case's figures to --out/cluster_cases.json. Run it with the
environment the nodes were started with (ASD, LOOPBACK_DATA_SIZE, ...): the loopback
script starts a node again from them.

    export ASD=... LOOPBACK_DATA_SIZE=2G
    for n in cache0 cache1 cache2; do scripts/aerospike-loopback.sh start $n; done
    .venv/bin/python bench/cache/cluster_cases.py --hosts 127.0.0.1:3600,127.0.0.1:3610 \\
        --out bench/results/cluster [--shapes 4x1M,4x4M,8x256K] [--cases plain,kill] \\
        [--factor 5] [-- ARGS FOR cache_fill.py]
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import cache_cluster as cluster  # noqa: E402
import cache_events as events  # noqa: E402
import record  # noqa: E402  bench/record.py

CASES = {
    "plain": [],
    "kill": ["--event", "kill:clock@0.4", "--event", "restart:clock@+30"],
    "pause": ["--event", "pause:clock@0.4:8"],
    "clocks": ["--writer-clock", "1:+30s", "--writer-clock", "2:-300s"],
}
SHAPES = "4x1M,4x4M,8x256K"


def options(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", default=os.environ.get("AEROSPIKE_TEST_HOSTS"))
    p.add_argument("--namespace", default="lmcache")
    p.add_argument("--out", required=True)
    p.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
    p.add_argument("--shapes", default=SHAPES, help=f"WRITERSxCHUNK,... (default {SHAPES})")
    p.add_argument("--factor", type=float, default=5.0)
    p.add_argument("--cluster-size", type=int, default=3)
    p.add_argument("--whole-timeout", type=float, default=600.0,
                   help="seconds to wait for a whole cluster before a case")
    p.add_argument("--ctl", default=None, metavar="CMD")
    p.add_argument("--ctl-node", action="append", default=[], metavar="HOST:PORT=NAME")
    p.add_argument("fill_args", nargs="*", help="after --: more arguments for cache_fill.py")
    a = p.parse_args(argv)
    if not a.hosts:
        p.error("give --hosts (or AEROSPIKE_TEST_HOSTS)")
    a.cases = a.cases.split(",")
    bad = [c for c in a.cases if c not in CASES]
    if bad:
        p.error(f"--cases: no case {bad[0]!r}")
    try:
        a.shapes = [parse_shape(s) for s in a.shapes.split(",")]
        a.ctl_nodes = [cluster.parse_ctl_node(t) for t in a.ctl_node]
    except ValueError as e:
        p.error(str(e))
    return a


def parse_shape(text):
    """'4x1M' -> (4, '1M')."""
    w, sep, chunk = text.lower().partition("x")
    if not sep or not w.isdigit() or not chunk:
        raise ValueError(f"--shapes: {text!r} is not WRITERSxCHUNK, e.g. 4x1M")
    return int(w), chunk.upper()


# ------------------------------------------------------------------ the cluster

def discover(a):
    from lmcache_aerospike import _native

    conn = _native.Connector(hosts=a.hosts, namespace=a.namespace, set="lmca_cases")
    try:
        return cluster.Nodes.discover(conn, a.namespace, a.ctl_nodes)
    finally:
        conn.close()


def restore(nodes, control, log=print):
    """Resumes, then starts again, every named node that does not answer."""
    for address in nodes.addresses:
        name = nodes.names.get(address)
        if name is None or answers(address):
            continue
        for action in ("resume", "restart"):
            ok, detail = control.act(action, name)
            log(f"restore: {action} {name}: {'ok' if ok else 'FAILED'} {detail}".rstrip())
            if answers(address):
                break


def answers(address):
    try:
        cluster.info_at(address, "statistics", timeout=2.0)
        return True
    except OSError:
        return False


def make_whole(a, nodes, control, log=print):
    restore(nodes, control, log)
    ok, waited, state = cluster.wait_whole(nodes.addresses, a.cluster_size, a.whole_timeout)
    log(f"cluster {'whole' if ok else 'NOT whole'} after {waited:.0f} s: {state}")
    return ok


# ------------------------------------------------------------------ the cases

def run_case(a, case, writers, chunk):
    """Runs cache_fill.py; returns its figures (or {"error": ...})."""
    name = f"{case}-{writers}x{chunk}"
    path = os.path.join(a.out, f"{name}.json")
    cmd = [sys.executable, os.path.join(HERE, "cache_fill.py"), "--hosts", a.hosts,
           "--namespace", a.namespace, "--writers", str(writers), "--chunk", chunk,
           "--factor", f"{a.factor:g}", "--json", path, *CASES[case], *a.fill_args]
    cmd += (["--ctl", a.ctl] if a.ctl else []) + [x for t in a.ctl_node for x in ("--ctl-node", t)]
    print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
    if os.path.exists(path):
        os.remove(path)
    with open(os.path.join(a.out, f"{name}.log"), "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc != 0 or not os.path.exists(path):
        return {"case": case, "error": f"cache_fill.py exited {rc} (see {name}.log)"}
    with open(path) as f:
        return {"case": case, **json.load(f)}


# ------------------------------------------------------------------ the table

COLUMNS = ("case", "writers x chunk", "stored / offered", "put raised", "dropped",
           "MB/s", "newest fifth", "oldest fifth", "warm reads hit", "warm alive",
           "exact LRU: warm reads hit, alive", "slowest put s (p99)",
           "clock trips / store, / s (key busy)", "own clocks (fallbacks)",
           "NSUP refused (longest run)", "debris / records", "wrong bytes",
           "events, writers' clocks")


def cells(s):
    """One row of the table from a case's figures."""
    if "error" in s:
        return [s["case"], "", s["error"]] + [""] * (len(COLUMNS) - 3)
    dropped = {k[8:]: v for k, v in s["dropped"].items() if v}
    w, p, c = s["warm"], s["puts"], s["clock"]
    nsup = s.get("nsup") or {}
    return [
        s["case"], f"{s['writers']} x {_size(s['chunk_bytes'])}",
        f"{s['stored']:,} / {s['offered']:,}",
        ", ".join(f"{k} {v}" for k, v in s["failed_by_error"].items()) or "0",
        ", ".join(f"{k} {v}" for k, v in dropped.items()) or "0",
        f"{s['mb_per_s']:.0f}", f"{s['newest_fifth']:.2f}", f"{s['oldest_fifth']:.2f}",
        f"{w['hit']} / {w['reads_after_first_capacity']}", f"{w['alive']} / {w['size']}",
        _lru(s.get("lru"), w["size"]), f"{p['max']} ({p['p99']})",
        f"{c['per_store']}, {c['per_second']} ({c.get('clock_busy', 0)})",
        f"{sum(c['clock_local'].values())} ({sum(c['clock_fallbacks'].values())})",
        "; ".join(f"{n}: {v['refused']} ({v['longest_run']})"
                  + (f", {v['out_of_space']} out of space" if v.get("out_of_space") else "")
                  for n, v in nsup.items() if "refused" in v) or "–",
        f"{s['debris']} / {s['objects']}", str(s["wrong_bytes"]),
        "; ".join([_event(r) for r in s["events"]] + _clocks(s)) or "–",
    ]


def _lru(lru, size):
    """An exact LRU of the same budget (cache_fill.exact_lru), in the table's terms."""
    if not lru:
        return "–"
    return f"{lru['warm_hit']} / {lru['warm_reads']}, {lru['warm_alive']} / {size}"


def _size(n):
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n >> 10} KiB"


def _event(r):
    if r["t_s"] is None:
        return f"{r['event']} not reached"
    return (f"{r['action']} {r['node']} {r['t_s']:.0f} s ("
            + ("after the fill" if r["after_run"] else f"{100 * r['share_done']:.0f} %") + ")"
            + ("" if r["ok"] else " FAILED"))


def _clocks(s):
    """Writers under faketime, with their wall clock's offset as measured."""
    measured = s.get("wall_offset_s") or {}
    return [f"writer {w} clock {o} (measured {measured.get(w)} s)"
            for w, o in (s.get("writer_clocks") or {}).items()]


def table(summaries):
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells(s)) + " |" for s in summaries]
    return lines


def write_table(a, summaries, provenance):
    """cluster_cases.md (the table, under its provenance) and cluster_cases.json (both,
    and every case's figures) in --out: a record that says what made it."""
    nodes = next((s["nodes"] for s in summaries if "nodes" in s), [])
    md = ("# Cache fill on a cluster, with events\n\n"
          + record.header_line(provenance) + "\n"
          f"`bench/cache/cluster_cases.py` against {a.hosts} "
          f"({', '.join(str(n.get('name') or n['address']) for n in nodes)}), "
          f"{a.factor:g}x the capacity offered per case. Stores in the order they "
          "returned; dropped by the engines' causes; own clocks: places made with no "
          "clock record reachable (clock_local), and reservations a fallback record "
          "served; key busy: clock round trips a record answered so; NSUP refused: "
          "cycles per node, the longest run of them in brackets, and the writes a node "
          "refused as out of space (its log: no free block in the record's stripe or "
          "device)."
          "\n\n" + "\n".join(table(summaries)) + "\n")
    doc = {"provenance": provenance, "cases": summaries}
    return record.write(a.out, "cluster_cases", doc, md)[1]


def main(argv=None):
    a = options(argv)
    os.makedirs(a.out, exist_ok=True)
    nodes = discover(a)
    # Before any event: a node killed last would leave the server's build unknown.
    provenance = record.provenance(a.hosts, packages=(), argv=argv, script=__file__,
                                   namespace=a.namespace)
    control = events.Control.choose(nodes, a.ctl)
    summaries = []
    for case in a.cases:
        for writers, chunk in a.shapes:
            if not make_whole(a, nodes, control):
                summaries.append({"case": case, "error": "the cluster was not whole"})
                continue
            summaries.append(run_case(a, case, writers, chunk))
            print("| " + " | ".join(cells(summaries[-1])) + " |", flush=True)
            write_table(a, summaries, provenance)  # as it goes: a long matrix keeps what it ran
    make_whole(a, nodes, control)
    print(f"wrote {write_table(a, summaries, provenance)}")


if __name__ == "__main__":
    main()
