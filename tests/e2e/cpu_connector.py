"""A GPUConnectorInterface that really copies, between a CPU "paged" KV buffer
and LMCache's MemoryObjs.

LMCache 0.5.6 ships no connector that does this on the CPU: MockGPUConnector
(lmcache/v1/gpu_connector/mock_gpu_connector.py:31-45) makes from_gpu/to_gpu
and their batched variants no-ops, and the vLLM/SGLang connectors need CUDA
streams (gpu_connectors.py:204-205). The interface to implement is
GPUConnectorInterface (gpu_connectors.py:45-145): to_gpu, from_gpu,
batched_from_gpu, batched_to_gpu (abstract) and get_shape.

The buffer has the layout of one MemoryObj with the token axis replaced by
slots: [kv_size, num_layers, num_slots, hidden], where kv_size is 2 (K and V,
MemoryFormat.KV_2LTD) or 1 (MLA, KV_MLA_FMT), and both formats put tokens on
axis 2 (memory_management.py:114-126). A request's `slot_mapping` (token i ->
slot, as vLLM passes one) says where each token lives, so a chunk's tokens can
be scattered over the buffer like pages. LMCache forwards the kwargs of
store()/retrieve() to batched_from_gpu/batched_to_gpu (cache_engine.py:569,
935-937), which is how `slot_mapping` reaches this class.
"""

from typing import List, Optional

import torch

from lmcache.v1.gpu_connector import GPUConnectorInterface
from lmcache.v1.memory_management import MemoryObj


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
