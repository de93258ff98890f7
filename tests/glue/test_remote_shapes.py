"""The chunk shapes LMCache 0.5.6 produces besides one full KV_2LTD group, put
and got through LMCache's own RemoteBackend over our RemoteConnector plugin:
binary buffers (dtype None: what cachegen's serializer returns), several
KV-layer groups, layerwise keys and shapes, MLA's sharing through worker id 0,
chunks stored without md, and the reference counts the connector leaves.

Every test runs on test_remote's Stack, which fails it on any MemoryObj left
allocated or garbage collected with references (LMCache's warning)."""

import asyncio
import gc
import inspect
import os
import struct

import pytest
import torch

from tests.glue.harness import KiB, allocated, full_chunk, keys, partial_chunk
from tests.glue.shapes import (
    Spy, chunk_keys, kv_metadata, payload, randomize, record, remote_backend, stored_md,
    two_group_manager, wait_until,
)
from tests.glue.test_remote import put, same_bytes, stack  # noqa: F401 (stack: a fixture)

from lmcache.v1.memory_management import (  # noqa: E402
    BytesBufferMemoryObj, MemoryFormat, TensorMemoryObj,
)
from lmcache.v1.protocol import DTYPE_TO_INT  # noqa: E402
from lmcache_aerospike.lmcache_names import RemoteMetadata  # noqa: E402

from lmcache_aerospike import _native  # noqa: E402

BF16, FP16 = torch.bfloat16, torch.float16


def fmt_of(spy, call=0):
    """The fmt argument of a recorded LocalCPUBackend.allocate call."""
    args, kwargs, _ = spy.calls[call]
    return inspect.signature(spy.real).bind(*args, **kwargs).arguments["fmt"]


def settle(stack, objs, refs=1):
    """Waits for RemoteBackend's put tasks to hand back their references (LMCache's
    InstrumentedRemoteConnector drops them when the connector's put returns), then
    lets the loop finish its step: the count each object is left with."""
    wait_until(lambda: all(o.get_ref_count() <= refs for o in objs))
    stack.loop.run(asyncio.sleep(0.05))
    return [o.get_ref_count() for o in objs]


# -- 1. binary buffers (dtype None) ---------------------------------------------------


@pytest.mark.parametrize("raw", [bytes, bytearray])
def test_a_binary_buffer_round_trips_through_the_backends_buffer_allocator(
        stack, monkeypatch, raw):
    rb, cpu, conn = stack.backend(64 * KiB)
    n = 12345  # a blob's length is its own: not a chunk's, not whole tokens
    blob = os.urandom(n)
    obj = BytesBufferMemoryObj(raw(blob))  # what CacheGenSerializer.serialize returns
    (k,) = keys(1)
    put(rb, k, obj)  # NaiveSerializer passes it through as it is
    rm = stored_md(conn, k)
    assert (rm.length, rm.fmt) == (n, MemoryFormat.BINARY_BUFFER)
    assert rm.shapes == [torch.Size([n, 0, 0, 0])] and rm.dtypes == [None]
    assert payload(conn, k) == blob

    allocate = Spy(monkeypatch, cpu, "allocate")
    buffers = Spy(monkeypatch, cpu.memory_allocator.buffer_allocator, "allocate")
    got = rb.get_blocking(k)
    assert isinstance(got, BytesBufferMemoryObj) and bytes(got.byte_array) == blob
    assert got.get_memory_format() == MemoryFormat.BINARY_BUFFER
    assert got.get_shapes() == [torch.Size([n, 0, 0, 0])] and got.get_dtypes() == [None]
    # Allocated by LocalCPUBackend from the md; MixedMemoryAllocator hands a
    # BINARY_BUFFER to its buffer allocator, not to the pinned pool.
    assert allocate.results == [got] and buffers.results == [got]
    assert fmt_of(allocate) == MemoryFormat.BINARY_BUFFER
    assert allocated(cpu) == 0


