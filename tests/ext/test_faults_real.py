"""Faults on a real server and a real cluster, through the extension (engine,
asynchronous layer and all): a server killed with SIGKILL and restarted in the
middle of puts and gets, a server frozen (SIGSTOP) until every call times out,
and a node of a three-node loopback cluster stopped and restarted (migrations)
during a load. In every case: typed errors or misses, never wrong bytes, no
buffer or thread left behind, and the connector recovers by itself.

These need servers this suite can stop and start, so they run only when told
how (docs/testing.md):

    AEROSPIKE_TEST_CTL="scripts/aerospike-loopback.sh"   # ACTION NODE
    AEROSPIKE_TEST_HOSTS=127.0.0.1:3000  AEROSPIKE_TEST_CTL_NODE=single
    AEROSPIKE_TEST_CLUSTER=127.0.0.1:3100,127.0.0.1:3110,127.0.0.1:3120
    AEROSPIKE_TEST_CLUSTER_NODES=0,1,2

and skip otherwise. The test server's fault injection covers the same ground
in CI (tests/c/test_faults.c).
"""

import collections
import hashlib
import os
import select
import shlex
import subprocess
import sys
import threading
import time
import uuid

import pytest

from lmcache_aerospike import _native
from tests.conftest import info

MiB = 1 << 20
CTL = os.environ.get("AEROSPIKE_TEST_CTL")
SIZES = [100 * 1024, 1 * MiB, 5 * MiB]  # a tile, one record, two segments
# What a fault may surface as: the cluster gone, slow, partitions moving.
TRANSIENT = {"ECONNECTION", "ETIMEOUT", "EBUSY", "ENAMESPACE"}


# What a sanitized test run sets for itself: not for the servers it starts.
SANITIZER_ENV = ("LD_PRELOAD", "ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS", "PYTHONMALLOC")


def ctl(action, node):
    env = {k: v for k, v in os.environ.items() if k not in SANITIZER_ENV}
    subprocess.run(shlex.split(CTL) + [action, node], check=True, timeout=180, env=env)


def threads():
    """The names of this process's threads (/proc/self/task/*/comm)."""
    names = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as f:
            names.append(f.read().strip())
    return sorted(names)


def real_hosts(hosts):
    if not CTL or not hosts:
        pytest.skip("needs AEROSPIKE_TEST_CTL and real servers (docs/testing.md)")
    if info(hosts, "fixture-reset") == "ok":
        pytest.skip("needs a real server, not the test server")
    return hosts


