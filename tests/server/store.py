"""In-memory record store: namespaces, records, size accounting and TTL.

One global lock (Store.lock) guards every namespace; handlers take it around
each command (a whole batch or scan included) and release it before sending.

Size accounting copies the server's flat record size (as/src/storage/flat.c
as_flat_record_size + drv_mem.c buffer_bins): a write fails with
RECORD_TOO_BIG when the flat size plus the 4-byte end mark exceeds the
namespace's limit. A real 8.1.2.0 memory namespace was measured to accept one
byte less than that formula gives (largest one-bin blob with a set and a TTL:
max-record-size - 55, where the formula says - 54), so the fixture rejects at
`flat + 4 >= limit`, which reproduces the measurement.

A Namespace also holds what the real server's threads keep per namespace
(stop_writes, the NSUP counters and evict void times: nsup.py runs the rules),
the read-touch rule of as/src/transaction/read_touch.c, and, for
`storage-engine device`, the write queue of as/src/storage/storage.c
as_storage_overloaded, drained at the fixture's device-write-bps.
"""

import threading
import time
from collections import Counter
from dataclasses import dataclass, replace

from . import proto

CITRUSLEAF_EPOCH = 1262304000  # 2010-01-01T00:00:00Z in Unix seconds
MAX_ALLOWED_TTL = 3600 * 24 * 365 * 10  # 10 years
TTL_USE_DEFAULT = 0
TTL_NEVER_EXPIRE = 0xFFFFFFFF
TTL_DONT_UPDATE = 0xFFFFFFFE
READ_TOUCH_USE_DEFAULT = 0  # read_touch.c USE_CONFIG_DEFAULT
READ_TOUCH_NEVER = 0xFFFFFFFF  # read_touch.c NEVER_TOUCH

FLAT_HEADER_SIZE = 35  # sizeof(as_flat_record)
END_MARK_SIZE = 4
MiB = 1 << 20
MEM_WRITE_BLOCK_SIZE = 8 * MiB  # cap when nothing else applies
WBLOCK_SIZE = 8 * MiB  # as/include/storage/storage.h WBLOCK_SZ
MEMORY_STRIPES = 8  # a memory namespace's stripes (drv_mem.c), as CE 8.1 reports them
DEFAULT_MAX_WRITE_CACHE = 64 * MiB  # storage.h DEFAULT_MAX_WRITE_CACHE (also the minimum)
DEFAULT_POST_WRITE_CACHE = 256 * MiB  # storage.h DEFAULT_POST_WRITE_CACHE
DEFAULT_FLUSH_SIZE = 1 * MiB  # storage.h DEFAULT_FLUSH_SIZE
MIN_FLUSH_SIZE = 4 * 1024  # storage.h MIN_FLUSH_SIZE
MAX_FLUSH_SIZE = WBLOCK_SIZE  # storage.h MAX_FLUSH_SIZE
# Fixture knob: bytes per second a device namespace's stand-in device writes.
# Large enough that no test overloads it unless it lowers the rate.
DEFAULT_DEVICE_WRITE_BPS = 16 << 30
STOP_WRITES_USED_PCT = 70  # storage-engine.stop-writes-used-pct default (namespace.c)

# Keys `set-config:context=namespace` accepts, under the real server's names
# (cfg_info.c cfg_set_namespace), plus the fixture's data-size, write-block-size
# and device-write-bps.
CONFIG_KEYS = (
    "max-record-size",
    "write-block-size",
    "nsup-period",
    "default-ttl",
    "data-size",
    "allow-ttl-without-nsup",
    "evict-used-pct",
    "stop-writes-used-pct",
    "stop-writes-avail-pct",
    "evict-tenths-pct",
    "evict-hist-buckets",
    "default-read-touch-ttl-pct",
    "stop-writes-sys-memory-pct",
    "evict-sys-memory-pct",  # as a 7.0 server takes it; 8.1 refuses it
    "max-write-cache",
    "post-write-cache",
    "defrag-lwm-pct",
    "flush-size",
    "device-write-bps",
    "transaction-pending-limit",
)
# Keys a real server accepts only for `storage-engine device` (cfg_info.c).
DEVICE_ONLY_KEYS = ("post-write-cache", "flush-size")


def now_void_time():
    """Current time in the server's clock: seconds since 2010-01-01."""
    return int(time.time()) - CITRUSLEAF_EPOCH


def parse_size(text):
    """Parse '1048576', '1M', '512K', '2G' into bytes."""
    text = text.strip()
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    mult = units.get(text[-1:].upper())
    if mult:
        text = text[:-1]
    value = int(text)
    if value < 0:
        raise ValueError("negative size")
    return value * (mult or 1)


