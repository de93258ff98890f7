"""The "plugin" L2 adapter (lmcache_aerospike.l2) beyond the shared contract:
its config through LMCache's plugin factory, lock reference counts and
touch_on_lock, byte accounting of overwrites, status, sharing the engine; and
LMCache's own drivers (basic_check test_l2_adapter, lmcache bench l2) run
against both of our multiprocess adapters."""

import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest
import torch

from tests.conftest import TTL_SPREAD_S, basic_check_module, info
from tests.lmcache.l2_driver import (
    SPECS, build, load, lookup, make_allocator, object_keys, objects, plugin_spec, store,
)
from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import (  # noqa: E402
    _object_key_to_string,
)

from lmcache_aerospike import _native, client  # noqa: E402
from lmcache_aerospike.l2 import AerospikeL2Adapter  # noqa: E402


@pytest.fixture
def adapter(aerospike_hosts):
    a = build(plugin_spec(aerospike_hosts))
    yield a
    a.close()


@pytest.fixture(scope="module")
def allocator():
    return make_allocator()


def test_the_factory_finds_our_config_class_and_names_bad_keys(aerospike_hosts):
    a = build(plugin_spec(aerospike_hosts))
    try:
        assert isinstance(a, AerospikeL2Adapter)
        assert a.settings.default_ttl_seconds == 60  # parsed by AerospikeL2AdapterConfig
    finally:
        a.close()
    with pytest.raises(_native.ConfigError, match=r"adapter_params\.read_timeout_ms"):
        build(plugin_spec(aerospike_hosts, read_timeout_ms="soon"))
    with pytest.raises(_native.ConfigError, match=r"adapter_params\.colour: unknown key"):
        build(plugin_spec(aerospike_hosts, colour="red"))


def test_upstream_keys_and_environment_work_unchanged(aerospike_hosts, monkeypatch):
    # LMCache's own Aerospike adapter spells the set set_name and reads hosts from
    # the environment when the JSON leaves them out.
    monkeypatch.setenv("LMCACHE_AEROSPIKE_HOSTS", aerospike_hosts)
    spec = plugin_spec("")
    del spec["adapter_params"]["hosts"], spec["adapter_params"]["set"]
    spec["adapter_params"].update(set_name="lmca_upstream", max_record_bytes=0,
                                  target_segment_bytes=0)
    a = build(spec)
    try:
        assert (a.settings.hosts, a.settings.set) == (aerospike_hosts, "lmca_upstream")
        assert a.settings.target_segment_bytes == 2097152  # upstream's 0 = auto
    finally:
        a.close()


def test_locks_are_reference_counts(adapter, allocator):
    keys = object_keys(2)
    src = objects(allocator, 1, fill=1)
    store(adapter, keys[:1], src)
    assert lookup(adapter, keys) == [True, False]
    assert lookup(adapter, keys) == [True, False]
    assert (adapter.locked(keys[0]), adapter.locked(keys[1])) == (2, 0)  # misses lock nothing
    adapter.submit_unlock(keys[:1])
    assert adapter.locked(keys[0]) == 1
    adapter.submit_unlock(keys)
    adapter.submit_unlock(keys)  # one unlock too many is harmless
    assert adapter.locked(keys[0]) == 0
    assert adapter.report_status()["locked_keys"] == 0
    src[0].ref_count_down()


def test_touch_on_lock_restarts_a_locked_chunks_ttl(aerospike_hosts, allocator):
    a = build(plugin_spec(aerospike_hosts, touch_on_lock=True))
    short = _native.Connector(hosts=aerospike_hosts, set="lmca_lmcache", default_ttl_seconds=20)
    try:
        keys = object_keys(1)
        name = _object_key_to_string(keys[0])
        short.put(name, bytearray(1000))
        assert short.stat(name)["ttl"] <= 20 + TTL_SPREAD_S
        assert lookup(a, keys) == [True]
        deadline = time.monotonic() + 10
        # the touch runs after the lookup's result
        while short.stat(name)["ttl"] <= 20 + TTL_SPREAD_S:
            assert time.monotonic() < deadline, "the lock never touched it"
        assert short.stat(name)["ttl"] > 20 + TTL_SPREAD_S  # the adapter's 60 s
        a.submit_unlock(keys)
    finally:
        short.close()
        a.close()