def test_binary_buffers_of_several_lengths_in_one_batch(stack):
    rb, cpu, conn = stack.backend(64 * KiB)
    ks = keys(4)
    blobs = [os.urandom(n) for n in (1, 64 * KiB + 7, 3000)]  # one over a full chunk
    rb.batched_submit_put_task([ks[0], ks[1], ks[3]], [BytesBufferMemoryObj(b) for b in blobs])
    assert wait_until(lambda: conn.native.prefix([k.to_string() for k in ks[:2]]) == 2
                      and conn.native.exists(ks[3].to_string()))
    got = rb.batched_get_blocking(ks)
    assert got[2] is None
    assert [bytes(g.byte_array) for g in (got[0], got[1], got[3])] == blobs
    assert [g.get_shapes()[0][0] for g in (got[0], got[1], got[3])] == [len(b) for b in blobs]
    ahead = stack.loop.run(conn.batched_get_non_blocking("lookup", ks))
    assert [bytes(g.byte_array) for g in ahead] == blobs[:2]  # stops at the miss
    assert allocated(cpu) == 0


def test_cachegen_chunks_are_stored_as_binary_buffers_and_decode_back(stack, monkeypatch):
    # remote_serde: cachegen runs on the CPU in 0.5.6: its kernels have torch
    # versions (v1/platform/torch_ops/cachegen_kernels.py). CacheGenConfig
    # knows "test_model" (32 layers, cachegen_basics.py:72); the encoder
    # needs the model's layer count (its bins are per layer).
    md = kv_metadata(32, 1, 8, model="test_model")
    rb, cpu, conn = remote_backend(stack, md, remote_serde="cachegen")
    sent = Spy(monkeypatch, rb.serializer, "serialize")  # the blob each put sends
    ks = chunk_keys(2, model="test_model")
    for k, tokens in zip(ks, (256, 100)):  # a full chunk and a prompt's last one
        obj = cpu.allocate(md.get_shapes(tokens), md.get_dtypes())
        obj.tensor.copy_(torch.randn(obj.tensor.shape))
        put(rb, k, obj)
        assert obj.get_ref_count() == 1
        blob = sent.results[-1]
        assert isinstance(blob, BytesBufferMemoryObj)
        # (Encoding is not byte-for-byte repeatable: decode this very blob.)
        decoded = rb.deserializer.deserialize(blob).tensor.clone()
        rm = stored_md(conn, k)
        n = len(blob.byte_array)
        assert (rm.length, rm.fmt, rm.dtypes) == (n, MemoryFormat.BINARY_BUFFER, [None])
        assert rm.shapes == [torch.Size([n, 0, 0, 0])]
        assert record(conn, k)["serde"] == "cachegen"
        assert payload(conn, k) == bytes(blob.byte_array)
        got = rb.get_blocking(k)  # read into a buffer object, then decoded by LMCache
        assert isinstance(got, TensorMemoryObj)
        assert got.get_memory_format() == MemoryFormat.KV_2LTD
        assert got.get_shape() == obj.tensor.shape and got.tensor.dtype == BF16
        assert torch.equal(got.tensor, decoded)
        obj.ref_count_down()


# -- 2. several KV-layer groups ---------------------------------------------------------


def two_group_backend(stack):
    md = kv_metadata(5, 2, 64, manager=two_group_manager())  # kv_shape: the legacy field
    assert md.get_num_groups() == 2
    assert md.get_dtypes() == [BF16, FP16]
    rb, cpu, conn = remote_backend(stack, md)
    # RemoteMetadata: length, fmt, then (dtype, 4 dims) per group (protocol.py:81-95)
    assert conn.remote_metadata_bytes == 4 * (2 + 5 * 2)
    return md, rb, cpu, conn


