"""A namespace whose NSUP stopped evicting is mended, not left full for a TTL
(src/engine/mend.c).

A writer off the shared clock (another client: the official Python one) puts a
burst of chunks into one second of void time, twice NSUP's per-cycle target, and
then two writers on the shared clock offer five times the
capacity, and two more after the mend. NSUP refuses every cycle while that second
is the lowest; the engines see evictions stall past evict-used-pct on a node, one
of them (the lease) removes the lowest second's records, whole chunks, and the
namespace takes stores again and keeps the newest. On one node and on a cluster.
"""

import time
import uuid

import pytest

from lmcache_aerospike import _native
from tests.conftest import info
from tests.ext.plant import Planter, meta_bins
from tests.ext.test_cache_full import FIXTURE_CACHE, NS, cache, ns_info, payload  # noqa: F401


def mend_case(hosts, capacity, size, target):
    tag = uuid.uuid4().hex[:10]
    common = dict(hosts=hosts, namespace=NS, set="lmca_mend_" + tag, default_ttl_seconds=3600)
    burst = [f"{tag}/burst/{i}" for i in range(min(2 * target + 2, capacity // size))]
    plant_burst(hosts, common["set"], burst, tag, size)
    buf = bytearray(size)
    reader = _native.Connector(**{**common, "touch_on_hit": False})
    assert all(reader.get(key, buf) is not None for key in burst)  # valid chunks, all there
    reader.close()  # (an open handle watches too, and may be the one that mends)

    conns = [_native.Connector(**{**common, "default_ttl_seconds": 7200}) for _ in range(2)]
    # Five capacities, and at least two more after the first mend (the stall lasts
    # 8 to 16 s); bounded in time all the same.
    n, per_capacity = 5 * capacity // size, capacity // size
    landed, mended_at, deadline = [], None, time.monotonic() + 300
    i = 0
    while (i < n or mended_at is None or i < mended_at + 2 * per_capacity) and \
            time.monotonic() < deadline:
        key = f"{tag}/{i}"
        try:
            conns[i % 2].put(key, payload(tag, i, size))
            landed.append(True)
        except _native.Error:
            landed.append(False)
        if mended_at is None and sum(c.stats()["mends"] for c in conns) > 0:
            mended_at = i
        i += 1
    n = i
    stats = [c.stats() for c in conns]
    reader = _native.Connector(**{**common, "touch_on_hit": False})
    alive = [reader.get(f"{tag}/{i}", buf) is not None for i in range(n - per_capacity // 5, n)]
    burst_left = sum(reader.get(key, buf) is not None for key in burst)
    debris = len(reader.sweep())
    reader.close()
    for i in range(n):
        conns[0].remove(f"{tag}/{i}")
    for key in burst:
        conns[0].remove(key)
    for c in conns:
        c.close()
    return dict(stats=stats, landed=landed, alive=alive, burst=len(burst), burst_left=burst_left,
                per_capacity=per_capacity, debris=debris)


def plant_burst(hosts, set_name, keys, tag, size):
    """One-record chunks, every one due in the same second of void time however
    long the puts take (a burst written at now + TTL that crossed into a second and
    a third second left each under NSUP's target, which then evicted it itself: no
    stall to mend). A TTL is counted from the server's now, so each put's is the
    second left to that void time from the host's now (a second's drift at an edge
    puts a few in the next second, which the mend takes too)."""
    planter = Planter(hosts, NS, set_name)
    due = int(time.time()) + 3600
    try:
        for i, key in enumerate(keys):
            ttl = due - int(time.time())
            planter.put(key + "|m", meta_bins(bytes(payload(tag, key, size)), 0x5EED0000 + i),
                        ttl=ttl)
    finally:
        planter.close()


def check(run):
    stats, per_capacity = run["stats"], run["per_capacity"]
    mends = sum(s["mends"] for s in stats)
    # Mended, by one handle at a time: the lease, and each mend rechecks the stall.
    told = ("mends", "mended_records", "dropped_full", "clock_local")
    assert mends >= 1 and sum(s["mended_records"] for s in stats) >= run["burst"] // 2, \
        [{k: s[k] for k in told} for s in stats]
    assert run["burst_left"] == 0
    assert sum(run["landed"][-per_capacity:]) / per_capacity >= 0.95, stats
    assert sum(run["alive"]) / len(run["alive"]) >= 0.95
    assert run["debris"] == 0  # whole chunks only


def test_a_second_nsup_refuses_is_removed_and_stores_go_on(cache):  # noqa: F811
    hosts, capacity, size = cache
    # NSUP's target once the namespace holds chunks of this size.
    target = capacity // size * int(ns_info(hosts)["evict-tenths-pct"]) // 1000
    check(mend_case(hosts, capacity, size, target))


def test_a_writers_first_look_writes_the_lease_a_full_namespace_still_grants(cache):  # noqa: F811
    """At stop-writes the lease is taken by deleting its record, so the record
    must exist before the namespace fills: a writer's first look writes it, free
    (without it a new namespace's first stall was waited out for 2 minutes)."""
    hosts, _, size = cache
    clock_set = Planter(hosts, NS, "lmca_clock")
    clock_set.remove("mend-lease")
    tag = uuid.uuid4().hex[:10]
    writer = _native.Connector(hosts=hosts, namespace=NS, set="lmca_mend_" + tag,
                               default_ttl_seconds=3600)
    try:
        writer.put(tag, payload(tag, 0, size))  # the first put plans: the first look
        for _ in range(50):
            if clock_set.exists("mend-lease"):
                break
            time.sleep(0.1)
        _, _, bins = clock_set.client.get((NS, "lmca_clock", "mend-lease"))
        assert bins == {"until_ms": 0}  # free: nobody mends
        writer.remove(tag)
    finally:
        writer.close()
        clock_set.close()


def test_a_cluster_is_mended_too(aerospike_cluster):
    """Three nodes, factor 2: each node's NSUP refuses the burst's second (every
    node has its share of it), and the engines watch every node."""
    hosts = aerospike_cluster
    seeds = hosts.split(",")
    fixture = not info(seeds[0], "fixture-cluster").startswith("ERROR")
    before = dict(kv.split("=", 1) for kv in info(seeds[0], f"namespace/{NS}").split(";")
                  if "=" in kv)
    if fixture:  # the memory recipe, small, on every node
        for seed in seeds:
            for key, value in FIXTURE_CACHE.items():
                assert info(seed, f"set-config:context=namespace;id={NS};{key}={value}") == "ok"
    try:
        nodes = [dict(kv.split("=", 1) for kv in info(s, f"namespace/{NS}").split(";") if "=" in kv)
                 for s in seeds]
        if int(nodes[0].get("storage-engine.evict-used-pct", 0)) == 0:
            pytest.skip(f"namespace {NS} does not evict on this cluster")
        rf = int(nodes[0]["effective_replication_factor"])
        capacity = sum(int(n["data_total_bytes"]) * int(n["storage-engine.evict-used-pct"]) // 100
                       for n in nodes) // rf
        size = 64 << 10 if fixture else 4 << 20
        # A second's records spread over the nodes: each node's target is its
        # share of the cluster's. Half as much again: a node's share of the burst
        # varies (each chunk's two copies go to two of three nodes), and its
        # target grows as it fills on to stop-writes; a node whose share fell
        # under it evicts the burst by itself, on every node (one SMD void time).
        target = capacity // size * int(nodes[0]["evict-tenths-pct"]) // 1000 * 3 // 2
        check(mend_case(hosts, capacity, size, target))
    finally:
        if fixture:  # as it was, for the session's other tests
            for seed in seeds:
                for key in FIXTURE_CACHE:
                    value = before.get(key, before.get("storage-engine." + key))
                    if value is not None:
                        info(seed, f"set-config:context=namespace;id={NS};{key}={value}")
