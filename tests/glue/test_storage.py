"""The storage plugin (lmcache_aerospike.storage), built by LMCache's own
CreateStorageBackends next to a real LocalCPUBackend, and driven as LMCache's
storage manager drives a backend."""

import gc
import logging
import threading
import time

import pytest
import torch

from tests.conftest import TTL_SPREAD_S, basic_check_module, info
from tests.glue.harness import (
    KiB, MiB, Loop, allocated, filled, keys, metadata, plugin_config,
)
from tests.glue.harness import DroppedObjects

from lmcache.v1.config import LMCacheEngineConfig  # noqa: E402
from lmcache.v1.memory_management import MemoryFormat  # noqa: E402
from lmcache_aerospike.lmcache_names import RemoteMetadata  # noqa: E402
from lmcache.v1.storage_backend import CreateStorageBackends  # noqa: E402

from lmcache_aerospike import _native  # noqa: E402
from lmcache_aerospike.storage import AerospikeStoragePlugin  # noqa: E402

MODULE = "lmcache_aerospike.storage"
SHORT_TTL = 20  # the raw writer's; the plugins' is 60


class SecondPlugin(AerospikeStoragePlugin):
    """A second instance in one process needs a class of its own: LMCache does not
    tell an instance its name."""


def storage_keys(hosts, name, extra=None, module=MODULE, class_name="AerospikeStoragePlugin"):
    prefix = f"storage_plugin.{name}."
    given = {"module_path": module, "class_name": class_name, "hosts": hosts,
             "default_ttl_seconds": 60, **(extra or {})}
    return {prefix + k: v for k, v in given.items()}


def storage_config(hosts, name="aerospike", extra=None, **engine_config):
    kw = dict(chunk_size=256, local_cpu=False, max_local_cpu_size=0.3,
              storage_plugins=[name], extra_config=storage_keys(hosts, name, extra))
    kw.update(engine_config)
    return LMCacheEngineConfig.from_defaults(**kw)


class LaunchErrors(logging.Handler):
    """What LMCache's plugin launcher logs when a plugin fails to build (it
    catches the error: storage_backend/__init__.py:107)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.seen = []
        self.logger = logging.getLogger("lmcache.v1.storage_backend")
        self.logger.addHandler(self)

    def emit(self, record):
        self.seen.append(record.getMessage())

    def close(self):
        self.logger.removeHandler(self)
        super().close()


class Stack:
    """Backends made by CreateStorageBackends over one loop."""

    def __init__(self, hosts):
        self.hosts = hosts
        self.loop = Loop()
        self.built = []
        self.dropped = DroppedObjects()

    def backends(self, config, chunk_bytes=64 * KiB):
        md = metadata(chunk_bytes, chunk_size=config.chunk_size)
        backends = CreateStorageBackends(config, md, self.loop.loop, "cpu")
        self.built.append(backends)
        return backends

    def plugin(self, chunk_bytes=64 * KiB, name="aerospike", extra=None, **engine_config):
        backends = self.backends(storage_config(self.hosts, name, extra, **engine_config),
                                 chunk_bytes)
        assert name in backends, "LMCache did not build the plugin"
        return backends[name], backends["LocalCPUBackend"]

    def close(self):
        gc.collect()
        self.dropped.check()
        leaked = [allocated(b["LocalCPUBackend"]) for b in self.built]
        for backends in self.built:
            for backend in reversed(backends.values()):  # the LocalCPUBackend last
                backend.close()
        self.loop.close()
        # Every test hands back what it allocated: anything left is the plugin's leak.
        assert not any(leaked), f"bytes never released: {leaked}"


@pytest.fixture
def stack(aerospike_hosts):
    s = Stack(aerospike_hosts)
    yield s
    s.close()


@pytest.fixture
def writer(aerospike_hosts):
    """A raw connector to plant records, with a TTL shorter than the plugins'."""
    w = _native.Connector(hosts=aerospike_hosts, set="kv_chunks", default_ttl_seconds=SHORT_TTL)
    yield w
    w.close()


def full_chunk(cpu, plugin):
    return filled(cpu, plugin.conn.meta_shapes, plugin.conn.meta_dtypes, plugin.conn.meta_fmt)