@pytest.mark.parametrize("tokens", [256, 100])
def test_two_kv_layer_groups_round_trip_with_each_groups_shape_and_dtype(stack, tokens):
    md, rb, cpu, conn = two_group_backend(stack)
    shapes = md.get_shapes(tokens)
    assert shapes == [torch.Size([2, 2, tokens, 128]), torch.Size([2, 3, tokens, 32])]
    obj = cpu.allocate(shapes, md.get_dtypes())
    for i, shape in enumerate(shapes):
        obj.get_tensor(i).copy_(torch.randn(shape))
    (k,) = chunk_keys(1)
    put(rb, k, obj)
    assert len(record(conn, k)["md"]) == 48
    rm = stored_md(conn, k)
    assert (rm.length, rm.fmt) == (len(obj.byte_array), MemoryFormat.KV_2LTD)
    assert rm.shapes == shapes and rm.dtypes == [BF16, FP16]
    got = rb.get_blocking(k)
    assert got is not None
    assert got.get_shapes() == shapes and got.get_dtypes() == [BF16, FP16]
    assert same_bytes(got, obj)
    for i in range(2):  # each group where LMCache's group_prefix_sum puts it
        assert got.get_tensor(i).dtype == obj.get_tensor(i).dtype
        assert torch.equal(got.get_tensor(i), obj.get_tensor(i))
    got.ref_count_down()
    obj.ref_count_down()


def test_a_record_with_another_group_count_is_a_miss(stack, aerospike_hosts):
    md, rb2, cpu2, conn2 = two_group_backend(stack)
    one_group, two_groups = chunk_keys(2)
    # A one-group LMCache's md for a [2, 2, 256, 128] bf16 chunk (7 ints).
    n = 2 * 2 * 256 * 128 * 2
    md1 = struct.pack("7i", n, MemoryFormat.KV_2LTD.value, DTYPE_TO_INT[BF16], 2, 2, 256, 128)
    w = _native.Connector(hosts=aerospike_hosts, set="kv_chunks", default_ttl_seconds=60)
    try:
        w.put(one_group.to_string(), bytearray(n), md=md1)
    finally:
        w.close()
    assert rb2.contains(one_group) and rb2.get_blocking(one_group) is None
    obj = randomize(cpu2.allocate(md.get_shapes(), md.get_dtypes()))
    put(rb2, two_groups, obj)
    obj.ref_count_down()
    # A one-group engine (LMCache keeps the md format process-wide: this
    # backend's connector sets it back to one group) reads group 0's shape
    # from the two-group md: too small for the record, so a miss.
    rb1, cpu1, conn1 = remote_backend(stack, kv_metadata(2, 2, 64), name="aerospike.one")
    assert conn1.remote_metadata_bytes == 28
    assert rb1.contains(two_groups) and rb1.get_blocking(two_groups) is None
    assert allocated(cpu1) == 0


# -- 3. layerwise -------------------------------------------------------------------------

# fmt: (engine config, use_mla, the layer's shape for t tokens of hidden size h)
LAYERWISE = {
    # VLLMPagedMemLayerwiseGPUConnector.get_shape (gpu_connectors.py:1448-1454)
    "KV_T2D": (dict(use_layerwise=True), False, lambda t, h: [t, 2, h]),
    # VLLMBufferLayerwiseGPUConnector.get_shape (gpu_connectors.py:1078), CacheBlend
    "KV_2TD": (dict(use_layerwise=True, enable_blending=True), False, lambda t, h: [2, t, h]),
    # MLA layerwise: [num_tokens, hidden_dim] (gpu_connectors.py:1449-1451)
    "KV_MLA_FMT": (dict(use_layerwise=True), True, lambda t, h: [t, h]),
}


