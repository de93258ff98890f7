"""Writer processes offer a namespace several times its capacity, re-reading a warm
set as they go (a benchmark, not a test): does the tier keep taking stores, and
does it keep what an LRU of the same budget would keep? Against one node or a
cluster, with events on the way: a node killed, paused or restarted, a writer whose
wall clock is off.

Each of --writers processes opens its own Connector (as a vLLM worker or an
`lmcache server` does) and puts its chunks w/0, w/1, ... with `Connector.put`
(each blocks until it lands, or the engine's backpressure gives up and drops it)
until, together, --factor times the capacity has been offered, printing a row every
--interval seconds. The capacity is the cluster's: every node's data size x
evict-used-pct (or x stop-writes-used-pct without eviction), summed, over the
replication factor (bench/cache/cache_cluster.py). Before the fill, writer 0 stores a warm
set; the writers then read one warm chunk, round robin, every 16 stores between them,
so each warm chunk is read again after --warm-distance of the capacity in stores (0 =
no warm set). An LRU of the capacity hits every such read; the run replays its stores
and reads on an exact LRU of the same budget, which is the capacity times the share
of nodes in the cluster (a node killed or paused counts out until it is back), and
reports what it keeps beside ours.

Events (bench/cache/cache_events.py): --event kill:NODE@0.4 kills a node once 40 % of the
offered stores are done, restart:NODE@+30 starts it again 30 s later, pause:NODE@0.4:8
stops it for 8 s; NODE is a name of the control command (--ctl, default
scripts/aerospike-loopback.sh; the loopback nodes are named by port, --ctl-node
HOST:PORT=NAME for others) or `clock`, the node that masters the shared clock's
record. --writer-clock W:OFFSET runs writer W under `faketime -m -f OFFSET` (a host
whose wall clock is off; bench/cache/cache_faketime.py).

Then, with no touch of any kind and newest first, every chunk is read back, and
the run reports, in the order the stores returned (time.monotonic(), one clock for
every writer of the host): stored of offered, puts that raised (by error name) and
those after the first capacity's worth, drops by cause (the engines' counters), the
store rate, which share of the newest and oldest chunks worth a fifth of the capacity
is still readable (and by tenths of the run), warm reads that hit after the first
capacity and warm chunks alive at the end, the slowest put (per writer, and the p99),
wrong bytes, the KV bytes still held (against the data size), debris (a sweep) over
the records, RSS of each writer, each writer's own clocks (clock_local,
clock_fallbacks), the shared clock's round trips per store and per second, what the
server did (evictions; NSUP's refusing cycles per node and the longest run of them,
from each node's log: --server-log [NAME=]PATH, or the loopback script's logs of the
named nodes) and the events with their times. --json PATH writes all of it as one
JSON document (bench/cache/cluster_cases.py puts many in one table). DESIGN.md, "A cache
that stays full", has the results for the README's recipes.

    ASD=... LOOPBACK_DATA_SIZE=2G scripts/aerospike-loopback.sh start cache
    .venv/bin/python bench/cache/cache_fill.py --hosts 127.0.0.1:3400 --writers 4 --chunk 256K \\
        --server-log /tmp/aerospike-loopback/node-cache/aerospike.log
        [--factor 5] [--warm-distance 0.5] [-o shared_clock=false]   # a setting under trial

    # a three-node cluster (replication-factor 2), the clock's node killed mid-fill
    # and started again 30 s later, two writers on clocks 30 s ahead and 5 min behind:
    export ASD=... LOOPBACK_DATA_SIZE=2G   # restart:NODE starts it again from these
    for n in cache0 cache1 cache2; do scripts/aerospike-loopback.sh start $n; done
    .venv/bin/python bench/cache/cache_fill.py --hosts 127.0.0.1:3600,127.0.0.1:3610 \\
        --writers 4 --chunk 1M --event kill:clock@0.4 --event restart:clock@+30 \\
        --writer-clock 1:+30s --writer-clock 2:-300s --json /tmp/case.json
"""

import argparse
import hashlib
import multiprocessing as mp
import os
import queue
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
from lmcache_aerospike import _native  # noqa: E402

