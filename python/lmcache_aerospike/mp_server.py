"""LMCache's multiprocess server (`lmcache server`) as a subprocess, with one of our
two L2 adapters: started on free loopback ports, waited for, stopped.

The end-to-end tests drive it with LMCache's own MP adapters (tests/e2e) and with
vLLM (tests/vllm, lmcache_aerospike.vllm_run). It imports no LMCache: the server is
another process.

How it is started, and why (paths under lmcache/v1/ of LMCache 0.5.6):
- `--supported-transfer-mode auto`: a CPU client (vLLM-CPU, or KV caches on the
  CPU) uses the engine-driven transfer (PREPARE_STORE/COMMIT_STORE,
  multiprocess/transfer_context/pickle.py:39-80); the server's default,
  lmcache_driven, wants device IPC handles (multiprocess/server.py:232-238), and
  vLLM then waits in register_kv_caches for its whole mq_timeout.
- `--hash-algorithm blake3`: "builtin" is Python's hash() of (prefix, tokens, None)
  (multiprocess/token_hasher.py:127, 179, 190), and on CPython 3.11 hash(None) is
  the address of None, which ASLR moves on every start (PYTHONHASHSEED does not
  help): a restarted server computes other keys and finds nothing it stored.
  blake3 (token_hasher.py:28-50, 78-80; the `blake3` package) is the same in every
  process.
- `--disable-metrics`: the OpenTelemetry metrics need the Prometheus exporter
  package (mp_observability/otel_init.py:105), and nothing here reads them.
- Stores reach L2 after COMMIT_STORE has answered, and stopping the server does
  not flush them (distributed/storage_manager.py:1257-1275): wait for the chunks
  in Aerospike before stopping it.
"""

from __future__ import annotations

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

STARTUP_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
HASH_ALGORITHM = "blake3"
ADAPTERS = ("plugin", "native_plugin")

# What the server logs when a lookup's prefetch into L1 is done
# (distributed/storage_manager.py:650-660).
_PREFETCH = re.compile(r"(\d+)/(\d+) retained keys \((\d+) L1, (\d+) L2\)")


def spec(kind: str, hosts: str, setname: str, **settings: Any) -> dict:
    """The --l2-adapter JSON of one of our two multiprocess adapters; `settings`
    go into adapter_params with hosts and set."""
    params = {"hosts": hosts, "set": setname, "default_ttl_seconds": 60, **settings}
    if kind == "plugin":
        return {"type": "plugin", "module_path": "lmcache_aerospike.l2",
                "class_name": "AerospikeL2Adapter", "adapter_params": params}
    if kind == "native_plugin":
        return {"type": "native_plugin", "module_path": "lmcache_aerospike._native",
                "class_name": "Connector", "adapter_params": params}
    raise ValueError(f"unknown L2 adapter {kind!r}: expected one of {', '.join(ADAPTERS)}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lmcache_cli() -> list[str]:
    exe = Path(sys.executable).with_name("lmcache")  # the console script of this venv
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "from lmcache.cli.main import main; main()"]


def server_env(extra: Optional[dict] = None) -> dict:
    env = dict(os.environ)
    env.update(LMCACHE_TRACK_USAGE="false", DO_NOT_TRACK="1", LMCACHE_DISABLE_BANNER="1",
               PYTHONUNBUFFERED="1")
    env.update(extra or {})
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

    def store_idle(self) -> bool:
        """No store waiting for, or on its way to, L2."""
        s = self.storage()["store_controller"]
        return s["pending_keys_count"] == 0 and s["in_flight_task_count"] == 0

    def log(self) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as e:
            return f"<no log: {e}>"
        return re.sub(r"\x1b\[[0-9;]*m", "", text)  # LMCache colours its log lines

    def prefetches(self) -> list[dict]:
        """Each completed lookup with hits, as the server logged it: keys found of
        keys asked, and how many came from L1 and from L2."""
        return [dict(zip(("hits", "keys", "l1", "l2"), map(int, m.groups())))
                for m in _PREFETCH.finditer(self.log())]

    def tail(self, lines: int = 40) -> str:
        return f"--- last {lines} lines of {self.log_path} ---\n" + "\n".join(
            self.log().splitlines()[-lines:])

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


def start(l2_spec: dict, log_path: Path, *, chunk_size: int, l1_size_gb: float = 0.125,
          cwd: Optional[Path] = None, env: Optional[dict] = None) -> MPServer:
    """Starts `lmcache server` on free loopback ports and waits until it serves.

    /status answering means the ZMQ server is up too: the HTTP app's lifespan runs
    run_cache_server, which starts the request server, before uvicorn accepts
    requests (v1/multiprocess/http_server.py:69-91; server.py:382, 509)."""
    port, http_port = free_port(), free_port()
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
        process = subprocess.Popen(cmd, cwd=cwd, env=server_env(env),
                                   stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    server = MPServer(process, port, http_port, Path(log_path))
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
def running(l2_spec: dict, log_path: Path, **kw: Any) -> Iterator[MPServer]:
    """A started server, always stopped on the way out (failures included)."""
    server = start(l2_spec, log_path, **kw)
    try:
        yield server
    finally:
        server.stop()
