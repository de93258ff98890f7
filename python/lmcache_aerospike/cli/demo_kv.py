"""LMCache's own engine on CPU tensors, with our RemoteConnector as its only
store: what `lmcache-aerospike demo` (and tests/e2e) drive.

LMCache 0.5.6 ships no connector that copies KV on the CPU: MockGPUConnector
(lmcache/v1/gpu_connector/mock_gpu_connector.py:31-45) makes from_gpu/to_gpu
and their batched variants no-ops, and the vLLM/SGLang connectors need CUDA
streams (gpu_connectors.py:204-205). CPUPagedConnector implements
GPUConnectorInterface (gpu_connectors.py:45-145): to_gpu, from_gpu,
batched_from_gpu, batched_to_gpu (abstract) and get_shape.

Its buffer has the layout of one MemoryObj with the token axis replaced by
slots: [kv_size, num_layers, num_slots, hidden], where kv_size is 2 (K and V,
MemoryFormat.KV_2LTD) or 1 (MLA, KV_MLA_FMT), and both formats put tokens on
axis 2 (memory_management.py:114-126). A request's `slot_mapping` (token i ->
slot, as vLLM passes one) says where each token lives, so a chunk's tokens can
be scattered over the buffer like pages. LMCache forwards the kwargs of
store()/retrieve() to batched_from_gpu/batched_to_gpu (cache_engine.py:569,
935-937), which is how `slot_mapping` reaches this class.

Engine life (paths under lmcache/v1/): LMCacheEngineBuilder.get_or_create
(cache_engine.py:2121-2172) and post_init() (301-333) build one; destroy
(2180-2222) closes its storage manager, our connector with it. local_cpu false
keeps LocalCPUBackend as the allocator only (storage_backend/__init__.py:
173-189, local_cpu_backend.py:65, 189-203), so every hit comes from the remote
backend, named "RemoteBackend-<plugin>" (storage_backend/__init__.py:259-285).
Remote puts are asynchronous and a batched put is not in RemoteBackend.put_tasks
(remote_backend.py:282-340), so `wait_for_puts` polls lookup and the allocator.
"""

from __future__ import annotations

import multiprocessing
import time
import uuid
from typing import Any, Callable, List, Mapping, Optional

import torch
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.memory_management import MemoryObj
from lmcache.v1.metadata import LMCacheMetadata

from lmcache_aerospike.lmcache_names import GPUConnectorInterface, LMCacheEngineBuilder

MiB = 1 << 20
PLUGIN = "aerospike"
REMOTE = "RemoteBackend-" + PLUGIN
PREFIX = f"remote_storage_plugin.{PLUGIN}."


