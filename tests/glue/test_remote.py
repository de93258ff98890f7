"""The RemoteConnector plugin (lmcache_aerospike.remote), driven through LMCache's
own RemoteBackend as LMCache's storage manager drives it."""

import gc
import logging
import os
import subprocess
import sys
import time

import pytest
import torch

from tests.conftest import TTL_SPREAD_S, basic_check_module, info
from tests.glue.harness import (
    KiB, MiB, DroppedObjects, Loop, allocated, cpu_backend, full_chunk, keys, metadata,
    partial_chunk, plugin_config,
)

from lmcache.v1.exceptions import IrrecoverableException  # noqa: E402
from lmcache.v1.storage_backend.remote_backend import RemoteBackend  # noqa: E402

from lmcache_aerospike import _native, client  # noqa: E402
from lmcache_aerospike.remote import AerospikeRemoteConnector, InvalidSettingsError  # noqa: E402


class Stack:
    """RemoteBackends over one loop and one LocalCPUBackend per metadata."""

    def __init__(self, hosts):
        self.hosts = hosts
        self.loop = Loop()
        self.backends = []
        self.dropped = DroppedObjects()

    def backend(self, chunk_bytes=64 * KiB, extra=None, name="aerospike", **engine):
        config = plugin_config(self.hosts, name=name, extra=extra, **engine)
        md = metadata(chunk_bytes, chunk_size=config.chunk_size)
        cpu = cpu_backend(config, md)
        rb = RemoteBackend(config, md, self.loop.loop, cpu, "cpu", plugin_name=name)
        assert rb.connection is not None, "the plugin did not connect"
        self.backends.append((rb, cpu))
        return rb, cpu, rb.connection.getWrappedConnector()

    def close(self):
        gc.collect()
        self.dropped.check()
        leaked = [allocated(cpu) for _, cpu in self.backends]
        for rb, cpu in self.backends:
            rb.close()
            cpu.close()
        self.loop.close()
        # Every test hands back what it allocated: anything left is the plugin's leak.
        assert not any(leaked), f"bytes never released: {leaked}"


@pytest.fixture
def stack(aerospike_hosts):
    s = Stack(aerospike_hosts)
    yield s
    s.close()


def put(rb, key, obj):
    rb.submit_put_task(key, obj).result(30)


def same_bytes(a, b):
    return bytes(a.byte_array) == bytes(b.byte_array)


@pytest.mark.parametrize("size", [256, 64 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB])
def test_put_then_get_round_trips_every_chunk_size(stack, size):
    # The spec's acceptance sizes (section 3, item 2), each one LMCache full chunk.
    rb, cpu, conn = stack.backend(size, chunk_size=64 if size == 256 else 256)
    assert conn.full_chunk_size_bytes == size
    (k,) = keys(1)
    obj = full_chunk(cpu, conn)
    put(rb, k, obj)
    assert rb.contains(k)
    got = rb.get_blocking(k)
    assert got is not None and same_bytes(got, obj)
    assert got.get_shapes() == obj.get_shapes() and got.get_dtypes() == obj.get_dtypes()
    got.ref_count_down()
    obj.ref_count_down()
    assert allocated(cpu) == 0


def test_partial_chunks_come_back_with_their_token_count(stack):
    rb, cpu, conn = stack.backend(64 * KiB)
    (k,) = keys(1)
    obj = partial_chunk(cpu, conn, tokens=100)
    put(rb, k, obj)
    got = rb.get_blocking(k)
    assert got is not None and got.get_shapes() == obj.get_shapes()  # from the stored md
    assert same_bytes(got, obj)
    got.ref_count_down()
    obj.ref_count_down()


def test_without_chunk_meta_a_partial_chunk_is_reshaped(stack):
    rb2, cpu2, conn2 = stack.backend(64 * KiB, name="aerospike.nometa")
    conn2.save_chunk_meta = False  # LMCache sets it from extra_config save_chunk_meta
    (k,) = keys(1)
    obj = partial_chunk(cpu2, conn2, tokens=40)
    put(rb2, k, obj)
    got = rb2.get_blocking(k)
    # reshape_partial_chunk sets meta.shape (LMCache's own base_connector.py)
    assert got is not None and got.meta.shape[2] == 40
    assert len(got.byte_array) == 40 * conn2.single_token_size
    assert bytes(got.byte_array) == bytes(obj.byte_array)
    got.ref_count_down()
    obj.ref_count_down()


