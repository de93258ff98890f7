"""One writer on the blocking API offers a namespace several times its capacity
(a benchmark, not a test): does the tier keep taking stores, and which chunks stay?

It puts chunks 0, 1, 2, ... with `Connector.put` (each blocks until it lands, or
the engine's backpressure gives up and drops it) until --factor times the capacity
(data size x evict-used-pct, or x stop-writes-used-pct without eviction) has been
offered, printing a row every --interval seconds. Then, without read-touch and newest
first (a read that touched would refresh what it reads), it reads every chunk back
and reports: stores that failed (by cause) after the first capacity's worth, the
store rate, which share of the newest and oldest chunks worth a fifth of the capacity
is still readable (and by tenths of the run), wrong bytes, debris (a sweep), RSS, and
what the server did (evictions, its refusals). DESIGN.md, "A cache that stays full",
has the results for the README's recipes.

    ASD=... LOOPBACK_DATA_SIZE=1G scripts/aerospike-loopback.sh start cache
    .venv/bin/python bench/cache_fill.py --hosts 127.0.0.1:3400 [--chunk 4M] [--factor 5]
        [-o records_per_void_second=1000000]     # an engine setting under trial
"""

import argparse
import hashlib
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from lmcache_aerospike import _native  # noqa: E402


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
    p.add_argument("--interval", type=float, default=10.0)
    p.add_argument("-o", action="append", default=[], metavar="KEY=VALUE",
                   help="an engine setting, passed to the Connector")
    return p.parse_args()


def ns_info(conn, ns):
    answer = conn.info(f"namespace/{ns}")[0][2]
    return dict(kv.split("=", 1) for kv in answer.split(";") if "=" in kv)


def capacity(info):
    pct = int(info.get("storage-engine.evict-used-pct", 0)) or \
        int(info.get("storage-engine.stop-writes-used-pct", 100))
    return int(info["data_total_bytes"]) * pct // 100


def payload(tag, i, size):
    head = hashlib.sha256(f"{tag}/{i}".encode()).digest()
    return bytearray((head * (size // len(head) + 1))[:size])


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def fill(conn, a, tag, n):
    """Offers n chunks; returns the failures (index, status name) and the seconds."""
    failed, t0, last, last_ok, rss = [], time.monotonic(), time.monotonic(), 0, []
    for i in range(n):
        try:
            conn.put(f"{tag}/{i}", payload(tag, i, a.chunk))
        except _native.Error as e:
            failed.append((i, e.name))
        now = time.monotonic()
        if now - last >= a.interval or i == n - 1:
            ok = i + 1 - len(failed)
            s, info = conn.stats(), ns_info(conn, a.namespace)
            rss.append(rss_mib())
            print(f"{now - t0:6.1f} s  offered {i + 1:6d}  stored {ok:6d}  failed {len(failed):5d}"
                  f"  {(ok - last_ok) * a.chunk / (now - last) / 1e6:6.0f} MB/s"
                  f"  used {info['data_used_pct']:>3}%  evicted {info['evicted_objects']:>7}"
                  f"  retried {s['puts_retried']}  paced {s['puts_paced']}"
                  f"  dropped {s['dropped_full']}/{s['dropped_busy']}  RSS {rss[-1]:.0f} MiB",
                  flush=True)
            last, last_ok = now, ok
    return failed, time.monotonic() - t0, rss


def survivors(a, settings, tag, n):
    """Which chunks read back whole (no read-touch, newest first), and how many wrong."""
    conn = _native.Connector(**{**settings, "read_touch_ttl_percent": -1})
    hit, wrong, out = [False] * n, 0, bytearray(a.chunk)
    for i in reversed(range(n)):
        if conn.get(f"{tag}/{i}", out) is not None:
            hit[i] = True
            wrong += out != payload(tag, i, a.chunk)
    conn.close()
    return hit, wrong


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
    n, fifth, warm = int(a.factor * cap // a.chunk), cap // 5 // a.chunk, cap // a.chunk
    print(f"capacity {cap / 2**20:.0f} MiB = {warm} chunks of {a.chunk / 2**20:g} MiB; offering "
          f"{n} ({a.factor:g}x); eviction plan {conn.eviction()}", flush=True)
    failed, seconds, rss = fill(conn, a, tag, n)
    hit, wrong = survivors(a, settings, tag, n)
    late = [f for f in failed if f[0] >= warm]
    causes = {}
    for _, name in failed:
        causes[name] = causes.get(name, 0) + 1
    info, stats = ns_info(conn, a.namespace), conn.stats()
    debris = len(conn.sweep())
    tenth = max(1, n // 10)
    print(f"stored {n - len(failed)} of {n} in {seconds:.1f} s "
          f"({(n - len(failed)) * a.chunk / seconds / 1e6:.0f} MB/s); failed {causes or 0}; "
          f"after the first capacity {len(late)} of {n - warm} "
          f"({100 * len(late) / max(1, n - warm):.2f} %)")
    print(f"newest fifth readable {sum(hit[-fifth:]) / fifth:.2f}, oldest fifth "
          f"{sum(hit[:fifth]) / fifth:.2f}; by tenths "
          f"{[round(sum(hit[j:j + tenth]) / tenth, 2) for j in range(0, tenth * 10, tenth)]}")
    print(f"wrong bytes {wrong}; debris {debris} of {info['objects']} records; "
          f"RSS {rss[0]:.0f} -> {rss[-1]:.0f} MiB (max {max(rss):.0f})")
    print(f"engine: retried {stats['puts_retried']} puts ({stats['write_retries']} retries), "
          f"paced {stats['puts_paced']}, dropped full {stats['dropped_full']} "
          f"(unsent {stats['dropped_unsent']}) busy {stats['dropped_busy']}; server: evicted "
          f"{int(info['evicted_objects']) - int(info0['evicted_objects'])}, "
          f"stop_writes {info['stop_writes']}")
    for i in range(n):
        conn.remove(f"{tag}/{i}")
    conn.close()


if __name__ == "__main__":
    main()