import cache_cluster as cluster  # noqa: E402
import cache_events as events  # noqa: E402
import cache_figures as fig  # noqa: E402
from cache_faketime import FaketimeProcess  # noqa: E402
from cache_lru import ExactLRU  # noqa: E402

WARM_EVERY = 16  # stores, between all writers, per warm read


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    return int(t[:-1]) * units[t[-1]] if t[-1:] in units else int(t)


def options(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", default=os.environ.get("AEROSPIKE_TEST_HOSTS"), required=False,
                   help="seed host:port[,...] of a node or a cluster")
    p.add_argument("--namespace", default="lmcache")
    p.add_argument("--chunk", type=parse_size, default=4 << 20)
    p.add_argument("--factor", type=float, default=5.0)
    p.add_argument("--writers", type=int, default=1)
    p.add_argument("--warm-distance", type=float, default=0.5,
                   help="stores between two reads of a warm chunk, as a share of capacity")
    p.add_argument("--interval", type=float, default=10.0)
    events.add_options(p)
    p.add_argument("--json", help="write the figures here as JSON")
    p.add_argument("-o", action="append", default=[], metavar="KEY=VALUE",
                   help="an engine setting, passed to every writer's Connector")
    a = p.parse_args(argv)
    events.parse_options(p, a)
    return a


def ns_nodes(conn, ns, tries=10):
    """namespace/NS from every node; tried again while the client still lists a node
    that a kill took away (its tend drops it within a second or two)."""
    for k in range(tries):
        try:
            return conn.info(f"namespace/{ns}")
        except _native.Error:
            if k == tries - 1:
                raise
            time.sleep(1.0)


