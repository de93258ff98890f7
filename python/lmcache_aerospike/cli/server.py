"""What the cluster says about itself, from info commands (`Connector.info`), per
node: builds, cluster size, and a namespace's space, thresholds, TTL settings, and
its eviction (NSUP) settings and counters.

Answers are untrusted text: a field that is missing or not a number is None, and
the commands say "unknown" rather than guess. Field names vary by server version,
so each value is looked up under its names, newest first.
"""

from __future__ import annotations

import re

from dataclasses import asdict, dataclass
from typing import Any

from lmcache_aerospike import _native

# value -> its field names: 7.0+ first, then the 6.x names of the same thing.
FIELDS = {
    "objects": ("objects",),
    "used_bytes": ("data_used_bytes", "device_used_bytes", "memory_used_bytes"),
    "total_bytes": ("data_total_bytes", "device_total_bytes", "storage-engine.data-size",
                    "memory-size"),
    "used_pct": ("data_used_pct", "device_used_pct"),
    "avail_pct": ("data_avail_pct", "device_available_pct"),
    "stop_writes_used_pct": ("storage-engine.stop-writes-used-pct", "stop-writes-pct"),
    "stop_writes_avail_pct": ("storage-engine.stop-writes-avail-pct",
                              "storage-engine.min-avail-pct"),
    "default_ttl": ("default-ttl",),
    "nsup_period": ("nsup-period",),
    "max_record_size": ("max-record-size",),
    "write_block_size": ("storage-engine.write-block-size",),
    "replication_factor": ("effective_replication_factor", "replication-factor"),
    # Eviction (NSUP) state and settings, 7.0+ names.
    "non_expirable_objects": ("non_expirable_objects",),
    "expired_objects": ("expired_objects",),
    "evicted_objects": ("evicted_objects",),
    "evict_ttl": ("evict_ttl",),
    "client_write_error": ("client_write_error",),
    "evict_used_pct": ("storage-engine.evict-used-pct",),
    "evict_tenths_pct": ("evict-tenths-pct",),
    "evict_hist_buckets": ("evict-hist-buckets",),
    "stop_writes_sys_memory_pct": ("stop-writes-sys-memory-pct",),
    "evict_sys_memory_pct": ("evict-sys-memory-pct",),  # 7.0 only
    "max_write_cache": ("storage-engine.max-write-cache",),
    "post_write_cache": ("storage-engine.post-write-cache",),
    "defrag_lwm_pct": ("storage-engine.defrag-lwm-pct",),
    "index_used_bytes": ("index_used_bytes",),
}
FLAGS = {
    "stop_writes": "stop_writes",
    "clock_skew_stop_writes": "clock_skew_stop_writes",
    "allow_ttl_without_nsup": "allow-ttl-without-nsup",
    "hwm_breached": "hwm_breached",
    "direct_files": "storage-engine.direct-files",
    "read_page_cache": "storage-engine.read-page-cache",
}
STRINGS = {
    "storage_engine": "storage-engine",
}


def pairs(text: str) -> dict[str, str]:
    """'a=1;b=2' -> {'a': '1', 'b': '2'}."""
    out = {}
    for item in text.strip().split(";"):
        key, eq, value = item.partition("=")
        if eq:
            out[key.strip()] = value.strip()
    return out


def _number(text: str | None) -> int | None:
    try:
        return int(float(text)) if text is not None else None
    except ValueError:
        return None


