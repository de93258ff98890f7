"""LMCache's RemoteConnector plugin (spec section 4) on the C engine.

    remote_storage_plugins: ["aerospike"]
    extra_config:
      remote_storage_plugin.aerospike.module_path: lmcache_aerospike.adapter
      remote_storage_plugin.aerospike.class_name: AerospikeConnectorAdapter
      remote_storage_plugin.aerospike.hosts: "127.0.0.1:3000"

LMCache builds the adapter with no arguments and picks it by `can_parse(url)`:
`plugin://aerospike[.instance]` (the plugin mode, which reads the settings of
that instance) or `aerospike://host:port[,host:port]/namespace/set` (a
`remote_url`). No byte of a chunk passes through Python: puts send the
MemoryObj's buffer as it is, and gets are received straight into a MemoryObj
allocated from the stored metadata (a STAT, then a FILL: the extension holds a
small chunk's payload between the two, so it is read once).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Callable, List, Optional, Sequence

from lmcache.logging import init_logger
from lmcache.utils import CacheEngineKey
from lmcache.v1.exceptions import IrrecoverableException
from lmcache.v1.memory_management import MemoryObj
from lmcache.v1.storage_backend.connector import (
    ConnectorAdapter,
    ConnectorContext,
    extract_plugin_type,
)
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector

from lmcache_aerospike.lmcache_names import RemoteMetadata
from lmcache_aerospike import _native, client, logs, metrics
from lmcache_aerospike.config import Settings

logger = init_logger("lmcache_aerospike")

PLUGIN_TYPE = "aerospike"
SCHEME = "aerospike://"
PLUGIN_SCHEME = "plugin://"


class InvalidSettingsError(_native.ConfigError, IrrecoverableException):
    """A ConfigError that LMCache's RemoteBackend does not retry: settings cannot
    fix themselves, so LMCache logs it once and creates no backend. Any other
    error at construction is retried every min_reconnect_interval, since a
    server that is down, or a namespace without nsup-period, can be fixed while
    LMCache runs (remote_backend.py, init_connection)."""


def _settings(build: Callable[[], Settings]) -> Settings:
    try:
        return build()
    except _native.ConfigError as e:
        raise InvalidSettingsError(str(e)) from None


def settings_for(url: str, config: Any) -> Settings:
    """The settings of the instance `url` names: for plugin://aerospike.NAME the
    keys remote_storage_plugin.aerospike.NAME.*; for an aerospike:// URL the
    hosts, namespace and set it gives over the keys remote_storage_plugin.aerospike.*"""
    extra = getattr(config, "extra_config", None) or {}
    if url.startswith(PLUGIN_SCHEME):
        prefix = f"remote_storage_plugin.{url[len(PLUGIN_SCHEME):]}."
        return _settings(lambda: Settings.from_extra_config(extra, prefix))
    hosts, _, path = url[len(SCHEME):].partition("/")
    parts = [p for p in path.split("/") if p]
    if len(parts) > 2 or not hosts:
        raise InvalidSettingsError(f'config remote_url="{url}": expected '
                                   f"{SCHEME}host:port[,host:port...][/namespace[/set]]")
    prefix = f"remote_storage_plugin.{PLUGIN_TYPE}."
    given = {k[len(prefix):]: v for k, v in extra.items()
             if k.startswith(prefix) and "." not in k[len(prefix):]}
    given.update(zip(("hosts", "namespace", "set"), [hosts, *parts]))
    return _settings(lambda: Settings.from_dict(given, where=prefix))


class AerospikeConnectorAdapter(ConnectorAdapter):
    """Built by LMCache with no arguments (connector/__init__.py,
    _remote_adapters_plugin_launcher)."""

    def __init__(self) -> None:
        super().__init__(SCHEME)

    def can_parse(self, url: str) -> bool:
        if url.startswith(PLUGIN_SCHEME):
            return extract_plugin_type(url[len(PLUGIN_SCHEME):]) == PLUGIN_TYPE
        return url.startswith(SCHEME)

    def create_connector(self, context: ConnectorContext) -> RemoteConnector:
        # The backend's config is the one LMCache's own adapters read; a scheduler
        # has a stand-in backend without one (SafeLocalCPUBackend).
        backend = context.local_cpu_backend
        config = getattr(backend, "config", None) or context.config
        metadata = getattr(backend, "metadata", None) or context.metadata
        settings = settings_for(context.url, config)
        return AerospikeRemoteConnector(config, metadata, backend, context.loop, settings)


class AerospikeRemoteConnector(RemoteConnector):
    """Every method of spec 4.4. Async methods complete from the engine's
    eventfd on the loop; sync methods block the calling thread (never the
    loop's) with the GIL released. Misses, timeouts of reads and records that
    fail validation are None; other errors raise typed `_native.Error`s."""

    def __init__(self, config: Any, metadata: Any, local_cpu_backend: Any,
                 loop: asyncio.AbstractEventLoop, settings: Settings) -> None:
        super().__init__(config, metadata)
        self.local_cpu_backend = local_cpu_backend
        self.loop = loop
        self.settings = settings
        self.serde = getattr(config, "remote_serde", None)
        # The engine discovers the server's limits as it opens (spec 4.4.0):
        # LMCache's RemoteBackend never calls post_init().
        self.engine = client.acquire(settings)
        self.engine.attach(loop)
        self.native = self.engine.native
        self.metrics = metrics.prometheus(settings.metrics)
        self._closed = False
        limits = self.native.limits()
        logger.info("aerospike connector %s: %s/%s, segments of %d bytes (cap %d from %s)",
                    settings.hosts, settings.namespace, settings.set,
                    limits["target_segment_bytes"], limits["server_cap"], limits["cap_source"])

    async def _run(self, method: str, names: Sequence[str], *columns: Sequence[Any],
                   per_key: Optional[dict[str, Sequence[Any]]] = None,
                   **kwargs: Any) -> tuple[bool, str, Optional[list]]:
        """One engine op per batch_max_in_flight keys, side by side: `columns`
        (positional) and `per_key` (keywords) hold one entry per name and are cut
        with them. The per-key results in order, or the first error."""
        step, per_key = self.settings.batch_max_in_flight, per_key or {}
        parts = await asyncio.gather(*(
            self.engine.run(method, list(names[i:i + step]),
                            *(list(c[i:i + step]) for c in columns),
                            **{k: list(v[i:i + step]) for k, v in per_key.items()}, **kwargs)
            for i in range(0, len(names), step)))
        for ok, error, _ in parts:
            if not ok:
                return False, self._redact(error, names), None
        return True, "", [r for _, _, found in parts for r in found]

    def _redact(self, text: str, names: Sequence[str]) -> str:
        """An engine error without the keys it names (spec 4.8: logs name records
        by digest, and LMCache logs what we raise)."""
        return logs.redact(text, self.settings.set, names)

    @contextlib.contextmanager
    def _blocking(self, names: Sequence[str]) -> Any:
        """A blocking call's error, raised again without the keys it names."""
        try:
            yield
        except _native.Error as e:
            raise _native.error_from(f"{e.name}: {self._redact(str(e), names)}") from None

    def _named(self, name: str) -> str:
        return logs.chunk(self.settings.set, name)

    # -- lookups -----------------------------------------------------------------

    async def exists(self, key: CacheEngineKey) -> bool:
        with self.metrics.timed("exists") as t:
            ok, error, found = await self._run("submit_batch_exists", [key.to_string()])
            _raise_unless(ok, error)
            t.results = _hits(found)
        return bool(found[0])

    def exists_sync(self, key: CacheEngineKey) -> bool:
        with self.metrics.timed("exists") as t, self._blocking([key.to_string()]):
            found = self.native.exists(key.to_string())
            t.results = _hits([found])
        return found

    def support_batched_contains(self) -> bool:
        return True

    def batched_contains(self, keys: List[CacheEngineKey]) -> int:
        names = [k.to_string() for k in keys]
        with self.metrics.timed("batched_contains") as t, self._blocking(names):
            count = self.native.prefix(names)
            t.results = _prefix_hits(count, len(keys))
        return count

    def support_batched_async_contains(self) -> bool:
        return True

    async def batched_async_contains(self, lookup_id: str, keys: List[CacheEngineKey],
                                     pin: bool = False) -> int:
        names = [k.to_string() for k in keys]
        with self.metrics.timed("batched_async_contains") as t:
            ok, error, found = await self._run("submit_batch_prefix", names)
            _raise_unless(ok, error)
            count = _leading(found)
            t.results = _prefix_hits(count, len(keys))
        if pin and count:
            # The hits are about to be loaded: their TTL starts again, so they
            # cannot expire in between (spec 4.4.8's later phase).
            await self._run("submit_batch_touch", names[:count])
        return count

    # -- gets ----------------------------------------------------------------------

    def _alloc(self, shapes: Any, dtypes: Any, fmt: Any) -> Optional[MemoryObj]:
        # This runs on the event loop, which also completes the loads and stores
        # that free memory: waiting here for memory (busy_loop) could wait forever.
        # Full memory is a miss instead (spec 4.4.3: LMCache decides to retry).
        return self.local_cpu_backend.allocate(shapes, dtypes, fmt, busy_loop=False)

    def _allocate(self, key: str, pending: Any) -> Optional[MemoryObj]:
        """A MemoryObj for `pending` from its md (save_chunk_meta), or a full chunk
        reshaped after the read; None when LMCache has no memory (a miss) or the
        record cannot be this LMCache's chunk (foreign or corrupt: a miss too)."""
        mine = self.serde if isinstance(self.serde, str) else ""
        if pending.serde not in ("", mine):
            # RemoteBackend would decode it with its own serde: a wrong chunk.
            logger.warning("aerospike %s: stored with serde %r, this LMCache uses %r; a miss",
                           self._named(key), pending.serde, mine)
            return None
        if self.save_chunk_meta:
            try:
                rm = RemoteMetadata.deserialize(pending.md)
                # Checked before allocating: a corrupt md must not make LMCache evict
                # its local cache for a chunk that cannot be, nor leave stale bytes
                # in the tail of one larger than the record.
                if not rm.length == _described_bytes(rm) == pending.nbytes:
                    raise ValueError(f"md says {rm.length} bytes, its shapes hold "
                                     f"{_described_bytes(rm)}, the record {pending.nbytes}")
            except Exception as e:  # noqa: BLE001 - the md is untrusted input
                logger.warning("aerospike %s: unusable md (%s); a miss", self._named(key), e)
                return None
            obj = self._alloc(rm.shapes, rm.dtypes, rm.fmt)
        else:
            n = pending.nbytes
            if n == 0 or n > self.full_chunk_size_bytes or n % self.single_token_size:
                logger.warning("aerospike %s: %d bytes cannot be a chunk of %d-byte tokens "
                               "(at most %d); a miss", self._named(key), n, self.single_token_size,
                               self.full_chunk_size_bytes)
                return None
            obj = self._alloc(self.meta_shapes, self.meta_dtypes, self.meta_fmt)
        if obj is not None and len(obj.byte_array) < pending.nbytes:  # no md: a full chunk
            logger.warning("aerospike %s: md shapes hold %d bytes, record %d; a miss",
                           self._named(key), len(obj.byte_array), pending.nbytes)
            obj.ref_count_down()
            return None
        return obj

    async def _get_many(self, keys: List[CacheEngineKey], op: str,
                        prefix_only: bool = False) -> List[Optional[MemoryObj]]:
        started = time.perf_counter()
        try:
            objs = await self._read(keys, prefix_only)
        except _native.Error as e:
            self.metrics.op(op, started, [metrics.result_of(f"{e.name}:")])
            raise
        self.metrics.op(op, started, _hits(objs) if objs is not None else ["timeout"])
        return objs if objs is not None else [None] * len(keys)

    async def _read(self, keys: List[CacheEngineKey],
                    prefix_only: bool) -> Optional[List[Optional[MemoryObj]]]:
        """STAT every key, allocate for the hits (only the leading ones when
        `prefix_only`), FILL them. None when the reads timed out: misses (spec
        4.4.3)."""
        names = [k.to_string() for k in keys]
        ok, error, pendings = await self._run("submit_batch_stat", names)
        if not ok and _native.error_from(error).status == _native.STATUS_ETIMEOUT:
            logger.warning("aerospike get of %d chunks: %s; misses", len(names), error)
            return None
        _raise_unless(ok, error)
        if prefix_only:
            pendings = pendings[:_leading(pendings)]
        objs: list = [None] * len(names)
        for i, p in enumerate(pendings):
            if p is not None:
                objs[i] = self._allocate(names[i], p)
                if objs[i] is None and prefix_only:
                    break  # nothing after a miss is kept
        todo = [i for i, o in enumerate(objs) if o is not None]
        if todo:
            await self._fill(names, pendings, objs, todo)
        return objs

    async def _fill(self, names: list, pendings: list, objs: list, todo: list) -> None:
        step = self.settings.batch_max_in_flight
        try:
            await asyncio.gather(*(self._fill_part(names, pendings, objs, todo[i:i + step])
                                   for i in range(0, len(todo), step)))
        except asyncio.CancelledError:
            # Parts still in the engine took their MemoryObjs (see _fill_part);
            # what is left came from parts that finished, or never started, and
            # nobody will receive it now.
            for i in todo:
                if objs[i] is not None:
                    objs[i].ref_count_down()
                    objs[i] = None
            raise

    async def _fill_part(self, names: list, pendings: list, objs: list, todo: list) -> None:
        future = self.engine.submit("submit_batch_fill", [names[i] for i in todo],
                                    [pendings[i] for i in todo],
                                    [objs[i].byte_array for i in todo])
        try:
            ok, error, placed = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            # LMCache cancels a get that outlives blocking_timeout_secs. The
            # workers may still be writing into these MemoryObjs: hand them
            # back only once the engine has let go of the buffers.
            held = [objs[i] for i in todo]
            for i in todo:
                objs[i] = None  # theirs to release now, not _fill's
            future.add_done_callback(lambda _: [o.ref_count_down() for o in held])
            raise
        if not ok:
            logger.warning("aerospike get of %d chunks: %s; misses", len(todo),
                           self._redact(error, [names[i] for i in todo]))
        for i, hit in zip(todo, placed if ok else [False] * len(todo)):
            if not hit:
                objs[i].ref_count_down()
                objs[i] = None
            elif not self.save_chunk_meta:
                objs[i] = self.reshape_partial_chunk(objs[i], pendings[i].nbytes)

    async def get(self, key: CacheEngineKey) -> Optional[MemoryObj]:
        return (await self._get_many([key], "get"))[0]

    def support_batched_get(self) -> bool:
        return True

    async def batched_get(self, keys: List[CacheEngineKey]) -> List[Optional[MemoryObj]]:
        return await self._get_many(keys, "batched_get")

    def support_batched_get_non_blocking(self) -> bool:
        return True

    async def batched_get_non_blocking(self, lookup_id: str,
                                       keys: List[CacheEngineKey]) -> List[MemoryObj]:
        """The consecutive hits from the first key (base_connector's contract).
        Only that prefix is allocated and read; a hit after a miss never is."""
        try:
            objs = await self._get_many(keys, "batched_get_non_blocking", prefix_only=True)
        except _native.Error as e:
            logger.warning("aerospike batched get %s: %s", lookup_id, e)
            return []
        count = _leading(objs)
        for obj in objs[count:]:
            if obj is not None:  # a FILL that missed before a later hit
                obj.ref_count_down()
        return objs[:count]

    # -- puts ------------------------------------------------------------------------

    def _md(self, obj: MemoryObj) -> Optional[bytes]:
        """RemoteMetadata as fs_connector.py writes it: the shapes of this object
        (a cachegen/kivi blob's differ from the full chunk's). A chunk trimmed by
        reshape_partial_chunk keeps its full `shapes` and only its `meta.shape`
        says what it holds (base_connector.py:132): that one is stored."""
        shapes, dtypes = obj.get_shapes(), obj.get_dtypes()
        rm = RemoteMetadata(len(obj.byte_array), shapes, dtypes, obj.get_memory_format())
        if len(shapes) == 1 and _described_bytes(rm) != rm.length:
            rm.shapes = [obj.meta.shape]
        return rm.serialize()

    async def _put_many(self, keys: List[CacheEngineKey], objs: List[MemoryObj],
                        op: str) -> None:
        """Never drops the caller's references: LMCache's RemoteBackend owns them."""
        kwargs: dict[str, Any] = {}
        if self.save_chunk_meta:
            kwargs["per_key"] = {"mds": [self._md(o) for o in objs]}
        if isinstance(self.serde, str):
            kwargs["serde"] = self.serde
        views = [o.byte_array for o in objs]
        self.metrics.in_flight(len(views))
        try:
            with self.metrics.timed(op) as t:
                ok, error, stored = await self._run("submit_batch_set",
                                                    [k.to_string() for k in keys], views, **kwargs)
                if not ok and metrics.dropped(error):
                    # A full or overloaded tier drops stores; LMCache must not see
                    # an error for each (the engine counts them and warns).
                    t.results = [metrics.result_of(error)]
                    return
                _raise_unless(ok, error)
                t.results = ["ok"] * len(keys)
        finally:
            self.metrics.in_flight(-len(views))
        if not self.native.closed:  # plan() needs an open engine
            self.metrics.segments(self.native.plan(len(v)) for v in views)

    async def put(self, key: CacheEngineKey, memory_obj: MemoryObj) -> None:
        await self._put_many([key], [memory_obj], "put")

    def support_batched_put(self) -> bool:
        return True

    async def batched_put(self, keys: List[CacheEngineKey],
                          memory_objs: List[MemoryObj]) -> None:
        await self._put_many(keys, memory_objs, "batched_put")

    # -- the rest ----------------------------------------------------------------------

    def remove_sync(self, key: CacheEngineKey) -> bool:
        with self.metrics.timed("remove") as t, self._blocking([key.to_string()]):
            removed = self.native.remove(key.to_string())
            t.results = ["ok" if removed else "miss"]
        return removed

    async def list(self) -> List[str]:
        if not self.settings.enable_list:
            logger.info("list disabled by default (set extra_config "
                        "remote_storage_plugin.aerospike.enable_list: true to enable an "
                        "expensive scan)")
            return []
        keys, unnamed = await asyncio.get_running_loop().run_in_executor(
            None, self.native.list_keys)
        if unnamed:
            logger.warning("list: %d chunks were stored without their key (send_key: "
                           "false) and cannot be listed", unnamed)
        return keys

    def support_ping(self) -> bool:
        return True

    async def ping(self) -> int:
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.native.ping)
            return 0
        except _native.Error as e:
            logger.warning("aerospike ping %s: %s", self.settings.hosts, e)
            return 1

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        client.release(self.engine)

    def __repr__(self) -> str:
        return (f"<AerospikeRemoteConnector {self.settings.hosts} "
                f"{self.settings.namespace}/{self.settings.set}>")


def _described_bytes(rm: RemoteMetadata) -> int:
    """The bytes a RemoteMetadata's shapes and dtypes hold; a binary blob's
    (dtype None) first dimension is its length."""
    total = 0
    for shape, dtype in zip(rm.shapes, rm.dtypes, strict=True):
        total += shape[0] if dtype is None else shape.numel() * dtype.itemsize
    return total


def _hits(results: Sequence[Any]) -> list[str]:
    return ["hit" if r else "miss" for r in results]


def _prefix_hits(count: int, n: int) -> list[str]:
    return ["hit"] * count + ["miss"] * (n - count)


def _leading(results: Sequence[Any]) -> int:
    """How many results lead before the first miss (False or None)."""
    return next((i for i, r in enumerate(results) if not r), len(results))


def _raise_unless(ok: bool, error: str) -> None:
    """A batch's error ("ETIMEOUT: ...") as the typed exception a blocking call
    would raise."""
    if not ok:
        raise _native.error_from(error)
