"""SGLang's HiCache storage backend (its L3 tier) on the engine.

    python -m sglang.launch_server ... --enable-hierarchical-cache \\
        --hicache-storage-backend dynamic \\
        --hicache-storage-backend-extra-config '{"backend_name": "aerospike",
            "module_path": "lmcache_aerospike.hicache",
            "class_name": "AerospikeHiCacheStorage",
            "interface_v1": 1, "hosts": "127.0.0.1:3000"}'

Every other key of the extra config is a setting of `Settings` (docs/surfaces.md,
"Settings"), with the same environment fallbacks as on LMCache's surfaces.

Facts of sglang 0.5.23 this rests on (python/sglang/srt/...):

- `StorageBackendFactory` builds a `dynamic` backend as `cls(storage_config,
  kwargs)` from the extra config's module_path and class_name, after checking it
  subclasses `HiCacheStorage` (mem_cache/storage/backend_factory.py:142-165). The
  controller then calls `register_mem_pool_host(host_pool)` and
  `on_host_pools_registered()` (managers/cache_controller.py:614-619).
- The controller uses the zero-copy calls `batch_get_v1` / `batch_set_v1` (keys
  and host-pool indices) only when the extra config has a true `interface_v1`
  (cache_controller.py:650-667); without it, it copies pages through
  `batch_get` / `batch_set` (:1130-1153, :1403-1408). `batch_exists` gives the
  leading run of stored pages (:1308-1330); batches are at most 128 pages
  (mem_cache/hicache_storage.py:24).
- Backups of MLA models are written by the storage writer rank alone
  (`HiCacheStorageConfig.is_storage_writer`, hicache_storage.py:68-74; the
  controller's `backup_skip`, cache_controller.py:744-746).
- Hybrid models' extra pools (Mamba, SWA, draft) go through the v2 calls
  (mem_cache/hybrid_cache/hybrid_cache_controller.py:1438, :1651, :1711), which
  this backend does not implement: it refuses such pools when they register.

Records. A page is stored as the host pool's regions of it, one chunk each, in
the order and sizes `get_page_buffer_meta` gives (MHA page_first: K, then V;
MLA page_first: one region), read and written in place: the engine moves bytes
between the socket and the pool, Python only slices a memoryview. The copy path
stores the flat page SGLang hands over as one chunk. Chunk keys:

    <model>@sglang@<layout>-<dtype>@<shard>@<page hash>@<region, or "flat">

The model is SGLang's storage model name ("@" written "%40"); the layout and
dtype name the page's byte order; the shard is tp<rank>of<size> (with
tp_lcm_size and split heads, the head group's rank in the lcm), "mla" for
rank-replicated MLA KV, and pp/cp coordinates as SGLang's own `file` backend
keys them (hicache_storage.py:745-771). So `lmcache-aerospike ls --model`,
`inspect` and `rm` find the pages, and two deployments share pages exactly when
their bytes are interchangeable.

Threads: SGLang calls from its prefetch, backup and scheduler threads at once.
Each call blocks its thread until the engine has let go of every buffer (never
sooner: a page the engine still writes into must not be reused), the GIL
released; the engine's timeouts bound the wait. Misses and refused stores are
False, never exceptions.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence

import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig

from lmcache_aerospike import _native, client, logs, metrics
from lmcache_aerospike.config import ConfigError, Settings, _error

logger = logging.getLogger("lmcache_aerospike.hicache")

# Keys of the extra config that SGLang reads itself (backend_factory.py:142-151,
# cache_controller.py:664); the controller pops its prefetch_* keys and tp_lcm_size
# before the backend sees the dict (hybrid_cache_controller.py:404-411,
# cache_controller.py:777).
SGLANG_KEYS = frozenset({"backend_name", "module_path", "class_name", "interface_v1"})
WHERE = "hicache-storage-backend-extra-config."
KV_POOL = "kv"  # PoolName.KV (hicache_storage.py:88): the pool v1 serves


def _memoryview(tensor: torch.Tensor) -> memoryview:
    """A flat, writable byte view of a contiguous CPU tensor's own memory (never of
    a copy: a read into a copy would be lost)."""
    if tensor.device.type != "cpu" or not tensor.is_contiguous():
        raise ValueError(f"a {tensor.device.type} tensor of strides {tensor.stride()}: "
                         "expected contiguous CPU memory")
    return memoryview(tensor.view(-1).view(torch.uint8).numpy())


def _page_ok(results: Sequence[bool], n_pages: int, parts: int) -> List[bool]:
    """Per page: all of its regions succeeded."""
    return [all(results[i * parts:(i + 1) * parts]) for i in range(n_pages)]


@dataclass
class _Buffer:
    """One host tensor of the pool: where it lies, and a view to slice."""
    base: int
    nbytes: int
    view: memoryview


@dataclass
class _Layout:
    """What a registered host pool means for keys and regions."""
    page_size: int
    parts: int                 # regions per page (chunks per page on the v1 path)
    templates: List[tuple]     # per region: (text before the page hash, after it)
    flat: tuple                # the copy path's page: (before, after)
    buffers: List[_Buffer] = field(default_factory=list)


def _pool_buffers(pool: Any) -> List[_Buffer]:
    """The host tensors of a pool (K and V of an MHA pool, as SGLang's Mooncake
    backend registers them), each as a byte view to slice."""
    tensors = (pool.get_hybrid_pool_buffer() if hasattr(pool, "get_hybrid_pool_buffer")
               else [getattr(pool, "kv_buffer", None)])
    buffers = []
    for t in (t for t in tensors if t is not None):
        try:
            view = _memoryview(t)
        except ValueError as e:
            raise _error(f"config hicache host pool {type(pool).__name__}: {e}") from None
        buffers.append(_Buffer(t.data_ptr(), view.nbytes, view))
    if not buffers:
        raise _error(f"config hicache host pool {type(pool).__name__}: no host KV buffer "
                     "(a logical anchor pool needs HiCache's v2 calls, which this backend "
                     "does not implement)")
    return buffers


class AerospikeHiCacheStorage(HiCacheStorage):
    """`HiCacheStorage` on a shared engine. Thread-safe."""

    def __init__(self, storage_config: HiCacheStorageConfig,
                 kwargs: Optional[dict] = None) -> None:
        # kwargs: what SGLang's factory passes on to a dynamic backend (empty).
        extra = dict(storage_config.extra_config or {})
        settings = Settings.from_dict({k: v for k, v in extra.items()
                                       if k not in SGLANG_KEYS}, where=WHERE)
        if storage_config.dcp_size > 1:
            # SGLang refuses it before building a dynamic backend
            # (cache_controller.py:560-563); a direct caller is told the same.
            raise _error(f"config dcp_size={storage_config.dcp_size}: decode context "
                         "parallelism is not supported (SGLang allows it with its file "
                         "and Mooncake backends only)")
        self.config = storage_config
        self.settings = settings
        self.zero_copy = bool(extra.get("interface_v1", 0))  # as cache_controller.py:664
        self.metrics = metrics.prometheus(settings.metrics)
        self._layout: Optional[_Layout] = None
        self._stats_lock = threading.Lock()
        self._pgs: dict[str, list] = {"prefetch": [], "backup": []}
        self._gbps: dict[str, list] = {"prefetch": [], "backup": []}
        self._closed = False
        self._engine = client.acquire(settings)
        self._engine.attach(None)
        self.native = self._engine.native
        logger.info("aerospike HiCache backend %s: %s/%s, keys %s..., %s path",
                    settings.hosts, settings.namespace, settings.set, self._prefix(),
                    "zero-copy (interface_v1)" if self.zero_copy else "copy")

    # -- keys ----------------------------------------------------------------------

    def _model(self) -> str:
        return (self.config.model_name or "").replace("%", "%25").replace("@", "%40")

    def _prefix(self) -> str:
        return f"{self._model()}@sglang@"

    def _shard(self, tp_rank: Optional[int] = None, tp_size: Optional[int] = None) -> str:
        """This rank's coordinates in the keys: what makes its bytes its own."""
        c = self.config
        if c.is_mla_model:  # one copy of the KV for every TP rank
            shard = "mla"
        else:
            shard = f"tp{c.tp_rank if tp_rank is None else tp_rank}of" \
                    f"{c.tp_size if tp_size is None else tp_size}"
        if c.pp_size > 1:
            shard += f".pp{c.pp_rank}of{c.pp_size}"
        if c.attn_cp_size > 1:  # each CP rank holds a disjoint slice of every page
            shard += f".cp{c.attn_cp_rank}of{c.attn_cp_size}"
        return shard

    def _split(self) -> int:
        """Head groups per page when SGLang splits heads for a heterogeneous-TP fleet
        (tp_lcm_size; page_head layout only, cache_controller.py:777-788)."""
        c = self.config
        return c.tp_lcm_size // c.tp_size if c.should_split_heads else 1

    def _names(self, keys: Sequence[str], flat: bool = False) -> List[str]:
        """The chunk keys of pages, page-major (every region of page 0 first)."""
        layout = self._require_layout()
        templates = [layout.flat] if flat else layout.templates
        return [before + key + after for key in keys for before, after in templates]

    # -- the host pool -------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Learns the pool's layout (the keys' byte order), its buffers and its regions
        per page, and checks that every region of a page lies in those buffers: a
        layout this backend cannot serve fails the attach, not a later transfer."""
        super().register_mem_pool_host(mem_pool_host)
        pool = mem_pool_host
        head = f"{self._prefix()}{pool.layout}-{str(pool.dtype).removeprefix('torch.')}@"
        ptrs, sizes = self._page_meta(pool, torch.arange(pool.page_size))
        templates = self._templates(head, len(ptrs))
        if len(templates) != len(ptrs):
            raise _error(f"config hicache host pool: {len(ptrs)} regions per page, expected "
                         f"{len(templates)} for {self._split()} head groups")
        self._layout = _Layout(page_size=pool.page_size, parts=len(ptrs),
                               templates=templates, flat=(f"{head}{self._shard()}@", "@flat"),
                               buffers=_pool_buffers(pool))
        try:
            self._views(ptrs, sizes)
        except ValueError as e:
            self._layout = None
            raise _error(f"config hicache host pool layout {pool.layout}: {e}") from None

    def _templates(self, head: str, parts: int) -> List[tuple]:
        """Per region of a page, the key around its page hash."""
        split = self._split()
        if split == 1:
            return [(f"{head}{self._shard()}@", f"@{j}") for j in range(parts)]
        # SGLang's split-heads regions are K and V of each head group in turn
        # (get_split_heads_page_buffer_meta, pool_host/mha.py:769-811).
        base, lcm = self.config.tp_rank * split, self.config.tp_lcm_size
        return [(f"{head}{self._shard(base + j // 2, lcm)}@", f"@{j % 2}")
                for j in range(2 * split)]

    def on_host_pools_registered(self) -> None:
        """Refuses the extra pools of hybrid models: they need the v2 calls."""
        extra = sorted(str(n) for n in getattr(self, "registered_pools", {})
                       if str(n) != KV_POOL)
        if extra:
            raise _error(f"config hicache host pools {extra}: hybrid models' extra pools "
                         "need HiCache's v2 calls, which this backend does not implement "
                         "(models with one KV pool, MHA or MLA, are served)")

    def _require_layout(self) -> _Layout:
        if self._layout is None:
            raise RuntimeError("aerospike HiCache backend: no host pool registered "
                               "(SGLang calls register_mem_pool_host on attach)")
        return self._layout

    def _page_meta(self, pool: Any, indices: torch.Tensor) -> tuple[list, list]:
        split = self._split()
        if split > 1:
            return pool.get_split_heads_page_buffer_meta(indices, split)
        return pool.get_page_buffer_meta(indices)

    def _views(self, ptrs: Sequence[int], sizes: Sequence[int]) -> List[memoryview]:
        """Each (pointer, size) region as a slice of the pool buffer that holds it;
        a region outside every buffer is a ValueError, never a stray write."""
        buffers = self._require_layout().buffers
        views = []
        for ptr, size in zip(ptrs, sizes):
            for b in buffers:
                off = ptr - b.base
                if size > 0 and 0 <= off and off + size <= b.nbytes:
                    views.append(b.view[off:off + size])
                    break
            else:
                raise ValueError(f"region {ptr:#x}+{size} lies outside the pool's "
                                 f"{len(buffers)} host buffers")
        return views

    def _regions(self, keys: Sequence[str], host_indices: torch.Tensor
                 ) -> tuple[List[str], List[memoryview]]:
        """The chunk keys and pool regions of pages."""
        layout = self._require_layout()
        if host_indices.numel() != len(keys) * layout.page_size:
            raise ValueError(f"{host_indices.numel()} host indices for {len(keys)} pages "
                             f"of {layout.page_size} tokens")
        ptrs, sizes = self._page_meta(self.mem_pool_host, host_indices)
        if len(ptrs) != len(keys) * layout.parts:
            raise ValueError(f"{len(ptrs)} regions for {len(keys)} pages of "
                             f"{layout.parts}")
        return self._names(keys), self._views(ptrs, sizes)

    # -- the engine ----------------------------------------------------------------

    def _call(self, method: str, names: List[str], *args: Any) -> List[bool]:
        """One engine batch, waited for; per key True or False (misses and errors
        alike: an error is logged, without keys, unless it is a dropped store)."""
        try:
            ok, error, results = self._engine.submit(method, names, *args).result()
        except _native.Error as e:  # refused at submit: a closed engine, a bad key
            ok, error, results = False, f"{e.name}: {e}", None
        if not ok:
            if not metrics.dropped(error):
                logger.warning("aerospike HiCache: %s",
                               logs.redact(error, self.settings.set, names))
            return [False] * len(names)
        return [bool(r) for r in results]

    def _present(self, names: List[str]) -> List[bool]:
        return self._call("submit_batch_exists", names)

    def _store(self, names: List[str], views: List[Any]) -> List[bool]:
        """Stores the regions not stored yet (as SGLang's file and Mooncake backends
        skip a page already there: a page's bytes never change under its hash)."""
        done = self._present(names)
        todo = [i for i, there in enumerate(done) if not there]
        if todo:
            stored = self._call("submit_batch_set", [names[i] for i in todo],
                                [views[i] for i in todo])
            for i, ok in zip(todo, stored):
                done[i] = ok
        return done

    def _record(self, kind: str, pages: int, nbytes: int, started: float) -> None:
        """SGLang's storage metrics (pages and GB/s per call), when it asks for them."""
        if not self.config.enable_storage_metrics or pages == 0:
            return
        seconds = max(time.perf_counter() - started, 1e-9)
        with self._stats_lock:
            self._pgs[kind].append(pages)
            self._gbps[kind].append(nbytes / seconds / (1 << 30))

    # -- zero-copy calls (interface_v1) --------------------------------------------

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Any = None) -> List[bool]:
        """Reads pages straight into the host pool at `host_indices`."""
        return self._pages("prefetch", keys, host_indices,
                           lambda names, views: self._call("submit_batch_get", names, views))

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Any = None) -> List[bool]:
        """Writes pages straight from the host pool at `host_indices`."""
        if not self.config.is_storage_writer:
            # MLA's pages are shared by every TP rank and written by one; SGLang
            # skips the others' backups itself (cache_controller.py:744-746).
            return [True] * len(keys)
        return self._pages("backup", keys, host_indices, self._store)

    # What a prefetch and a backup are in the metrics: op, and the labels of a page
    # that succeeded and of one that did not.
    _OPS = {"prefetch": ("batched_get", "hit", "miss"), "backup": ("batched_put", "ok", "error")}

    def _pages(self, kind: str, keys: List[str], host_indices: torch.Tensor,
               io: Any) -> List[bool]:
        """Per page, whether `io(names, views)` succeeded for all of its regions."""
        if not keys:
            return []
        started = time.perf_counter()
        try:
            names, views = self._regions(keys, host_indices)
        except ValueError as e:
            logger.warning("aerospike HiCache: %s of %d pages: %s", kind, len(keys), e)
            return [False] * len(keys)
        op, yes, no = self._OPS[kind]
        with self.metrics.timed(op) as t:
            done = _page_ok(io(names, views), len(keys), len(names) // len(keys))
            t.results = [yes if d else no for d in done]
        self._record(kind, sum(done), sum(v.nbytes for v in views), started)
        return done

    # -- lookups -------------------------------------------------------------------

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        """How many pages from the first are stored whole: one batch read of every
        region's meta record (the path's own records: interface_v1's regions, or the
        copy path's flat pages)."""
        if not keys:
            return 0
        names = self._names(keys, flat=not self.zero_copy)
        per_page = len(names) // len(keys)
        with self.metrics.timed("batched_contains") as t:
            try:
                count = self.native.prefix(names) // per_page
            except _native.Error as e:
                logger.warning("aerospike HiCache: batch_exists of %d pages: %s", len(keys),
                               logs.redact(f"{e.name}: {e}", self.settings.set, names))
                count = 0
            t.results = ["hit"] * count + ["miss"] * (len(keys) - count)
        return count

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    # -- the copy path (no interface_v1) -------------------------------------------

    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> List[Optional[torch.Tensor]]:
        """Reads each flat page into its target (a contiguous CPU tensor; without
        one, a new flat page of the pool's). A target of another size is a miss: the
        engine reads only a chunk of exactly its size."""
        if not keys:
            return []
        targets = list(target_locations) if target_locations is not None else [None] * len(keys)
        if len(targets) != len(keys):
            logger.warning("aerospike HiCache: batch_get of %d pages with %d targets",
                           len(keys), len(targets))
            return [None] * len(keys)
        names = self._names(keys, flat=True)
        targets = [t if t is not None else self.mem_pool_host.get_dummy_flat_data_page()
                   for t in targets]
        views = {}
        for i, target in enumerate(targets):
            try:
                views[i] = _memoryview(target)
            except ValueError as e:
                logger.warning("aerospike HiCache: batch_get target %d: %s", i, e)
        with self.metrics.timed("batched_get") as t:
            got = self._call("submit_batch_get", [names[i] for i in views],
                             list(views.values())) if views else []
            out: List[Optional[torch.Tensor]] = [None] * len(keys)
            for i, hit in zip(views, got):
                out[i] = targets[i] if hit else None
            t.results = ["hit" if o is not None else "miss" for o in out]
        return out

    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> Optional[torch.Tensor]:
        return self.batch_get([key], [target_location])[0]

    def batch_set(self, keys: List[str], values: Optional[Any] = None,
                  target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> bool:
        """Stores each flat page as one chunk; True when every page is stored. Values
        that are not CPU tensors store nothing and are False."""
        if not keys or not self.config.is_storage_writer:  # as batch_set_v1
            return True
        if values is None or len(values) != len(keys):
            logger.warning("aerospike HiCache: batch_set of %d pages with %s values",
                           len(keys), "no" if values is None else len(values))
            return False
        try:
            views = [_memoryview(v.contiguous()) for v in values]
        except (AttributeError, ValueError) as e:
            logger.warning("aerospike HiCache: batch_set of %d pages: a value is not a CPU "
                           "tensor: %s", len(keys), e)
            return False
        with self.metrics.timed("batched_put") as t:
            stored = self._store(self._names(keys, flat=True), views)
            t.results = ["ok" if s else "error" for s in stored]
        return all(stored)

    def set(self, key: str, value: Optional[Any] = None,
            target_location: Optional[Any] = None, target_sizes: Optional[Any] = None) -> bool:
        return self.batch_set([key], [value])

    # -- operations ----------------------------------------------------------------

    def get_stats(self) -> Any:
        """SGLang's StorageMetrics (pages and GB/s per prefetch and backup since the
        last call, when SGLang enables storage metrics), with the engine's counters
        as `engine`."""
        from sglang.srt.observability.metrics_collector import StorageMetrics

        stats = StorageMetrics()
        with self._stats_lock:
            stats.prefetch_pgs.extend(self._pgs["prefetch"])
            stats.backup_pgs.extend(self._pgs["backup"])
            stats.prefetch_bandwidth.extend(self._gbps["prefetch"])
            stats.backup_bandwidth.extend(self._gbps["backup"])
            for lists in (self._pgs, self._gbps):
                for v in lists.values():
                    v.clear()
        stats.engine = {} if self.native.closed else self.native.stats()
        return stats

    def clear(self) -> bool:
        """Removes every page of this model (all layouts and shards). Needs the
        chunks' keys on the server (send_key true); otherwise nothing is removed
        and the warning says how to do it instead."""
        rows = self.native.scan()
        if any(r["key"] is None for r in rows):
            logger.warning("aerospike HiCache: clear needs send_key true (chunks do not hold "
                           "their keys); use `lmcache-aerospike rm` or a set of its own")
            return False
        mine = [r["key"] for r in rows if r["key"].startswith(self._prefix())]
        for name in mine:
            self.native.remove(name)
        logger.info("aerospike HiCache: cleared %d chunks", len(mine))
        return True

    def close(self) -> None:
        """Idempotent. SGLang calls it on detach (cache_controller.py:727-733)."""
        if self._closed:
            return
        self._closed = True
        client.release(self._engine)


__all__ = ["AerospikeHiCacheStorage", "ConfigError"]
