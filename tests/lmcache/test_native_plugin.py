"""The connector through LMCache's own code (lmcache pinned in
requirements-lmcache.txt): the "native_plugin" L2 adapter type loads
lmcache_aerospike._native.Connector from its JSON config, and LMCache's
NativeConnectorL2Adapter drives store, lookup-and-lock, load and delete."""

import os
import select
import time
import uuid

os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")  # no usage telemetry from tests
os.environ.setdefault("DO_NOT_TRACK", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from lmcache.v1.distributed.api import ObjectKey  # noqa: E402
from lmcache.v1.distributed.l2_adapters.config import get_l2_adapter_config_class  # noqa: E402
from lmcache.v1.distributed.l2_adapters.factory import (  # noqa: E402
    create_l2_adapter_from_registry,
)
from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import (  # noqa: E402
    NativeConnectorL2Adapter,
)
from lmcache.v1.memory_allocators.tensor_memory_allocator import (  # noqa: E402
    TensorMemoryAllocator,
)
from lmcache.v1.memory_management import MemoryFormat  # noqa: E402

from lmcache_aerospike import _native  # noqa: E402

# 2 x 8 x 256 x 4 x 128 bf16 = 4 MiB: a chunk that travels as two segments.
SHAPE, DTYPE = torch.Size([2, 8, 256, 4, 128]), torch.bfloat16


def spec(hosts, **params):
    return {
        "type": "native_plugin",
        "module_path": "lmcache_aerospike._native",
        "class_name": "Connector",
        "adapter_params": {"hosts": hosts, "namespace": "lmcache", "set": "lmca_lmcache",
                           "default_ttl_seconds": 60, "num_workers": 4, **params},
        "max_capacity_gb": 1,
    }


@pytest.fixture
def adapter(aerospike_hosts):
    config = get_l2_adapter_config_class("native_plugin").from_dict(spec(aerospike_hosts))
    a = create_l2_adapter_from_registry(config)
    yield a
    a.close()


@pytest.fixture(scope="module")
def allocator():
    return TensorMemoryAllocator(torch.empty(64 << 20, dtype=torch.uint8))


def objects(allocator, n, fill=None):
    out = []
    for i in range(n):
        o = allocator.allocate(SHAPE, DTYPE, MemoryFormat.KV_2LTD)
        if fill is None:
            o.tensor.zero_()
        else:
            o.tensor.copy_(torch.randn(SHAPE, generator=torch.Generator().manual_seed(fill + i))
                           .to(DTYPE))
        out.append(o)
    return out


def object_keys(n):
    run = uuid.uuid4().bytes
    return [ObjectKey(chunk_hash=run + bytes([i]) * 8, model_name="llama-8b", kv_rank=0)
            for i in range(n)]


def wait(fd, timeout=30):
    """Waits for one of the adapter's notifiers and consumes it, as LMCache's
    controllers do."""
    ready, _, _ = select.select([fd], [], [], timeout)
    assert ready, "the adapter signalled nothing"
    try:
        os.eventfd_read(fd)
    except BlockingIOError:
        pass


def result(query, task, fd, timeout=30):
    deadline = time.monotonic() + timeout
    while (r := query(task)) is None:
        assert time.monotonic() < deadline, f"task {task} never finished"
        wait(fd, timeout)
    return r


def bits(bitmap, n):
    return [bitmap.test(i) for i in range(n)]


def store(adapter, keys, objs):
    task = adapter.submit_store_task(keys, objs)
    done = {}
    while task not in done:
        wait(adapter.get_store_event_fd())
        done.update(adapter.pop_completed_store_tasks())
    return done[task]


def test_native_plugin_config_loads_our_connector(adapter):
    assert isinstance(adapter, NativeConnectorL2Adapter)
    assert isinstance(adapter._client, _native.Connector)
    fds = {adapter.get_store_event_fd(), adapter.get_lookup_and_lock_event_fd(),
           adapter.get_load_event_fd(), adapter._client.event_fd()}
    assert len(fds) == 4
    assert adapter.report_status()["is_healthy"]


def test_store_lookup_load_delete_byte_for_byte(adapter, allocator):
    keys, missing = object_keys(3), object_keys(1)
    src = objects(allocator, 3, fill=7)
    stored = store(adapter, keys, src)
    assert stored.is_successful() and stored.bytes_transferred() == 3 * src[0].get_size()

    task = adapter.submit_lookup_and_lock_task(keys + missing, {})
    found = result(adapter.query_lookup_and_lock_result, task,
                   adapter.get_lookup_and_lock_event_fd())
    assert bits(found, 4) == [True, True, True, False]
    assert adapter.query_lookup_and_lock_result(task) is None  # reported once
    adapter.submit_unlock(keys)

    dst = objects(allocator, 4)
    task = adapter.submit_load_task(keys + missing, dst)
    loaded = result(adapter.query_load_result, task, adapter.get_load_event_fd())
    assert bits(loaded, 4) == [True, True, True, False]
    for a, b in zip(src, dst[:3]):
        assert bytes(a.byte_array) == bytes(b.byte_array)
    assert not dst[3].tensor.any()  # the miss left its buffer alone

    adapter.delete(keys[:2])
    task = adapter.submit_lookup_and_lock_task(keys, {})
    found = result(adapter.query_lookup_and_lock_result, task,
                   adapter.get_lookup_and_lock_event_fd())
    assert bits(found, 3) == [False, False, True]
    adapter.submit_unlock(keys[2:])
    for o in src + dst:
        o.ref_count_down()


def test_bad_adapter_params_fail_with_our_config_error(aerospike_hosts):
    config = get_l2_adapter_config_class("native_plugin").from_dict(
        spec(aerospike_hosts, target_segment_bytes="lots"))
    with pytest.raises(_native.ConfigError, match="target_segment_bytes"):
        create_l2_adapter_from_registry(config)
