"""SGLang's own objects around our HiCache backend, on the CPU: its published
runtime config (ServerArgs), a one-rank gloo group, its device KV pools and host
pools (MHA and MLA, every host layout), its storage config, its backend factory
and its HybridCacheController, the controller SGLang 0.5.23 builds for every
model with one KV pool (mem_cache/hybrid_cache/hybrid_pool_assembler.py:524-566).
Tests drive SGLang's classes, so they check what SGLang actually calls.

Two departures from a GPU server, both SGLang's own options: host pools are
built with pin_memory=False (pinning registers the pool with cudaHostRegister,
which needs an NVIDIA driver: pool_host/common.py:347-349), and the tests stand
in for the scheduler thread where a prefetch needs host memory allocated
(unified_radix_cache.py:3146-3150 does it there).
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any, Optional

import pytest

pytest.importorskip("sglang.srt.mem_cache.hicache_storage")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig, PoolName  # noqa: E402
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool  # noqa: E402
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.utils import get_storage_hash_str  # noqa: E402

BACKEND = {"backend_name": "aerospike", "module_path": "lmcache_aerospike.hicache",
           "class_name": "AerospikeHiCacheStorage"}
MHA_LAYOUTS = ["page_first", "page_first_direct", "layer_first", "page_head"]
MLA_LAYOUTS = ["page_first", "page_first_direct", "layer_first"]
PAGE = 16        # tokens per page
LAYERS = 2
TOKENS = 1024    # device pool size; the host pool is twice that
MODEL = "tiny-llama"

_started = threading.Lock()


def start_runtime() -> None:
    """Once per process: a one-rank gloo group and SGLang's published config (rank
    0 of one, the hierarchical cache on). SGLang reads both on attach
    (cache_controller.py:551, :751-812)."""
    with _started:
        if dist.is_initialized():
            return
        from sglang.srt.runtime_context import get_parallel, publish
        from sglang.srt.server_args import ServerArgs

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                rank=0, world_size=1)
        model = Path(tempfile.mkdtemp(prefix="lmca-sglang-model-"))
        # ServerArgs reads the model's config only: no weights are loaded here.
        (model / "config.json").write_text(json.dumps({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": LAYERS,
            "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 1024,
            "max_position_embeddings": 4096}))
        publish(ServerArgs(model_path=str(model), device="cpu", skip_tokenizer_init=True,
                           enable_hierarchical_cache=True, page_size=PAGE),
                role="scheduler")
        get_parallel().override_permanently(tp_rank=0, pp_rank=0)


def device_pool(mla: bool = False, dtype: torch.dtype = torch.bfloat16) -> Any:
    if mla:  # DeepSeek's geometry: kv_lora_rank 512 + rope 64
        return MLATokenToKVPool(TOKENS, PAGE, dtype, 512, 64, LAYERS, "cpu", False, 0, LAYERS)
    return MHATokenToKVPool(TOKENS, PAGE, dtype, 2, 64, LAYERS, "cpu", False,
                            v_head_dim=64, start_layer=0, end_layer=LAYERS)


def host_pool(layout: str, mla: bool = False, dtype: torch.dtype = torch.bfloat16,
              kv: Any = None) -> Any:
    """SGLang's host pool of `layout` beside a CPU device pool, filled with
    random bytes (any bit pattern: compare pages with `same`)."""
    kv = kv if kv is not None else device_pool(mla, dtype)
    common = dict(pin_memory=False, device="cpu", device_capacity_tokens=kv.size,
                  start_layer=0, end_layer=LAYERS)
    info = kv.get_device_pool_infos()[0].buffer_info
    if mla:
        host = MLATokenToKVPoolHost(info, 2.0, 0, PAGE, layout,
                                    override_kv_cache_dim=kv.kv_cache_dim,
                                    target_layer_num=LAYERS, **common)
    else:
        host = MHATokenToKVPoolHost(info, 2.0, 0, PAGE, layout,
                                    write_back_staging=kv.hicache_write_back_staging, **common)
    host.kv_buffer.view(torch.uint8).random_()
    host.device_pool = kv
    return host


def extra_config(hosts: str, setname: str, v1: bool = True, **settings: Any) -> dict:
    """--hicache-storage-backend-extra-config as a user writes it for our backend."""
    extra = dict(BACKEND, hosts=hosts, set=setname, default_ttl_seconds=600, **settings)
    if v1:
        extra["interface_v1"] = 1
    return extra


def storage_config(hosts: str, setname: str, *, mla: bool = False, tp_rank: int = 0,
                   tp_size: int = 1, pp_rank: int = 0, pp_size: int = 1,
                   model: Optional[str] = MODEL, metrics: bool = False,
                   v1: bool = True, **settings: Any) -> HiCacheStorageConfig:
    """What SGLang hands a backend (cache_controller.py:792-812), with our settings
    in the extra config as a user writes them."""
    return HiCacheStorageConfig(
        tp_rank=tp_rank, tp_size=tp_size, pp_rank=pp_rank, pp_size=pp_size,
        attn_cp_rank=0, attn_cp_size=1, is_mla_model=mla, enable_storage_metrics=metrics,
        is_page_first_layout=False, model_name=model,
        extra_config=extra_config(hosts, setname, v1, **settings))


def backend(config: HiCacheStorageConfig, pool: Any) -> Any:
    """Our backend as SGLang makes one: its factory's `dynamic` loading, then the
    host pool registered (cache_controller.py:614-619)."""
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    b = StorageBackendFactory.create_backend("dynamic", config, pool)
    b.register_mem_pool_host(pool)
    b.on_host_pools_registered()
    return b


def pages(n: int, seed: Optional[int] = None) -> tuple[list[int], list[str]]:
    """Token ids of n pages and SGLang's page hashes of them (the keys its
    controller passes, cache_controller.py:1316-1318)."""
    base = seed if seed is not None else int(uuid.uuid4().hex[:6], 16)
    tokens = [(base + i) % 100_000 for i in range(n * PAGE)]
    return tokens, get_storage_hash_str(tokens, None, page_size=PAGE)


def page_bytes(pool: Any, indices: torch.Tensor, n: int) -> list[bytes]:
    """Each page's bytes, as SGLang's own copy path reads a page
    (get_data_page, pool_host/mha.py:713-725)."""
    return [pool.get_data_page(int(indices[i * PAGE])).contiguous().view(torch.uint8)
            .numpy().tobytes() for i in range(n)]


def setname() -> str:
    return "sg" + uuid.uuid4().hex[:10]


# -- the controller -----------------------------------------------------------------


class Controller:
    """SGLang's HybridCacheController over one KV host pool, attached to our backend
    through `--hicache-storage-backend dynamic` and its extra config."""

    def __init__(self, host: Any, extra: dict, model: str = MODEL) -> None:
        from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
        from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import (
            HybridCacheController,
        )
        from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import build_pool_entry
        from sglang.srt.mem_cache.pool_host.group import HostPoolGroup

        start_runtime()
        kv = host.device_pool
        self.host = host
        alloc = PagedTokenToKVPoolAllocator(TOKENS, PAGE, kv.dtype, "cpu", kv, False)
        # build_kv_only_group's group (hybrid_pool_assembler.py:285-325), around a
        # host pool built without pinning.
        self.group = HostPoolGroup([build_pool_entry(
            name=PoolName.KV, host_pool=host, device_pool=kv,
            layer_mapping={i: i for i in range(LAYERS)}, transfer_layer_id_max=LAYERS,
            is_anchor=True)])
        self.ctl = HybridCacheController(
            alloc, self.group, PAGE, dist.group.WORLD, load_cache_event=threading.Event(),
            io_backend="kernel", storage_backend="dynamic", model_name=model,
            storage_backend_extra_config=dict(extra), transfer_layer_id_max=LAYERS)

    @property
    def backend(self) -> Any:
        return self.ctl.storage_backend

    def backup(self, tokens: list[int], hashes: list[str]) -> tuple[torch.Tensor, int]:
        """Host pages for `tokens` (their random bytes), written to storage by
        SGLang's backup thread; the host indices and the tokens it reports written."""
        indices = self.host.alloc(len(tokens))
        self.ctl.write_storage(indices, tokens, hash_value=hashes)
        op = self.ctl.ack_backup_queue.get(timeout=60)
        return indices, op.completed_tokens

    def prefetch(self, tokens: list[int]) -> tuple[int, Optional[torch.Tensor], int]:
        """SGLang's prefetch of `tokens`: the storage hit its query thread found
        (tokens), then, in host memory this method allocates as the scheduler
        would, what its IO thread loaded (tokens, the ranks' agreed count)."""
        op = self.ctl.prefetch(CacheRequestHandle(uuid.uuid4().hex, 0), tokens)
        hit = self.ctl.prefetch_hit_queue.get(timeout=60)
        assert hit is op
        if hit.storage_hit_count == 0:
            return 0, None, 0
        hit.host_indices = self.host.alloc(hit.storage_hit_count)
        self.ctl.prefetch_buffer.put(hit)
        loaded = 0
        while True:
            ack = self.ctl.ack_prefetch_queue.get(timeout=60)
            if getattr(ack, "completed_req", False):
                return hit.storage_hit_count, hit.host_indices, loaded
            loaded = ack.completed_tokens

    def close(self) -> None:
        self.ctl.detach_storage_backend()