def test_submit_touch_restarts_the_ttl_and_tells_the_listeners(aerospike_hosts):
    """LMCache 0.5.7's submit_touch ("mark keys accessed for eviction"): on
    Aerospike the chunk's TTL restarts, so NSUP evicts it last. Called directly
    here, so that 0.5.6 (which never calls it) is held to it too."""
    setname = "lmca_touch_" + uuid.uuid4().hex[:8]
    a = build(plugin_spec(aerospike_hosts, set=setname))
    short = _native.Connector(hosts=aerospike_hosts, set=setname, default_ttl_seconds=20)
    accessed = []

    class Listener:
        def on_l2_keys_accessed(self, keys):
            accessed.append(list(keys))

    a._listeners.append(Listener())  # what register_listener does, without its type
    try:
        keys = object_keys(2)
        names = [_object_key_to_string(k) for k in keys]
        for name in names:
            short.put(name, bytearray(5 << 20))  # segments too: all of them are touched
        a.submit_touch(keys[:1])
        deadline = time.monotonic() + 10
        while short.stat(names[0])["ttl"] <= 20 + TTL_SPREAD_S:
            assert time.monotonic() < deadline, "submit_touch never touched it"
        assert short.stat(names[1])["ttl"] <= 20 + TTL_SPREAD_S, "touched a key not given"
        assert accessed == [keys[:1]]
        # Every record of the touched chunk, its segments too, and none of the other's.
        nseg = len(short.inspect(names[0])["segments"])
        assert nseg > 1
        deadline = time.monotonic() + 10
        while True:
            ttls = sorted(r["ttl"] for r in short.scan(records=True))
            assert len(ttls) == 2 * (nseg + 1), ttls
            fresh = [t for t in ttls if t > 20 + TTL_SPREAD_S]
            if len(fresh) == nseg + 1 or time.monotonic() > deadline:
                break
        assert len(fresh) == nseg + 1, ttls
        a.submit_touch([])  # nothing to do: no round trip, no listener call
        assert accessed == [keys[:1]]
    finally:
        for r in short.scan(records=True):
            short.remove_record(r["digest"])
        short.close()
        a.close()


def test_memory_tags_say_remote_storage(adapter):
    try:
        from lmcache.v1.distributed.api import MemoryResidency, MemorySegment, MemoryTags
    except ImportError:  # LMCache 0.5.6: no tags, and nothing asks
        assert adapter.get_memory_tags() is None
        return
    assert adapter.get_memory_tags() == MemoryTags(MemorySegment.STORAGE,
                                                   MemoryResidency.REMOTE)


def test_an_overwrite_of_another_size_replaces_its_bytes(adapter, allocator):
    (key,) = object_keys(1)
    big = objects(allocator, 1, fill=2)[0]
    small = allocator.allocate(torch.Size([2, 8, 128, 4, 128]), torch.bfloat16)
    before = adapter.get_usage().total_bytes_used
    store(adapter, [key], [big])
    store(adapter, [key], [big])  # the same size again counts once
    assert adapter.get_usage().total_bytes_used - before == big.get_size()
    store(adapter, [key], [small])
    assert adapter.get_usage().total_bytes_used - before == small.get_size()
    adapter.delete([key])
    assert adapter.get_usage().total_bytes_used == before
    big.ref_count_down()
    small.ref_count_down()


def test_status_reports_the_engine_and_turns_unhealthy_on_connection_errors(
        aerospike_hosts, allocator, fixture_only):
    a = build(plugin_spec(aerospike_hosts))
    try:
        status = a.report_status()
        assert status["is_healthy"] and status["hosts"] == aerospike_hosts
        assert "engine_submitted" in status and "engine_corrupt" in status
        assert info(fixture_only, "fixture-fault:kind=drop;op=read;count=4") == "ok"
        dropped = object_keys(1)
        assert lookup(a, dropped) == [False]
        status = a.report_status()
        assert not status["is_healthy"] and "ECONNECTION" in status["last_error"]
        # Named by its record's digest (spec 4.8), never by its key.
        assert _object_key_to_string(dropped[0]) not in status["last_error"]
        info(fixture_only, "fixture-clear-faults")
        assert lookup(a, object_keys(1)) == [False]
        assert a.report_status()["is_healthy"]  # the next success clears it
    finally:
        a.close()


def test_adapters_with_the_same_settings_share_one_engine(aerospike_hosts, allocator):
    a = build(plugin_spec(aerospike_hosts))
    b = build(plugin_spec(aerospike_hosts))
    try:
        assert a._engine is b._engine and a._engine.users == 2
        keys = object_keys(1)
        src = objects(allocator, 1, fill=9)
        store(a, keys, src)
        dst = objects(allocator, 1)
        assert load(b, keys, dst) == [True]
        assert bytes(dst[0].byte_array) == bytes(src[0].byte_array)
        a.close()
        a.close()  # idempotent
        assert b._engine.users == 1 and not b._engine.native.closed
        for o in src + dst:
            o.ref_count_down()
    finally:
        b.close()
    assert b._engine.native.closed
    assert client._engines.get(b.settings.identity()) is None


def test_close_waits_for_its_loads_while_the_engine_lives_on(aerospike_hosts, allocator,
                                                              fixture_only):
    import aerospike

    a = build(plugin_spec(aerospike_hosts))
    b = build(plugin_spec(aerospike_hosts))  # keeps the engine open after a.close()
    try:
        keys = object_keys(1)
        src = objects(allocator, 1, fill=4)
        store(a, keys, src)
        digest = aerospike.calc_digest("lmcache", "lmca_lmcache",
                                       _object_key_to_string(keys[0]) + "|s|0").hex()
        rule = f"fixture-fault:kind=delay;ms=700;op=read;count=1;digest={digest}"
        assert info(fixture_only, rule) == "ok"
        dst = objects(allocator, 1)
        a.submit_load_task(keys, dst)
        a.close()  # returns only once the engine is done writing into dst
        assert bytes(dst[0].byte_array) == bytes(src[0].byte_array)
        for o in src + dst:
            o.ref_count_down()
    finally:
        b.close()


