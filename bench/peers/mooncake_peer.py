"""Mooncake Store as an LMCache L2 tier, for the side-by-side benchmarks: a connector
with the interface LMCache's `native_plugin` adapter drives (NativeConnectorL2Adapter,
lmcache/v1/distributed/l2_adapters/native_connector_l2_adapter.py: event_fd,
submit_batch_set/get/exists/delete, drain_completions, close) over Mooncake's Python
client, `mooncake.store.MooncakeDistributedStore`.

LMCache's own `mooncake_store` L2 adapter needs its C++ `lmcache_mooncake`
extension, which LMCache's wheel does not ship; this stands in for it. Its puts and
gets copy through Python bytes (Mooncake's zero-copy calls want registered buffers),
so it is a lower bound for Mooncake. Set it up with bench/peers/mooncake.sh; `Store`
runs it, and `Store.debug_build` reads what its master's --version says of its build.

    {"type": "native_plugin", "module_path": "mooncake_peer", "class_name":
     "MooncakeConnector", "adapter_params": {"master": "127.0.0.1:50051",
     "metadata": "http://127.0.0.1:8080/metadata", "num_workers": 8}}
"""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor


class MooncakeConnector:
    def __init__(self, master="127.0.0.1:50051", metadata="http://127.0.0.1:8080/metadata",
                 hostname="127.0.0.1", num_workers=8, local_buffer_mb=512):
        from mooncake.store import MooncakeDistributedStore

        self._store = MooncakeDistributedStore()
        # global_segment_size 0: this process lends no memory, so every byte crosses
        # TCP to the store's client process (bench/peers/mooncake.sh starts it).
        rc = self._store.setup(hostname, metadata, 0, int(local_buffer_mb) << 20, "tcp", "",
                               master)
        if rc != 0:
            raise ConnectionError(f"Mooncake setup against master {master} failed: {rc}")
        self._pool = ThreadPoolExecutor(max_workers=int(num_workers),
                                        thread_name_prefix="mooncake")
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._lock = threading.Lock()
        self._done, self._next = [], 1

    # -- the native connector interface ---------------------------------------------

    def event_fd(self):
        return self._fd

    def submit_batch_set(self, keys, memviews):
        return self._submit(lambda: [self._store.put(k, memoryview(m).cast("B").tobytes()) == 0
                                     for k, m in zip(keys, memviews)], every=True)

    def submit_batch_get(self, keys, memviews):
        def get():
            ok = []
            for k, m in zip(keys, memviews):
                out = memoryview(m).cast("B")  # LMCache's views are typed, not bytes
                data = self._store.get(k)
                hit = data is not None and len(data) == out.nbytes
                if hit:
                    out[:] = data
                ok.append(hit)
            return ok
        return self._submit(get)

    def submit_batch_exists(self, keys):
        return self._submit(lambda: [r == 1 for r in self._store.batch_is_exist(list(keys))])

    def submit_batch_delete(self, keys):
        return self._submit(lambda: [self._store.remove(k) == 0 for k in keys])

    def drain_completions(self):
        try:
            os.eventfd_read(self._fd)
        except BlockingIOError:
            pass
        with self._lock:
            done, self._done = self._done, []
        return done

    def close(self):
        self._pool.shutdown(wait=True)
        self._store.close()
        os.close(self._fd)

    def remove_all(self):
        """Empties the store: a put of a key it holds succeeds without copying."""
        return self._store.remove_all(True)

    # -------------------------------------------------------------------------------

    def _submit(self, work, every=False):
        """Runs `work` (-> a bool per key) on a worker. The completion's ok is whether
        the call ran, and for a store whether every key was stored: a lookup or load
        reports its misses per key (the adapter ignores the keys of a call not ok)."""
        with self._lock:
            fid, self._next = self._next, self._next + 1

        def run():
            try:
                bools, ok, error = work(), True, ""
            except Exception as e:  # the adapter reports it; the benchmark fails on it
                bools, ok, error = [], False, f"{type(e).__name__}: {e}"
            with self._lock:
                self._done.append((fid, ok and (all(bools) or not every), error, bools))
            os.eventfd_write(self._fd, 1)

        self._pool.submit(run)
        return fid