def test_batched_put_and_get_keep_order_and_report_misses(stack):
    rb, cpu, conn = stack.backend(1 * MiB, extra={"batch_max_in_flight": 3})
    ks = keys(8)
    objs = [full_chunk(cpu, conn) for _ in range(6)]
    rb.batched_submit_put_task(ks[:6], objs)
    deadline = time.monotonic() + 30
    while rb.batched_contains(ks) < 6 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert rb.batched_contains(ks) == 6
    got = rb.batched_get_blocking([ks[6], *ks[:6], ks[7]])  # ops of 3 keys, in order
    assert got[0] is None and got[7] is None
    assert all(same_bytes(g, o) for g, o in zip(got[1:7], objs))
    for o in got[1:7] + objs:
        o.ref_count_down()
    assert allocated(cpu) == 0


def test_non_blocking_get_returns_the_leading_hits_and_reads_nothing_after(stack):
    rb, cpu, conn = stack.backend(8 * MiB)  # segmented: a STAT reads no payload
    ks = keys(4)
    objs = [full_chunk(cpu, conn) for _ in range(4)]
    for k, o in zip(ks, objs):
        if k is not ks[2]:
            put(rb, k, o)
    before = conn.native.stats()["bytes_read"]
    got = stack.loop.run(conn.batched_get_non_blocking("lookup-1", ks))
    assert len(got) == 2 and all(same_bytes(g, o) for g, o in zip(got, objs))
    # The hit after the miss was neither allocated nor read.
    assert conn.native.stats()["bytes_read"] - before == 2 * 8 * MiB
    for o in got + objs:
        o.ref_count_down()


def test_async_contains_counts_the_prefix_and_pin_restarts_the_ttl(stack, aerospike_hosts):
    rb, cpu, conn = stack.backend(64 * KiB)
    ks = keys(3)
    short = _native.Connector(hosts=aerospike_hosts, set="kv_chunks", default_ttl_seconds=20)
    try:
        for k in ks[:2]:
            short.put(k.to_string(), bytearray(64 * KiB))
        assert stack.loop.run(conn.batched_async_contains("l", ks)) == 2
        assert short.stat(ks[0].to_string())["ttl"] <= 20 + TTL_SPREAD_S
        assert stack.loop.run(conn.batched_async_contains("l", ks, pin=True)) == 2
        # the connector's 60 s again
        assert short.stat(ks[0].to_string())["ttl"] > 20 + TTL_SPREAD_S
    finally:
        short.close()


def test_remove_exists_and_list(stack, aerospike_hosts):
    setname = "lmca_glue_list_" + os.urandom(4).hex()
    rb, cpu, conn = stack.backend(64 * KiB, extra={"set": setname, "send_key": True})
    (k,) = keys(1)
    obj = full_chunk(cpu, conn)
    put(rb, k, obj)
    assert conn.exists_sync(k) and stack.loop.run(conn.exists(k))
    assert stack.loop.run(conn.list()) == []  # off unless enable_list
    rb2, _, listing = stack.backend(64 * KiB, name="aerospike.lister",
                                    extra={"set": setname, "enable_list": True})
    assert stack.loop.run(listing.list()) == [k.to_string()]
    assert conn.remove_sync(k) and not conn.remove_sync(k)
    assert not conn.exists_sync(k) and rb.get_blocking(k) is None
    obj.ref_count_down()


def test_ping_and_repeated_close(stack):
    rb, cpu, conn = stack.backend()
    assert stack.loop.run(conn.ping()) == 0
    stack.loop.run(conn.close())
    stack.loop.run(conn.close())  # idempotent


def test_instances_with_the_same_settings_share_one_engine(stack):
    _, _, a = stack.backend(extra={}, name="aerospike.a")
    _, _, b = stack.backend(extra={}, name="aerospike.b")
    _, _, c = stack.backend(extra={"read_timeout_ms": 1500}, name="aerospike.c")
    assert a.engine is b.engine and a.engine is not c.engine
    stack.loop.run(a.close())
    assert not b.native.closed  # b still uses it
    stack.loop.run(b.close())
    assert b.native.closed and client._engines.get(b.settings.identity()) is None


def test_a_record_whose_md_is_not_lmcache_metadata_is_a_miss(stack, aerospike_hosts):
    rb, cpu, conn = stack.backend(64 * KiB)
    bad_md, wrong_length, no_md = keys(3)
    w = _native.Connector(hosts=aerospike_hosts, set="kv_chunks", default_ttl_seconds=60)
    try:
        w.put(bad_md.to_string(), bytearray(64 * KiB), md=b"\xff" * 5)
        obj = full_chunk(cpu, conn)
        good = conn._md(obj)
        obj.ref_count_down()
        w.put(wrong_length.to_string(), bytearray(1000), md=good)
        w.put(no_md.to_string(), bytearray(64 * KiB))
    finally:
        w.close()
    for k in (bad_md, wrong_length, no_md):
        assert rb.contains(k) and rb.get_blocking(k) is None
    assert allocated(cpu) == 0  # what was allocated for them went back