# -- LMCache's own drivers, for both adapters --------------------------------------


def lmcache_cli(*args, timeout=600):
    lmcache = shutil.which("lmcache", path=os.path.dirname(sys.executable))
    cmd = [lmcache, *args] if args[0] == "bench" else [sys.executable, *args]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "LMCACHE_TRACK_USAGE": "false"})
    return run.returncode, run.stdout + run.stderr


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_lmcache_basic_check_test_l2_adapter_passes(aerospike_hosts, kind):
    spec = SPECS[kind](aerospike_hosts, set="lmca_check_" + uuid.uuid4().hex[:6])
    rc, out = lmcache_cli("-m", basic_check_module(), "--mode", "test_l2_adapter",
                          "--l2-adapter", json.dumps(spec), "--num-keys", "8")
    assert rc == 0, out[-3000:]
    assert "Validation (content): 8/8" in out and "Validation: 8/8 found" in out, out[-3000:]
    assert "correctly absent" in out, out[-3000:]


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_lmcache_bench_l2_verifies_the_round_trip(aerospike_hosts, kind):
    spec = SPECS[kind](aerospike_hosts, set="lmca_bench_" + uuid.uuid4().hex[:6])
    rc, out = lmcache_cli("bench", "l2", "--l2-adapter", json.dumps(spec), "--no-skip-verify")
    assert rc == 0, out[-3000:]
    assert "[Verify]" in out and "Total success:" in out, out[-3000:]


def test_operations_are_opentelemetry_instruments(aerospike_hosts, allocator):
    from opentelemetry import metrics as otel
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    otel.set_meter_provider(MeterProvider(metric_readers=[reader]))
    if not isinstance(otel.get_meter_provider(), MeterProvider):
        pytest.fail("another meter provider was set first in this process")

    def points(name):
        data = reader.get_metrics_data()
        return [p for rm in data.resource_metrics for sm in rm.scope_metrics
                for m in sm.metrics if m.name == name for p in m.data.data_points]

    def count(op, result):
        return sum(p.value for p in points("aerospike.op")
                   if p.attributes == {"op": op, "result": result})

    a = build(plugin_spec(aerospike_hosts))
    try:
        keys = object_keys(2)
        before = (count("store", "ok"), count("lookup", "hit"), count("lookup", "miss"))
        src = objects(allocator, 1, fill=6)
        store(a, keys[:1], src)
        assert lookup(a, keys) == [True, False]
        a.submit_unlock(keys[:1])
        assert (count("store", "ok"), count("lookup", "hit"), count("lookup", "miss")) == \
            (before[0] + 1, before[1] + 1, before[2] + 1)
        assert sum(p.count for p in points("aerospike.segment.count")) >= 1
        assert any(p.count for p in points("aerospike.op.latency")
                   if p.attributes == {"op": "lookup"})
        src[0].ref_count_down()
    finally:
        a.close()



def test_a_touch_a_full_namespace_refuses_is_not_logged(aerospike_hosts, fixture_only):
    """Another error is logged (which shows the touch ran and the log is seen);
    stop-writes is not: the chunk keeps its TTL, and it stays readable."""
    import logging

    a = build(plugin_spec(aerospike_hosts))
    logged = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: logged.append(record.getMessage())
    log = logging.getLogger("lmcache_aerospike")
    log.addHandler(handler)
    writer = _native.Connector(hosts=aerospike_hosts, set="lmca_lmcache")
    try:
        keys = object_keys(1)
        name = _object_key_to_string(keys[0])
        writer.put(name, bytearray(1000))
        # Result 4 (a parameter error) on writes: that refusal is worth a warning.
        assert info(fixture_only, "fixture-fault:kind=result;code=4;op=write") == "ok"
        started = time.monotonic()
        a.submit_touch(keys)
        while not logged:
            assert time.monotonic() - started < 10, "the refused touch was never logged"
            time.sleep(0.02)
        took = time.monotonic() - started
        assert "touching 1 chunks" in logged[0], logged
        # Result 8 (stop-writes) on writes: refused, and not logged.
        info(fixture_only, "fixture-clear-faults")
        assert info(fixture_only, "fixture-fault:kind=result;code=8;op=write") == "ok"
        logged.clear()
        a.submit_touch(keys)
        time.sleep(3 * took + 0.5)
        assert logged == [], logged
        info(fixture_only, "fixture-clear-faults")
        assert writer.exists(name)
    finally:
        info(fixture_only, "fixture-clear-faults")
        log.removeHandler(handler)
        writer.close()
        a.close()
