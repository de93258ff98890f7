"""LMCache's storage plugin (spec 5.2) on the C engine.

    storage_plugins: ["aerospike"]
    extra_config:
      storage_plugin.aerospike.module_path: lmcache_aerospike.storage
      storage_plugin.aerospike.class_name: AerospikeStoragePlugin
      storage_plugin.aerospike.hosts: "127.0.0.1:3000"

Facts of LMCache 0.5.6 this rests on (lmcache/v1/...):

- There is no entry-point group (spec 5.2's `lmcache.storage_plugins`):
  `storage_plugin_launcher` imports `storage_plugin.<name>.module_path` and builds
  `class_name(config=, dst_device=, metadata=, local_cpu_backend=, loop=)`
  (storage_backend/__init__.py:67-101) for each name of `storage_plugins`, a
  `StoragePluginInterface` (storage_backend/abstract_backend.py:424-456). It passes
  no name, so the plugin finds its own: the one name whose module_path/class_name
  resolve to this class (`_own_name`). Two names for one class cannot be told apart
  (the launcher iterates a set, __init__.py:55): that is a ConfigError; a one-line
  subclass per instance gives each its own class_name.
- The launcher catches every error of the constructor, logs "Failed to create backend
  <name>: <error>" and goes on without the plugin (__init__.py:107-108). Bad settings
  raise `_native.ConfigError` naming the full key `storage_plugin.<name>.<key>`.
- Puts: the storage manager drops its reference right after
  `batched_submit_put_task` returns (storage_backend/storage_manager.py:431-435), so
  a backend takes its own for the write and drops it when done, as LocalDiskBackend
  does (local_disk_backend.py:426, :712) and RemoteBackend through its serializer
  (naive_serde.py:11-13, connector/instrumented_connector.py:189). Ours is dropped
  when the engine has let go of the buffer (its future resolves: client.py).
- Pins: LMCache pins at lookup (`batched_contains(pin=True)`,
  storage_manager.py:1001; `batched_async_contains(pin=True)`, :733) and unpins
  through `lookup_unpin` for synchronous lookups only (cache_engine.py:1573-1577);
  after an asynchronous lookup only the rounded-off tail is unpinned
  (storage_manager.py:743-749). A never-expire flag (the engine's pin) would
  stay forever when its unpin never comes (that path, a crash), and Aerospike
  keeps no count per holder: one process's unpin would end another's pin. So
  pinning restarts the record's TTL (a touch, as the RemoteConnector's
  `batched_async_contains(pin=True)`, remote.py): what a pin guards against,
  expiry between lookup and load, cannot happen, and nothing is held, so `unpin`
  has nothing to release (as RemoteBackend's, remote_backend.py:582-594).
- Gets allocate from the LocalCPUBackend that LMCache passes, as RemoteBackend
  does (`get_allocator_backend`, remote_backend.py:609-614).

Keys are `CacheEngineKey.to_string()` and records carry `RemoteMetadata`, as the
RemoteConnector plugin writes them: the two surfaces read each other's chunks. This
class is the glue of `StoragePluginInterface` around that connector
(`AerospikeRemoteConnector`, its gets and lookups); puts go to the engine directly
so that a reference is dropped exactly when the engine is done with the buffer.

Synchronous methods wait on LMCache's event loop (as RemoteBackend's do): call them
from LMCache's threads, never from the loop's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import threading
import time
from typing import Any, Callable, Coroutine, List, Optional, Sequence

from lmcache.logging import init_logger
from lmcache.utils import CacheEngineKey
from lmcache.v1.memory_management import MemoryObj
from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface

from lmcache_aerospike import client, metrics
from lmcache_aerospike.config import Settings, _error
from lmcache_aerospike.remote import AerospikeRemoteConnector

logger = init_logger("lmcache_aerospike")

# Records we write hold a MemoryObj's bytes as they are; "" is a record written
# without a tag (the RemoteConnector under a remote_serde that is not a string).
SERDE = "naive"
RAW_SERDES = ("", SERDE)
# How long close() waits for this plugin's puts before it lets go of the engine.
CLOSE_WAIT_S = 30.0


def _builds(extra: Any, name: str, cls: type) -> bool:
    """Whether storage_plugin.<name> names `cls`, as the launcher resolves it."""
    module_path = extra.get(f"storage_plugin.{name}.module_path")
    class_name = extra.get(f"storage_plugin.{name}.class_name")
    if not module_path or not class_name:
        return False
    try:
        return getattr(importlib.import_module(module_path), class_name, None) is cls
    except Exception:  # noqa: BLE001 - another plugin's broken module is not ours
        return False


def _own_name(config: Any, cls: type) -> str:
    """The name of `storage_plugins` that builds `cls`: LMCache passes none."""
    extra = getattr(config, "extra_config", None) or {}
    listed = list(getattr(config, "storage_plugins", None) or [])
    names = [n for n in listed if _builds(extra, n, cls)]
    if len(names) == 1:
        return names[0]
    where = f"storage_plugins {listed}"
    if not names:
        raise _error(f"config {where}: no name whose storage_plugin.<name>.module_path "
                     f"and class_name are {cls.__module__}.{cls.__name__}")
    raise _error(f"config {where}: {names} all name {cls.__name__}, and LMCache does "
                 f"not tell an instance its name; give each a subclass of its own")


class _Connector(AerospikeRemoteConnector):
    """The RemoteConnector's gets and lookups, for records of raw MemoryObj bytes:
    the storage plugin has no serializer, so a record encoded otherwise (the
    RemoteConnector under remote_serde cachegen) is a miss, not a wrong chunk."""

    def _allocate(self, key: str, pending: Any) -> Optional[MemoryObj]:
        if pending.serde not in RAW_SERDES:
            logger.warning("aerospike %s: stored with serde %s; a miss", self._named(key),
                           pending.serde)
            return None
        return super()._allocate(key, pending)


class AerospikeStoragePlugin(StoragePluginInterface):
    """Every method of StorageBackendInterface. Misses, timeouts of reads and
    records that fail validation are misses; other errors are logged and read as
    misses (gets, lookups) or failures (remove, pin), as RemoteBackend does."""

    def __init__(self, dst_device: str = "cpu", config: Any = None, metadata: Any = None,
                 local_cpu_backend: Any = None,
                 loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        super().__init__(dst_device=dst_device, config=config, metadata=metadata,
                         local_cpu_backend=local_cpu_backend, loop=loop)
        self.name = _own_name(config, type(self))
        self.settings = Settings.from_extra_config(config.extra_config,
                                                   f"storage_plugin.{self.name}.")
        if loop is None:
            raise ValueError(f"storage plugin {self.name}: needs LMCache's event loop")
        self.conn = _Connector(config, metadata, local_cpu_backend, loop, self.settings)
        self.engine = self.conn.engine
        self._lock = threading.Lock()
        # Notified when a put's completion has let go of its buffers: a future is
        # done before its done-callbacks run (concurrent.futures), so waiting on the
        # futures alone let close() return under a callback still holding one.
        self._settled = threading.Condition(self._lock)
        self._put_keys: set[CacheEngineKey] = set()
        self._puts: set[concurrent.futures.Future] = set()
        self._closed = False
        logger.info("aerospike storage plugin %s: %s %s/%s", self.name, self.settings.hosts,
                    self.settings.namespace, self.settings.set)

    def __str__(self) -> str:
        return self.name

    # -- waiting on the loop ------------------------------------------------------

    def _wait(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Runs `coro` on LMCache's loop and waits blocking_timeout_secs. A get
        canceled here hands its MemoryObjs back once the engine lets go of them
        (remote.py, _fill_part)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(self.config.blocking_timeout_secs)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def _quietly(self, what: str, coro: Coroutine[Any, Any, Any], default: Any) -> Any:
        try:
            return self._wait(coro)
        except Exception as e:  # noqa: BLE001 - a lookup or get that fails is a miss
            logger.warning("aerospike storage plugin %s: %s: %s", self.name, what, e)
            return default

    def _on_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    # -- lookups ------------------------------------------------------------------

    def contains(self, key: CacheEngineKey, pin: bool = False) -> bool:
        return self.batched_contains([key], pin) == 1

    def batched_contains(self, keys: List[CacheEngineKey], pin: bool = False) -> int:
        """The leading hits; with `pin` their TTLs restart (see the module's doc)."""
        return self._quietly("contains", self.conn.batched_async_contains("", keys, pin), 0)

    async def batched_async_contains(self, lookup_id: str, keys: List[CacheEngineKey],
                                     pin: bool = False) -> int:
        try:
            return await self.conn.batched_async_contains(lookup_id, keys, pin)
        except Exception as e:  # noqa: BLE001 - as RemoteBackend: a failed lookup is 0
            logger.warning("aerospike storage plugin %s: lookup %s: %s", self.name, lookup_id, e)
            return 0

    def pin(self, key: CacheEngineKey) -> bool:
        """Restarts the record's TTL; False when there is no record."""
        try:
            with self.conn._blocking([key.to_string()]):
                return self.conn.native.touch(key.to_string())
        except Exception as e:  # noqa: BLE001 - the interface reports failure as False
            logger.warning("aerospike storage plugin %s: pin: %s", self.name, e)
            return False

    def unpin(self, key: CacheEngineKey) -> bool:
        return True  # a pin holds nothing (see the module's doc)

    def touch_cache(self) -> None:
        """The server keeps its own expiry: no eviction policy here to update (the
        interface's default raises; storage_manager.py:1042-1045 calls it only on
        the local backends today)."""

    # -- gets ---------------------------------------------------------------------

    def get_blocking(self, key: CacheEngineKey) -> Optional[MemoryObj]:
        return self.batched_get_blocking([key])[0]

    def batched_get_blocking(self, keys: List[CacheEngineKey]) -> List[Optional[MemoryObj]]:
        if self.local_cpu_backend is None:  # the scheduler has no memory to fill
            return [None] * len(keys)
        return self._quietly("get", self.conn.batched_get(keys), [None] * len(keys))

    def get_non_blocking(self, key: CacheEngineKey,
                         location: Optional[str] = None) -> Optional[concurrent.futures.Future]:
        if self.local_cpu_backend is None:
            return None
        return asyncio.run_coroutine_threadsafe(self.conn.get(key), self.loop)

    async def batched_get_non_blocking(self, lookup_id: str, keys: List[CacheEngineKey],
                                       transfer_spec: Any = None) -> List[MemoryObj]:
        """The leading hits; nothing after the first miss is allocated or read."""
        if self.local_cpu_backend is None:
            return []
        return await self.conn.batched_get_non_blocking(lookup_id, keys)

    def get_allocator_backend(self) -> Any:
        assert self.local_cpu_backend is not None, "no LocalCPUBackend (scheduler role)"
        return self.local_cpu_backend

    # -- puts ---------------------------------------------------------------------

    def exists_in_put_tasks(self, key: CacheEngineKey) -> bool:
        with self._lock:
            return key in self._put_keys

    def submit_put_task(self, key: CacheEngineKey, memory_obj: MemoryObj,
                        on_complete_callback: Optional[Callable[[CacheEngineKey], None]] = None
                        ) -> Optional[concurrent.futures.Future]:
        futures = self.batched_submit_put_task([key], [memory_obj],
                                               on_complete_callback=on_complete_callback)
        return futures[0] if futures else None

    def batched_submit_put_task(self, keys: Sequence[CacheEngineKey], objs: List[MemoryObj],
                                transfer_spec: Any = None,
                                on_complete_callback: Optional[Callable[[CacheEngineKey],
                                                                        None]] = None
                                ) -> Optional[List[concurrent.futures.Future]]:
        """One engine op per batch_max_in_flight chunks; a key already being
        written is skipped. The futures resolve to (ok, error, results)."""
        keys, objs = self._claim(keys, objs)
        step = self.settings.batch_max_in_flight
        futures = [self._put_part(keys[i:i + step], objs[i:i + step], on_complete_callback)
                   for i in range(0, len(keys), step)]
        return futures or None

    def _claim(self, keys: Sequence[CacheEngineKey],
               objs: List[MemoryObj]) -> tuple[list, list]:
        """The chunks not being written yet, now marked as being written."""
        mine: tuple[list, list] = ([], [])
        with self._lock:
            for key, obj in zip(keys, objs):
                if key not in self._put_keys:
                    self._put_keys.add(key)
                    mine[0].append(key)
                    mine[1].append(obj)
        return mine

    def _put_part(self, keys: list, objs: list,
                  on_complete: Optional[Callable[[CacheEngineKey], None]]
                  ) -> concurrent.futures.Future:
        # LMCache drops its reference when we return: ours keeps the buffer alive
        # until the engine's future resolves, which is when the workers let go of it
        # (also when the engine is closed under them).
        for obj in objs:
            obj.ref_count_up()
        started = time.perf_counter()
        self.conn.metrics.in_flight(len(objs))
        kwargs: dict[str, Any] = {"serde": SERDE}
        if self.conn.save_chunk_meta:
            kwargs["mds"] = [self.conn._md(o) for o in objs]
        try:
            future = self.engine.submit("submit_batch_set", [k.to_string() for k in keys],
                                        [o.byte_array for o in objs], **kwargs)
        except Exception as e:  # noqa: BLE001 - never accepted: the buffers are free now
            future = concurrent.futures.Future()
            future.set_result((False, str(e), None))
        with self._lock:
            self._puts.add(future)
        future.add_done_callback(lambda f: self._put_done(keys, objs, on_complete, f, started))
        return future

    def _put_done(self, keys: list, objs: list,
                  on_complete: Optional[Callable[[CacheEngineKey], None]],
                  future: concurrent.futures.Future, started: float) -> None:
        ok, error, _ = future.result()
        sizes = [len(o.byte_array) for o in objs]
        for obj in objs:
            obj.ref_count_down()
        self.conn.metrics.in_flight(-len(objs))
        self.conn.metrics.op("put", started, ["ok"] * len(keys) if ok
                             else [metrics.result_of(error)])
        if ok and not self.conn.native.closed:
            self.conn.metrics.segments(self.conn.native.plan(n) for n in sizes)
        with self._lock:
            self._put_keys.difference_update(keys)
            self._puts.discard(future)
            self._settled.notify_all()
        if not ok:
            if not metrics.dropped(error):  # drops: the engine counts them and warns
                logger.warning("aerospike storage plugin %s: put of %d chunks: %s", self.name,
                               len(keys), self.conn._redact(error, [k.to_string() for k in keys]))
            return
        for key in keys if on_complete is not None else ():
            try:
                on_complete(key)
            except Exception as e:  # noqa: BLE001 - the interface says: caught and logged
                logger.warning("on_complete_callback failed for %s: %s",
                               self.conn._named(key.to_string()), e)

    # -- the rest -------------------------------------------------------------------

    def remove(self, key: CacheEngineKey, force: bool = True) -> bool:
        try:
            return self.conn.remove_sync(key)
        except Exception as e:  # noqa: BLE001 - the interface reports failure as False
            logger.warning("aerospike storage plugin %s: remove: %s", self.name, e)
            return False

    def close(self) -> None:
        """Waits for this plugin's puts (LMCache frees their memory once close()
        returns), then lets go of the engine; the last user closes it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            puts = set(self._puts)
            # Their completions are drained on the loop: waiting on it would stall.
            if puts and self.loop.is_running() and not self._on_loop():
                self._settled.wait_for(lambda: not puts & self._puts, timeout=CLOSE_WAIT_S)
        client.release(self.engine)
