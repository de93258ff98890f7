"""Helpers for test_remote_shapes.py: LMCache metadata for the chunk shapes
LMCache produces besides harness.metadata's single-group KV_2LTD chunk
(several KV-layer groups, MLA, layerwise, cachegen's model), RemoteBackends
over such metadata on a test_remote.Stack (so its leak checks cover them),
and views of what a record holds on the server."""

import os
import time
import uuid

import torch

from tests.glue.harness import cpu_backend, plugin_config

from lmcache.utils import CacheEngineKey, EngineType  # noqa: E402
from lmcache.v1.gpu_connector.utils import normalize_and_discover_per_layer_formats  # noqa: E402
from lmcache.v1.kv_layer_groups import KVLayerGroupsManager  # noqa: E402
from lmcache.v1.metadata import LMCacheMetadata  # noqa: E402
from lmcache_aerospike.lmcache_names import RemoteMetadata  # noqa: E402
from lmcache.v1.storage_backend.remote_backend import RemoteBackend  # noqa: E402

MODEL = "lmca-test"


def kv_metadata(layers, heads, head_size, dtype=torch.bfloat16, chunk_size=256,
                use_mla=False, world_size=1, worker_id=0, model=MODEL, manager=None):
    """LMCacheMetadata as LMCache's vLLM adapter builds it
    (integration/vllm/utils.py:415: kv_shape = (num_layer, 1 if use_mla else 2,
    chunk_size, num_kv_head, head_size))."""
    return LMCacheMetadata(model_name=model, world_size=world_size,
                           local_world_size=world_size, worker_id=worker_id,
                           local_worker_id=worker_id, kv_dtype=dtype,
                           kv_shape=(layers, 1 if use_mla else 2, chunk_size, heads, head_size),
                           use_mla=use_mla, chunk_size=chunk_size,
                           kv_layer_groups_manager=manager)


def two_group_manager(chunk_size=256):
    """A real KVLayerGroupsManager, built the way LMCache builds it when vLLM
    registers its KV caches (gpu_connector/gpu_connectors.py:479-498, and
    platform/devices/cpu/cache_context.py:100-114 for the CPU server):
    normalize_and_discover_per_layer_formats, then KVLayerGroupsManager.

    The KV caches are CPU tensors in vLLM's flash-attention layout, one per
    layer, [2, num_blocks, block_size, num_heads, head_size] with the "NHD"
    layout hint vLLM passes (without it 0.5.6's detector reads these dims as
    HND): layers 0-1 bf16 with 2 heads of 64, layers 2-4 fp16 with 1 head of
    32. The layers' identities (kv_layer_groups.py:59, KernelGroupIdentity)
    differ, so LMCache makes 2 kernel groups of them."""
    blocks, block_size = 4, 16
    kv_caches = ([torch.zeros(2, blocks, block_size, 2, 64, dtype=torch.bfloat16)
                  for _ in range(2)] +
                 [torch.zeros(2, blocks, block_size, 1, 32, dtype=torch.float16)
                  for _ in range(3)])
    normalized, formats = normalize_and_discover_per_layer_formats(
        kv_caches, [], EngineType.VLLM, {"kv_layout": "NHD"})
    return KVLayerGroupsManager(normalized, engine_kv_formats=formats,
                                lmcache_tokens_per_chunk=chunk_size)


def remote_backend(stack, md, name="aerospike", lmcache_extra=None, **engine):
    """A RemoteBackend over our plugin for metadata `md`, registered with the
    Stack (closed, and checked for leaks, at the end of the test).
    `lmcache_extra` holds LMCache's own extra_config keys (save_chunk_meta,
    remote_enable_mla_worker_id_as0, ...), which are not the plugin's."""
    engine.setdefault("max_local_cpu_size", 0.05)
    config = plugin_config(stack.hosts, name=name, chunk_size=md.chunk_size, **engine)
    config.extra_config.update(lmcache_extra or {})
    cpu = cpu_backend(config, md)
    rb = RemoteBackend(config, md, stack.loop.loop, cpu, "cpu", plugin_name=name)
    stack.backends.append((rb, cpu))
    assert rb.connection is not None, "the plugin did not connect"
    return rb, cpu, rb.connection.getWrappedConnector()


def chunk_keys(n, world_size=1, worker_id=0, model=MODEL):
    """n keys of consecutive chunks of a fresh run, as token_database makes them
    (token_database.py:_make_key_by_hash)."""
    run = int(uuid.uuid4().hex[:12], 16) << 32
    return [CacheEngineKey(model_name=model, world_size=world_size, worker_id=worker_id,
                           chunk_hash=run + i, dtype=torch.bfloat16) for i in range(n)]


def randomize(obj):
    """Fills a MemoryObj with random bytes and returns it."""
    view = torch.frombuffer(obj.byte_array, dtype=torch.uint8)
    view.copy_(torch.frombuffer(bytearray(os.urandom(view.numel())), dtype=torch.uint8))
    return obj


def record(conn, key):
    """The record's metadata as the engine's STAT reads it (md, tot_b, serde...)."""
    meta = conn.native.stat(key.to_string())
    assert meta is not None, f"no record for {key.to_string()}"
    return meta


def stored_md(conn, key):
    """The RemoteMetadata the connector stored with the chunk."""
    return RemoteMetadata.deserialize(record(conn, key)["md"])


def payload(conn, key):
    """The record's payload bytes, read by the engine without LMCache."""
    buf = bytearray(record(conn, key)["tot_b"])
    got = conn.native.get(key.to_string(), buf)
    assert got == len(buf)
    return bytes(buf)


def wait_until(predicate, timeout=15):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Spy:
    """Records the calls of one method of one object (set with monkeypatch, so
    the test's end undoes it): (args, kwargs, result) each."""

    def __init__(self, monkeypatch, obj, name):
        self.calls = []
        self.real = real = getattr(obj, name)

        def spy(*args, **kwargs):
            result = real(*args, **kwargs)
            self.calls.append((args, kwargs, result))
            return result

        monkeypatch.setattr(obj, name, spy)

    @property
    def results(self):
        return [r for _, _, r in self.calls]