@dataclass
class NodeNamespace:
    """One node's view of the namespace."""

    node: str
    address: str
    present: bool
    stop_writes: bool | None = None
    clock_skew_stop_writes: bool | None = None
    allow_ttl_without_nsup: bool | None = None
    objects: int | None = None
    used_bytes: int | None = None
    total_bytes: int | None = None
    used_pct: int | None = None
    avail_pct: int | None = None
    stop_writes_used_pct: int | None = None
    stop_writes_avail_pct: int | None = None
    default_ttl: int | None = None
    nsup_period: int | None = None
    max_record_size: int | None = None
    write_block_size: int | None = None
    replication_factor: int | None = None
    storage_engine: str | None = None
    hwm_breached: bool | None = None
    non_expirable_objects: int | None = None
    expired_objects: int | None = None
    evicted_objects: int | None = None
    evict_ttl: int | None = None
    client_write_error: int | None = None
    evict_used_pct: int | None = None
    evict_tenths_pct: int | None = None
    evict_hist_buckets: int | None = None
    stop_writes_sys_memory_pct: int | None = None
    evict_sys_memory_pct: int | None = None
    max_write_cache: int | None = None
    post_write_cache: int | None = None
    defrag_lwm_pct: int | None = None
    stripes: int | None = None  # a memory namespace's stripes (7.1+), None if not said
    devices: int | None = None  # a device namespace's devices or files, None if not said
    files: int | None = None  # ... of which files (not raw devices)
    index_used_bytes: int | None = None  # the primary index's RAM on this node
    direct_files: bool | None = None  # files opened O_DIRECT (not through the page cache)
    read_page_cache: bool | None = None  # raw devices read through the page cache

    @classmethod
    def parse(cls, node: str, address: str, answer: str) -> "NodeNamespace":
        kv = pairs(answer)
        if not kv or kv.get("type") == "unknown" or answer.startswith("ERROR"):
            return cls(node, address, present=False)
        view = cls(node, address, present=True)
        for name, keys in FIELDS.items():
            found = next((kv[k] for k in keys if k in kv), None)
            setattr(view, name, _number(found))
        for name, key in FLAGS.items():
            setattr(view, name, kv[key] == "true" if key in kv else None)
        for name, key in STRINGS.items():
            setattr(view, name, kv.get(key) or None)
        stripes = sum(1 for k in kv if k.startswith("storage-engine.stripe[")
                      and k.endswith("].used_bytes"))
        view.stripes = stripes or None
        devices = sum(1 for k in kv if re.fullmatch(r"storage-engine\.(device|file)\[\d+\]", k))
        view.devices = devices or None
        files = sum(1 for k in kv if re.fullmatch(r"storage-engine\.file\[\d+\]", k))
        view.files = files or None
        if view.used_pct is None and view.used_bytes is not None and view.total_bytes:
            view.used_pct = 100 * view.used_bytes // view.total_bytes
        return view

    def bytes_left(self) -> int | None:
        """Bytes this node can take before its first stop-writes threshold: the
        smaller of data-size x stop-writes-used-pct - used, and data-size x
        (data_avail_pct - stop-writes-avail-pct); the second counts space that
        fragmented blocks hold, which `used` does not."""
        total = self.total_bytes
        if not total:
            return None
        room = []
        if self.stop_writes_used_pct is not None and self.used_bytes is not None:
            room.append(total * self.stop_writes_used_pct // 100 - self.used_bytes)
        if self.stop_writes_avail_pct is not None and self.avail_pct is not None:
            room.append(total * (self.avail_pct - self.stop_writes_avail_pct) // 100)
        return max(0, min(room)) if room else None

    @property
    def is_device(self) -> bool:
        """An SSD (or file) namespace of 7.1+: it has a write queue and defrag."""
        return self.storage_engine == "device" and self.write_block_size is None

    def mean_record_bytes(self) -> int | None:
        """data_used_bytes / objects: what one record of the namespace takes."""
        if not self.objects or self.used_bytes is None:
            return None
        return self.used_bytes // self.objects

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def namespace(conn: _native.Connector, name: str) -> list[NodeNamespace]:
    return [NodeNamespace.parse(node, addr, answer)
            for node, addr, answer in conn.info(f"namespace/{name}")]


def builds(conn: _native.Connector) -> list[dict[str, str]]:
    return [{"node": node, "address": addr, "build": answer.strip()}
            for node, addr, answer in conn.info("build")]


def cluster_size(conn: _native.Connector) -> int | None:
    """The nodes' own count (statistics cluster_size), the largest any reports,
    rather than the client's: a node the client never found still counts."""
    sizes = [_number(pairs(answer).get("cluster_size"))
             for _, _, answer in conn.info("statistics")]
    return max((s for s in sizes if s is not None), default=None)
