"""A writer process of a cache benchmark on a host whose wall clock is off:
`--writer-clock W:OFFSET` (e.g. 1:+30s, 2:-300s) runs writer W under Debian's
`faketime -m -f OFFSET` (libfaketime, its multi-threaded flavour: the engine has
threads), where the other writers are multiprocessing's spawned processes.

A process started through the faketime command is no child of multiprocessing, so
it cannot inherit the shared counters and queues the spawned writers get. It gets a
socket to the parent instead, and stand-ins for those objects: each method call on a
stand-in is sent to the parent, where a thread calls the real object and sends the
result back (the writers' calls are few: one or two round trips a store, beside a
put of a chunk). The writer function is the spawned writers' own, with the same
arguments.

Only the wall clock is off: FAKETIME_DONT_FAKE_MONOTONIC=1 leaves CLOCK_MONOTONIC
alone, as on a host whose wall clock is wrong, and the benchmarks order every
writer's stores by time.monotonic(), which is one clock for every process of the
host.

    python bench/cache/cache_faketime.py FD      (run by FaketimeProcess, not by hand)
"""

import importlib
import os
import pickle
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_writer_clock(text):
    """'1:+30s' -> (1, '+30s'): writer 1 on a wall clock 30 s ahead."""
    w, sep, offset = text.partition(":")
    if not sep or not w.isdigit() or not offset or offset[0] not in "+-":
        raise ValueError(f"--writer-clock {text!r}: expected W:OFFSET, e.g. 1:+30s or 2:-300s")
    return int(w), offset


def writer_clocks(texts, writers):
    """{writer: offset} from the --writer-clock options."""
    out = dict(parse_writer_clock(t) for t in texts)
    bad = [w for w in out if w >= writers]
    if bad:
        raise ValueError(f"--writer-clock: no writer {bad[0]} among {writers}")
    return out


class FaketimeProcess:
    """Like multiprocessing.Process(target=module.func, args=args + tuple(serve)), run
    under `faketime -m -f offset`: `serve` are the objects the writer shares with the
    parent (counters, queues), reached through the socket."""

    def __init__(self, module, func, args, serve, offset):
        self.module, self.func, self.args, self.serve = module, func, args, list(serve)
        self.offset = offset
        self.popen = None

    def start(self):
        ours, theirs = socket.socketpair()
        env = {**os.environ, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
        self.popen = subprocess.Popen(
            ["faketime", "-m", "-f", self.offset, sys.executable, os.path.abspath(__file__),
             str(theirs.fileno())], pass_fds=[theirs.fileno()], env=env)
        theirs.close()
        self.conn = Connection(ours.detach())
        # The parent's sys.path, as multiprocessing's spawn hands it on.
        self.conn.send(sys.path)  # first: the call's arguments may need its modules
        self.conn.send((self.module, self.func, self.args, len(self.serve)))
        threading.Thread(target=self._serve, daemon=True, name="faketime-writer").start()

    def _serve(self):
        """Calls the parent's objects for the writer until it hangs up."""
        while True:
            try:
                k, method, args = self.conn.recv()
            except (EOFError, OSError):
                return
            try:
                reply = (True, getattr(self.serve[k], method)(*args))
            except Exception as e:  # noqa: BLE001 (raised again in the writer)
                reply = (False, e)
            try:
                self.conn.send(reply)
            except (OSError, pickle.PicklingError):
                return

    @property
    def pid(self):
        return self.popen.pid

    @property
    def exitcode(self):
        return self.popen.poll()

    def is_alive(self):
        return self.popen is not None and self.popen.poll() is None

    def join(self, timeout=None):
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def kill(self):
        self.popen.kill()


class StandIn:
    """The writer's side of a shared object: a method call is a round trip."""

    def __init__(self, conn, lock, k):
        self._conn, self._lock, self._k = conn, lock, k

    def __getattr__(self, method):
        def call(*args):
            with self._lock:  # the writer's threads share one socket
                self._conn.send((self._k, method, args))
                ok, value = self._conn.recv()
            if not ok:
                raise value
            return value
        return call


def main(fd):
    conn = Connection(fd)
    sys.path[:] = conn.recv()
    module, func, args, n = conn.recv()
    lock = threading.Lock()
    target = getattr(importlib.import_module(module), func)
    target(*args, *(StandIn(conn, lock, k) for k in range(n)))
    conn.close()


if __name__ == "__main__":
    main(int(sys.argv[1]))
