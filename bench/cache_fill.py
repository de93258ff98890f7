"""Writer processes offer a namespace several times its capacity, re-reading a warm
set as they go (a benchmark, not a test): does the tier keep taking stores, and
does it keep what an LRU of the same budget would keep?

Each of --writers processes opens its own Connector (as a vLLM worker or an
`lmcache server` does) and puts its chunks w/0, w/1, ... with `Connector.put`
(each blocks until it lands, or the engine's backpressure gives up and drops it)
until, together, --factor times the capacity (data size x evict-used-pct, or x
stop-writes-used-pct without eviction) has been offered, printing a row every
--interval seconds. Before the fill, writer 0 stores a warm set; the writers then
read one warm chunk, round robin, every 16 stores between them, so each warm chunk
is read again after --warm-distance of the capacity in stores (0 = no warm set).
An LRU of the capacity hits every such read.

Then, with no touch of any kind and newest first, every chunk is read back, and
the run reports, in the global order of the stores: stores that failed (by cause)
after the first capacity's worth, the store rate, which share of the newest and
oldest chunks worth a fifth of the capacity is still readable (and by tenths of
the run), warm reads that hit after the first capacity and warm chunks alive at the
end, wrong bytes, the KV bytes still held (against the data size), debris (a sweep),
RSS of each writer, what the engine did (the
shared clock's round trips, touches) and what the server did (evictions, and with
--server-log the NSUP cycles that refused to evict, and the longest run of them).
DESIGN.md, "A cache that stays full", has the results for the README's recipes.

    ASD=... LOOPBACK_DATA_SIZE=2G scripts/aerospike-loopback.sh start cache
    .venv/bin/python bench/cache_fill.py --hosts 127.0.0.1:3400 --writers 4 --chunk 256K \\
        --server-log /tmp/aerospike-loopback/node-cache/aerospike.log
        [--factor 5] [--warm-distance 0.5] [-o shared_clock=false]   # a setting under trial
"""

import argparse
import calendar
import hashlib
import multiprocessing as mp
import os
import re
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from lmcache_aerospike import _native  # noqa: E402

WARM_EVERY = 16  # stores, between all writers, per warm read


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    return int(t[:-1]) * units[t[-1]] if t[-1:] in units else int(t)


def options():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", default=os.environ.get("AEROSPIKE_TEST_HOSTS"), required=False)
    p.add_argument("--namespace", default="lmcache")
    p.add_argument("--chunk", type=parse_size, default=4 << 20)
    p.add_argument("--factor", type=float, default=5.0)
    p.add_argument("--writers", type=int, default=1)
    p.add_argument("--warm-distance", type=float, default=0.5,
                   help="stores between two reads of a warm chunk, as a share of capacity")
    p.add_argument("--interval", type=float, default=10.0)
    p.add_argument("--server-log", help="the node's aerospike.log, for NSUP's refusals")
    p.add_argument("-o", action="append", default=[], metavar="KEY=VALUE",
                   help="an engine setting, passed to every writer's Connector")
    return p.parse_args()


def ns_info(conn, ns):
    answer = conn.info(f"namespace/{ns}")[0][2]
    return dict(kv.split("=", 1) for kv in answer.split(";") if "=" in kv)


def capacity(info):
    pct = int(info.get("storage-engine.evict-used-pct", 0)) or \
        int(info.get("storage-engine.stop-writes-used-pct", 100))
    return int(info["data_total_bytes"]) * pct // 100