def parse_bool(text):
    if text.lower() in ("true", "yes", "1"):
        return True
    if text.lower() in ("false", "no", "0"):
        return False
    raise ValueError("not a boolean: %r" % text)


def _int_in(text, low, high, key):
    value = int(text)
    if not low <= value <= high:
        raise ValueError("%s must be %d..%d" % (key, low, high))
    return value


def _pct(text, key):
    return _int_in(text, 0, 100, key)


def canonical_key(key):
    """Spec and set-config keys: short names, or the dotted names the info
    answers use (storage-engine.evict-used-pct is evict-used-pct)."""
    key = key.strip()
    if key.startswith("storage-engine."):
        key = key[len("storage-engine.") :]
    return key


@dataclass
class NamespaceConfig:
    name: str
    max_record_size: int = 1 << 20  # 8.x default
    write_block_size: int = 0  # non-zero only to emulate a 6.x/7.0 device
    nsup_period: int = 0
    default_ttl: int = 0
    data_size: int = 2 << 30  # memory data-size, or a device's filesize
    allow_ttl_without_nsup: bool = False
    # storage-engine memory (8.x) or device (a stand-in for an SSD; no file).
    storage_engine: str = "memory"
    # Defaults of as/src/base/namespace.c as_namespace_create.
    evict_used_pct: int = 0
    stop_writes_used_pct: int = STOP_WRITES_USED_PCT
    stop_writes_avail_pct: int = 5
    evict_tenths_pct: int = 5
    evict_hist_buckets: int = 10000
    default_read_touch_ttl_pct: int = 0
    stop_writes_sys_memory_pct: int = 90  # reported only
    evict_sys_memory_pct: int = 0  # a 7.0 key (obsolete in 8.1): reported when non-zero
    max_write_cache: int = DEFAULT_MAX_WRITE_CACHE
    post_write_cache: int = DEFAULT_POST_WRITE_CACHE  # device only
    defrag_lwm_pct: int = 50  # reported only
    flush_size: int = DEFAULT_FLUSH_SIZE  # device only, reported only
    device_write_bps: int = DEFAULT_DEVICE_WRITE_BPS  # fixture knob (device)
    # Write transactions that may queue behind one in flight on a record before
    # the next is refused with KEY_BUSY (rw_request_hash.c handle_hot_key); 0 =
    # no limit. cfg.c: a u32 with no checks; cfg_info.c sets it the same way.
    transaction_pending_limit: int = 20

    def set(self, key, value):
        """Apply one `key=value` config item; raise ValueError if invalid.

        Ranges are the real server's (cfg.c / cfg_info.c)."""
        key = canonical_key(key)
        if key == "max-record-size":
            size = parse_size(value)
            if size != 0 and not 64 <= size <= MEM_WRITE_BLOCK_SIZE:
                raise ValueError("max-record-size must be 0 or 64..8M")
            self.max_record_size = size
        elif key == "write-block-size":
            self.write_block_size = parse_size(value)
        elif key == "nsup-period":
            self.nsup_period = int(value)
            if self.nsup_period < 0:
                raise ValueError("nsup-period must be >= 0")
        elif key == "default-ttl":
            self.default_ttl = _int_in(value, 0, MAX_ALLOWED_TTL, key)
        elif key in ("data-size", "filesize"):
            self.data_size = parse_size(value)
            if self.data_size == 0:
                raise ValueError("%s must be > 0" % key)
        elif key == "allow-ttl-without-nsup":
            self.allow_ttl_without_nsup = parse_bool(value)
        elif key == "storage-engine":
            if value not in ("memory", "device"):
                raise ValueError("storage-engine must be memory or device")
            self.storage_engine = value
        elif key == "evict-used-pct":
            self.evict_used_pct = _pct(value, key)
        elif key == "stop-writes-used-pct":
            self.stop_writes_used_pct = _pct(value, key)
        elif key == "stop-writes-avail-pct":
            self.stop_writes_avail_pct = _pct(value, key)
        elif key == "evict-tenths-pct":
            self.evict_tenths_pct = _int_in(value, 0, 0xFFFFFFFF, key)  # cfg_u32_no_checks
        elif key == "evict-hist-buckets":
            self.evict_hist_buckets = _int_in(value, 100, 10000000, key)  # cfg.c
        elif key == "default-read-touch-ttl-pct":
            self.default_read_touch_ttl_pct = _pct(value, key)
        elif key == "stop-writes-sys-memory-pct":
            self.stop_writes_sys_memory_pct = _pct(value, key)
        elif key == "evict-sys-memory-pct":
            self.evict_sys_memory_pct = _pct(value, key)
        elif key == "max-write-cache":
            size = parse_size(value)
            if size < DEFAULT_MAX_WRITE_CACHE:  # cfg.c cfg_u64(DEFAULT_MAX_WRITE_CACHE, ...)
                raise ValueError("max-write-cache must be >= 64M")
            self.max_write_cache = size
        elif key == "post-write-cache":
            self.post_write_cache = parse_size(value)
        elif key == "defrag-lwm-pct":
            self.defrag_lwm_pct = _pct(value, key)
        elif key == "flush-size":
            size = parse_size(value)
            if not MIN_FLUSH_SIZE <= size <= MAX_FLUSH_SIZE or size & (size - 1):
                raise ValueError("flush-size must be a power of 2, 4K..8M")
            self.flush_size = size
        elif key == "device-write-bps":
            self.device_write_bps = parse_size(value)
        elif key == "transaction-pending-limit":
            self.transaction_pending_limit = _int_in(value, 0, 0xFFFFFFFF, key)
        else:
            raise ValueError("unknown namespace config key %r" % key)

    @property
    def is_device(self):
        """An 8.x device namespace (the 6.x/7.0 emulation is `legacy`)."""
        return self.storage_engine == "device" and not self.write_block_size

    @property
    def legacy(self):
        return bool(self.write_block_size)

    def record_size_limit(self):
        """Largest flat size + end mark the namespace accepts (exclusive)."""
        if self.max_record_size:
            return self.max_record_size
        if self.write_block_size:
            return self.write_block_size
        return MEM_WRITE_BLOCK_SIZE