def put_as_lmcache(plugin, ks, objs):
    """As the storage manager puts (storage_manager.py:431-435): submit, drop its
    own reference at once, never wait. Returns the bytes put and the futures."""
    sent = [bytes(o.byte_array) for o in objs]
    futures = plugin.batched_submit_put_task(ks, objs)
    for o in objs:
        o.ref_count_down()
    return sent, futures


def wait_puts(futures):
    for f in futures:
        ok, error, _ = f.result(30)
        assert ok, error


def freeze(loop):
    """Blocks the loop that drains the engine's completions; set() the result to
    thaw it."""
    entered, gate = threading.Event(), threading.Event()
    loop.loop.call_soon_threadsafe(lambda: (entered.set(), gate.wait(30)))
    assert entered.wait(10)
    return gate


def release(objs):
    for o in objs:
        if o is not None:
            o.ref_count_down()


# -- building -------------------------------------------------------------------


def test_lmcache_builds_the_plugin_with_its_own_settings(stack):
    # Two names: the plugin finds its own, and reads only its keys.
    config = storage_config(stack.hosts, "as_store", {"set": "lmca_storage_own"})
    config.storage_plugins = ["as_store", "unrelated"]
    config.extra_config.update({"storage_plugin.unrelated.module_path": "nowhere",
                                "storage_plugin.unrelated.class_name": "Nothing",
                                "storage_plugin.unrelated.set": "not_ours"})
    backends = stack.backends(config)
    plugin = backends["as_store"]
    assert isinstance(plugin, AerospikeStoragePlugin) and str(plugin) == "as_store"
    assert plugin.settings.set == "lmca_storage_own"
    assert plugin.get_allocator_backend() is backends["LocalCPUBackend"]


def test_two_instances_need_a_class_each(stack):
    config = storage_config(stack.hosts, "one", {"set": "lmca_storage_one"})
    config.storage_plugins = ["one", "two"]
    config.extra_config.update(storage_keys(stack.hosts, "two", {"set": "lmca_storage_two"},
                                            module=__name__, class_name="SecondPlugin"))
    backends = stack.backends(config)
    assert type(backends["one"]) is AerospikeStoragePlugin
    assert type(backends["two"]) is SecondPlugin
    assert (backends["one"].settings.set, backends["two"].settings.set) == (
        "lmca_storage_one", "lmca_storage_two")

    # The same class under two names: which one is being built cannot be known.
    config.extra_config.update(storage_keys(stack.hosts, "two"))
    with pytest.raises(_native.ConfigError, match=r"\['one', 'two'\].*subclass"):
        AerospikeStoragePlugin(config=config, dst_device="cpu", metadata=metadata(64 * KiB),
                               local_cpu_backend=None, loop=stack.loop.loop)


def test_bad_settings_raise_config_error_naming_the_key(stack):
    config = storage_config(stack.hosts, "as_bad", {"target_segment_bytes": "big"})
    errors = LaunchErrors()
    try:
        backends = stack.backends(config)
    finally:
        errors.close()
    # LMCache's launcher logs the error and goes on without the plugin.
    assert "as_bad" not in backends
    assert any("storage_plugin.as_bad.target_segment_bytes" in m for m in errors.seen), errors.seen

    md, cpu = metadata(64 * KiB), backends["LocalCPUBackend"]
    with pytest.raises(_native.ConfigError, match="storage_plugin.as_bad.target_segment_bytes"):
        AerospikeStoragePlugin(config=config, dst_device="cpu", metadata=md,
                               local_cpu_backend=cpu, loop=stack.loop.loop)
    config = storage_config(stack.hosts, "as_bad", {"hots": "x"})
    with pytest.raises(_native.ConfigError, match=r"storage_plugin.as_bad.hots: unknown key "
                                                  r"\(did you mean hosts\?\)"):
        AerospikeStoragePlugin(config=config, dst_device="cpu", metadata=md,
                               local_cpu_backend=cpu, loop=stack.loop.loop)


# -- puts and gets ------------------------------------------------------------------