def test_bad_settings_are_irrecoverable_and_name_the_key(stack):
    with pytest.raises(InvalidSettingsError, match="remote_storage_plugin.aerospike."
                       "target_segment_bytes") as e:
        stack.backend(extra={"target_segment_bytes": "big"})
    assert isinstance(e.value, IrrecoverableException)
    assert isinstance(e.value, _native.ConfigError)


def test_an_unreachable_server_leaves_the_backend_retrying(stack):
    with pytest.raises(AssertionError, match="did not connect"):
        stack.backend(extra={"hosts": "127.0.0.1:1", "connect_timeout_ms": 200})


def test_remote_url_names_hosts_namespace_and_set(aerospike_hosts):
    loop = Loop()
    config = plugin_config(aerospike_hosts, remote_url=f"aerospike://{aerospike_hosts}/lmcache/"
                                                      "lmca_url", remote_storage_plugins=[])
    config.remote_storage_plugins = ["aerospike"]  # loads the adapter; the URL picks it
    md = metadata(64 * KiB)
    cpu = cpu_backend(config, md)
    rb = RemoteBackend(config, md, loop.loop, cpu, "cpu")
    try:
        conn = rb.connection.getWrappedConnector()
        assert isinstance(conn, AerospikeRemoteConnector)
        assert (conn.settings.namespace, conn.settings.set) == ("lmcache", "lmca_url")
        (k,) = keys(1)
        obj = full_chunk(cpu, conn)
        put(rb, k, obj)
        got = rb.get_blocking(k)
        assert same_bytes(got, obj)
        got.ref_count_down()
        obj.ref_count_down()
    finally:
        rb.close()
        cpu.close()
        loop.close()


def test_a_get_lmcache_gives_up_on_returns_its_memory_when_the_read_ends(stack, fixture_only):
    import aerospike

    # blocking_timeout_secs is an int in LMCache; the engine's own read timeout must
    # not end the read first.
    rb, cpu, conn = stack.backend(8 * MiB, extra={"read_timeout_ms": 5000},
                                  blocking_timeout_secs=1)
    (k,) = keys(1)
    obj = full_chunk(cpu, conn)
    put(rb, k, obj)
    obj.ref_count_down()
    # Slow down the payload's first segment, not the metadata: LMCache gives up
    # while the engine is writing into the MemoryObj it allocated.
    digest = aerospike.calc_digest("lmcache", "kv_chunks", k.to_string() + "|s|0").hex()
    rule = f"fixture-fault:kind=delay;ms=2500;op=read;count=1;digest={digest}"
    assert info(fixture_only, rule) == "ok"
    assert rb.get_blocking(k) is None  # canceled after 1 s
    assert allocated(cpu) == 8 * MiB  # still the engine's until the read ends
    deadline = time.monotonic() + 10
    while allocated(cpu) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert allocated(cpu) == 0


def test_a_batch_lmcache_gives_up_on_returns_every_part_when_the_reads_end(stack,
                                                                          fixture_only):
    """One engine op per batch_max_in_flight keys: when LMCache cancels the get, parts
    that finished must give back their MemoryObjs too, not only the one in flight."""
    import aerospike

    rb, cpu, conn = stack.backend(8 * MiB, extra={"read_timeout_ms": 5000,
                                                  "batch_max_in_flight": 1},
                                  blocking_timeout_secs=1)
    ks = keys(3)
    objs = [full_chunk(cpu, conn) for _ in ks]
    for k, o in zip(ks, objs):
        put(rb, k, o)
        o.ref_count_down()
    digest = aerospike.calc_digest("lmcache", "kv_chunks", ks[1].to_string() + "|s|0").hex()
    rule = f"fixture-fault:kind=delay;ms=2500;op=read;count=1;digest={digest}"
    assert info(fixture_only, rule) == "ok"
    assert rb.batched_get_blocking(ks) == [None] * 3
    deadline = time.monotonic() + 10
    while allocated(cpu) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert allocated(cpu) == 0


def test_a_record_stored_under_another_serde_is_a_miss(stack, aerospike_hosts):
    rb, cpu, conn = stack.backend(64 * KiB)
    (k,) = keys(1)
    obj = full_chunk(cpu, conn)
    w = _native.Connector(hosts=aerospike_hosts, set="kv_chunks", default_ttl_seconds=60)
    try:
        w.put(k.to_string(), obj.byte_array, md=conn._md(obj), serde="cachegen")
    finally:
        w.close()
    assert rb.contains(k) and rb.get_blocking(k) is None  # naive would decode it wrong
    obj.ref_count_down()