@pytest.mark.parametrize("fmt", list(LAYERWISE))
def test_layerwise_chunks_round_trip_layer_by_layer(stack, fmt):
    engine, use_mla, shape_of = LAYERWISE[fmt]
    layers, heads, head_size = 4, (1 if use_mla else 2), (64 if use_mla else 32)
    hidden = heads * head_size
    md = kv_metadata(layers, heads, head_size, use_mla=use_mla)
    # save_chunk_meta: false is overridden by use_layerwise (base_connector.py:55-59)
    rb, cpu, conn = remote_backend(stack, md, lmcache_extra={"save_chunk_meta": False},
                                   **engine)
    assert conn.save_chunk_meta
    tokens = (256, 100)  # a full chunk and a prompt's last, partial one
    layer_keys = [k.split_layers(layers) for k in chunk_keys(2)]  # cache_engine.py:695
    objs = [cpu.batched_allocate(torch.Size(shape_of(t, hidden)), md.kv_dtype,
                                 batch_size=layers, fmt=MemoryFormat[fmt], busy_loop=False)
            for t in tokens]  # cache_engine.py:706
    flat = [randomize(o) for chunk in objs for o in chunk]
    # store_layer puts layer by layer, one batch of chunks each (cache_engine.py:771-776)
    for layer in range(layers):
        rb.batched_submit_put_task([ks[layer] for ks in layer_keys],
                                   [chunk[layer] for chunk in objs])
    assert settle(stack, flat) == [1] * len(flat)
    rm = stored_md(conn, layer_keys[1][layers - 1])
    assert rm.fmt == MemoryFormat[fmt] and rm.dtypes == [BF16]
    assert rm.shapes == [torch.Size(shape_of(100, hidden))]  # 4-D padding stripped
    # retrieve_layer: contains on the first layer's key (cache_engine.py:1067-1071), then
    # one batched_get_non_blocking per layer (storage_manager.py:536-541)
    assert all(rb.contains(ks[0]) for ks in layer_keys)
    for layer in range(layers):
        got = stack.loop.run(rb.batched_get_non_blocking(
            "fake_lookup_id", [ks[layer] for ks in layer_keys]))
        assert len(got) == 2
        for g, chunk, t in zip(got, objs, tokens):
            assert g.get_shapes() == [torch.Size(shape_of(t, hidden))]
            assert g.get_memory_format() == MemoryFormat[fmt] and g.get_dtypes() == [BF16]
            assert same_bytes(g, chunk[layer])  # each layer its own record
            assert g.get_ref_count() == 1
            g.ref_count_down()
    for o in flat:
        o.ref_count_down()


# -- 4. MLA: workers share chunks through worker id 0 --------------------------------------

# remote_backend.py:74-81: _mla_worker_id_as0_mode = extra_config
# remote_enable_mla_worker_id_as0 (default: use_mla) and use_mla and
# world_size > 1 and worker_id != 0. In that mode contains, batched_contains,
# get_blocking, batched_get_blocking and batched_async_contains (:169, 200,
# 361, 414, 523) read the key with_new_worker_id(0); submit_put_task and
# batched_submit_put_task (:245, 301) store nothing. save_only_first_rank
# (default: use_mla) must be off, or a rank other than 0 is passive and reaches
# no backend at all (cache_engine.py:1946-1951).


def mla_workers(stack, flag):
    extra = {"save_only_first_rank": False}
    if flag is not None:
        extra["remote_enable_mla_worker_id_as0"] = flag
    workers = []
    for w in (0, 1):
        md = kv_metadata(4, 1, 64, use_mla=True, world_size=2, worker_id=w)
        workers.append(remote_backend(stack, md, name=f"aerospike.w{w}", lmcache_extra=extra))
    return workers


@pytest.mark.parametrize("flag", [None, True], ids=["default", "set"])
def test_mla_worker_1_reads_what_worker_0_stored_and_stores_nothing(stack, flag):
    (rb0, cpu0, conn0), (rb1, cpu1, conn1) = mla_workers(stack, flag)
    assert not rb0._mla_worker_id_as0_mode and rb1._mla_worker_id_as0_mode
    assert conn1.meta_fmt == MemoryFormat.KV_MLA_FMT
    k0 = chunk_keys(5, world_size=2, worker_id=0)
    k1 = [k.with_new_worker_id(1) for k in k0]
    objs = [full_chunk(cpu0, conn0), full_chunk(cpu0, conn0), partial_chunk(cpu0, conn0, 100)]
    rb0.batched_submit_put_task(k0[:3], objs)
    # Worker 1 tries to store chunks 3 and 4, which worker 0 does not.
    mine = [full_chunk(cpu1, conn1) for _ in range(2)]
    rb1.submit_put_task(k1[3], mine[0]).result(30)
    rb1.batched_submit_put_task(k1[4:], mine[1:])
    assert settle(stack, objs + mine) == [1] * 5
    # Worker 1 stored nothing, under either worker's key.
    assert not any(conn1.native.exists(k.to_string()) for k in k0[3:] + k1)
    assert all(payload(conn0, k) == bytes(o.byte_array) for k, o in zip(k0, objs))
    # Worker 1 reads chunks 0-2 under its own keys: worker 0's records.
    ours = k1[:3]
    assert rb1.contains(ours[2]) and rb1.batched_contains(ours) == 3
    assert stack.loop.run(rb1.batched_async_contains("lookup", ours)) == 3
    one = rb1.get_blocking(ours[0])
    batch = rb1.batched_get_blocking(ours)
    for got in [one] + batch:
        assert got is not None and got.get_memory_format() == MemoryFormat.KV_MLA_FMT
    assert same_bytes(one, objs[0])
    assert all(same_bytes(g, o) for g, o in zip(batch, objs))
    assert batch[2].get_shapes() == [torch.Size([1, 4, 100, 64])]
    # LMCache 0.5.6 does not rewrite the keys of batched_get_non_blocking
    # (remote_backend.py:549-583), which its async loading and
    # layerwise retrieval use: there, worker 1 misses what worker 0 stored.
    assert stack.loop.run(rb1.batched_get_non_blocking("lookup", ours)) == []
    for o in [one] + batch + objs + mine:
        o.ref_count_down()


