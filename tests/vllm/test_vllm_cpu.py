"""lmcache_aerospike.vllm_cpu without vLLM running: the connector's copies against
vLLM-CPU's own reading of its KV cache, its checks, and how it is installed."""

import importlib.util
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from lmcache_aerospike.vllm_cpu import CPUPagedConnector

LAYERS, HEADS, HEAD, BLOCK, BLOCKS = 2, 2, 64, 32, 6


def vllm_cpu_cache() -> list[torch.Tensor]:
    """Per layer [num_blocks, kv_heads, block_size, 2 * head_size], random."""
    return [torch.randn(BLOCKS, HEADS, BLOCK, 2 * HEAD) for _ in range(LAYERS)]


def key_value(layer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V as vLLM-CPU's attention reads them (vllm/v1/attention/backends/
    cpu_attn.py:414-416): [num_blocks, heads, block_size, head_size] each."""
    num_blocks, heads, block_size, _ = layer.size()
    return layer.view((num_blocks, heads, block_size * 2, -1)).chunk(2, dim=2)


def memory_obj(tokens: int) -> SimpleNamespace:
    """A MemoryObj as far as the connector looks: its KV_2LTD tensor."""
    return SimpleNamespace(tensor=torch.zeros(2, LAYERS, tokens, HEADS * HEAD))


def connector(block_size=BLOCK) -> CPUPagedConnector:
    return CPUPagedConnector(LAYERS, HEADS, HEAD, torch.float32, block_size)


def test_from_gpu_reads_each_tokens_k_and_v_where_vllm_cpu_keeps_them():
    kv = vllm_cpu_cache()
    slots = torch.randperm(BLOCKS * BLOCK)[:50]
    obj = memory_obj(40)
    connector().from_gpu(obj, 10, 50, kvcaches=kv, slot_mapping=slots)
    for layer, cache in enumerate(kv):
        k, v = key_value(cache)
        for t in range(40):
            b, o = divmod(int(slots[10 + t]), BLOCK)
            assert torch.equal(obj.tensor[0, layer, t], k[b, :, o].reshape(-1)), (layer, t)
            assert torch.equal(obj.tensor[1, layer, t], v[b, :, o].reshape(-1)), (layer, t)


def test_to_gpu_writes_back_what_from_gpu_read_and_nothing_else():
    src, dst = vllm_cpu_cache(), [torch.zeros(BLOCKS, HEADS, BLOCK, 2 * HEAD)
                                  for _ in range(LAYERS)]
    src_slots = torch.randperm(BLOCKS * BLOCK)[:64]
    dst_slots = torch.randperm(BLOCKS * BLOCK)[:64]
    obj = memory_obj(64)
    c = connector()
    c.batched_from_gpu([obj], [0], [64], kvcaches=src, slot_mapping=src_slots)
    c.batched_to_gpu([obj], [0], [64], kvcaches=dst, slot_mapping=dst_slots)
    for s, d in zip(src, dst):
        (sk, sv), (dk, dv) = key_value(s), key_value(d)
        for a, b in zip(src_slots.tolist(), dst_slots.tolist()):
            assert torch.equal(dk[b // BLOCK, :, b % BLOCK], sk[a // BLOCK, :, a % BLOCK])
            assert torch.equal(dv[b // BLOCK, :, b % BLOCK], sv[a // BLOCK, :, a % BLOCK])
        written = torch.zeros(BLOCKS * BLOCK, dtype=torch.bool)
        written[dst_slots] = True
        untouched = (~written).nonzero()[:, 0]
        blocks, offsets = untouched // BLOCK, untouched % BLOCK
        assert not dk[blocks, :, offsets].any() and not dv[blocks, :, offsets].any()


def test_to_gpu_leaves_the_tokens_vllm_already_holds():
    kv = [torch.zeros(BLOCKS, HEADS, BLOCK, 2 * HEAD) for _ in range(LAYERS)]
    slots = torch.arange(64)
    obj = memory_obj(64)
    obj.tensor.fill_(1.0)
    connector().to_gpu(obj, 0, 64, kvcaches=kv, slot_mapping=slots, vllm_cached_tokens=40)
    k, _ = key_value(kv[0])
    assert not k[0, :, :].any() and not k[1, :, :8].any(), "overwrote vLLM's cached tokens"
    assert k[1, :, 8:].eq(1).all(), "did not write the rest"


@pytest.mark.parametrize("bad, named", [
    (lambda kv: kv[:1], "1 KV cache tensors, the model has 2 layers"),
    (lambda kv: [t[:, :1] for t in kv], "expected (6, 2, 32, 128)"),
    (lambda kv: [t.to(torch.bfloat16) for t in kv], "torch.bfloat16"),
    (lambda kv: [torch.randn(BLOCKS, HEADS, 16, 2 * HEAD) for _ in kv],
     "blocks of 16 tokens, vLLM's block_size is 32"),
])
def test_a_cache_that_is_not_vllm_cpus_is_refused_by_name(bad, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        connector().from_gpu(memory_obj(8), 0, 8, kvcaches=bad(vllm_cpu_cache()),
                             slot_mapping=torch.arange(8))


def test_slots_and_memory_objs_are_checked():
    c = connector()
    with pytest.raises(ValueError, match="outside the cache's 6 blocks of 32"):
        c.from_gpu(memory_obj(2), 0, 2, kvcaches=vllm_cpu_cache(),
                   slot_mapping=torch.tensor([0, BLOCKS * BLOCK]))
    with pytest.raises(ValueError, match=r"MemoryObj \(2, 2, 4, 128\)"):
        c.from_gpu(memory_obj(4), 0, 8, kvcaches=vllm_cpu_cache(),
                   slot_mapping=torch.arange(8))


needs_lmcache = pytest.mark.skipif(importlib.util.find_spec("lmcache") is None,
                                   reason="needs LMCache")


@needs_lmcache
def test_the_entry_point_installs_the_fallback_once_lmcache_is_imported():
    """In a process of its own: register() must import no LMCache (vLLM's CPU
    worker scans the loaded modules after loading plugins), and LMCache's factory
    must then build our connector for vLLM on the CPU, once, whoever imports it."""
    code = """
import sys
from lmcache_aerospike import vllm_cpu
vllm_cpu.register(); vllm_cpu.register()
assert not [m for m in sys.modules if m.split(".")[0] == "lmcache"], "register imported LMCache"
import torch
from lmcache.utils import EngineType
from lmcache.v1 import gpu_connector
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.metadata import LMCacheMetadata
create = gpu_connector.CreateGPUConnector
assert create._lmca_cpu_fallback and vllm_cpu.install()
assert gpu_connector.CreateGPUConnector is create, "installed twice"
md = LMCacheMetadata(model_name="m", world_size=1, local_world_size=1, worker_id=0,
                     local_worker_id=0, kv_dtype=torch.float32, kv_shape=(2, 2, 256, 2, 64),
                     chunk_size=256)
c = create(LMCacheEngineConfig.from_defaults(chunk_size=256), md, EngineType.VLLM,
           layout_hints={"kv_layout": "HND"})
assert isinstance(c, vllm_cpu.CPUPagedConnector)
assert isinstance(c, gpu_connector.GPUConnectorInterface)
assert c.get_shape(256) == torch.Size([2, 2, 256, 128])
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                   env={**os.environ, "LMCACHE_TRACK_USAGE": "false", "DO_NOT_TRACK": "1"})
