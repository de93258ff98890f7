"""Hits move their chunks within a budget (src/engine/hits.c): a move rewrites the
chunk on the master and the replica, as many bytes as a store, on a device and on
memory alike (since 7.0 a memory namespace keeps records in write blocks too), so
hits may rewrite at most touch_budget_percent of what stores write at NSUP's pace
a second. The bytes moved are counted (touch_bytes), and the hits past the budget
stay where they are (hits_unbudgeted); 0 is no budget.

On the test server a namespace of its own (storage-engine device or memory) is
started for each test; on a real server the session's lmcache namespace is used
where it is of that kind (the README's recipes, scripts/aerospike-loopback.sh
start ssd or cache).
"""

import contextlib
import time
import uuid

import pytest

from lmcache_aerospike import _native
from tests.conftest import info
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


def hits(hosts, ns, budget_percent):
    """Stores 128 chunks, 32 a second of void time, then reads the first 16 again,
    every one of them 3.5 s of the clock behind its head (a whole second off
    either way in a TTL read back, and the newest second is fresh: not moved);
    returns the engine's counters, the plan and how long the reads took."""
    tag = uuid.uuid4().hex[:10]
    conn = _native.Connector(hosts=hosts, namespace=ns, set="lmca_budget_" + tag,
                             default_ttl_seconds=3600, records_per_void_second=32,
                             max_put_wait_ms=30000, touch_budget_percent=budget_percent)
    keys = [f"{tag}/{i}" for i in range(128)]
    for key in keys:
        conn.put(key, bytes(SIZE))
    buf = bytearray(SIZE)
    t0 = time.monotonic()
    for key in keys[:16]:
        assert conn.get(key, buf) is not None
    seconds = time.monotonic() - t0
    stats, plan = conn.stats(), conn.eviction()
    for key in keys:
        conn.remove(key)
    conn.close()
    return stats, plan, seconds


@pytest.mark.parametrize("engine", ["device", "memory"])
def test_moves_rewrite_at_most_the_budget(aerospike_hosts, engine):
    with evicting_namespace(aerospike_hosts, engine) as (hosts, ns):
        stats, plan, seconds = hits(hosts, ns, 10)
        assert plan["device"] == (engine == "device") and plan["bytes_per_second"] > 0
        assert stats["hits_fresh"] == 0
        # A tenth of what stores write a second: up to a second of it at once (a
        # move may take it below zero), then what fills in at that rate while the
        # reads go on.
        rate = plan["bytes_per_second"] * 10 / 100
        allowed = int(rate / SIZE) + 1 + int(seconds * rate / SIZE) + 1
        assert 1 <= stats["hits_touched"] <= allowed, (stats, rate, seconds)
        assert stats["hits_touched"] + stats["hits_unbudgeted"] == 16
        # Every move counted its bytes.
        assert stats["touch_bytes"] == stats["hits_touched"] * SIZE


def test_no_budget_moves_every_hit(aerospike_hosts):
    with evicting_namespace(aerospike_hosts) as (hosts, ns):
        stats, _, _ = hits(hosts, ns, 0)
        assert stats["hits_unbudgeted"] == 0 and stats["hits_fresh"] == 0
        assert stats["hits_touched"] == 16
        assert stats["touch_bytes"] == 16 * SIZE