@pytest.mark.parametrize("size", [64 * KiB, 16 * MiB])
def test_put_then_blocking_get_round_trips(stack, size):
    plugin, cpu = stack.plugin(size)
    (k,) = keys(1)
    obj = full_chunk(cpu, plugin)
    shapes, dtypes = obj.get_shapes(), obj.get_dtypes()
    sent, futures = put_as_lmcache(plugin, [k], [obj])
    wait_puts(futures)
    assert allocated(cpu) == 0  # the plugin's reference went with the write
    assert plugin.contains(k)
    got = plugin.get_blocking(k)
    assert got is not None and bytes(got.byte_array) == sent[0]
    assert got.get_shapes() == shapes and got.get_dtypes() == dtypes
    assert got.get_ref_count() == 1  # the caller's, and only that
    got.ref_count_down()


def test_a_partial_chunk_comes_back_with_its_shape(stack):
    plugin, cpu = stack.plugin(64 * KiB)
    (k,) = keys(1)
    s = plugin.conn.meta_shapes
    shapes = [torch.Size([s[0][0], s[0][1], 100, s[0][3]])]
    obj = filled(cpu, shapes, plugin.conn.meta_dtypes, plugin.conn.meta_fmt)
    assert plugin.submit_put_task(k, obj).result(30)[0]
    got = plugin.get_blocking(k)
    assert got.get_shapes() == shapes and bytes(got.byte_array) == bytes(obj.byte_array)
    release([got, obj])


def test_batched_puts_skip_keys_in_flight_and_gets_keep_order(stack):
    plugin, cpu = stack.plugin(1 * MiB, extra={"batch_max_in_flight": 3})
    ks = keys(9)
    objs = [full_chunk(cpu, plugin) for _ in range(7)]
    gate = freeze(stack.loop)
    try:
        sent, futures = put_as_lmcache(plugin, ks[:7], objs)
        assert len(futures) == 3  # ops of at most 3 chunks
        assert all(plugin.exists_in_put_tasks(k) for k in ks[:7])
        again = full_chunk(cpu, plugin)
        assert plugin.batched_submit_put_task([ks[0]], [again]) is None  # in flight
        assert again.get_ref_count() == 1  # not taken
        again.ref_count_down()
    finally:
        gate.set()
    wait_puts(futures)
    assert not any(plugin.exists_in_put_tasks(k) for k in ks)
    got = plugin.batched_get_blocking([ks[7], *ks[:7], ks[8]])
    assert got[0] is None and got[8] is None
    assert [bytes(g.byte_array) for g in got[1:8]] == sent
    release(got)


def test_a_put_holds_its_own_reference_until_the_engine_is_done(stack):
    plugin, cpu = stack.plugin(1 * MiB)
    ks = keys(2)
    objs = [full_chunk(cpu, plugin) for _ in ks]
    done = []
    gate = freeze(stack.loop)  # completions wait: the puts stay in flight
    try:
        futures = plugin.batched_submit_put_task(ks, objs, on_complete_callback=done.append)
        assert [o.get_ref_count() for o in objs] == [2, 2]
        release(objs)  # LMCache's own reference goes at once
        assert allocated(cpu) == 2 * MiB  # the plugin's keeps the buffers
        assert not done
    finally:
        gate.set()
    wait_puts(futures)
    assert done == ks  # once per key, after the write
    assert allocated(cpu) == 0
    assert plugin.batched_contains(ks) == 2


def test_a_failed_put_releases_its_reference(stack, fixture_only):
    plugin, cpu = stack.plugin(64 * KiB, extra={"backpressure_ms": 200})
    (k,) = keys(1)
    obj = full_chunk(cpu, plugin)
    done = []
    assert info(fixture_only, "fixture-fault:kind=result;code=8;op=write") == "ok"
    try:
        (future,) = plugin.batched_submit_put_task([k], [obj], on_complete_callback=done.append)
        ok, error, _ = future.result(30)
    finally:
        info(fixture_only, "fixture-clear-faults")
    assert not ok and "EFULL" in error
    assert obj.get_ref_count() == 1 and not done and not plugin.exists_in_put_tasks(k)
    obj.ref_count_down()


