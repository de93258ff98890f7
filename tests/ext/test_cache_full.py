"""A full namespace keeps taking stores and keeps the recent and hot chunks
(README, "A cache that stays full"; DESIGN.md, "A cache that stays full").

Five times the namespace's capacity is offered: by one writer on the blocking API,
which the engine's backpressure may slow but must not refuse, and by several
writers through the asynchronous layer, whose drops must each have a cause. On the
test server (whose NSUP, stop-writes and read-touch follow CE 8.1.2.0's rules) the
namespace is made small for the test; on a real server its lmcache namespace must
evict as tests/aerospike-test.conf sets it up (the README's memory recipe).
"""

import hashlib
import threading
import time
import uuid

import pytest

from lmcache_aerospike import _native
from tests.conftest import info

NS = "lmcache"
# The test server's namespace for these tests: the memory recipe, small.
FIXTURE_CACHE = {"data-size": str(16 << 20), "evict-used-pct": "50",
                 "stop-writes-used-pct": "90", "stop-writes-avail-pct": "1",
                 "evict-tenths-pct": "300", "evict-hist-buckets": "1000000"}


def ns_info(hosts):
    text = info(hosts, f"namespace/{NS}")
    return dict(kv.split("=", 1) for kv in text.split(";") if "=" in kv)


@pytest.fixture(scope="module")
def cache(aerospike_hosts):
    """(hosts, capacity in bytes, chunk size): capacity is what the namespace holds
    before NSUP evicts, data size x evict-used-pct."""
    fixture = info(aerospike_hosts, "fixture-reset") == "ok"
    if fixture:
        for key, value in FIXTURE_CACHE.items():
            assert info(aerospike_hosts, f"set-config:context=namespace;id={NS};"
                                         f"{key}={value}") == "ok", key
    ns = ns_info(aerospike_hosts)
    if int(ns.get("storage-engine.evict-used-pct", 0)) == 0:
        pytest.skip(f"namespace {NS} does not evict: set it up as "
                    "tests/aerospike-test.conf says")
    capacity = int(ns["data_total_bytes"]) * int(ns["storage-engine.evict-used-pct"]) // 100
    chunk = 64 << 10 if fixture else 4 << 20
    yield aerospike_hosts, capacity, chunk
    if fixture:
        info(aerospike_hosts, "fixture-reset")


