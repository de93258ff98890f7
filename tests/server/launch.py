"""Starts the test server in a subprocess for the duration of a `with` block."""

import contextlib
import os
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The test server is Python alone: under scripts/test.sh's ASan run it would inherit
# the sanitizers, and LeakSanitizer would report the objects of its threads, alive
# when it is terminated, as leaks of the run.
_SANITIZER_ENV = ("LD_PRELOAD", "ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS", "PYTHONMALLOC")


@contextlib.contextmanager
def _started(args, timeout):
    """Runs `python -m tests.server --port 0 --port-file F *args`; yields the
    port file's text once written; stops the server afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        port_file = os.path.join(tmp, "port")
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.server", "--port", "0", "--port-file", port_file,
             *args],
            cwd=REPO_ROOT,
            env={k: v for k, v in os.environ.items() if k not in _SANITIZER_ENV},
        )
        try:
            deadline = time.time() + timeout
            while not (os.path.exists(port_file) and open(port_file).read().strip()):
                if proc.poll() is not None:
                    raise RuntimeError("the test server exited early")
                if time.time() > deadline:
                    raise RuntimeError("the test server did not write its port file")
                time.sleep(0.02)
            yield open(port_file).read().strip()
        finally:
            proc.terminate()
            proc.wait(10)


@contextlib.contextmanager
def running(timeout=10, args=()):
    """Yields the loopback port of a fresh test server started with the extra
    command-line `args` (e.g. ["--namespace", "ns:data-size=1M"]); stops it
    afterwards."""
    with _started(list(args), timeout) as text:
        yield int(text)


@contextlib.contextmanager
def running_cluster(nodes=3, rf=2, args=(), timeout=20):
    """Yields the loopback ports (a list) of a fresh cluster of `nodes` test
    server nodes with replication factor `rf` in one process (cluster.py),
    started with the extra command-line `args` (e.g. ["--heartbeat-timeout",
    "1"]); stops it afterwards."""
    cmd = ["--nodes", str(nodes), "--replication-factor", str(rf), *args]
    with _started(cmd, timeout) as text:
        yield [int(p) for p in text.split(",")]
