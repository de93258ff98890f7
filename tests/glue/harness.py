"""LMCache's own objects around our plugins, on the CPU: an engine config, a
LocalCPUBackend that allocates MemoryObjs, an event loop on its thread (as
LMCache's storage manager runs one), and keys. Tests drive LMCache's classes
(RemoteBackend, the L2 adapter factory), never ours directly, so they check
what LMCache actually calls."""

import asyncio
import logging
import os
import threading
import uuid

import pytest
import torch

pytest.importorskip("lmcache")

from lmcache.utils import CacheEngineKey  # noqa: E402
from lmcache.v1.config import LMCacheEngineConfig  # noqa: E402
from lmcache.v1.metadata import LMCacheMetadata  # noqa: E402
from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
PLUGIN = "lmcache_aerospike.adapter"


def plugin_config(hosts, name="aerospike", extra=None, **engine_config):
    """An LMCache config with our RemoteConnector plugin as instance `name`."""
    prefix = f"remote_storage_plugin.{name}."
    extra_config = {prefix + "module_path": PLUGIN,
                    prefix + "class_name": "AerospikeConnectorAdapter",
                    prefix + "hosts": hosts,
                    prefix + "default_ttl_seconds": 60}
    extra_config.update({prefix + k: v for k, v in (extra or {}).items()})
    kw = dict(chunk_size=256, local_cpu=False, max_local_cpu_size=0.3,
              remote_storage_plugins=[name], extra_config=extra_config)
    kw.update(engine_config)
    return LMCacheEngineConfig.from_defaults(**kw)


def metadata(chunk_bytes, chunk_size=256):
    """Engine metadata whose full chunk (bf16, KV_2LTD) is `chunk_bytes` long."""
    per_token = chunk_bytes // chunk_size // 4  # 2 (K and V) x 2 bytes (bf16)
    assert per_token * chunk_size * 4 == chunk_bytes, chunk_bytes
    layers = 1
    while per_token > 1024 and per_token % 2 == 0:
        per_token //= 2
        layers *= 2
    return LMCacheMetadata(model_name="lmca-test", world_size=1, local_world_size=1,
                           worker_id=0, local_worker_id=0, kv_dtype=torch.bfloat16,
                           kv_shape=(layers, 2, chunk_size, 1, per_token),
                           chunk_size=chunk_size)


def keys(n):
    """n fresh keys of consecutive chunks (a new run each call)."""
    run = int(uuid.uuid4().hex[:12], 16) << 32
    return [CacheEngineKey(model_name="lmca-test", world_size=1, worker_id=0,
                           chunk_hash=run + i, dtype=torch.bfloat16) for i in range(n)]


class Loop:
    """An asyncio loop on its own thread, as LMCache's storage manager keeps one."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout=60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def cpu_backend(config, md):
    return LocalCPUBackend(config=config, metadata=md, dst_device="cpu")


def allocated(cpu):
    """Bytes the backend's allocator has handed out and not had back."""
    return cpu.memory_allocator.pin_allocator.total_allocated_size


def filled(cpu, shapes, dtypes, fmt=None):
    """A MemoryObj of random bytes."""
    obj = cpu.allocate(shapes, dtypes, fmt)
    assert obj is not None, "the test's LocalCPUBackend is too small"
    # byte_array's format is "<B", which memoryview cannot assign to; torch can.
    view = torch.frombuffer(obj.byte_array, dtype=torch.uint8)
    view.copy_(torch.frombuffer(bytearray(os.urandom(view.numel())), dtype=torch.uint8))
    return obj


def full_chunk(cpu, connector):
    return filled(cpu, connector.meta_shapes, connector.meta_dtypes, connector.meta_fmt)


def partial_chunk(cpu, connector, tokens):
    """A chunk of `tokens` tokens, shaped as LMCache stores the last one of a prompt."""
    shapes = [torch.Size([s[0], s[1], tokens, s[3]]) for s in connector.meta_shapes]
    return filled(cpu, shapes, connector.meta_dtypes, connector.meta_fmt)


class DroppedObjects(logging.Handler):
    """LMCache frees a MemoryObj that is garbage collected with references left
    and warns: that hides a missing ref_count_down from allocated(), not from this."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen = []
        self.logger = logging.getLogger("lmcache.v1.memory_management")
        self.logger.addHandler(self)

    def emit(self, record):
        if "garbage collected" in record.getMessage():
            self.seen.append(record.getMessage())

    def check(self):
        self.logger.removeHandler(self)
        assert not self.seen, self.seen


def tenant_keys():
    """Keys of one chunk hash for four tenants of the in-process engine: two models,
    and two tag values (LMCache's `lmcache.tag.*` request configs, which go into
    the key) of one model. A tenant must never read another's bytes."""
    h = int(uuid.uuid4().hex[:12], 16)

    def key(model, tag=None):
        configs = {} if tag is None else {"lmcache.tag.tenant": tag}
        return CacheEngineKey(model_name=model, world_size=1, worker_id=0, chunk_hash=h,
                              dtype=torch.bfloat16, request_configs=configs)

    return [key("lmca-model-a"), key("lmca-model-b"),
            key("lmca-model-a", "t1"), key("lmca-model-a", "t2")]