def payload(tag, i, size):
    """Bytes that only chunk i of this run has (a stale or swapped chunk differs)."""
    head = hashlib.sha256(f"{tag}/{i}".encode()).digest()
    return bytearray((head * (size // len(head) + 1))[:size])


def connector(hosts, tag, **settings):
    return _native.Connector(hosts=hosts, namespace=NS, set="lmca_full_" + tag,
                             default_ttl_seconds=3600, num_workers=4, **settings)


def survivors(hosts, tag, n, size):
    """Which of chunks 0..n-1 read back whole, and how many read back wrong. The
    reads do not touch: a read-touch would make each chunk read the newest, and
    NSUP, still evicting, would take the ones not read yet first."""
    conn = connector(hosts, tag, read_touch_ttl_percent=-1, touch_on_hit=False)
    hit, wrong, out = [False] * n, 0, bytearray(size)
    for i in reversed(range(n)):
        if conn.get(f"{tag}/{i}", out) is not None:
            hit[i] = True
            wrong += out != payload(tag, i, size)
    conn.close()
    return hit, wrong


def forget(conn, tag, n):
    for i in range(n):
        conn.remove(f"{tag}/{i}")


@pytest.fixture(scope="module")
def flood(cache):
    """One blocking writer offers 5x the capacity while a hot set of chunks is read
    every half second."""
    hosts, capacity, size = cache
    tag = uuid.uuid4().hex[:10]
    conn = connector(hosts, tag)
    n = 5 * capacity // size
    hot = [f"{tag}/hot{j}" for j in range(4)]
    for j, key in enumerate(hot):
        conn.put(key, payload(tag, f"hot{j}", size))
    refused, out, last_read, hot_misses = [], bytearray(size), 0.0, 0
    started = time.time()
    for i in range(n):
        try:
            conn.put(f"{tag}/{i}", payload(tag, i, size))
        except _native.Error as e:
            refused.append((i, e.name))
        if time.monotonic() - last_read > 0.5:
            last_read = time.monotonic()
            hot_misses += sum(conn.get(key, out) is None for key in hot)
    hot_alive = [conn.get(key, out) is not None for key in hot]
    eviction, ended = conn.eviction(), time.time()
    hit, wrong = survivors(hosts, tag, n, size)
    debris = len(conn.sweep())
    objects = int(ns_info(hosts)["objects"])
    stats = conn.stats()
    yield dict(n=n, per_fifth=capacity // 5 // size, refused=refused, hit=hit, wrong=wrong,
               hot_alive=hot_alive, hot_misses=hot_misses, debris=debris, objects=objects,
               stats=stats, eviction=eviction, started=started, ended=ended)
    forget(conn, tag, n)
    for key in hot:
        conn.remove(key)
    conn.close()


def dropped(stats):
    """Stores the engine dropped, every cause."""
    return sum(stats[k] for k in ("dropped_full", "dropped_busy", "dropped_paced",
                                  "dropped_unreachable"))


def test_one_writer_is_slowed_not_refused(flood):
    warm = flood["per_fifth"] * 5  # the first capacity's worth fills an empty namespace
    late = [r for r in flood["refused"] if r[0] >= warm]
    assert len(late) <= 0.001 * (flood["n"] - warm), late[:5]
    # Each refused store was counted once, by its cause.
    stats = flood["stats"]
    assert dropped(stats) == len(flood["refused"])


def test_the_newest_chunks_stay_and_the_oldest_go(flood):
    k, hit = flood["per_fifth"], flood["hit"]
    assert sum(hit[-k:]) / k >= 0.95
    assert sum(hit[:k]) / k <= 0.05


def test_no_hit_carries_wrong_bytes(flood):
    assert flood["wrong"] == 0


def test_a_hot_set_read_every_half_second_survives_the_flood(flood):
    assert all(flood["hot_alive"])
    assert flood["hot_misses"] == 0


def test_the_plan_knows_where_nsup_cut(flood):
    """The handle's look reads NSUP's last cut (evict_void_time): a void time of
    this flood's chunks, due a TTL (3600 s) after their stores, give or take the
    clock's lead. A spent touch budget moves only hits a fifth of the span from
    it to the head behind the head (src/engine/hits.c, fresh)."""
    cut = flood["eviction"]["cut_void_time"]
    assert flood["started"] + 3600 - 60 < cut < flood["ended"] + 3600 + 600, flood["eviction"]


def test_evicted_chunks_leave_little_debris(flood):
    assert flood["debris"] <= 0.02 * max(flood["objects"], 1)


def test_many_writers_drop_only_with_a_cause(cache):
    """Several writers through the asynchronous layer: every store either lands or
    is dropped with a cause (stop-writes or load), counted by the engine."""
    hosts, capacity, size = cache
    tag = uuid.uuid4().hex[:10]
    conn = connector(hosts, tag)
    n, writers, batch = 5 * capacity // size, 4, 4
    results, lock = {}, threading.Lock()

    def write(w):
        for first in range(w * batch, n, writers * batch):
            idx = list(range(first, min(first + batch, n)))
            fid = conn.submit_batch_set([f"{tag}/{i}" for i in idx],
                                        [payload(tag, i, size) for i in idx])
            while True:  # one batch in flight per writer
                with lock:
                    done = {c[0]: c for c in conn.drain_completions()}
                    results.update(done)
                    if fid in results:
                        break
                time.sleep(0.005)
            _, ok, error, stored = results[fid]
            with lock:
                results[fid] = (idx, ok, error, stored)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed, causes = 0, set()
    for idx, ok, error, stored in results.values():
        failed += stored.count(False)
        if not ok:
            causes.add(error.split(":", 1)[0])
    stats = conn.stats()
    assert causes <= {"EFULL", "EBUSY"}
    assert failed == dropped(stats)
    hit, wrong = survivors(hosts, tag, n, size)
    assert wrong == 0
    k = capacity // 5 // size
    # Writers interleave: the newest are roughly the last.
    assert sum(hit[-k:]) / k >= 0.9, (sum(hit), [sum(hit[j:j + n // 10])
                                                 for j in range(0, n, n // 10)], stats)
    forget(conn, tag, n)
    conn.close()