class Load:
    """Sets and gets in batches on one thread, checking every hit against the
    digests of what was ever written under its key, until stopped."""

    def __init__(self, connector, nkeys=16):
        run = uuid.uuid4().hex[:10]
        self.c = connector
        self.keys = [f"model@1@0@{run}{i:04x}@faults" for i in range(nkeys)]
        self.size = {k: SIZES[i % len(SIZES)] for i, k in enumerate(self.keys)}
        self.written = {k: set() for k in self.keys}
        # The last buffers submitted, to check at the end that the extension
        # released them (all of them would hold gigabytes by then).
        self.held = collections.deque(maxlen=64)
        self.log = []   # (time, op, ok, error kind, hits)
        self.wrong = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def wait(self, fid, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            select.select([self.c.event_fd()], [], [], 1)
            for done in self.c.drain_completions():
                assert done[0] == fid, "one batch in flight at a time"
                return done
        raise AssertionError(f"batch {fid} never completed")

    def record(self, op, ok, error, hits):
        kind = error.split(":", 1)[0] if error else ""
        self.log.append((time.monotonic(), op, ok, kind, hits))

    def set_batch(self, keys):
        bufs = [bytearray(os.urandom(self.size[k])) for k in keys]
        for k, b in zip(keys, bufs):
            self.written[k].add(hashlib.sha1(b).digest())  # may land even if the batch fails
        self.held.extend(bufs)
        _, ok, error, results = self.wait(self.c.submit_batch_set(keys, bufs))
        self.record("set", ok, error, sum(results))

    def get_batch(self, keys):
        bufs = [bytearray(self.size[k]) for k in keys]
        self.held.extend(bufs)
        _, ok, error, results = self.wait(self.c.submit_batch_get(keys, bufs))
        for k, b, hit in zip(keys, bufs, results):
            if hit and hashlib.sha1(b).digest() not in self.written[k]:
                self.wrong += 1
        self.record("get", ok, error, sum(results))

    def blocking_get(self, key):
        try:
            self.c.get(key, bytearray(self.size[key]))
            self.record("blocking", True, "", 0)
        except _native.Error as e:  # typed, or the test fails on the exception
            self.record("blocking", False, e.name, 0)

    def run(self):
        turn = 0
        while not self.stop.is_set():
            i = (turn * 4) % len(self.keys)
            self.set_batch(self.keys[i:i + 4])
            self.get_batch(self.keys[(i + 4) % len(self.keys):][:4] or self.keys[:4])
            self.blocking_get(self.keys[turn % len(self.keys)])
            turn += 1
            time.sleep(0.01)  # faults are the point, not throughput: spare the server's defrag

    def errors(self):
        return {kind for _, _, ok, kind, _ in self.log if not ok}

    def recovered_after(self, since):
        """Whole set and get batches succeeded after `since`, and nothing failed
        in the last second of the load."""
        after = [e for e in self.log if e[0] > since]
        end = self.log[-1][0]
        good_sets = any(op == "set" and ok for _, op, ok, _, _ in after)
        good_gets = any(op == "get" and ok and hits for _, op, ok, _, hits in after)
        return good_sets and good_gets and all(ok for t, _, ok, _, _ in after if t > end - 1)

    def summary(self):
        ops = len(self.log)
        failed = sum(1 for e in self.log if not e[2])
        return f"{ops} batches, {failed} failed ({sorted(self.errors())}), {self.wrong} wrong"


def run_with_fault(connector, fault, settle=4.0):
    """Runs a load around `fault()`; returns the load after `settle` seconds
    of recovery. The load stops whatever the fault does."""
    load = Load(connector)
    load.thread.start()
    try:
        time.sleep(2)
        fault()
        recovered_from = time.monotonic()
        time.sleep(settle)
    finally:
        load.stop.set()
        load.thread.join(120)
    assert not load.thread.is_alive()
    print(load.summary())
    return load, recovered_from


def check(load, recovered_from, before_threads):
    assert load.wrong == 0, load.summary()
    assert load.errors() <= TRANSIENT, load.summary()
    assert load.recovered_after(recovered_from), load.summary()
    load.c.close()
    for _ in range(20):  # workers, tend and scan threads all joined
        if threads() == before_threads:
            break
        time.sleep(0.1)
    assert threads() == before_threads
    # Every buffer the extension held is released: only our list refers to it.
    alone = [bytearray(1)]
    baseline = [sys.getrefcount(b) for b in alone][0]
    held = [sys.getrefcount(b) for b in load.held]
    assert held and all(r == baseline for r in held), (baseline, sorted(set(held)))


def connector_for(hosts, **settings):
    return _native.Connector(hosts=hosts, namespace="lmcache", set="lmca_faults",
                             num_workers=4, read_timeout_ms=500, write_timeout_ms=1000,
                             connect_timeout_ms=500, default_ttl_seconds=60, **settings)


@pytest.fixture
def single():
    hosts = real_hosts(os.environ.get("AEROSPIKE_TEST_HOSTS"))
    node = os.environ.get("AEROSPIKE_TEST_CTL_NODE", "single")
    yield hosts, node
    ctl("resume", node)
    ctl("start", node)  # whatever a failed test left, the next one finds it up


def test_server_killed_and_restarted_mid_load(single):
    hosts, node = single
    before = threads()
    c = connector_for(hosts)

    def crash():
        ctl("kill", node)
        time.sleep(1.5)
        ctl("start", node)

    load, since = run_with_fault(c, crash, settle=5)
    assert load.errors(), "the kill went unnoticed: the test did not test anything"
    check(load, since, before)


def test_frozen_server_times_out_then_recovers(single):
    hosts, node = single
    before = threads()
    c = connector_for(hosts)
    key = "model@1@0@frozen@faults"
    c.put(key, b"x" * 1000)

    def freeze():
        ctl("pause", node)
        try:
            started = time.monotonic()
            with pytest.raises((_native.TimeoutError, _native.ConnectionError)):
                c.get(key, bytearray(1000))
            assert time.monotonic() - started < 5  # bounded by the timeouts, not the freeze
            time.sleep(3)  # the load's batches time out too
        finally:
            ctl("resume", node)

    load, since = run_with_fault(c, freeze, settle=5)
    assert {"ETIMEOUT", "ECONNECTION"} & load.errors(), load.summary()
    check(load, since, before)


@pytest.fixture
def cluster():
    hosts = real_hosts(os.environ.get("AEROSPIKE_TEST_CLUSTER"))
    nodes = os.environ.get("AEROSPIKE_TEST_CLUSTER_NODES", "0,1,2").split(",")
    yield hosts, nodes
    for n in nodes:
        ctl("start", n)


def migrations_done(hosts):
    for seed in hosts.split(","):
        stats = dict(kv.split("=", 1) for kv in info(seed, "statistics").split(";") if "=" in kv)
        if stats.get("migrate_partitions_remaining", "0") != "0":
            return False
    return True


def test_cluster_node_stopped_and_killed_during_load(cluster):
    hosts, nodes = cluster
    before = threads()
    c = connector_for(hosts)

    def churn():
        ctl("stop", nodes[1])  # a clean leave, then a crash of another node
        time.sleep(2)
        ctl("start", nodes[1])
        ctl("kill", nodes[2])
        time.sleep(2)
        ctl("start", nodes[2])
        for _ in range(60):  # migrations back to the full cluster
            if migrations_done(hosts):
                break
            time.sleep(0.5)

    load, since = run_with_fault(c, churn, settle=5)
    # Replication factor 2: what was stored before the churn survives it, and
    # every hit, during and after, is exactly what was written.
    final = Load(c)
    final.keys, final.size, final.written = load.keys, load.size, load.written
    final.get_batch(load.keys)
    print("after the churn:", final.summary(), final.log[-1])
    assert final.wrong == 0 and final.log[-1][2]
    assert final.log[-1][4] > 0
    # the payloads went the fast path, through the node changes
    stats = c.stats()
    assert stats["fast_ops"] > 0 and stats["client_ops"] == 0, stats
    load.held.extend(final.held)
    final.held.clear()  # only load.held refers to them now
    check(load, since, before)