def test_mla_without_worker_id_0_each_worker_keeps_its_own_chunks(stack):
    (rb0, cpu0, conn0), (rb1, cpu1, conn1) = mla_workers(stack, False)
    assert not rb1._mla_worker_id_as0_mode
    k0 = chunk_keys(2, world_size=2, worker_id=0)
    k1 = [k.with_new_worker_id(1) for k in k0]
    theirs, mine = full_chunk(cpu0, conn0), full_chunk(cpu1, conn1)
    put(rb0, k0[0], theirs)
    put(rb1, k1[1], mine)
    assert not rb1.contains(k1[0]) and rb1.get_blocking(k1[0]) is None
    got = rb1.get_blocking(k1[1])
    assert same_bytes(got, mine) and not same_bytes(got, theirs)
    for o in (got, theirs, mine):
        o.ref_count_down()


# -- 5. no chunk md; reference counts ----------------------------------------------------


def test_without_chunk_meta_a_batched_get_reshapes_only_the_partial_chunks(stack):
    md = kv_metadata(2, 1, 64)  # a full chunk: [2, 2, 256, 64] bf16, 128 KiB
    rb, cpu, conn = remote_backend(stack, md, lmcache_extra={"save_chunk_meta": False})
    assert not conn.save_chunk_meta  # LMCache's key, read in base_connector.py:55-59
    ks = chunk_keys(5)
    tokens = {0: 256, 1: 40, 2: 256, 4: 1}  # ks[3] is never stored
    objs = {i: (full_chunk(cpu, conn) if t == 256 else partial_chunk(cpu, conn, t))
            for i, t in tokens.items()}
    for i, o in objs.items():
        put(rb, ks[i], o)
        assert record(conn, ks[i])["md"] == b""
    base = allocated(cpu)
    got = rb.batched_get_blocking(ks)
    assert got[3] is None
    # Without md every hit is read into a full chunk and cut to what it holds.
    assert allocated(cpu) - base == 4 * conn.full_chunk_size_bytes
    for i, t in tokens.items():
        g = got[i]
        assert g.meta.shape == torch.Size([2, 2, t, 64])  # reshape_partial_chunk's
        assert len(g.byte_array) == t * conn.single_token_size
        assert same_bytes(g, objs[i]) and g.get_ref_count() == 1
        g.ref_count_down()
    assert allocated(cpu) == base  # the cut ones give back their whole block
    # A prompt's chunks: full ones and its last, partial one.
    ahead = stack.loop.run(rb.batched_get_non_blocking("lookup", [ks[0], ks[2], ks[1]]))
    assert [g.meta.shape[2] for g in ahead] == [256, 256, 40]
    assert all(same_bytes(g, objs[i]) for g, i in zip(ahead, (0, 2, 1)))
    assert [g.get_ref_count() for g in ahead] == [1, 1, 1]
    for o in ahead + list(objs.values()):
        o.ref_count_down()