def test_non_blocking_get_returns_the_leading_hits_and_reads_nothing_after(stack):
    plugin, cpu = stack.plugin(8 * MiB)  # segmented: a STAT reads no payload
    ks = keys(4)
    objs = [full_chunk(cpu, plugin) for _ in ks]
    sent, futures = put_as_lmcache(plugin, [ks[0], ks[1], ks[3]], [objs[0], objs[1], objs[3]])
    wait_puts(futures)
    objs[2].ref_count_down()
    before = plugin.conn.native.stats()["bytes_read"]
    got = stack.loop.run(plugin.batched_get_non_blocking("lookup-1", ks))
    assert [bytes(g.byte_array) for g in got] == sent[:2]
    assert [g.get_ref_count() for g in got] == [1, 1]
    # The hit after the miss was neither allocated nor read.
    assert allocated(cpu) == 2 * 8 * MiB
    assert plugin.conn.native.stats()["bytes_read"] - before == 2 * 8 * MiB
    release(got)


def test_a_record_that_cannot_be_a_chunk_ends_the_leading_hits(stack, writer):
    plugin, cpu = stack.plugin(64 * KiB)
    hit, bad_md, cachegen, after = keys(4)
    obj = full_chunk(cpu, plugin)
    md = plugin.conn._md(obj)
    writer.put(hit.to_string(), obj.byte_array, md=md, serde="naive")
    writer.put(bad_md.to_string(), obj.byte_array, md=b"\xff" * 5)
    # Encoded by a RemoteConnector under remote_serde cachegen: not raw bytes.
    writer.put(cachegen.to_string(), obj.byte_array, md=md, serde="cachegen")
    writer.put(after.to_string(), obj.byte_array, md=md)
    for middle in (bad_md, cachegen):
        got = stack.loop.run(plugin.batched_get_non_blocking("l", [hit, middle, after]))
        assert len(got) == 1 and bytes(got[0].byte_array) == bytes(obj.byte_array)
        assert allocated(cpu) == 2 * 64 * KiB  # obj and the one hit
        release(got)
        assert plugin.contains(middle) and plugin.get_blocking(middle) is None
    untagged = plugin.get_blocking(after)  # raw bytes stored without a serde tag: a hit
    assert untagged is not None and bytes(untagged.byte_array) == bytes(obj.byte_array)
    release([untagged, obj])


def test_a_get_lmcache_gives_up_on_returns_its_memory_when_the_read_ends(stack, fixture_only):
    import aerospike

    # The engine's own read timeout must not end the read before LMCache gives up.
    plugin, cpu = stack.plugin(8 * MiB, extra={"read_timeout_ms": 5000}, blocking_timeout_secs=1)
    (k,) = keys(1)
    obj = full_chunk(cpu, plugin)
    wait_puts(put_as_lmcache(plugin, [k], [obj])[1])
    digest = aerospike.calc_digest("lmcache", "kv_chunks", k.to_string() + "|s|0").hex()
    rule = f"fixture-fault:kind=delay;ms=2500;op=read;count=1;digest={digest}"
    assert info(fixture_only, rule) == "ok"
    assert plugin.get_blocking(k) is None  # given up after 1 s
    assert allocated(cpu) == 8 * MiB  # still the engine's until the read ends
    deadline = time.monotonic() + 10
    while allocated(cpu) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert allocated(cpu) == 0


# -- lookups and pins -------------------------------------------------------------


def test_contains_with_pin_restarts_the_ttl_and_without_leaves_it(stack, writer):
    plugin, cpu = stack.plugin(64 * KiB)
    ks = keys(3)
    for k in ks[:2]:
        writer.put(k.to_string(), bytearray(64 * KiB))
    assert plugin.contains(ks[0]) and not plugin.contains(ks[2])
    assert plugin.batched_contains(ks) == 2
    assert writer.stat(ks[0].to_string())["ttl"] <= SHORT_TTL + TTL_SPREAD_S

    assert plugin.contains(ks[0], pin=True)
    touched = writer.stat(ks[0].to_string())
    assert touched["ttl"] > SHORT_TTL + TTL_SPREAD_S and not touched["pin"]  # the plugin's 60 s
    assert writer.stat(ks[1].to_string())["ttl"] <= SHORT_TTL + TTL_SPREAD_S

    assert plugin.batched_contains(ks, pin=True) == 2
    assert writer.stat(ks[1].to_string())["ttl"] > SHORT_TTL + TTL_SPREAD_S
    assert writer.stat(ks[2].to_string()) is None  # a miss is not created


