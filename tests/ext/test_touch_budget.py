"""Hits move their chunks within a budget every writer shares
(src/engine/clock.c, hits.c): a move rewrites the chunk on every copy, as many
bytes as a store, on a device and on memory alike (since 7.0 a memory namespace
keeps records in write blocks too), so the moves of all writers rewrite at most
touch_budget_percent of what their stores landed. The credit lives in the
shared clock's record: each reservation adds what its handle's stores landed,
and a move takes its bytes while the credit is above 0 (it may take it below).
The bytes moved are counted (touch_bytes), the hits past the budget stay where
they are (hits_unbudgeted); once it is spent, a hit within a fifth of the
namespace's span of the head is not even asked for (hits_fresh), so what
credit comes goes to the chunks nearest the cut; 0 is no budget.

On the test server a namespace of its own (storage-engine device or memory) is
started for each test; on a real server the session's lmcache namespace is used
where it is of that kind (the README's recipes, scripts/aerospike-loopback.sh
start ssd or cache), its clock record removed first so that no earlier credit
counts.
"""

import contextlib
import time
import uuid

import pytest

import aerospike

from lmcache_aerospike import _native
from tests.conftest import info
from tests.ext.plant import Planter
from tests.server.launch import running

SIZE = 64 << 10
EVICTS = "max-record-size=1M,nsup-period=1,evict-used-pct=50,evict-tenths-pct=300,stop-writes-used-pct=90"
NAMESPACES = {"device": "lmcache:storage-engine=device,filesize=64M," + EVICTS,
              "memory": "lmcache:storage-engine=memory,data-size=64M," + EVICTS}


@contextlib.contextmanager
def evicting_namespace(hosts, engine="device"):
    """(hosts, namespace) of a namespace on `engine` that evicts."""
    if info(hosts, "fixture-reset") == "ok":
        with running(args=["--namespace", NAMESPACES[engine]]) as port:
            yield f"127.0.0.1:{port}", "lmcache"
        return
    ns = dict(kv.split("=", 1) for kv in info(hosts, "namespace/lmcache").split(";") if "=" in kv)
    if ns.get("storage-engine") != engine or int(ns.get("storage-engine.evict-used-pct", 0)) == 0:
        pytest.skip(f"needs a {engine} namespace that evicts (the README's recipes)")
    yield hosts, "lmcache"


def fresh_clock(hosts, ns):
    """No credit from earlier writers: the shared clock's record removed."""
    planter = Planter(hosts, ns, "lmca_clock")
    try:
        planter.client.remove((ns, "lmca_clock", "void-clock"))
    except aerospike.exception.RecordNotFound:
        pass
    finally:
        planter.close()


def connector(hosts, ns, tag, budget_percent):
    return _native.Connector(hosts=hosts, namespace=ns, set="lmca_budget_" + tag,
                             default_ttl_seconds=3600, records_per_void_second=32,
                             max_put_wait_ms=30000, touch_budget_percent=budget_percent)


def hits(hosts, ns, budget_percent, reader_stores=True, writer_percent=None):
    """A writer stores 128 chunks, 32 a second of void time; then a reader (the
    writer itself, or a handle that stored nothing) reads the first 16 again,
    every one of them 3.5 s of the clock behind its head (a whole second off
    either way in a TTL read back, and the newest second is fresh: not moved).
    Returns the reader's counters and the eviction plan."""
    tag = uuid.uuid4().hex[:10]
    fresh_clock(hosts, ns)
    writer = connector(hosts, ns, tag,
                       budget_percent if writer_percent is None else writer_percent)
    keys = [f"{tag}/{i}" for i in range(128)]
    for key in keys:
        writer.put(key, bytes(SIZE))
    reader = writer if reader_stores else connector(hosts, ns, tag, budget_percent)
    buf = bytearray(SIZE)
    for key in keys[:16]:
        assert reader.get(key, buf) is not None
    stats, plan = reader.stats(), reader.eviction()
    for key in keys:
        writer.remove(key)
    for conn in {id(writer): writer, id(reader): reader}.values():
        conn.close()
    return stats, plan