def payload(key, size):
    head = hashlib.sha256(key.encode()).digest()
    return bytearray((head * (size // len(head) + 1))[:size])


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def writer(w, a, settings, plan, offered, warm_next, start, out):
    """One writer process: its stores (time, index, status name or None), its warm
    reads (time, hit) and its RSS, put on `out` at the end."""
    conn = _native.Connector(**settings)
    buf, stores, reads, rss = bytearray(a.chunk), [], [], [rss_mib()]
    start.wait()
    last = time.monotonic()
    i = 0
    while True:
        with offered.get_lock():
            g = offered.value
            if g >= plan["n"]:
                break
            offered.value += 1
        key = f"{plan['tag']}/{w}/{i}"
        try:
            conn.put(key, payload(key, a.chunk))
            stores.append((time.time(), i, None))
        except _native.Error as e:
            stores.append((time.time(), i, e.name))
        i += 1
        if plan["warm"] and g % WARM_EVERY == WARM_EVERY - 1:
            with warm_next.get_lock():
                j = warm_next.value % plan["warm"]
                warm_next.value += 1
            wkey = f"{plan['tag']}/warm/{j}"
            got = conn.get(wkey, buf)
            reads.append((time.time(), g, got is not None and buf == payload(wkey, a.chunk)))
        if w == 0 and time.monotonic() - last >= a.interval:
            last = time.monotonic()
            s, info = conn.stats(), ns_info(conn, a.namespace)
            rss.append(rss_mib())
            print(f"offered {g:7d} of {plan['n']}  used {info['data_used_pct']:>3}%  evicted "
                  f"{info['evicted_objects']:>7}  writer 0: paced {s['puts_paced']}  dropped "
                  f"{s['dropped_full']}/{s['dropped_busy']}  clock {s['clock_reservations']}"
                  f"  touched {s['hits_touched']}  RSS {rss[-1]:.0f} MiB", flush=True)
    rss.append(rss_mib())
    out.put((w, stores, reads, rss, conn.stats()))
    conn.close()


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
        ok = conn.get(key, out) is not None
        hit[key] = ok
        wrong += ok and out != payload(key, a.chunk)
    conn.close()
    return hit, wrong


def nsup_refusals(path, ns, since):
    """NSUP cycles that refused to evict since `since` (unix time), and the longest
    run of consecutive refusing cycles ("no records below eviction void-time")."""
    if not path:
        return None
    refused = run = longest = 0
    ns_tag = "{%s}" % ns
    stamp = re.compile(r"^(\w{3} \d{2} \d{4} \d{2}:\d{2}:\d{2})")
    with open(path, errors="replace") as f:
        for line in f:
            m = stamp.match(line)
            if not m or calendar.timegm(time.strptime(m[1], "%b %d %Y %H:%M:%S")) < since:
                continue
            if ns_tag in line and "no records below eviction void-time" in line:
                refused += 1
                run += 1
                longest = max(longest, run)
            elif ns_tag in line and (e := re.search(r"nsup-done: .* evicted \((\d+),", line)):
                run = 0 if int(e[1]) > 0 else run
    return refused, longest


def report(a, cap, n, results, hit, wrong, plan, info0, info, debris, refusals, seconds):
    stores = sorted((t, f"{plan['tag']}/{w}/{i}", err) for w, ss, *_ in results
                    for t, i, err in ss)
    warm_cap = cap // a.chunk
    failed = [s for s in stores if s[2]]
    late = [s for s in stores[warm_cap:] if s[2]]
    causes = {}
    for _, _, name in failed:
        causes[name] = causes.get(name, 0) + 1
    order = [k for _, k, err in stores]
    fifth, tenth = max(1, warm_cap // 5), max(1, len(order) // 10)
    alive = [hit[k] for k in order]
    ok = len(stores) - len(failed)
    print(f"{a.writers} writer(s), {a.chunk >> 10} KiB chunks: stored {ok} of {n} in "
          f"{seconds:.1f} s ({ok * a.chunk / seconds / 1e6:.0f} MB/s); failed {causes or 0}; "
          f"after the first capacity {len(late)} of {len(stores) - warm_cap} "
          f"({100 * len(late) / max(1, len(stores) - warm_cap):.2f} %)")
    held = (sum(alive) + sum(hit[f"{plan['tag']}/warm/{j}"] for j in range(plan["warm"])))
    print(f"held at the end: {held * a.chunk / 2**20:.0f} MiB of KV = "
          f"{100 * held * a.chunk / int(info['data_total_bytes']):.0f} % of the data size "
          f"({100 * held * a.chunk / cap:.0f} % of the capacity)")
    print(f"newest fifth readable {sum(alive[-fifth:]) / fifth:.2f}, oldest fifth "
          f"{sum(alive[:fifth]) / fifth:.2f}; by tenths "
          f"{[round(sum(alive[j:j + tenth]) / tenth, 2) for j in range(0, tenth * 10, tenth)]}")
    if plan["warm"]:
        reads = [r for _, _, rs, *_ in results for r in rs if r[1] >= warm_cap]
        warm_alive = sum(hit[f"{plan['tag']}/warm/{j}"] for j in range(plan["warm"]))
        print(f"warm set of {plan['warm']}, each read again after {a.warm_distance:g} of the "
              f"capacity: {sum(r[2] for r in reads)} / {len(reads)} reads hit after the first "
              f"capacity; {warm_alive} / {plan['warm']} alive at the end")
    rss = [r for *_, rs, _ in results for r in rs]
    print(f"wrong bytes {wrong}; debris {debris} of {info['objects']} records; writers' RSS "
          f"{[f'{rs[0]:.0f}->{rs[-1]:.0f}' for _, _, _, rs, _ in results]} MiB "
          f"(max {max(rss):.0f})")
    st = {k: sum(r[4][k] for r in results) for k in
          ("puts_paced", "dropped_full", "dropped_unsent", "dropped_busy", "clock_reservations",
           "clock_resets", "clock_local", "hits_touched", "hits_fresh", "touches_failed")}
    print(f"engines: {st}; server: evicted "
          f"{int(info['evicted_objects']) - int(info0['evicted_objects'])}, stop_writes "
          f"{info['stop_writes']}" + ("" if refusals is None else
                                      f"; NSUP refused {refusals[0]} cycles, at most "
                                      f"{refusals[1]} in a row"))


def main():
    a = options()
    if not a.hosts:
        sys.exit("cache_fill.py: give --hosts (or AEROSPIKE_TEST_HOSTS)")
    tag = "lmca_fill_" + uuid.uuid4().hex[:8]
    settings = dict(hosts=a.hosts, namespace=a.namespace, set=tag, default_ttl_seconds=3600)
    settings.update(kv.split("=", 1) for kv in a.o)
    conn = _native.Connector(**settings)
    info0 = ns_info(conn, a.namespace)
    cap = capacity(info0)
    n = int(a.factor * cap // a.chunk)
    warm = int(a.warm_distance * cap // a.chunk // WARM_EVERY)
    plan = {"tag": tag, "n": n, "warm": warm}
    print(f"capacity {cap / 2**20:.0f} MiB = {cap // a.chunk} chunks of {a.chunk / 2**20:g} MiB;"
          f" offering {n} ({a.factor:g}x) from {a.writers} writer(s), warm set {warm}; "
          f"eviction plan {conn.eviction()}", flush=True)
    store_warm(a, settings, tag, warm)
    ctx = mp.get_context("spawn")
    offered, warm_next, start, out = ctx.Value("q", 0), ctx.Value("q", 0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=writer, args=(w, a, settings, plan, offered, warm_next, start, out))
             for w in range(a.writers)]
    for p in procs:
        p.start()
    time.sleep(1.0)  # every writer connected
    t0, since = time.monotonic(), time.time()
    start.set()
    results = sorted(out.get() for _ in procs)
    seconds = time.monotonic() - t0
    for p in procs:
        p.join()
    keys = [f"{tag}/warm/{j}" for j in range(warm)] + \
        [f"{tag}/{w}/{i}" for w, ss, *_ in results for _, i, _ in ss]
    hit, wrong = survivors(a, settings, keys)
    info = ns_info(conn, a.namespace)
    debris = len(conn.sweep())
    report(a, cap, n, results, hit, wrong, plan, info0, info, debris,
           nsup_refusals(a.server_log, a.namespace, since), seconds)
    for key in keys:
        conn.remove(key)
    conn.close()


if __name__ == "__main__":
    main()