def test_async_contains_counts_the_prefix_and_pin_restarts_the_ttl(stack, writer):
    plugin, cpu = stack.plugin(64 * KiB)
    ks = keys(3)
    for k in (ks[0], ks[2]):
        writer.put(k.to_string(), bytearray(64 * KiB))
    assert stack.loop.run(plugin.batched_async_contains("l", ks)) == 1
    assert writer.stat(ks[0].to_string())["ttl"] <= SHORT_TTL + TTL_SPREAD_S
    assert stack.loop.run(plugin.batched_async_contains("l", ks, pin=True)) == 1
    assert writer.stat(ks[0].to_string())["ttl"] > SHORT_TTL + TTL_SPREAD_S
    assert writer.stat(ks[2].to_string())["ttl"] <= SHORT_TTL + TTL_SPREAD_S  # after the miss: untouched


def test_pin_restarts_the_ttl_and_unpin_leaves_the_record(stack, writer):
    plugin, cpu = stack.plugin(64 * KiB)
    pinned, unpinned, missing = keys(3)
    for k in (pinned, unpinned):
        writer.put(k.to_string(), bytearray(64 * KiB))
    assert plugin.pin(pinned) and not plugin.pin(missing)
    touched = writer.stat(pinned.to_string())
    assert touched["ttl"] > SHORT_TTL + TTL_SPREAD_S and not touched["pin"]  # restarted, not never-expire
    # unpin holds nothing to release: the record keeps its TTL and stays.
    assert plugin.unpin(unpinned) and plugin.unpin(missing)
    after = writer.stat(unpinned.to_string())
    assert after is not None and after["ttl"] <= SHORT_TTL + TTL_SPREAD_S and not after["pin"]
    assert writer.stat(missing.to_string()) is None


def test_remove(stack):
    plugin, cpu = stack.plugin(64 * KiB)
    (k,) = keys(1)
    obj = full_chunk(cpu, plugin)
    wait_puts(put_as_lmcache(plugin, [k], [obj])[1])
    assert plugin.remove(k) and not plugin.remove(k)
    assert not plugin.contains(k) and plugin.get_blocking(k) is None
    assert allocated(cpu) == 0


# -- life -------------------------------------------------------------------------


def test_close_waits_for_its_puts_and_is_idempotent(stack):
    # Two instances with the same settings share one engine, which outlives the
    # first close: only the wait keeps that close from returning under its put.
    config = storage_config(stack.hosts, "one", {"set": "lmca_storage_close"})
    config.storage_plugins = ["one", "two"]
    config.extra_config.update(storage_keys(stack.hosts, "two", {"set": "lmca_storage_close"},
                                            module=__name__, class_name="SecondPlugin"))
    backends = stack.backends(config, 1 * MiB)
    one, two, cpu = backends["one"], backends["two"], backends["LocalCPUBackend"]
    engine = one.engine
    assert two.engine is engine and engine.users == 2
    (k,) = keys(1)
    obj = full_chunk(cpu, one)
    gate = freeze(stack.loop)
    try:
        put_as_lmcache(one, [k], [obj])
        closer = threading.Thread(target=one.close)
        closer.start()
        closer.join(0.5)
        assert closer.is_alive()  # its put is in flight
    finally:
        gate.set()
    closer.join(30)
    assert not closer.is_alive() and allocated(cpu) == 0
    assert two.contains(k)  # written before close() returned
    one.close()  # again: nothing more happens
    assert engine.users == 1 and not engine.native.closed
    two.close()
    assert engine.users == 0 and engine.native.closed