def payload(key, size):
    head = hashlib.sha256(key.encode()).digest()
    return bytearray((head * (size // len(head) + 1))[:size])


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Shared:
    """What the writers share: the stores offered and done, the warm set's next chunk,
    who is connected, the start, and the queue of results. A spawned writer inherits
    it; a writer under faketime calls it through its socket (bench/cache/cache_faketime.py)."""

    def __init__(self, ctx):
        self.offered, self.done, self.warm_next, self.ready = (ctx.Value("q", 0)
                                                               for _ in range(4))
        self.go, self.out = ctx.Event(), ctx.Queue()

    def take(self, n):
        """The next store's global index, or None once n were offered."""
        with self.offered.get_lock():
            g = self.offered.value
            if g >= n:
                return None
            self.offered.value += 1
            return g

    def warm(self, size):
        with self.warm_next.get_lock():
            self.warm_next.value += 1
            return (self.warm_next.value - 1) % size

    def stored(self):
        with self.done.get_lock():
            self.done.value += 1

    def connected(self):
        with self.ready.get_lock():
            self.ready.value += 1

    def wait_start(self):
        self.go.wait()

    def finish(self, result):
        self.out.put(result)


def writer(w, a, settings, plan, shared):
    """One writer process: its stores (monotonic time returned, index, error name or
    None, seconds the put took), its warm reads (time, global index, hit, warm index), its RSS and
    its engine's counters, handed to `shared` at the end."""
    conn = _native.Connector(**settings)
    buf, stores, reads, rss = bytearray(a.chunk), [], [], [rss_mib()]
    read_errors = []  # warm reads that failed (a miss to the caller): why
    shared.connected()
    shared.wait_start()
    last = time.monotonic()
    i = 0
    while (g := shared.take(plan["n"])) is not None:
        key = f"{plan['tag']}/{w}/{i}"
        data = payload(key, a.chunk)
        t0 = time.monotonic()
        try:
            conn.put(key, data)
            err = None
        except _native.Error as e:
            err = e.name
        t1 = time.monotonic()
        stores.append((t1, i, err, t1 - t0))
        shared.stored()
        i += 1
        if plan["warm"] and g % WARM_EVERY == WARM_EVERY - 1:
            j = shared.warm(plan["warm"])
            wkey = f"{plan['tag']}/warm/{j}"
            try:
                got = conn.get(wkey, buf)
            except _native.Error as e:  # a read that failed is a miss to its caller
                got = None
                read_errors.append(e.name)
            reads.append((time.monotonic(), g, got is not None and buf == payload(wkey, a.chunk), j))
        if w == 0 and time.monotonic() - last >= a.interval:
            last = time.monotonic()
            rss.append(rss_mib())
            progress_row(conn, a, plan, g, rss[-1])
    rss.append(rss_mib())
    # The wall clock it ran on (time.time(): faked under --writer-clock), for the report.
    shared.finish({"w": w, "stores": stores, "reads": reads, "read_errors": read_errors,
                   "rss": rss, "stats": conn.stats(),
                   "wall_s": time.time()})
    conn.close()


def progress_row(conn, a, plan, g, rss):
    s = conn.stats()
    try:  # a paused node answers no info: the row goes without the server's side
        c = cluster.namespace_counters(conn.info(f"namespace/{a.namespace}"))
        server = f"used {c['data_used_pct']:>3}%  evicted {c['evicted_objects']:>7}"
    except _native.Error as e:
        server = f"info: {e.name}"
    drops = "/".join(str(s.get(k, 0)) for k in fig.DROPS)
    print(f"offered {g:7d} of {plan['n']}  {server}  writer 0: paced {s['puts_paced']}  "
          f"dropped {drops}  clock {s['clock_reservations']} local {s.get('clock_local', 0)}  "
          f"touched {s['hits_touched']}  RSS {rss:.0f} MiB", flush=True)


def store_warm(a, settings, tag, n):
    conn = _native.Connector(**settings)
    for j in range(n):
        key = f"{tag}/warm/{j}"
        conn.put(key, payload(key, a.chunk))
    conn.close()


def survivors(a, settings, keys):
    """Which keys read back whole (no touch, newest first), and how many were wrong."""
    conn = _native.Connector(**{**settings, "read_touch_ttl_percent": -1, "touch_on_hit": False})
    hit, wrong, out = {}, 0, bytearray(a.chunk)
    for key in reversed(keys):
        try:
            ok = conn.get(key, out) is not None
        except _native.Error:  # a node still coming back: not readable
            ok = False
        hit[key] = ok
        wrong += ok and out != payload(key, a.chunk)
    conn.close()
    return hit, wrong


def debris(conn, tries=5):
    """Records a sweep finds broken. A node started again after a kill refuses scans
    while it migrates (ECONNECTION on the 3-node loopback cluster): tried again."""
    for k in range(tries):
        try:
            return len(conn.sweep())
        except _native.Error as e:
            if k == tries - 1:
                return f"no sweep: {e.name}"
            time.sleep(3.0)


# ------------------------------------------------------------------ the figures

def figures(run, results, hit, wrong):
    """The case's figures from the writers' results and the readback (no I/O).
    run: capacity, chunk, offered, tag, warm, seconds, data_size."""
    chunk, tag = run["chunk"], run["tag"]
    cap_chunks = run["capacity"] // chunk
    stores = sorted((t, f"{tag}/{r['w']}/{i}", err) for r in results
                    for t, i, err, _ in r["stores"])
    failed = [err for _, _, err in stores if err]
    late = [err for _, _, err in stores[cap_chunks:] if err]
    alive = [hit[k] for _, k, _ in stores]
    fifth, tenth = max(1, cap_chunks // 5), max(1, len(alive) // 10)
    warm_keys = [f"{tag}/warm/{j}" for j in range(run["warm"])]
    held = (sum(alive) + sum(hit[k] for k in warm_keys)) * chunk
    reads = [ok for r in results for _, g, ok, _ in r["reads"] if g >= cap_chunks]
    engines = {r["w"]: r["stats"] for r in results}
    ok = len(stores) - len(failed)
    seconds = run["seconds"]
    return {
        "writers": len(results), "chunk_bytes": chunk, "capacity_bytes": run["capacity"],
        "capacity_chunks": cap_chunks, "offered": run["offered"], "stored": ok,
        "seconds": round(seconds, 1), "mb_per_s": round(ok * chunk / seconds / 1e6, 1),
        "failed": len(failed), "failed_by_error": fig.count(failed),
        "after_first_capacity": max(0, len(stores) - cap_chunks),
        "failed_after_first_capacity": len(late),
        "dropped": fig.summed(engines.values(), fig.DROPS),
        "newest_fifth": round(sum(alive[-fifth:]) / fifth, 3),
        "oldest_fifth": round(sum(alive[:fifth]) / fifth, 3),
        "tenths": [round(sum(alive[j:j + tenth]) / tenth, 2) for j in range(0, tenth * 10, tenth)],
        "warm": {"size": run["warm"], "reads_after_first_capacity": len(reads),
                 "hit": sum(reads), "alive": sum(hit[k] for k in warm_keys),
                 "read_errors": fig.count([n for r in results for n in r.get("read_errors", [])]),
                 # where the misses were, in stores offered (events are in `events`)
                 "missed_at": sorted(g for r in results for _, g, ok, _ in r["reads"]
                                     if g >= cap_chunks and not ok),
                 # each chunk lost by the end: its reads (stores offered, hit), to say
                 # when it went against the events
                 "lost": {str(j): sorted([g, ok] for r in results for _, g, ok, jj in r["reads"]
                                         if jj == j)
                          for j in range(run["warm"]) if not hit[warm_keys[j]]}},
        "held_bytes": held, "held_of_data_size": round(held / run["data_size"], 3)
        if run["data_size"] else None, "held_of_capacity": round(held / run["capacity"], 3),
        "puts": fig.put_times({r["w"]: [s[3] for s in r["stores"]] for r in results}),
        "clock": fig.clocks(engines, len(stores), seconds),
        "wrong_bytes": int(wrong),
        "rss_mib": {str(r["w"]): [round(r["rss"][0]), round(r["rss"][-1])] for r in results},
        # Each writer's wall clock against the parent's when it finished: --writer-clock's
        # offset, measured.
        "wall_offset_s": {str(r["w"]): r.get("wall_offset_s") for r in results},
        "engines": fig.summed(engines.values(), sorted({k for e in engines.values() for k in e
                                                       if k != "full"})),
    }


DOWN, BACK = {"kill", "pause"}, {"restart", "resume"}


def budget_shares(records, t0, nodes):
    """[(monotonic time, share of the capacity)] from the events' records: a node
    killed or paused counts out from its event until it is restarted or resumed."""
    out, down = [], set()
    for r in sorted((r for r in records if r["t_s"] is not None and r["ok"]),
                    key=lambda r: r["t_s"]):
        if r["action"] in DOWN:
            down.add(r["node"])
        elif r["action"] in BACK:
            down.discard(r["node"])
        else:
            continue
        out.append((t0 + r["t_s"], (nodes - len(down)) / nodes))
    return out


def exact_lru(run, results, shares):
    """What an exact LRU keeps of the same run: the warm set stored first, then every
    store that landed and every warm read, in the order they returned; its budget is
    the capacity times the share of it up at that moment (budget_shares). The same
    figures as ours: warm reads hit after the first capacity, warm alive at the end,
    newest and oldest fifth."""
    chunk, tag, cap_chunks = run["chunk"], run["tag"], run["capacity"] // run["chunk"]
    lru = ExactLRU(run["capacity"])
    warm_keys = [f"{tag}/warm/{j}" for j in range(run["warm"])]
    for key in warm_keys:
        lru.insert(key, chunk)
    stores = sorted((t, f"{tag}/{r['w']}/{i}", err) for r in results
                    for t, i, err, _ in r["stores"])
    ops = sorted([(t, "store", key, 0) for t, key, err in stores if not err] +
                 [(t, "read", f"{tag}/warm/{j}", g) for r in results
                  for t, g, _, j in r["reads"]])
    changes, reads = sorted(shares), []
    for t, op, key, g in ops:
        while changes and changes[0][0] <= t:
            lru.resize(int(run["capacity"] * changes.pop(0)[1]))
        if op == "store":
            lru.insert(key, chunk)
            continue
        if key in lru:
            lru.touch(key)
        if g >= cap_chunks:
            reads.append(key in lru)
    alive = [key in lru for _, key, _ in stores]
    fifth = max(1, cap_chunks // 5)
    return {"warm_hit": sum(reads), "warm_reads": len(reads),
            "warm_alive": sum(key in lru for key in warm_keys),
            "newest_fifth": round(sum(alive[-fifth:]) / fifth, 3),
            "oldest_fifth": round(sum(alive[:fifth]) / fifth, 3)}


def print_report(s):
    """The figures as the lines the run prints."""
    cap = s["capacity_chunks"]
    late, after = s["failed_after_first_capacity"], s["after_first_capacity"]
    print(f"{s['writers']} writer(s), {s['chunk_bytes'] >> 10} KiB chunks: stored {s['stored']} "
          f"of {s['offered']} in {s['seconds']:.1f} s ({s['mb_per_s']:.0f} MB/s); put raised "
          f"{s['failed_by_error'] or 0}; after the first capacity {late} of {after} failed "
          f"({100 * late / max(1, after):.2f} %)")
    print("dropped by cause: " + ", ".join(f"{k[8:]} {v}" for k, v in s["dropped"].items()))
    print(f"held at the end: {s['held_bytes'] / 2**20:.0f} MiB of KV = "
          f"{100 * (s['held_of_data_size'] or 0):.0f} % of the data size "
          f"({100 * s['held_of_capacity']:.0f} % of the capacity, {cap} chunks)")
    print(f"newest fifth readable {s['newest_fifth']:.2f}, oldest fifth {s['oldest_fifth']:.2f};"
          f" by tenths {s['tenths']}")
    w = s["warm"]
    if w["size"]:
        print(f"warm set of {w['size']}: {w['hit']} / {w['reads_after_first_capacity']} reads "
              f"hit after the first capacity; {w['alive']} / {w['size']} alive at the end"
              + (f"; reads that failed: {w['read_errors']}" if w.get("read_errors") else ""))
        for j, seen in w["lost"].items():
            print(f"warm chunk {j} lost: reads (% of offered, hit) "
                  + " ".join(f"{100 * g / s['offered']:.0f}{'+' if ok else '-'}" for g, ok in seen))
    lru = s.get("lru")
    if lru:
        print(f"an exact LRU of the same budget: {lru['warm_hit']} / {lru['warm_reads']} warm "
              f"reads hit, {lru['warm_alive']} / {w['size']} alive; newest fifth "
              f"{lru['newest_fifth']:.2f}, oldest {lru['oldest_fifth']:.2f}")
    p, c = s["puts"], s["clock"]
    print(f"slowest put {p['max']} s (p99 {p['p99']} s; per writer {p['max_per_writer']})")
    print(f"clock: round trips {c['clock_reservations']} ({c['per_store']} a store, "
          f"{c['per_second']} a second); own clocks per writer {c['clock_local']}, "
          f"fallbacks {c['clock_fallbacks']}, key busy {c.get('clock_busy', 0)}")
    if any(abs(v or 0) >= 1 for v in s["wall_offset_s"].values()):
        print(f"writers' wall clocks against this host's (s): {s['wall_offset_s']}")
    print(f"wrong bytes {s['wrong_bytes']}; debris {s.get('debris')} of {s.get('objects')} "
          f"records; writers' RSS {s['rss_mib']} MiB")
    print(f"engines: {s['engines']}")
    server = s.get("server", {})
    print(f"server: evicted {server.get('evicted')} (every copy), stop_writes {server.get('stop_writes')}; "
          + fig.nsup_line(s.get("nsup")))
    for r in s.get("events", []):
        print(f"event {r['event']}: {events.event_line(r)}")


# ------------------------------------------------------------------ the run

def start_writers(a, settings, plan, shared):
    """The writer processes: spawned, or under faketime for --writer-clock."""
    ctx = mp.get_context("spawn")
    procs = []
    for w in range(a.writers):
        if w in a.clocks:
            p = FaketimeProcess("cache_fill", "writer", (w, a, settings, plan), [shared],
                                a.clocks[w])
        else:
            p = ctx.Process(target=writer, args=(w, a, settings, plan, shared))
        p.start()
        procs.append(p)
    deadline = time.monotonic() + 60
    while shared.ready.value < a.writers and time.monotonic() < deadline:
        if any(not p.is_alive() for p in procs):
            sys.exit("cache_fill.py: a writer exited before it connected")
        time.sleep(0.1)
    return procs


def run(a):
    """One fill: the writers, the events, the readback and the figures. Returns the
    figures, every key offered (warm set first), which read back whole, and the
    settings; the chunks stay stored (main removes them)."""
    tag = "lmca_fill_" + uuid.uuid4().hex[:8]
    settings = dict(hosts=a.hosts, namespace=a.namespace, set=tag, default_ttl_seconds=3600)
    settings.update(kv.split("=", 1) for kv in a.o)
    conn = _native.Connector(**settings)
    nodes0 = ns_nodes(conn, a.namespace)
    cap = cluster.capacity(nodes0)
    nodes = cluster.Nodes.discover(conn, a.namespace, a.ctl_nodes)
    n = int(a.factor * cap // a.chunk)
    warm = int(a.warm_distance * cap // a.chunk // WARM_EVERY)
    plan = {"tag": tag, "n": n, "warm": warm}
    print(f"capacity {cap / 2**20:.0f} MiB over {len(nodes0)} node(s) = {cap // a.chunk} chunks"
          f" of {a.chunk / 2**20:g} MiB; offering {n} ({a.factor:g}x) from {a.writers} writer(s)"
          f", warm set {warm}; eviction plan {conn.eviction()}", flush=True)
    store_warm(a, settings, tag, warm)
    shared = Shared(mp.get_context("spawn"))
    procs = start_writers(a, settings, plan, shared)
    control = events.Control.choose(nodes, a.ctl)
    ev = events.Events(a.events, control, lambda: shared.done.value / max(1, n))
    t0, since = time.monotonic(), time.time()
    ev.start(t0)
    shared.go.set()
    results = []
    while len(results) < len(procs):
        try:
            results.append(shared.out.get(timeout=5))
        except queue.Empty:  # a writer that died sends nothing: do not wait for it
            if sum(not p.is_alive() for p in procs) > len(results):
                sys.exit("cache_fill.py: a writer exited without its results (its error above)")
            continue
        results[-1]["wall_offset_s"] = round(results[-1]["wall_s"] - time.time(), 1)
    results.sort(key=lambda r: r["w"])
    seconds = time.monotonic() - t0
    for p in procs:
        p.join()
    records = ev.finish()
    keys = [f"{tag}/warm/{j}" for j in range(warm)] + \
        [f"{tag}/{r['w']}/{i}" for r in results for _, i, _, _ in r["stores"]]
    hit, wrong = survivors(a, settings, keys)
    nodes1 = ns_nodes(conn, a.namespace)
    counters = cluster.namespace_counters(nodes1)
    run = {"capacity": cap, "chunk": a.chunk, "offered": n, "tag": tag, "warm": warm,
           "seconds": seconds, "data_size": cluster.data_size(nodes0)}
    s = figures(run, results, hit, wrong)
    logs = fig.server_logs(a.server_log, [nodes.names[x] for x in nodes.addresses
                                          if x in nodes.names])
    s.update({"command": " ".join([os.path.basename(sys.executable)] + sys.argv),
              "factor": a.factor, "warm_distance": a.warm_distance,
              "hosts": a.hosts, "nodes": nodes.describe(), "settings": a.o,
              "writer_clocks": {str(w): o for w, o in a.clocks.items()},
              "control": control.describe(), "events": records,
              "debris": debris(conn), "objects": counters["master_objects"],
              "server": {"evicted": cluster.evicted_since(nodes0, nodes1),
                         "stop_writes": counters["stop_writes"]},
              "nsup": fig.nsup_per_node(logs, a.namespace, since),
              "lru": exact_lru(run, results, budget_shares(records, t0, len(nodes0)))})
    conn.close()
    return {"figures": s, "keys": keys, "hit": hit, "settings": settings}


def remove(settings, keys):
    conn = _native.Connector(**settings)
    for key in keys:
        try:
            conn.remove(key)
        except _native.Error:
            pass
    conn.close()


def main(argv=None):
    a = options(argv)
    if not a.hosts:
        sys.exit("cache_fill.py: give --hosts (or AEROSPIKE_TEST_HOSTS)")
    out = run(a)
    print_report(out["figures"])
    fig.write_json(a.json, out["figures"])
    remove(out["settings"], out["keys"])


if __name__ == "__main__":
    main()
