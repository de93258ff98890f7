"""LMCache's multiprocess `plugin` L2 adapter on the engine.

    --l2-adapter '{"type": "plugin", "module_path": "lmcache_aerospike.l2",
                   "class_name": "AerospikeL2Adapter",
                   "adapter_params": {"hosts": "127.0.0.1:3000"}}'

LMCache's plugin factory (l2_adapters/plugin_l2_adapter.py) finds the config class
by the name `<class_name>Config` and builds `AerospikeL2Adapter(config,
l1_memory_desc=...)`. Next to `native_plugin` (LMCache's own wrapper of our
`_native.Connector`), this adapter adds what that wrapper cannot know: the
settings' environment fallbacks and aliases, `touch_on_lock`, one engine shared
with the other surfaces of the process, status with the engine's counters, and
byte accounting that follows overwrites and deletes.

Records are written under the key strings of LMCache's native adapters
(native_connector_l2_adapter._object_key_to_string), so `plugin` and
`native_plugin` read each other's chunks.

Threads: LMCache's store and prefetch controllers call in concurrently; the
engine's drain thread completes tasks. Every table here is guarded by one lock,
never held while calling the engine or a listener.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
import time
from collections.abc import Mapping
from typing import Any, Optional

from lmcache.lmcache_native import Bitmap
from lmcache.logging import init_logger
from lmcache.v1.distributed.internal_api import L2StoreResult
from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface, L2TaskId
from lmcache.v1.distributed.l2_adapters.config import L2AdapterConfigBase
from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import (
    _object_key_to_string as key_string,
)
from lmcache.v1.platform import create_event_notifier

try:  # LMCache 0.5.7: where an adapter's bytes are (l2_adapters/base.py, get_memory_tags)
    from lmcache.v1.distributed.api import MemoryResidency, MemorySegment, MemoryTags
except ImportError:  # 0.5.6 has no memory tags
    MemoryTags = None

from lmcache_aerospike import _native, client, logs, metrics
from lmcache_aerospike.config import Settings

logger = init_logger("lmcache_aerospike")

TYPE_NAME = "aerospike"


class AerospikeL2AdapterConfig(L2AdapterConfigBase):
    """The adapter's `adapter_params`: every setting of `Settings`, with the
    keys and environment fallbacks of LMCache's own Aerospike adapter."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @classmethod
    def from_dict(cls, d: dict) -> "AerospikeL2AdapterConfig":
        return cls(Settings.from_dict(d, where="adapter_params."))

    @classmethod
    def help(cls) -> str:
        return Settings.help()