def test_a_read_that_times_out_is_a_miss_and_a_full_server_drops_the_store(stack,
                                                                            fixture_only):
    rb, cpu, conn = stack.backend(64 * KiB, extra={"read_timeout_ms": 200,
                                                   "backpressure_ms": 300})
    k, other = keys(2)
    obj = full_chunk(cpu, conn)
    put(rb, k, obj)
    # Every try of the read (one copy for half the timeout, then again) is late.
    assert info(fixture_only, "fixture-fault:kind=delay;ms=1000;op=read") == "ok"
    assert stack.loop.run(conn.get(k)) is None  # spec 4.4.3: a timeout is a miss
    info(fixture_only, "fixture-clear-faults")
    # Result 8 (stop-writes) passes once NSUP evicts: the put waits and lands.
    assert info(fixture_only, "fixture-fault:kind=result;code=8;op=write;count=2") == "ok"
    before = conn.native.stats()
    try:
        stack.loop.run(conn.put(other, obj))
        assert conn.exists_sync(other)
        after = conn.native.stats()
        assert after["puts_retried"] - before["puts_retried"] == 1
        # A tier that stays full drops the store: no error reaches LMCache, the
        # engine counts it by cause.
        assert info(fixture_only, "fixture-fault:kind=result;code=8;op=write") == "ok"
        (third,) = keys(1)
        assert stack.loop.run(conn.put(third, obj)) is None
        assert not conn.exists_sync(third)
        assert conn.native.stats()["dropped_full"] - after["dropped_full"] == 1
    finally:
        info(fixture_only, "fixture-clear-faults")
        obj.ref_count_down()


def test_lmcache_basic_check_test_remote_passes(tmp_path, aerospike_hosts):
    config = tmp_path / "lmcache.yaml"
    config.write_text(
        "chunk_size: 256\nlocal_cpu: false\nmax_local_cpu_size: 0.2\n"
        f'remote_url: "aerospike://{aerospike_hosts}/lmcache/lmca_basic_check"\n'
        'remote_storage_plugins: ["aerospike"]\n'
        "extra_config:\n"
        "  remote_storage_plugin.aerospike.module_path: lmcache_aerospike.adapter\n"
        "  remote_storage_plugin.aerospike.class_name: AerospikeConnectorAdapter\n"
        "  remote_storage_plugin.aerospike.default_ttl_seconds: 60\n")
    env = {**os.environ, "LMCACHE_CONFIG_FILE": str(config)}
    run = subprocess.run([sys.executable, "-m", basic_check_module(), "--mode",
                          "test_remote", "--model", "lmca-check"], env=env,
                         capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "Test Failed" not in out and "FAIL" not in out, out[-3000:]
    assert "PASS" in out or "passed" in out.lower(), out[-3000:]


def test_logs_and_errors_name_records_by_digest_never_by_key(stack, aerospike_hosts,
                                                             fixture_only):
    """Spec 4.8: a key appears in logs only as its record's digest (the one asadm and
    aql show), including in the errors we raise, which LMCache logs."""
    import aerospike

    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    log = logging.getLogger("lmcache_aerospike")
    log.addHandler(handler)
    try:
        rb, cpu, conn = stack.backend(64 * KiB)
        bad, slow = keys(2)
        w = _native.Connector(hosts=aerospike_hosts, set="kv_chunks", default_ttl_seconds=60)
        try:
            w.put(bad.to_string(), bytearray(64 * KiB), md=b"\xff" * 5)
        finally:
            w.close()
        assert rb.get_blocking(bad) is None
        assert info(fixture_only, "fixture-fault:kind=result;code=14;op=read;count=1") == "ok"
        with pytest.raises(_native.BusyError) as e:
            conn.exists_sync(slow)
    finally:
        log.removeHandler(handler)
    text = "\n".join(seen) + "\n" + str(e.value)
    for k in (bad, slow):
        assert k.to_string() not in text
    assert aerospike.calc_digest("lmcache", "kv_chunks", bad.to_string() + "|m").hex() in text
    assert aerospike.calc_digest("lmcache", "kv_chunks", slow.to_string() + "|m").hex() in text


def test_tenants_never_read_each_others_bytes(stack):
    """Two models, and two tags of one model, with the same chunk hash: each gets
    its own bytes back, and a tenant that stored nothing misses."""
    from tests.glue.harness import tenant_keys

    rb, cpu, conn = stack.backend(64 * KiB)
    ks = tenant_keys()
    objs = [full_chunk(cpu, conn) for _ in ks[:-1]]  # the last tenant stores nothing
    for k, obj in zip(ks, objs):
        put(rb, k, obj)
    for k, obj in zip(ks, objs):
        got = rb.get_blocking(k)
        assert got is not None and same_bytes(got, obj), k.to_string()
        got.ref_count_down()
    assert len({bytes(o.byte_array) for o in objs}) == len(objs)  # distinct payloads
    assert not rb.contains(ks[-1]) and rb.get_blocking(ks[-1]) is None
    for obj in objs:
        obj.ref_count_down()