def test_puts_leave_the_callers_reference_count_as_it_was(stack):
    rb, cpu, conn = stack.backend(64 * KiB)
    ks = keys(6)
    objs = [full_chunk(cpu, conn) for _ in ks]
    # The connector's own puts: LMCache's InstrumentedRemoteConnector drops the
    # reference RemoteBackend took (instrumented_connector.py:27-35), not the connector.
    stack.loop.run(conn.put(ks[0], objs[0]))
    stack.loop.run(conn.batched_put(ks[1:3], objs[1:3]))
    assert [o.get_ref_count() for o in objs[:3]] == [1, 1, 1]
    # Through RemoteBackend: +1 (submit_put_task), +1 -1 (NaiveSerializer), -1 (instrumented).
    rb.submit_put_task(ks[3], objs[3]).result(30)
    rb.batched_submit_put_task(ks[4:], objs[4:])
    assert settle(stack, objs) == [1] * 6
    assert rb.batched_contains(ks) == 6
    got = rb.batched_get_blocking(ks)
    assert all(same_bytes(g, o) for g, o in zip(got, objs))
    for o in got + objs:
        o.ref_count_down()
    assert allocated(cpu) == 0


def test_a_non_blocking_get_hands_over_one_reference_and_allocates_nothing_else(stack):
    rb, cpu, conn = stack.backend(64 * KiB)
    ks = keys(5)
    objs = {i: full_chunk(cpu, conn) for i in (0, 1, 3, 4)}  # ks[2] is a miss
    for i, o in objs.items():
        put(rb, ks[i], o)
        o.ref_count_down()
    assert allocated(cpu) == 0
    expected = {i: payload(conn, ks[i]) for i in objs}
    got = stack.loop.run(rb.batched_get_non_blocking("lookup", ks))
    assert [bytes(g.byte_array) for g in got] == [expected[0], expected[1]]
    assert [g.get_ref_count() for g in got] == [1, 1]
    # Only the two it returns: nothing for the miss or the hits after it, and
    # nothing dropped with references left (LMCache frees those, and warns).
    gc.collect()
    assert allocated(cpu) == sum(g.get_physical_size() for g in got)
    assert not stack.dropped.seen
    for g in got:
        g.ref_count_down()
    assert allocated(cpu) == 0
    got = stack.loop.run(rb.batched_get_non_blocking("lookup", [ks[3], ks[4]]))
    assert [bytes(g.byte_array) for g in got] == [expected[3], expected[4]]
    assert [g.get_ref_count() for g in got] == [1, 1]
    assert allocated(cpu) == sum(g.get_physical_size() for g in got)
    for g in got:
        g.ref_count_down()


def test_md_whose_shapes_hold_more_than_the_record_is_a_miss(stack, aerospike_hosts):
    """Found by review: an md whose length matched the record but whose shapes held
    more was a hit, with the tail of the MemoryObj left as a freed chunk's bytes."""
    rb, cpu, conn = stack.backend(64 * KiB)
    (k,) = keys(1)
    part = 40 * conn.single_token_size
    md = RemoteMetadata(part, conn.meta_shapes, conn.meta_dtypes, conn.meta_fmt).serialize()
    w = _native.Connector(hosts=aerospike_hosts, set="kv_chunks", default_ttl_seconds=60)
    try:
        w.put(k.to_string(), os.urandom(part), md=md)
    finally:
        w.close()
    stale = full_chunk(cpu, conn)
    stale.ref_count_down()
    got = rb.get_blocking(k)
    if got is not None:
        got.ref_count_down()
    assert got is None


def test_a_trimmed_partial_chunk_is_stored_with_the_shape_it_holds(stack):
    """reshape_partial_chunk trims bytes and meta.shape but not meta.shapes: such an
    object, stored again, must come back as the partial chunk it is."""
    rb, cpu, conn = stack.backend(64 * KiB)
    (k,) = keys(1)
    obj = full_chunk(cpu, conn)
    trimmed = conn.reshape_partial_chunk(obj, 40 * conn.single_token_size)
    put(rb, k, trimmed)
    got = rb.get_blocking(k)
    assert got is not None and got.get_shapes()[0][2] == 40
    assert bytes(got.byte_array) == bytes(trimmed.byte_array)
    got.ref_count_down()
    trimmed.ref_count_down()