class AerospikeL2Adapter(L2AdapterInterface):
    """L2AdapterInterface on a shared engine. Store, lookup and load each have
    their own event fd; each result is handed out once."""

    def __init__(self, config: AerospikeL2AdapterConfig | Mapping[str, Any],
                 l1_memory_desc: Any = None) -> None:
        if isinstance(config, Mapping):  # the plugin factory's raw-dict mode
            config = AerospikeL2AdapterConfig.from_dict(dict(config))
        settings = config.settings
        super().__init__(max_capacity_bytes=int(settings.max_capacity_gb * (1 << 30)))
        self.settings = settings
        self._engine = client.acquire(settings)
        self._engine.attach(None)
        self.metrics = metrics.opentelemetry(settings.metrics)
        self._closed = False
        self._notifiers = {kind: create_event_notifier() for kind in ("store", "lookup", "load")}
        self._done: dict[str, dict[L2TaskId, Any]] = {k: {} for k in self._notifiers}
        self._locks: dict[Any, int] = {}  # ObjectKey -> lookups not yet unlocked
        self._sizes: dict[Any, int] = {}  # ObjectKey -> bytes stored, for accounting
        self._inflight: set[concurrent.futures.Future] = set()
        self._connection_failures = 0
        self._last_error = ""
        self._lock = threading.Lock()
        self._task_ids = itertools.count()
        limits = self._engine.native.limits()
        logger.info("aerospike L2 adapter %s: %s/%s, %d workers, segments of %d bytes",
                    settings.hosts, settings.namespace, settings.set, settings.num_workers,
                    limits["target_segment_bytes"])

    # -- event fds ---------------------------------------------------------------

    def get_store_event_fd(self) -> int:
        return self._notifiers["store"].fileno()

    def get_lookup_and_lock_event_fd(self) -> int:
        return self._notifiers["lookup"].fileno()

    def get_load_event_fd(self) -> int:
        return self._notifiers["load"].fileno()

    # -- tasks -------------------------------------------------------------------

    def _submit(self, kind: str, method: str, args: tuple, on_done: Any) -> L2TaskId:
        """Runs `method` on the engine; `on_done(ok, error, results)` returns the
        task's result, which is published under `kind`. A submit the engine
        refuses (closed, a bad key) completes at once, as a failure."""
        task_id = next(self._task_ids)
        try:
            future = self._engine.submit(method, *args)
        except _native.Error as e:
            self._publish(kind, task_id, on_done(False, f"{e.name}: {e}", None))
            return task_id
        with self._lock:
            self._inflight.add(future)

        def finish(f: concurrent.futures.Future) -> None:
            with self._lock:
                self._inflight.discard(f)
            self._publish(kind, task_id, on_done(*f.result()))

        future.add_done_callback(finish)
        return task_id

    def _publish(self, kind: str, task_id: L2TaskId, result: Any) -> None:
        with self._lock:
            if self._closed:  # after close(), nobody polls for it
                return
            self._done[kind][task_id] = result
            # Under the lock: close() cannot close the fd between check and notify.
            self._notifiers[kind].notify()

    def _pop(self, kind: str, task_id: L2TaskId) -> Any:
        with self._lock:
            return self._done[kind].pop(task_id, None)

    def _health(self, ok: bool, error: str, names: list) -> None:
        """Tracks connection trouble for report_status and logs the error, its keys
        replaced by their records' digests (spec 4.8)."""
        if ok:
            self._connection_failures = 0
            return
        error = logs.redact(error, self.settings.set, names)
        self._last_error = error
        if error.startswith(("ECONNECTION", "ETIMEOUT")):
            self._connection_failures += 1
        if not metrics.dropped(error):  # drops: the engine counts them and warns
            logger.warning("aerospike L2: %s", error)

    # -- store -------------------------------------------------------------------

    def submit_store_task(self, keys: list, objects: list) -> L2TaskId:
        keys = list(keys)
        names = [key_string(k) for k in keys]
        views = [o.byte_array for o in objects]
        sizes = [len(v) for v in views]
        started = time.perf_counter()
        self.metrics.in_flight(len(views))

        def done(ok: bool, error: str, stored: Optional[list]) -> L2StoreResult:
            self._health(ok, error, names)
            self.metrics.in_flight(-len(views))
            self.metrics.op("store", started, _labels(ok, error, stored, "ok", "error"))
            stored = stored or [False] * len(keys)
            if ok and not self._engine.native.closed:  # plan() needs an open engine
                self.metrics.segments(self._engine.native.plan(n) for n in sizes)
            self._account_stored([k for k, s in zip(keys, stored) if s],
                                 [n for n, s in zip(sizes, stored) if s])
            # The interface reports a store per task: all of it, or a failure.
            return L2StoreResult(ok, sum(n for n, s in zip(sizes, stored) if s))

        return self._submit("store", "submit_batch_set",
                            (names, views), done)

    def _account_stored(self, keys: list, sizes: list) -> None:
        """Listeners hear of every stored key; bytes count once per key, and an
        overwrite of another size replaces the old size."""
        if not keys:
            return
        added, replaced, old = [], [], []
        with self._lock:
            for k, n in zip(keys, sizes):
                before = self._sizes.get(k)
                self._sizes[k] = n
                if before is None or before == n:
                    added.append(0 if before is not None else n)
                else:
                    replaced.append(k)
                    old.append(before)
                    added.append(n)
        if replaced:
            self._notify_keys_deleted(replaced, old)
        self._notify_keys_stored(keys, added)

    def pop_completed_store_tasks(self) -> dict[L2TaskId, L2StoreResult]:
        with self._lock:
            done, self._done["store"] = self._done["store"], {}
        return done

    # -- lookup and lock -----------------------------------------------------------

    def submit_lookup_and_lock_task(self, keys: list, group_layout_descs: Any) -> L2TaskId:
        keys = list(keys)
        names = [key_string(k) for k in keys]
        started = time.perf_counter()

        def done(ok: bool, error: str, found: Optional[list]) -> Bitmap:
            self._health(ok, error, names)
            self.metrics.op("lookup", started, _labels(ok, error, found, "hit", "miss"))
            hits = [i for i, f in enumerate(found or []) if f] if ok else []
            with self._lock:
                for i in hits:
                    self._locks[keys[i]] = self._locks.get(keys[i], 0) + 1
            if hits and self.settings.touch_on_lock:
                self._touch([names[i] for i in hits])
            return _bitmap(len(keys), hits)

        return self._submit("lookup", "submit_batch_exists", (names,), done)

    def _touch(self, names: list) -> None:
        """Restarts the TTL of chunks (locked ones, so they outlive the wait for
        their load; touched ones). Best effort: a chunk that expired anyway is a
        miss at load. A touch a full or busy namespace refuses is not logged: the
        chunk keeps its TTL, and the engine's own warning about the namespace
        says the rest (LMCache 0.5.7 touches on every access)."""
        def touched(future: Any) -> None:
            ok, error, _ = future.result()
            if not ok and not metrics.dropped(error):
                logger.warning("aerospike L2: touching %d chunks: %s", len(names),
                               logs.redact(error, self.settings.set, names))
        try:
            self._engine.submit("submit_batch_touch", names).add_done_callback(touched)
        except _native.Error as e:
            logger.warning("aerospike L2: touching %d chunks: %s", len(names), e)

    def submit_touch(self, keys: list) -> None:
        """LMCache 0.5.7's "mark keys accessed for eviction": on Aerospike that is
        the chunk's TTL restarted (every record of it, as a read-touch does), so
        NSUP evicts it last; and LMCache's listeners told, as the base class does."""
        keys = list(keys)
        if not keys or self._closed:
            return
        self._touch([key_string(k) for k in keys])
        self._notify_keys_accessed(keys)

    def get_memory_tags(self) -> Any:
        """LMCache 0.5.7: the bytes are in remote storage, shared between hosts (the
        tags of LMCache's own remote adapters, resp_l2_adapter.py:172). None on 0.5.6,
        which never asks."""
        if MemoryTags is None:
            return None
        return MemoryTags(MemorySegment.STORAGE, MemoryResidency.REMOTE)

    def query_lookup_and_lock_result(self, task_id: L2TaskId) -> Optional[Bitmap]:
        return self._pop("lookup", task_id)

    def submit_unlock(self, keys: list) -> None:
        with self._lock:
            for k in keys:
                n = self._locks.get(k, 0)
                if n > 1:
                    self._locks[k] = n - 1
                else:
                    self._locks.pop(k, None)

    def locked(self, key: Any) -> int:
        """How many lookups hold `key` locked (for tests and status)."""
        with self._lock:
            return self._locks.get(key, 0)

    # -- load ----------------------------------------------------------------------

    def submit_load_task(self, keys: list, objects: list) -> L2TaskId:
        keys = list(keys)
        names = [key_string(k) for k in keys]
        started = time.perf_counter()
        self.metrics.in_flight(len(keys))

        def done(ok: bool, error: str, loaded: Optional[list]) -> Bitmap:
            self._health(ok, error, names)
            self.metrics.in_flight(-len(keys))
            self.metrics.op("load", started, _labels(ok, error, loaded, "hit", "miss"))
            hits = [i for i, hit in enumerate(loaded or []) if hit]
            if hits:
                self._notify_keys_accessed([keys[i] for i in hits])
            return _bitmap(len(keys), hits)

        return self._submit("load", "submit_batch_get",
                            (names, [o.byte_array for o in objects]), done)

    def query_load_result(self, task_id: L2TaskId) -> Optional[Bitmap]:
        return self._pop("load", task_id)

    # -- delete, status, close ---------------------------------------------------------

    def delete(self, keys: list) -> None:
        """Removes the chunks and waits (LMCache's eviction calls this)."""
        keys = list(keys)
        if not keys or self._closed:
            return
        started = time.perf_counter()
        names = [key_string(k) for k in keys]
        try:
            ok, error, removed = self._engine.submit("submit_batch_delete", names).result(60)
        except Exception as e:  # noqa: BLE001 - eviction must not take the controller down
            logger.warning("aerospike L2: deleting %d chunks: %s", len(keys), e)
            return
        self._health(ok, error, names)
        self.metrics.op("delete", started, _labels(ok, error, removed, "ok", "miss"))
        gone, sizes = [], []
        with self._lock:
            for k, r in zip(keys, removed or []):
                if r and k in self._sizes:
                    gone.append(k)
                    sizes.append(self._sizes.pop(k))
        if gone:
            self._notify_keys_deleted(gone, sizes)

    def report_status(self) -> dict[str, Any]:
        native = self._engine.native
        healthy = not self._closed and not native.closed and self._connection_failures == 0
        status: dict[str, Any] = {
            "is_healthy": healthy,
            "type": TYPE_NAME,
            "implementation": "lmcache-aerospike plugin",
            "hosts": self.settings.hosts,
            "namespace": self.settings.namespace,
            "set": self.settings.set,
            "num_workers": self.settings.num_workers,
        }
        if not healthy and self._last_error:
            status["last_error"] = self._last_error
        with self._lock:
            status["locked_keys"] = len(self._locks)
        if not native.closed:
            status.update({f"engine_{k}": v for k, v in native.stats().items()})
        return status

    def close(self) -> None:
        """Idempotent. Waits for this adapter's tasks: LMCache frees their buffers
        once close() returns, and an engine other surfaces still use goes on
        running them. The last user's release cancels what is queued instead."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            inflight = list(self._inflight)
        if self._engine.users > 1:
            concurrent.futures.wait(inflight, timeout=60)
        client.release(self._engine)
        for n in self._notifiers.values():
            n.close()


def _labels(ok: bool, error: str, results: Optional[list], yes: str, no: str) -> list[str]:
    """Result labels: one per key, or the error's for the whole task."""
    if not ok:
        return [metrics.result_of(error)]
    return [yes if r else no for r in results or []]


def _bitmap(n: int, hits: list) -> Bitmap:
    bitmap = Bitmap(n)
    for i in hits:
        bitmap.set(i)
    return bitmap