# ------------------------------------------------------------------ the store's processes

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Store:
    """A Mooncake Store on loopback for one benchmark run: its master (with the HTTP
    metadata server) and one client process that lends it `segment` of memory,
    over TCP. Making one starts both; `spec()` is the --l2-adapter JSON of a
    connector to it; `clear()` empties it; `stop()` ends both processes."""

    def __init__(self, site, workdir, segment="1 GB"):
        # segment: the memory the store's one client lends it (its capacity), e.g.
        # "1 GB" or a byte count.
        self.site = site
        self.rpc, self.http, self.client_port = free_port(), free_port(), free_port()
        self.master_addr = f"127.0.0.1:{self.rpc}"
        self.metadata = f"http://127.0.0.1:{self.http}/metadata"
        # Every process of the store and its clients binds loopback (Mooncake's TCP
        # transport otherwise picks an interface of its own).
        os.environ["MC_TCP_BIND_ADDRESS"] = "127.0.0.1"
        env = {**os.environ, "PYTHONPATH": site}
        bin_ = os.path.join(site, "bin")
        self.master_log = os.path.join(workdir, "mooncake_master.log")
        self.procs = []
        with open(self.master_log, "w") as log:
            self.procs.append(subprocess.Popen(
                [sys.executable, os.path.join(bin_, "mooncake_master"),
                 "--rpc_address=127.0.0.1", f"--rpc_port={self.rpc}",
                 f"--metrics_port={free_port()}", "--enable_http_metadata_server=true",
                 "--http_metadata_server_host=127.0.0.1",
                 f"--http_metadata_server_port={self.http}"],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        self._wait_for(self.rpc, "its master")
        with open(os.path.join(workdir, "mooncake_client.log"), "w") as log:
            self.procs.append(subprocess.Popen(
                [sys.executable, os.path.join(bin_, "mooncake_client"), "--host=127.0.0.1",
                 f"--port={self.client_port}", f"--global_segment_size={segment}",
                 "--protocol=tcp", f"--master_server_address={self.master_addr}",
                 f"--metadata_server={self.metadata}"],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        self._wait_for(self.client_port, "its client")
        time.sleep(1.0)  # the client mounts its segment after it listens

    def _wait_for(self, port, what, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                self.stop()
                raise RuntimeError(f"Mooncake Store: {what} exited while starting")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"Mooncake Store: {what} did not listen within {timeout:.0f} s")

    def spec(self, num_workers=8, master=None):
        # master: another address of the master (a delay proxy in front of it).
        return {"type": "native_plugin", "module_path": "mooncake_peer",
                "class_name": "MooncakeConnector",
                "adapter_params": {"master": master or self.master_addr,
                                   "metadata": self.metadata,
                                   "num_workers": num_workers}}

    def metrics(self):
        """The master's counters of the store (its Prometheus text): keys held,
        evicted, bytes allocated and capacity."""
        with open(self.master_log, errors="replace") as f:
            port = re.search(r"metrics_port=(\d+)", f.read()).group(1)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        out = {}
        for line in text.decode().splitlines():
            name, _, value = line.partition(" ")
            if name in ("master_key_count", "master_evicted_key_count",
                        "master_allocated_bytes", "master_total_capacity_bytes"):
                out[name.removeprefix("master_")] = int(float(value))
        return out

    def debug_build(self):
        """What `mooncake_master --version` says of its build: "Debug build (NDEBUG not
        #defined)" for 0.3.13.post1 (its bundled gflags prints that line, so it may
        describe only how that library was built); None when it says nothing."""
        out = subprocess.run([sys.executable, os.path.join(self.site, "bin", "mooncake_master"),
                              "--version"], capture_output=True, text=True, timeout=30,
                             env={**os.environ, "PYTHONPATH": self.site})
        return next((ln.strip() for ln in (out.stdout + out.stderr).splitlines()
                     if "debug build" in ln.lower()), None)

    def clear(self):
        conn = MooncakeConnector(self.master_addr, self.metadata, num_workers=1,
                                 local_buffer_mb=16)
        try:
            conn.remove_all()
        finally:
            conn.close()

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        self.procs = []