def budgeted(stored, percent, plan):
    """Moves of SIZE the credit of `stored` chunks allows, one at a time (a
    blocking get moves its hit before it returns): while the credit is above 0,
    the last taking it below. The credit is banked up to a sixteenth of the
    namespace's capacity (its records times the mean record, SIZE here) times
    the percentage; give or take one for the bytes rounded down at each
    reservation."""
    credit = stored * SIZE * percent // 100
    cap = plan["records"] * SIZE // 16 * percent // 100
    return -(-min(credit, cap) // SIZE)


def left(stats):
    """Hits past the budget: refused for it (hits_unbudgeted), or, once it is
    spent, left where they are as near enough the head (hits_fresh)."""
    return stats["hits_unbudgeted"] + stats["hits_fresh"]


@pytest.mark.parametrize("engine", ["device", "memory"])
def test_moves_rewrite_at_most_the_budget(aerospike_hosts, engine):
    with evicting_namespace(aerospike_hosts, engine) as (hosts, ns):
        stats, plan = hits(hosts, ns, 10)
        allowed = budgeted(128, 10, plan)
        assert allowed < 16  # the budget binds
        assert allowed - 1 <= stats["hits_touched"] <= allowed, stats
        assert left(stats) == 16 - stats["hits_touched"], stats
        # Every move counted its bytes.
        assert stats["touch_bytes"] == stats["hits_touched"] * SIZE


def test_every_writer_shares_one_budget(aerospike_hosts):
    """A reader that stored nothing moves on the credit another writer's stores
    earned: a budget per handle would have moved none of its hits."""
    with evicting_namespace(aerospike_hosts) as (hosts, ns):
        stats, plan = hits(hosts, ns, 10, reader_stores=False)
        allowed = budgeted(128, 10, plan)
        assert allowed - 1 <= stats["hits_touched"] <= allowed, stats
        assert left(stats) == 16 - stats["hits_touched"], stats


def test_moves_are_paid_for_by_stores(aerospike_hosts):
    """Stores that earn no credit (a writer with no budget) pay for no moves: a
    budget of time (NSUP's pace a second, per handle) moved 4 of these 16."""
    with evicting_namespace(aerospike_hosts) as (hosts, ns):
        stats, _ = hits(hosts, ns, 10, reader_stores=False, writer_percent=0)
        assert stats["hits_touched"] == 0 and stats["hits_unbudgeted"] == 16, stats


def test_no_budget_moves_every_hit(aerospike_hosts):
    with evicting_namespace(aerospike_hosts) as (hosts, ns):
        stats, _ = hits(hosts, ns, 0)
        assert stats["hits_unbudgeted"] == 0 and stats["hits_fresh"] == 0
        assert stats["hits_touched"] == 16
        assert stats["touch_bytes"] == 16 * SIZE


def test_a_spent_budget_moves_the_chunks_nearest_the_cut(aerospike_hosts):
    """With credit, a chunk read at the head moves (it outlives a lost node's
    deeper cuts); with the credit spent, one read within a fifth of the
    namespace's span of the head is left where it is (hits_fresh), not
    refused for the budget, so the credit still to come goes to the chunks
    nearest the cut. Spent first come, first served, the read-heavy
    conversations of bench/cache/cache_bench.py kept 0.926x an exact LRU by
    prefix token after the first eviction, on the cut's 0.975x (docs/capacity.md,
    "At equal DRAM")."""
    size = 16 << 10
    with evicting_namespace(aerospike_hosts) as (hosts, ns):
        tag = uuid.uuid4().hex[:10]
        fresh_clock(hosts, ns)
        conn = connector(hosts, ns, tag, 10)
        keys = [f"{tag}/{i}" for i in range(512)]
        try:
            for key in keys:
                conn.put(key, bytes(size))
            buf = bytearray(size)

            def read(key):
                before = conn.stats()
                assert conn.get(key, buf) is not None
                after = conn.stats()
                return {k: after[k] - before[k]
                        for k in ("hits_touched", "hits_fresh", "hits_unbudgeted")}

            # The credit is whole: the newest chunk moves.
            assert read(keys[-1]) == {"hits_touched": 1, "hits_fresh": 0, "hits_unbudgeted": 0}
            # The oldest spend it: the last ones find none, refused for it or,
            # as the line drops while the credit runs out, left as fresh.
            spent = [read(key) for key in keys[:64]]
            assert sum(r["hits_touched"] for r in spent) < 64, spent
            assert spent[-1]["hits_touched"] == 0, spent
            # Spent: a chunk near the head is left where it is, not refused.
            assert read(keys[-2]) == {"hits_touched": 0, "hits_fresh": 1, "hits_unbudgeted": 0}
        finally:
            for key in keys:
                conn.remove(key)
            conn.close()