def parse_namespace_spec(spec):
    """Parse the CLI form NAME[:key=value,...] into a NamespaceConfig."""
    name, _, items = spec.partition(":")
    if not name or len(name) >= 32:
        raise ValueError("bad namespace name %r" % name)
    cfg = NamespaceConfig(name)
    given = set()
    for item in filter(None, items.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError("expected key=value, got %r" % item)
        cfg.set(key.strip(), value.strip())
        given.add(canonical_key(key))
    if not cfg.is_device and given & set(DEVICE_ONLY_KEYS):
        device_keys = ", ".join(sorted(given & set(DEVICE_ONLY_KEYS)))
        raise ValueError("%s need storage-engine=device" % device_keys)
    return cfg


# The namespaces of the real server the project tests against.
DEFAULT_NAMESPACES = (
    "lmcache:max-record-size=8M,nsup-period=1,default-ttl=0,data-size=2G",
    "small:max-record-size=1M,nsup-period=1",
    "nonsup:max-record-size=1M,nsup-period=0",
    "legacy:max-record-size=0,write-block-size=1M,nsup-period=1",
)


def particle_flat_size(ptype, value):
    """Bytes a bin value takes in a flat record (particle_*.c *_flat_size)."""
    if ptype == proto.PT_INTEGER:
        n = int.from_bytes(value[-8:].rjust(8, b"\0"), "big")
        for width in (1, 2, 4):
            if n < (1 << (8 * width)):
                return 2 + width
        return 2 + 8
    if ptype == proto.PT_DOUBLE:
        return 1 + 8
    if ptype == proto.PT_BOOL:
        return 1 + 1
    return 1 + 4 + len(value)  # blob, string, geojson, list, map, hll


@dataclass
class Record:
    set_name: str
    bins: dict  # name -> (particle type, bytes); insertion order is bin order
    generation: int
    void_time: int  # 0 = never expires
    key: bytes = None  # stored KEY field data (particle type + value), or None
    last_update_ms: int = 0  # Unix milliseconds; every write and touch sets it

    def flat_size(self):
        size = FLAT_HEADER_SIZE
        if self.void_time:
            size += 4
        if self.set_name:
            size += 1 + len(self.set_name.encode())
        if self.key is not None:
            size += proto.uintvar_size(len(self.key)) + len(self.key)
        if self.bins:
            size += proto.uintvar_size(len(self.bins))
        for name, (ptype, value) in self.bins.items():
            size += 1 + len(name.encode()) + particle_flat_size(ptype, value)
        return size

    def expired(self, now):
        return self.void_time != 0 and self.void_time < now

    def last_update_void_time(self):
        """last_update_time in seconds of the server's clock (since 2010)."""
        return self.last_update_ms // 1000 - CITRUSLEAF_EPOCH


class Namespace:
    """One namespace's records, and the state the server's threads keep for it
    (as_namespace in as/include/base/datamodel.h, under the same names).

    Every method is called with Store.lock held."""

    def __init__(self, config):
        self.config = config
        self.records = {}  # digest -> Record
        self.bytes_used = 0  # sum of flat sizes of stored records
        # Set and cleared only by the stop-writes thread (nsup.c eval_stop_writes),
        # which holds it set while fixture-stop-writes forces it.
        self.stop_writes = False
        self.forced_stop_writes = False
        # NSUP state (nsup.c): set by the namespace's NSUP thread.
        self.hwm_breached = False
        self.max_void_time = 0  # partition max_void_time: a high-water mark (write.c)
        self.evict_void_time = 0
        self.smd_evict_void_time = 0
        self.evict_ttl = 0
        self.non_expirable_objects = 0
        self.expired_objects = 0
        self.evicted_objects = 0
        self.nsup_cycle_duration = 0
        self.nsup_cycle_deleted_pct = 0.0
        self.nsup_last_time = int(time.monotonic())  # cf_get_seconds() at thread start
        # Counters: real ones (client_write_success, read_touch_*, ...) and the
        # fixture's own (evict_refusals, evictions, ...), by name.
        self.counts = Counter()
        # Device stand-in: bytes written and not yet flushed (storage.c write queue).
        self._flush_q_bytes = 0.0
        self._flush_q_at = time.monotonic()

    def live(self, digest, now=None):
        """Return the live record for `digest`; drop it first if expired."""
        rec = self.records.get(digest)
        if rec is not None and rec.expired(now_void_time() if now is None else now):
            self.delete(digest)
            self.expired_objects += 1
            return None
        return rec

    def store(self, digest, rec):
        old = self.records.get(digest)
        if old is not None:
            self.bytes_used -= old.flat_size()
        self.records[digest] = rec
        size = rec.flat_size()
        self.bytes_used += size
        if rec.void_time > self.max_void_time:
            self.max_void_time = rec.void_time  # write.c write_master: as_setmax_uint32
        self.queue_flush(size)

    def delete(self, digest):
        old = self.records.pop(digest, None)
        if old is not None:
            self.bytes_used -= old.flat_size()
        return old

    def purge_expired(self):
        now = now_void_time()
        for digest in [d for d, r in self.records.items() if r.expired(now)]:
            self.delete(digest)
            self.expired_objects += 1

    # -- space ---------------------------------------------------------------

    def used_pct(self):
        """data_used_pct: used bytes * 100 / data-size (thr_info.c), rounded down."""
        size = self.config.data_size
        return self.bytes_used * 100 // size if size else 0

    def avail_pct(self):
        """data_avail_pct. A real node counts free write blocks; the fixture
        has no blocks, so it is what is not used."""
        return 100 - min(self.used_pct(), 100)

    def fits(self, rec, old):
        """False when storing `rec` over `old` would pass data-size: the storage
        layer itself has no room (drv_mem.c / drv_ssd.c 'out of space')."""
        grow = rec.flat_size() - (old.flat_size() if old is not None else 0)
        return self.bytes_used + grow <= self.config.data_size

    # -- the device write queue (storage.c as_storage_overloaded) ------------

    def _drain(self):
        t = time.monotonic()
        drained = self.config.device_write_bps * (t - self._flush_q_at)
        self._flush_q_bytes = max(0.0, self._flush_q_bytes - drained)
        self._flush_q_at = t

    def queue_flush(self, size):
        """A device namespace writes `size` bytes into its write buffers."""
        if self.config.is_device:
            self._drain()
            self._flush_q_bytes += size

    def flush_q_bytes(self):
        if self.config.is_device:
            self._drain()
        return int(self._flush_q_bytes)

    def wblocks_to_flush(self):
        """n_wblocks_to_flush: full write blocks waiting for the device."""
        return self.flush_q_bytes() // WBLOCK_SIZE

    def overloaded(self):
        """as_storage_overloaded(ns, 0, "write"): the queue holds more blocks than
        max-write-cache (storage_max_write_q = devices * max-write-cache / WBLOCK_SZ,
        drv_ssd.c; one device here)."""
        if not self.config.is_device:
            return False
        return self.wblocks_to_flush() > self.config.max_write_cache // WBLOCK_SIZE

    # -- TTL rules (write.c write_master, rw_utils.h) ----------------------

    def check_ttl(self, ttl, exists):
        """Return (result code, ttl after special-value conversion)."""
        if ttl == TTL_DONT_UPDATE and not exists:
            ttl = TTL_USE_DEFAULT
        if not (ttl <= MAX_ALLOWED_TTL or ttl in (TTL_NEVER_EXPIRE, TTL_DONT_UPDATE)):
            return proto.ERR_PARAMETER, ttl
        cfg = self.config
        signed = ttl - (1 << 32) if ttl & 0x80000000 else ttl
        wants_expiry = signed > 0 or (ttl == TTL_USE_DEFAULT and cfg.default_ttl != 0)
        if wants_expiry and cfg.nsup_period == 0 and not cfg.allow_ttl_without_nsup:
            return proto.ERR_FORBIDDEN, ttl
        return proto.OK, ttl

    def void_time_for(self, ttl, old_void_time, now):
        if ttl == TTL_USE_DEFAULT:
            return now + self.config.default_ttl if self.config.default_ttl else 0
        if ttl == TTL_NEVER_EXPIRE:
            return 0
        if ttl == TTL_DONT_UPDATE:
            return old_void_time
        return now + ttl

    def too_big(self, rec):
        return rec.flat_size() + END_MARK_SIZE >= self.config.record_size_limit()

    # -- read-touch (as/src/transaction/read_touch.c) -----------------------

    def read_touch_check(self, rec, pct):
        """as_read_touch_check: return (result, write_ttl); write_ttl is None when
        the read needs no touch, result is ERR_PARAMETER for a bad percentage.
        `pct` is the request's record_ttl field: 0 = the namespace's
        default-read-touch-ttl-pct, 0xFFFFFFFF = never touch, else 1..100."""
        if rec.void_time == 0:
            return proto.OK, None
        if pct == READ_TOUCH_NEVER:
            return proto.OK, None
        if pct == READ_TOUCH_USE_DEFAULT:
            pct = self.config.default_read_touch_ttl_pct
            if pct == 0:
                return proto.OK, None
        elif pct > 100:
            return proto.ERR_PARAMETER, None
        write_ttl = (rec.void_time - rec.last_update_void_time()) & 0xFFFFFFFF
        threshold_ttl = write_ttl * pct // 100
        threshold_void_time = (rec.void_time - threshold_ttl) & 0xFFFFFFFF
        if now_void_time() < threshold_void_time:
            return proto.OK, None
        return proto.OK, write_ttl

    def read_touch(self, digest, write_ttl):
        """The internal write the server enqueues after the read is answered
        (read_touch.c rt_enqueue, read_touch_master): a new void time of now +
        the last write's TTL and a new last-update time; the generation stays.
        It bypasses the write-queue check and stop-writes; it counts
        read_touch_success, read_touch_skip (no TTL, or a write already extended
        it) or read_touch_error (the storage has no room)."""
        rec = self.records.get(digest)
        if rec is None:
            self.counts["read_touch_skip"] += 1  # AS_ERR_NOT_FOUND
            return
        if rec.void_time == 0:
            self.counts["read_touch_skip"] += 1  # AS_ERR_KEY_BUSY
            return
        now_ms = int(time.time() * 1000)
        void_time = now_ms // 1000 - CITRUSLEAF_EPOCH + write_ttl
        if rec.void_time >= void_time:
            self.counts["read_touch_skip"] += 1  # a write extended the void time
            return
        if self.bytes_used > self.config.data_size:
            self.counts["read_touch_error"] += 1  # as_storage_record_write failed
            return
        rec.void_time = void_time  # the same flat size: both are non-zero
        rec.last_update_ms = now_ms
        self.queue_flush(rec.flat_size())
        self.counts["read_touch_success"] += 1


class Store:
    """All namespaces, plus the lock that serialises access to them (a cluster's
    nodes share one lock: cluster.py).

    `smd_set(name, evict_void_time)` and `smd_delete(name)` publish an evict void
    time the way nsup.c does through system metadata: to this store's namespace
    alone on a single node; a cluster replaces them to reach every node."""

    def __init__(self, configs, lock=None):
        self.lock = lock or threading.RLock()
        self._initial = [replace(c) for c in configs]
        self.namespaces = {}
        self.reset()

    def smd_set(self, name, evict_void_time):
        """nsup_smd_accept_cb for a set item."""
        ns = self.get(name)
        if ns is not None:
            ns.smd_evict_void_time = evict_void_time

    def smd_delete(self, name):
        """nsup_smd_accept_cb for a deleted item: both void times go to 0."""
        ns = self.get(name)
        if ns is not None:
            ns.evict_void_time = 0
            ns.smd_evict_void_time = 0

    def reset(self):
        """Drop every record and restore the startup namespace configs."""
        with self.lock:
            self.namespaces = {c.name: Namespace(replace(c)) for c in self._initial}

    def get(self, name):
        return self.namespaces.get(name)

    def names(self):
        return list(self.namespaces)
