"""Drives an L2 adapter as LMCache's store and prefetch controllers do: builds it
from its JSON through LMCache's registry, waits on its event fds, reads each
result once. Shared by the tests of `native_plugin` and `plugin`."""

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
from lmcache.v1.memory_allocators.tensor_memory_allocator import (  # noqa: E402
    TensorMemoryAllocator,
)
from lmcache.v1.memory_management import MemoryFormat  # noqa: E402

PARAMS = {"namespace": "lmcache", "set": "lmca_lmcache", "default_ttl_seconds": 60,
          "num_workers": 4}


def native_plugin_spec(hosts, **params):
    return {"type": "native_plugin", "module_path": "lmcache_aerospike._native",
            "class_name": "Connector",
            "adapter_params": {"hosts": hosts, **PARAMS, **params}, "max_capacity_gb": 1}


def plugin_spec(hosts, **params):
    return {"type": "plugin", "module_path": "lmcache_aerospike.l2",
            "class_name": "AerospikeL2Adapter",
            "adapter_params": {"hosts": hosts, **PARAMS, "max_capacity_gb": 1, **params}}


SPECS = {"native_plugin": native_plugin_spec, "plugin": plugin_spec}


def build(spec):
    """The adapter LMCache builds from this JSON (its registry and factory)."""
    config = get_l2_adapter_config_class(spec["type"]).from_dict(spec)
    return create_l2_adapter_from_registry(config)


# 2 x 8 x 256 x 4 x 128 bf16 = 4 MiB: a chunk that travels as two segments.
SHAPE, DTYPE = torch.Size([2, 8, 256, 4, 128]), torch.bfloat16


def make_allocator():
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


def lookup(adapter, keys):
    task = adapter.submit_lookup_and_lock_task(keys, {})
    found = result(adapter.query_lookup_and_lock_result, task,
                   adapter.get_lookup_and_lock_event_fd())
    assert adapter.query_lookup_and_lock_result(task) is None  # reported once
    return bits(found, len(keys))


def load(adapter, keys, dst):
    task = adapter.submit_load_task(keys, dst)
    loaded = result(adapter.query_load_result, task, adapter.get_load_event_fd())
    assert adapter.query_load_result(task) is None
    return bits(loaded, len(keys))
