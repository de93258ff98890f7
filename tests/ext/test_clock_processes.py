"""Several writer processes fill one namespace five times over: one eviction order
for all of them (the shared clock, src/engine/clock.c) and hits that move a chunk
to the head (src/engine/hits.c), as a deployment with a vLLM worker or an
`lmcache server` per process sees it.

Each writer is a process of its own with its own Connector, sharing nothing with
the others but the server, and the writers re-read a warm set between them (a
read every 16 stores, so each warm chunk is read again after half the capacity
in stores; an LRU of the capacity hits every read). Judged in the global order of
the stores, as an LRU of the capacity would keep them. On the test server the
namespace is the memory recipe made small (test_cache_full.FIXTURE_CACHE) and its
NSUP must never refuse a second; on a real server the lmcache namespace must evict
as tests/aerospike-test.conf says.
"""

import multiprocessing as mp
import time
import uuid

import pytest

from lmcache_aerospike import _native
from tests.conftest import info
from tests.ext.test_cache_full import NS, cache, payload  # noqa: F401 (a fixture)

WRITERS = 4
WARM_EVERY = 16


def settings(hosts, tag, **more):
    return {"hosts": hosts, "namespace": NS, "set": "lmca_procs_" + tag,
            "default_ttl_seconds": 3600, **more}


def writer(w, hosts, tag, size, n, warm, offered, warm_next, start, out):
    """Puts chunks until n were offered between all writers; every WARM_EVERY-th
    store (of all writers) is followed by a read of the next warm chunk."""
    conn = _native.Connector(**settings(hosts, tag))
    buf, stores, reads = bytearray(size), [], []
    start.wait()
    while True:
        with offered.get_lock():
            g = offered.value
            if g >= n:
                break
            offered.value += 1
        key = f"{tag}/{w}/{g}"
        try:
            conn.put(key, payload(tag, key, size))
            stores.append((time.time(), key, None))
        except _native.Error as e:
            stores.append((time.time(), key, e.name))
        if g % WARM_EVERY == WARM_EVERY - 1:
            with warm_next.get_lock():
                j = warm_next.value % warm
                warm_next.value += 1
            wkey = f"{tag}/warm/{j}"
            got = conn.get(wkey, buf)
            reads.append((g, got is not None and buf == payload(tag, wkey, size)))
    out.put((stores, reads, conn.stats()))
    conn.close()


@pytest.fixture(scope="module")
def fill(cache):  # noqa: F811
    hosts, capacity, size = cache
    fixture = info(hosts, "fixture-stats") != ""
    before = info(hosts, "fixture-stats") if fixture else ""
    tag = uuid.uuid4().hex[:10]
    n, per_capacity = 5 * capacity // size, capacity // size
    warm = max(1, per_capacity // 2 // WARM_EVERY)
    conn = _native.Connector(**settings(hosts, tag))
    warm_keys = [f"{tag}/warm/{j}" for j in range(warm)]
    for key in warm_keys:
        conn.put(key, payload(tag, key, size))
    ctx = mp.get_context("spawn")
    offered, warm_next, start, out = ctx.Value("q", 0), ctx.Value("q", 0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=writer, args=(w, hosts, tag, size, n, warm, offered, warm_next,
                                               start, out)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    start.set()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    stores = sorted(s for r in results for s in r[0])
    # Read back without touching anything, newest first.
    reader = _native.Connector(**settings(hosts, tag, touch_on_hit=False))
    buf, alive, wrong = bytearray(size), {}, 0
    for _, key, _ in reversed(stores):
        alive[key] = reader.get(key, buf) is not None
        wrong += alive[key] and buf != payload(tag, key, size)
    warm_alive = [reader.get(key, buf) is not None for key in warm_keys]
    reader.close()
    debris = len(conn.sweep())
    objects = int(dict(kv.split("=", 1) for kv in info(hosts, f"namespace/{NS}").split(";")
                       if "=" in kv)["objects"])
    after = info(hosts, "fixture-stats") if fixture else ""
    yield dict(stores=stores, alive=[alive[k] for _, k, _ in stores], wrong=wrong,
               reads=[r for res in results for r in res[1] if r[0] >= per_capacity],
               warm_alive=warm_alive, stats=[r[2] for r in results], debris=debris,
               objects=objects, per_capacity=per_capacity, fixture=fixture,
               refusals=(stat(after, f"evict_refusals.{NS}") - stat(before, f"evict_refusals.{NS}"))
               if fixture else None)
    for _, key, _ in stores:
        conn.remove(key)
    for key in warm_keys:
        conn.remove(key)
    conn.close()


def stat(text, name):
    return int(dict(kv.split("=", 1) for kv in text.split(";") if "=" in kv).get(name, 0))


def test_every_writer_keeps_storing(fill):
    late = [s for s in fill["stores"][fill["per_capacity"]:] if s[2]]
    assert len(late) <= 0.001 * (len(fill["stores"]) - fill["per_capacity"]), late[:5]


def test_every_writer_places_on_the_shared_clock(fill):
    assert all(s["clock_reservations"] > 0 and s["clock_local"] == 0 for s in fill["stats"])
    # One clock for every writer, and never a queue past the server's
    # transaction-pending-limit on its record.
    assert all(s["clock_busy"] == 0 for s in fill["stats"]), fill["stats"]


def test_the_newest_stay_and_the_oldest_go_across_writers(fill):
    k, alive = fill["per_capacity"] // 5, fill["alive"]
    tenths = [round(sum(alive[j:j + len(alive) // 10]) / (len(alive) // 10), 2)
              for j in range(0, len(alive), len(alive) // 10)]
    assert sum(alive[-k:]) / k >= 0.95, tenths
    assert sum(alive[:k]) / k <= 0.05, tenths


def test_a_warm_set_read_after_half_the_capacity_stays(fill):
    reads = fill["reads"]
    assert reads and sum(hit for _, hit in reads) / len(reads) >= 0.95
    assert all(fill["warm_alive"])
    assert sum(s["hits_touched"] for s in fill["stats"]) > 0


def test_no_wrong_bytes_and_little_debris(fill):
    assert fill["wrong"] == 0
    assert fill["debris"] <= 0.02 * max(fill["objects"], 1)


def test_nsup_never_refuses_a_second(fill):
    if not fill["fixture"]:
        pytest.skip("a real server's NSUP logs its refusals: bench/cache/cache_fill.py --server-log")
    assert fill["refusals"] == 0