def test_the_remote_connector_and_the_storage_plugin_read_each_other(stack):
    config = plugin_config(stack.hosts)  # the RemoteConnector plugin "aerospike"
    config.storage_plugins = ["as_store"]
    config.extra_config.update(storage_keys(stack.hosts, "as_store"))
    backends = stack.backends(config, 64 * KiB)
    rb, plugin, cpu = (backends["RemoteBackend-aerospike"], backends["as_store"],
                       backends["LocalCPUBackend"])
    conn = rb.connection.getWrappedConnector()
    assert plugin.engine is conn.engine  # the same settings: one engine

    by_remote, by_plugin = keys(2)
    s = conn.meta_shapes
    shapes = [torch.Size([s[0][0], s[0][1], 40, s[0][3]])]  # partial: shape from the md
    a = filled(cpu, shapes, conn.meta_dtypes, conn.meta_fmt)
    rb.submit_put_task(by_remote, a).result(30)
    got = plugin.get_blocking(by_remote)
    assert got.get_shapes() == shapes and bytes(got.byte_array) == bytes(a.byte_array)

    b = full_chunk(cpu, plugin)
    assert plugin.submit_put_task(by_plugin, b).result(30)[0]
    back = rb.get_blocking(by_plugin)
    assert bytes(back.byte_array) == bytes(b.byte_array)
    release([a, b, got, back])


def test_a_scheduler_has_lookups_but_no_gets(stack, writer):
    config = storage_config(stack.hosts, "as_sched")
    md = metadata(64 * KiB)
    md.role = "scheduler"  # LMCache builds no LocalCPUBackend for it
    backends = CreateStorageBackends(config, md, stack.loop.loop, "cpu")
    plugin = backends["as_sched"]
    try:
        (k,) = keys(1)
        rm = RemoteMetadata(64 * KiB, md.get_shapes(), md.get_dtypes(), MemoryFormat.KV_2LTD)
        writer.put(k.to_string(), bytearray(64 * KiB), md=rm.serialize())  # a chunk to read
        assert plugin.local_cpu_backend is None and plugin.contains(k)
        assert plugin.get_blocking(k) is None and plugin.get_non_blocking(k) is None
        assert stack.loop.run(plugin.batched_get_non_blocking("l", [k])) == []
    finally:
        plugin.close()


def test_lmcache_basic_check_test_storage_manager_passes(tmp_path, aerospike_hosts):
    """LMCache's own check of a storage manager, built from a YAML whose only
    backend is this plugin (local_cpu off), puts, finds and gets chunks."""
    import os
    import subprocess
    import sys
    import uuid

    config = tmp_path / "lmcache.yaml"
    config.write_text(
        "chunk_size: 256\nlocal_cpu: false\nmax_local_cpu_size: 0.2\n"
        'storage_plugins: ["aerospike"]\n'
        "extra_config:\n"
        "  storage_plugin.aerospike.module_path: lmcache_aerospike.storage\n"
        "  storage_plugin.aerospike.class_name: AerospikeStoragePlugin\n"
        f'  storage_plugin.aerospike.hosts: "{aerospike_hosts}"\n'
        f"  storage_plugin.aerospike.set: lmca_sm_{uuid.uuid4().hex[:8]}\n"
        "  storage_plugin.aerospike.default_ttl_seconds: 60\n")
    env = {**os.environ, "LMCACHE_CONFIG_FILE": str(config), "LMCACHE_TRACK_USAGE": "false"}
    run = subprocess.run([sys.executable, "-m", basic_check_module(), "--mode",
                          "test_storage_manager", "--model", "lmca-sm", "--num-keys", "6"],
                         env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "Failed to create backend" not in out, out[-3000:]
    assert "Validation (content correct): 6/6 passed" in out, out[-3000:]
    assert "Test Failed" not in out, out[-3000:]


def test_tenants_never_read_each_others_bytes(stack):
    """Two models, and two tags of one model, with the same chunk hash."""
    from tests.glue.harness import tenant_keys

    plugin, cpu = stack.plugin(64 * KiB)
    ks = tenant_keys()
    objs = [full_chunk(cpu, plugin) for _ in ks[:-1]]
    sent, futures = put_as_lmcache(plugin, ks[:-1], objs)
    wait_puts(futures)
    assert len(set(sent)) == len(sent)
    for k, data in zip(ks, sent):
        got = plugin.get_blocking(k)
        assert got is not None and bytes(got.byte_array) == data, k.to_string()
        got.ref_count_down()
    assert not plugin.contains(ks[-1]) and plugin.get_blocking(ks[-1]) is None
