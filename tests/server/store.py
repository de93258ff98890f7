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
"""

import threading
import time
from dataclasses import dataclass, replace

from . import proto

CITRUSLEAF_EPOCH = 1262304000  # 2010-01-01T00:00:00Z in Unix seconds
MAX_ALLOWED_TTL = 3600 * 24 * 365 * 10  # 10 years
TTL_USE_DEFAULT = 0
TTL_NEVER_EXPIRE = 0xFFFFFFFF
TTL_DONT_UPDATE = 0xFFFFFFFE

FLAT_HEADER_SIZE = 35  # sizeof(as_flat_record)
END_MARK_SIZE = 4
MEM_WRITE_BLOCK_SIZE = 8 * 1024 * 1024  # cap when nothing else applies
STOP_WRITES_USED_PCT = 70  # storage-engine.stop-writes-used-pct default

CONFIG_KEYS = (
    "max-record-size",
    "write-block-size",
    "nsup-period",
    "default-ttl",
    "data-size",
    "allow-ttl-without-nsup",
)


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


@dataclass
class NamespaceConfig:
    name: str
    max_record_size: int = 1 << 20  # 8.x default
    write_block_size: int = 0  # non-zero only to emulate a 6.x/7.0 device
    nsup_period: int = 0
    default_ttl: int = 0
    data_size: int = 2 << 30
    allow_ttl_without_nsup: bool = False

    def set(self, key, value):
        """Apply one `key=value` config item; raise ValueError if invalid."""
        if key == "max-record-size":
            size = parse_size(value)
            if size != 0 and not 64 <= size <= MEM_WRITE_BLOCK_SIZE:
                raise ValueError("max-record-size must be 0 or 64..8M")
            self.max_record_size = size
        elif key == "write-block-size":
            self.write_block_size = parse_size(value)
        elif key == "nsup-period":
            self.nsup_period = int(value)
        elif key == "default-ttl":
            self.default_ttl = int(value)
        elif key == "data-size":
            self.data_size = parse_size(value)
        elif key == "allow-ttl-without-nsup":
            self.allow_ttl_without_nsup = parse_bool(value)
        else:
            raise ValueError("unknown namespace config key %r" % key)

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
    for item in filter(None, items.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError("expected key=value, got %r" % item)
        cfg.set(key.strip(), value.strip())
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
    last_update_ms: int = 0

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


class Namespace:
    def __init__(self, config):
        self.config = config
        self.records = {}  # digest -> Record
        self.bytes_used = 0  # sum of flat sizes of stored records

    def live(self, digest, now=None):
        """Return the live record for `digest`; drop it first if expired."""
        rec = self.records.get(digest)
        if rec is not None and rec.expired(now_void_time() if now is None else now):
            self.delete(digest)
            return None
        return rec

    def store(self, digest, rec):
        old = self.records.get(digest)
        if old is not None:
            self.bytes_used -= old.flat_size()
        self.records[digest] = rec
        self.bytes_used += rec.flat_size()

    def delete(self, digest):
        old = self.records.pop(digest, None)
        if old is not None:
            self.bytes_used -= old.flat_size()
        return old

    def purge_expired(self):
        now = now_void_time()
        for digest in [d for d, r in self.records.items() if r.expired(now)]:
            self.delete(digest)

    def stop_writes(self):
        """True when memory use is past stop-writes-used-pct of data-size."""
        limit = self.config.data_size * STOP_WRITES_USED_PCT // 100
        return self.config.data_size > 0 and self.bytes_used > limit

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


class Store:
    """All namespaces, plus the lock that serialises access to them."""

    def __init__(self, configs):
        self.lock = threading.RLock()
        self._initial = [replace(c) for c in configs]
        self.namespaces = {}
        self.reset()

    def reset(self):
        """Drop every record and restore the startup namespace configs."""
        with self.lock:
            self.namespaces = {c.name: Namespace(replace(c)) for c in self._initial}

    def get(self, name):
        return self.namespaces.get(name)

    def names(self):
        return list(self.namespaces)
