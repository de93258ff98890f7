"""One engine per identity, shared and reference-counted, and the one place
that drains its completions.

An `Engine` wraps one `_native.Connector` (one Aerospike client, one worker
pool, one eventfd). Every LMCache surface that needs the same engine settings
shares it (spec 4.2.3): `acquire(settings)` returns it, `release()` closes it
with the last user.

Completions arrive on the connector's eventfd. The first user that attaches an
asyncio loop has it drained there (`loop.add_reader`, no thread at all);
without a loop (the multiprocess L2 adapter) one drain thread per engine polls
it. Either way each submit gets a `concurrent.futures.Future` resolved with
`(ok, error, results)`; asyncio code awaits it with `asyncio.wrap_future`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import select
import threading
from typing import Any, Optional

from lmcache_aerospike import _native

logger = logging.getLogger("lmcache_aerospike.client")

Completion = tuple  # (ok: bool, error: str, results: list)


class Engine:
    """A shared `_native.Connector` and its completion routing. Thread-safe."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.native = _native.Connector(**settings.engine_kwargs())
        self._futures: dict[int, concurrent.futures.Future] = {}
        self._lock = threading.Lock()  # submit + register vs. drain
        self._users = 0
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()

    # -- completions -----------------------------------------------------------

    def submit(self, method: str, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        """Calls `native.<method>(*args, **kwargs)` (a submit_batch_*), and returns
        a future of its completion. The lock makes the id known before a drain
        can look it up."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        # Running futures cannot be canceled: an awaiter that gives up (LMCache
        # cancels slow gets) must not make the op look finished while workers
        # still use its buffers. The result always comes from the drain.
        future.set_running_or_notify_cancel()
        with self._lock:
            fid = getattr(self.native, method)(*args, **kwargs)
            self._futures[fid] = future
        return future

    async def run(self, method: str, *args: Any, **kwargs: Any) -> Completion:
        """`submit`, awaited on the running loop."""
        return await asyncio.wrap_future(self.submit(method, *args, **kwargs))

    def _drain(self) -> None:
        for fid, ok, error, results in self.native.drain_completions():
            with self._lock:
                future = self._futures.pop(fid, None)
            if future is not None:
                future.set_result((ok, error, results))

    def _drain_forever(self) -> None:
        poller = select.poll()
        poller.register(self.native.event_fd(), select.POLLIN)
        while not self._stop.is_set():
            if poller.poll(200):
                self._drain()

    def attach(self, loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        """Starts draining completions, once per engine: on `loop` (its thread
        runs the drain) or, without one, on a thread of the engine's own."""
        with self._lock:
            if self._loop is not None or self._thread is not None:
                return
            if loop is not None:
                self._loop = loop
            else:
                self._thread = threading.Thread(
                    target=self._drain_forever, name="lmcache-aerospike-drain", daemon=True)
        if loop is not None:
            # add_reader must run on the loop's thread.
            if _on_loop_thread(loop):
                loop.add_reader(self.native.event_fd(), self._drain)
            else:
                loop.call_soon_threadsafe(loop.add_reader, self.native.event_fd(), self._drain)
        else:
            self._thread.start()

    # -- life ------------------------------------------------------------------

    @property
    def users(self) -> int:
        """How many surfaces hold this engine (acquire minus release)."""
        with _registry_lock:
            return self._users

    def close(self) -> None:
        """Stops draining, closes the connector (queued work is canceled, every
        buffer released) and resolves what is left."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        if self._loop is not None and not self._loop.is_closed():
            fd = self.native.event_fd()
            if _on_loop_thread(self._loop):
                self._loop.remove_reader(fd)
            else:
                _call_on_loop(self._loop, self._loop.remove_reader, fd)
        self.native.close()
        self._drain()  # the cancellations close() collected
        with self._lock:
            left, self._futures = self._futures, {}
        for future in left.values():  # never accepted by a live pool: say so
            future.set_result((False, "ECANCELED: the connector was closed", None))


def _on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _call_on_loop(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    """Runs fn on the loop's thread and waits, when the loop is running."""
    if not loop.is_running():
        fn(*args)
        return
    done = concurrent.futures.Future()

    def call() -> None:
        try:
            done.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed back to the caller
            done.set_exception(e)

    loop.call_soon_threadsafe(call)
    done.result(timeout=30)


# -- the registry --------------------------------------------------------------

_engines: dict[tuple, Engine] = {}
_registry_lock = threading.Lock()


def acquire(settings: Any) -> Engine:
    """The engine for these settings (`settings.identity()`), opened on first use."""
    with _registry_lock:
        engine = _engines.get(settings.identity())
        if engine is None:
            engine = _engines[settings.identity()] = Engine(settings)
        engine._users += 1
        return engine


def release(engine: Engine) -> None:
    """Drops one use; the last closes the engine."""
    with _registry_lock:
        engine._users -= 1
        if engine._users > 0:
            return
        _engines.pop(engine.settings.identity(), None)
    engine.close()