class CPUPagedConnector(GPUConnectorInterface):
    """Copies tokens [start, end) of a request between `kv` (the "GPU" KV cache,
    on the CPU) and a MemoryObj of end - start tokens."""

    def __init__(self, kv: torch.Tensor):
        assert kv.dim() == 4 and kv.device.type == "cpu", kv.shape
        self.kv = kv
        self.kvcaches = None  # what initialize_kvcaches_ptr sets; unused here

    def get_shape(self, num_tokens: int) -> torch.Size:
        kv_size, layers, _, hidden = self.kv.shape
        return torch.Size([kv_size, layers, num_tokens, hidden])

    def _view(self, memory_obj: MemoryObj, start: int, end: int,
              slot_mapping: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The MemoryObj's tensor and the slots of tokens [start, end)."""
        tensor = memory_obj.tensor
        assert tensor is not None, "invalidated MemoryObj"
        assert tensor.shape == self.get_shape(end - start), (tensor.shape, start, end)
        assert tensor.dtype == self.kv.dtype, (tensor.dtype, self.kv.dtype)
        slots = slot_mapping[start:end]
        assert len(slots) == end - start, (len(slot_mapping), start, end)
        return tensor, slots

    def from_gpu(self, memory_obj: MemoryObj, start: int, end: int, **kwargs) -> None:
        tensor, slots = self._view(memory_obj, start, end, kwargs["slot_mapping"])
        tensor.copy_(self.kv[:, :, slots, :])

    def to_gpu(self, memory_obj: MemoryObj, start: int, end: int, **kwargs) -> None:
        tensor, slots = self._view(memory_obj, start, end, kwargs["slot_mapping"])
        self.kv[:, :, slots, :] = tensor

    def batched_from_gpu(self, memory_objs: List[MemoryObj], starts: List[int],
                         ends: List[int], **kwargs) -> None:
        for obj, start, end in zip(memory_objs, starts, ends, strict=True):
            self.from_gpu(obj, start, end, **kwargs)

    def batched_to_gpu(self, memory_objs: Optional[List[MemoryObj]] = None,
                       starts: Optional[List[int]] = None,
                       ends: Optional[List[int]] = None, **kwargs) -> None:
        assert memory_objs is not None and starts is not None and ends is not None
        for obj, start, end in zip(memory_objs, starts, ends, strict=True):
            self.to_gpu(obj, start, end, **kwargs)


# -- a model-shaped KV cache ------------------------------------------------------


def metadata(model: str, layers: int, heads: int, head_size: int,
             chunk: int) -> LMCacheMetadata:
    """One bf16 worker of a model with `layers` layers of K and V."""
    return LMCacheMetadata(model_name=model, world_size=1, local_world_size=1,
                           worker_id=0, local_worker_id=0, kv_dtype=torch.bfloat16,
                           kv_shape=(layers, 2, chunk, heads, head_size), chunk_size=chunk)


def kv_buffer(md: LMCacheMetadata, slots: int, random: bool) -> torch.Tensor:
    """The worker's KV cache, [2, layers, slots, heads * head_size]: random bits
    (every bit pattern, so a byte lost or moved shows) or zeros."""
    layers, kv_size, _, heads, head_size = md.kv_shape
    shape = (kv_size, layers, slots, heads * head_size)
    if not random:
        return torch.zeros(shape, dtype=torch.bfloat16)
    return torch.randint(-(1 << 15), 1 << 15, shape, dtype=torch.int16).view(torch.bfloat16)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Byte for byte (bf16 NaNs compare unequal as numbers)."""
    return torch.equal(a.contiguous().view(torch.int16), b.contiguous().view(torch.int16))


def config(settings: Mapping[str, Any], chunk: int, cpu_bytes: int) -> LMCacheEngineConfig:
    """LMCache's config with our plugin as the only store: `settings` become
    remote_storage_plugin.aerospike.* keys; `cpu_bytes` sizes the allocator that
    stages chunks between the KV buffer and Aerospike."""
    extra = {PREFIX + "module_path": "lmcache_aerospike.adapter",
             PREFIX + "class_name": "AerospikeConnectorAdapter"}
    extra.update({PREFIX + k: v for k, v in settings.items()})
    # remote_url stays unset: RemoteBackend builds plugin://aerospike itself.
    return LMCacheEngineConfig.from_defaults(
        chunk_size=chunk, local_cpu=False, max_local_cpu_size=cpu_bytes / 1024**3,
        save_unfull_chunk=True, remote_storage_plugins=[PLUGIN], extra_config=extra)


# -- one worker, restarted ----------------------------------------------------------


class Worker:
    """LMCache engines under one instance id: start, stop, start again (a vLLM
    worker restart). Puts the process's multiprocessing start method back,
    which LMCacheEngine.__init__ forces to "spawn" (cache_engine.py:140)."""

    def __init__(self, config: LMCacheEngineConfig, md: LMCacheMetadata):
        self.config, self.md = config, md
        self.instance_id = "lmca-demo-" + uuid.uuid4().hex[:8]
        self._start_method = multiprocessing.get_start_method(allow_none=True)

    def start(self, kv: torch.Tensor) -> Any:
        engine = LMCacheEngineBuilder.get_or_create(
            self.instance_id, self.config, self.md, CPUPagedConnector(kv),
            lambda tensor, src: None,   # one rank: nothing to broadcast
            lambda obj, src: obj)
        engine.post_init()
        return engine

    def stop(self) -> None:
        """Destroys the engine, if one runs; its errors are LMCache's to log
        (destroy swallows them, cache_engine.py:2196-2201)."""
        if LMCacheEngineBuilder.get(self.instance_id) is not None:
            LMCacheEngineBuilder.destroy(self.instance_id)
        multiprocessing.set_start_method(self._start_method, force=True)


def connector(engine: Any) -> Any:
    """Our connector inside the engine's remote backend, or None when LMCache
    could not create it (it only logs why)."""
    backend = engine.storage_manager.storage_backends.get(REMOTE)
    if backend is None or backend.connection is None:
        return None
    return backend.connection.getWrappedConnector()


def chunks(engine: Any, tokens: torch.Tensor) -> list:
    """(start, end, CacheEngineKey) of each chunk of the prompt."""
    return list(engine.token_database.process_tokens(tokens=tokens))


def allocated(engine: Any) -> int:
    """Bytes the engine's allocator has handed out and not had back."""
    cpu = engine.storage_manager.storage_backends["LocalCPUBackend"]
    return cpu.memory_allocator.pin_allocator.total_allocated_size


def wait_for_puts(engine: Any, tokens: torch.Tensor, deadline_s: float) -> bool:
    """True once lookup finds every token in Aerospike and every put has handed
    its MemoryObjs back (the wrapper drops them when our batched_put returns);
    False at the deadline."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if engine.lookup(tokens) == len(tokens) and allocated(engine) == 0:
            return True
        time.sleep(0.01)
    return False


# -- the demo: store, restart, load ---------------------------------------------------


class RemoteTierError(Exception):
    """The remote tier did not work: no connector, or puts that never landed.
    LMCache only logs why, so the text carries its last logged complaint."""


def store_restart_load(settings: Mapping[str, Any], *, model: str, tokens: int,
                       chunk: int, layers: int, heads: int, head_size: int,
                       put_deadline_s: float, started: Callable[[], None],
                       complaint: Callable[[], str]) -> dict:
    """Engine A stores a random prompt's KV; once its puts have landed it is
    destroyed, and engine B (the restarted worker) retrieves the prompt into an
    empty buffer at other slots. `started` runs after each engine starts (to
    adopt loggers LMCache made meanwhile); `complaint` is LMCache's last logged
    error, for RemoteTierError. Returns what happened, as numbers."""
    md = metadata(model, layers, heads, head_size, chunk)
    token_bytes = 2 * layers * heads * head_size * 2  # K and V, bf16
    # The allocator stages a whole prompt at once (store, then retrieve).
    cpu_bytes = (tokens + chunk) * token_bytes * 5 // 4 + 16 * MiB
    worker = Worker(config(settings, chunk, cpu_bytes), md)
    prompt = torch.randint(0, 32000, (tokens,))
    kv_a, slots_a = kv_buffer(md, tokens, random=True), torch.randperm(tokens)
    try:
        engine, conn = _start(worker, kv_a, started, complaint)
        layout = chunks(engine, prompt)
        t0 = time.perf_counter()
        engine.store(prompt, slot_mapping=slots_a)
        if not wait_for_puts(engine, prompt, put_deadline_s):
            raise RemoteTierError(
                f"the puts did not land in {put_deadline_s:.0f} s (lookup finds "
                f"{engine.lookup(prompt)} of {tokens} tokens): {complaint()}")
        store_s = time.perf_counter() - t0
        sizes = [(end - start) * conn.single_token_size for start, end, _ in layout]
        plans = {n: conn.native.plan(n) for n in sorted(set(sizes), reverse=True)}
        store_counters = conn.native.stats()

        worker.stop()  # the restart: the engine and our connector close
        kv_b, slots_b = kv_buffer(md, tokens, random=False), torch.randperm(tokens)
        engine, conn = _start(worker, kv_b, started, complaint)
        lookup = engine.lookup(prompt)
        t0 = time.perf_counter()
        hit = engine.retrieve(prompt, slot_mapping=slots_b)
        load_s = time.perf_counter() - t0
        identical = same_bits(kv_b[:, :, slots_b], kv_a[:, :, slots_a])
        load_counters = conn.native.stats()
        for _, _, key in layout:  # leave nothing behind
            conn.remove_sync(key)
    finally:
        worker.stop()
    return {"tokens": tokens, "lookup_hits": lookup, "hits": int(hit.sum()),
            "bytes_identical": identical, "chunk_bytes": sizes, "stored_bytes": sum(sizes),
            "segments": [{"chunk_bytes": n, "nseg": p[0], "seg_bytes": p[1], "last_bytes": p[2]}
                         for n, p in plans.items()],
            "store_seconds": store_s, "load_seconds": load_s,
            "counters": {"store": store_counters, "load": load_counters}}


def _start(worker: Worker, kv: torch.Tensor, started: Callable[[], None],
           complaint: Callable[[], str]) -> tuple[Any, Any]:
    engine = worker.start(kv)
    started()
    conn = connector(engine)
    if conn is None:
        raise RemoteTierError(f"LMCache did not create the Aerospike backend: {complaint()}")
    return engine, conn
