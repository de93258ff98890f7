"""The L2 adapter contract (l2_adapters/base.py in LMCache 0.5.6), met by both of
our multiprocess adapters: `native_plugin` (LMCache's wrapper of _native.Connector)
and `plugin` (lmcache_aerospike.l2). Built from JSON through LMCache's registry."""

import pytest
import torch

from tests.lmcache.l2_driver import (
    SPECS, build, load, lookup, make_allocator, object_keys, objects, store,
)


@pytest.fixture(params=sorted(SPECS))
def adapter(request, aerospike_hosts):
    a = build(SPECS[request.param](aerospike_hosts))
    yield a
    a.close()


@pytest.fixture(scope="module")
def allocator():
    return make_allocator()


def test_the_three_event_fds_are_distinct(adapter):
    fds = {adapter.get_store_event_fd(), adapter.get_lookup_and_lock_event_fd(),
           adapter.get_load_event_fd()}
    assert len(fds) == 3
    assert adapter.report_status()["is_healthy"]


def test_store_lookup_load_delete_byte_for_byte(adapter, allocator):
    keys, missing = object_keys(3), object_keys(1)
    src = objects(allocator, 3, fill=7)
    stored = store(adapter, keys, src)
    assert stored.is_successful() and stored.bytes_transferred() == 3 * src[0].get_size()

    assert lookup(adapter, keys + missing) == [True, True, True, False]
    adapter.submit_unlock(keys)

    dst = objects(allocator, 4)
    assert load(adapter, keys + missing, dst) == [True, True, True, False]
    for a, b in zip(src, dst[:3]):
        assert bytes(a.byte_array) == bytes(b.byte_array)
    assert not dst[3].tensor.any()  # the miss left its buffer alone

    adapter.delete(keys[:2])
    assert lookup(adapter, keys) == [False, False, True]
    adapter.submit_unlock(keys[2:])
    for o in src + dst:
        o.ref_count_down()


def test_partial_hits_in_one_batch_keep_their_positions(adapter, allocator):
    keys = object_keys(6)
    src = objects(allocator, 3, fill=11)
    assert store(adapter, [keys[1], keys[3], keys[4]], src).is_successful()
    assert lookup(adapter, keys) == [False, True, False, True, True, False]
    adapter.submit_unlock(keys)
    dst = objects(allocator, 6)
    assert load(adapter, keys, dst) == [False, True, False, True, True, False]
    assert [bytes(d.byte_array) for d in (dst[1], dst[3], dst[4])] == \
        [bytes(s.byte_array) for s in src]
    for o in src + dst:
        o.ref_count_down()


def test_usage_counts_stored_bytes_and_forgets_deleted_ones(adapter, allocator):
    before = adapter.get_usage().total_bytes_used
    keys = object_keys(2)
    src = objects(allocator, 2, fill=3)
    store(adapter, keys, src)
    usage = adapter.get_usage()
    assert usage.total_bytes_used - before == 2 * src[0].get_size()
    assert usage.total_capacity_bytes == 1 << 30 and adapter.supports_global_eviction
    adapter.delete(keys)
    assert adapter.get_usage().total_bytes_used == before
    for o in src:
        o.ref_count_down()


def test_a_chunk_of_another_size_loads_as_a_miss(adapter, allocator):
    (key,) = object_keys(1)
    src = objects(allocator, 1, fill=5)
    store(adapter, [key], src)
    small = allocator.allocate(torch.Size([2, 8, 128, 4, 128]), torch.bfloat16)
    assert load(adapter, [key], [small]) == [False]  # never a partial or overflowing copy
    for o in src + [small]:
        o.ref_count_down()


def test_tenants_never_read_each_others_bytes(adapter, allocator):
    """One chunk hash for two models, and for two cache salts of one model
    (ObjectKey.cache_salt, which LMCache 0.5.6+ puts in the key): each gets its own
    bytes back, and a tenant that stored nothing misses."""
    from lmcache.v1.distributed.api import ObjectKey

    h = object_keys(1)[0].chunk_hash
    keys = [ObjectKey(chunk_hash=h, model_name=m, kv_rank=0, cache_salt=s)
            for m, s in (("model-a", ""), ("model-b", ""), ("model-a", "t1"),
                         ("model-a", "t2"), ("model-c", ""))]
    src = [objects(allocator, 1, fill=20 + i)[0] for i in range(4)]  # model-c stores nothing
    assert store(adapter, keys[:4], src).is_successful()
    assert lookup(adapter, keys) == [True, True, True, True, False]
    adapter.submit_unlock(keys)
    dst = objects(allocator, 5)
    assert load(adapter, keys, dst) == [True, True, True, True, False]
    for i, (a, b) in enumerate(zip(src, dst)):
        assert bytes(a.byte_array) == bytes(b.byte_array), keys[i]
    assert len({bytes(o.byte_array) for o in src}) == 4
    adapter.delete(keys[:4])
    for o in src + dst:
        o.ref_count_down()
