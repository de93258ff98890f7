"""LMCache's multiprocess server (`lmcache server`) as a subprocess, and a client
that talks to it the way vLLM does, on CPU.

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

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

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

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
MQ_TIMEOUT_S = 20.0

# The server hashes token chunks into the keys it hands the L2 adapter. "builtin"
# is Python's hash() of (prefix, tokens, None) (v1/multiprocess/token_hasher.py:
# 127, 179, 190), and on CPython 3.11 hash(None) is the address of None, which ASLR
# moves on every start (PYTHONHASHSEED does not help): a restarted server computes
# other keys and finds nothing it stored before. blake3 (LMCache's default,
# token_hasher.py:28-50, 78-80; needs the `blake3` package) is the same in every
# process.
HASH_ALGORITHM = "blake3"


def spec(kind: str, hosts: str, setname: str) -> dict:
    """The --l2-adapter JSON of one of our two multiprocess adapters."""
    params = {"hosts": hosts, "set": setname, "default_ttl_seconds": 60}
    if kind == "plugin":
        return {"type": "plugin", "module_path": "lmcache_aerospike.l2",
                "class_name": "AerospikeL2Adapter", "adapter_params": params}
    if kind == "native_plugin":
        return {"type": "native_plugin", "module_path": "lmcache_aerospike._native",
                "class_name": "Connector", "adapter_params": params}
    raise ValueError(kind)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lmcache_cli() -> list[str]:
    exe = Path(sys.executable).with_name("lmcache")  # the console script of this venv
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "from lmcache.cli.main import main; main()"]


def server_env() -> dict:
    env = dict(os.environ)
    env.update(LMCACHE_TRACK_USAGE="false", DO_NOT_TRACK="1", LMCACHE_DISABLE_BANNER="1",
               PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


@dataclass
class MPServer:
    """One `lmcache server` process: its ZMQ and HTTP ports and its log."""

    process: subprocess.Popen
    port: int
    http_port: int
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def status(self) -> dict:
        """GET /status: MPCacheServer.report_status (v1/multiprocess/server.py:126-148)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/status",
                                    timeout=10) as r:
            return json.loads(r.read())

    def storage(self) -> dict:
        return self.status()["storage_manager"]

    def l2_status(self) -> dict:
        """What our adapter's report_status() says (one L2 adapter configured)."""
        adapters = self.storage()["l2_adapters"]
        assert len(adapters) == 1, adapters
        return adapters[0]

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as e:
            return f"<no log: {e}>"
        text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # LMCache colours its log lines
        return f"--- last {lines} lines of {self.log_path} ---\n" + "\n".join(
            text.splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL, as a crash would: no shutdown code of LMCache or of the adapter runs."""
        self._signal(signal.SIGKILL)
        self.process.wait(timeout=STOP_TIMEOUT_S)

    def stop(self) -> None:
        """SIGTERM (uvicorn's graceful shutdown), SIGKILL if that takes too long.
        Signals go to the process group the server was started in, so nothing it
        may have started outlives it."""
        if self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        self._signal(signal.SIGKILL)  # the group: stragglers too
        self.process.wait(timeout=STOP_TIMEOUT_S)

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)  # its own group (start_new_session)


def start(l2_spec: dict, log_path: Path, *, chunk_size: int,
          l1_size_gb: float = 0.125) -> MPServer:
    """Starts `lmcache server` on free loopback ports and waits until it serves.

    /status answering means the ZMQ server is up too: the HTTP app's lifespan runs
    run_cache_server, which starts the request server, before uvicorn accepts
    requests (v1/multiprocess/http_server.py:69-91; server.py:382, 509)."""
    port, http_port = _free_port(), _free_port()
    cmd = _lmcache_cli() + [
        "server",
        "--host", "127.0.0.1", "--port", str(port),
        "--http-host", "127.0.0.1", "--http-port", str(http_port),
        "--chunk-size", str(chunk_size),
        "--l1-size-gb", str(l1_size_gb),
        "--eviction-policy", "LRU",
        "--hash-algorithm", HASH_ALGORITHM,
        "--disable-metrics",
        "--supported-transfer-mode", "auto",
        "--l2-adapter", json.dumps(l2_spec),
    ]
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        process = subprocess.Popen(cmd, cwd=REPO, env=server_env(), stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    server = MPServer(process, port, http_port, log_path)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"lmcache server exited with {process.returncode} "
                                   f"while starting\n{server.tail(80)}")
            try:
                if server.status().get("is_healthy"):
                    return server
            except (OSError, urllib.error.URLError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"lmcache server not ready within {STARTUP_TIMEOUT_S} s"
                                   f"\n{server.tail(80)}")
            time.sleep(0.25)
    except BaseException:
        server.stop()
        raise


@contextlib.contextmanager
def running(l2_spec: dict, log_path: Path, **kw):
    """A started server, always stopped on the way out (failures included)."""
    server = start(l2_spec, log_path, **kw)
    try:
        yield server
    finally:
        server.stop()


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
        op = LoadStoreOp(token_ids=tokens, block_ids=[block_ids], start=0, end=len(tokens))
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
        self.scheduler.maybe_submit_lookup_request(request_id, tokens)
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
        op = LoadStoreOp(token_ids=tokens, block_ids=[block_ids], start=0, end=len(tokens))
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
