"""A client of LMCache's multiprocess server (`lmcache server`, started by
lmcache_aerospike.mp_server) that talks to it the way vLLM does, on CPU.

The client is LMCache's own: the scheduler and worker adapters that vLLM's
LMCacheMPConnector drives (lmcache/integration/vllm/vllm_multi_process_adapter.py,
LMCacheMPSchedulerAdapter :670, LMCacheMPWorkerAdapter :1314). They reach the
server over ZMQ (RequestClientFactory.create, v1/multiprocess/transport/factory.py:32-60:
a tcp:// URL gives the zmq_impl client, a DEALER socket, transport/zmq_impl/mq.py:297-309,
against the server's ROUTER, mq.py:614). KV caches that live on the CPU get the
engine-driven transfer context (transfer_context/worker_transfer.py:1019-1076; the CPU
device spec defaults to it, v1/platform/devices/cpu/__init__.py:86-94): the worker
gathers its paged blocks into chunk tensors and sends them pickled with
PREPARE_STORE/COMMIT_STORE, and gets them back with PREPARE_RETRIEVE
(transfer_context/pickle.py:39-80). The server serves that path only when started
with --supported-transfer-mode auto or engine_driven (its default, lmcache_driven,
wants device IPC handles: v1/multiprocess/server.py:232-238; without the
engine-driven module REGISTER_KV_CACHE_ENGINE_DRIVEN_CONTEXT has no handler).
"""

import os
import time
import uuid

os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")  # no usage telemetry from tests
os.environ.setdefault("DO_NOT_TRACK", "1")

import torch  # noqa: E402
import zmq  # noqa: E402
from lmcache.integration.vllm.vllm_multi_process_adapter import (  # noqa: E402
    LMCacheMPSchedulerAdapter,
    LMCacheMPWorkerAdapter,
    LoadStoreOp,
    ParallelStrategy,
)

# The server itself is the package's helper, which tests/vllm uses too.
from lmcache_aerospike.mp_server import running, spec  # noqa: E402,F401

MQ_TIMEOUT_S = 20.0

# LMCache 0.5.7 sends token ids packed (v1/multiprocess/token_codec.py): LoadStoreOp
# holds token_bytes, and the scheduler's lookup takes the packed bytes
# (integration/vllm/vllm_multi_process_adapter.py:651-654, 883-889); 0.5.6 takes lists.
PACKED_TOKENS = "token_bytes" in getattr(LoadStoreOp, "__dataclass_fields__", {})


def tokens_arg(tokens: list[int]):
    if PACKED_TOKENS:
        from lmcache.v1.multiprocess.token_codec import pack_token_ids

        return pack_token_ids(tokens)
    return tokens


def load_store_op(tokens: list[int], block_ids: list[int]) -> LoadStoreOp:
    if PACKED_TOKENS:
        return LoadStoreOp(token_bytes=tokens_arg(tokens), block_ids=[block_ids], start=0,
                           end=len(tokens))
    return LoadStoreOp(token_ids=tokens, block_ids=[block_ids], start=0, end=len(tokens))


def wait_until(condition, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)


class Engine:
    """One vLLM worker (TP 1) and its scheduler, built as LMCache's vLLM MP
    connector builds them, around paged KV caches that live on the CPU:
    per layer [num_blocks, 2, num_heads, block_size, head_size] in HND order, the
    layout LMCache's SDK uses for CPU caches (lmcache/sdk/context.py:201-224)."""

    def __init__(self, url: str, kv_caches: dict[str, torch.Tensor], *, model_name: str,
                 block_size: int):
        self.zmq = zmq.Context()
        strategy = ParallelStrategy(mla_only=False, vllm_world_size=1, vllm_worker_id=0,
                                    tp_size=1, pp_size=1, n_servers=1)
        self.scheduler = self.worker = None
        try:
            self.scheduler = LMCacheMPSchedulerAdapter(
                [url], self.zmq, model_name, block_size, strategy, mq_timeout=MQ_TIMEOUT_S)
            self.worker = LMCacheMPWorkerAdapter(
                url, self.zmq, model_name, block_size, strategy, mq_timeout=MQ_TIMEOUT_S)
            self.worker.register_kv_caches(kv_caches, layout_hints={"kv_layout": "HND"})
        except BaseException:
            self.close()
            raise
        self.chunk_size = self.scheduler.lmcache_tokens_per_chunk
        self.block_size = block_size

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def store(self, tokens: list[int], block_ids: list[int]) -> bool:
        """Stores the KV of `tokens`, held in `block_ids`; the server's answer."""
        request_id = "store-" + uuid.uuid4().hex
        op = load_store_op(tokens, block_ids)
        self.worker.submit_store_request(request_id, op, self.worker.create_recorded_event())
        # The future get_finished() reads (vllm_multi_process_adapter.py:2112-2127);
        # on the engine-driven path it holds COMMIT_STORE's answer
        # (worker_transfer.py:914-960).
        ok = self.worker.store_futures[request_id].result(timeout=MQ_TIMEOUT_S)
        assert wait_until(lambda: request_id in (self.worker.get_finished({request_id})[0]
                                                 or ()), MQ_TIMEOUT_S)
        return bool(ok)

    def lookup(self, tokens: list[int], request_id: str) -> int:
        """How many leading tokens the server has (LOOKUP, then QUERY_PREFETCH_STATUS
        until the prefetch from L2 into L1 is done); the hits stay locked for
        retrieve() under the same request id."""
        self.scheduler.maybe_submit_lookup_request(request_id, tokens_arg(tokens))
        result: list[int] = []

        def done():
            hit = self.scheduler.check_lookup_result(request_id)
            if hit is not None:
                result.append(hit)
            return bool(result)

        assert wait_until(done, MQ_TIMEOUT_S, 0.02), f"lookup {request_id} never finished"
        return result[0]

    def retrieve(self, tokens: list[int], block_ids: list[int], request_id: str) -> bool:
        """Loads the KV of `tokens` into `block_ids`, after lookup(request_id)."""
        op = load_store_op(tokens, block_ids)
        self.worker.submit_retrieve_request(request_id, op,
                                            self.worker.create_recorded_event())

        def finished():
            _, retrieves = self.worker.get_finished(set())
            return request_id in (retrieves or ())

        assert wait_until(finished, MQ_TIMEOUT_S), f"retrieve {request_id} never finished"
        # A retrieve that failed, wholly or in part, is reported here
        # (vllm_multi_process_adapter.py:2129-2145, 2377-2388).
        return request_id not in self.worker.get_failed_request_ids()

    def end(self, request_id: str) -> None:
        self.scheduler.end_session(request_id)
        self.scheduler.cleanup_lookup_result(request_id)

    def close(self) -> None:
        try:
            if self.worker is not None:
                self.worker.shutdown()
            if self.scheduler is not None:
                self.scheduler.shutdown()
        finally:
            self.zmq.destroy(linger=0)
