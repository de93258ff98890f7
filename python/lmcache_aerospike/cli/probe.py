"""`probe`: is the cluster fit to hold the cache, and what will the engine do on it?

It reaches every seed, opens the engine as LMCache would (which discovers the
namespace's record-size limits and logs the segment sizes it derives), reads the
cluster's builds, size and the namespace's space, thresholds, TTL and eviction
settings, judges whether the namespace evicts our chunks when full (rather than
stopping writes), and says what is wrong, one sentence per problem. Exit status 1
when anything is.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import socket
from typing import Any, Iterator

from lmcache_aerospike import _native
from lmcache_aerospike.cli import output, server
from lmcache_aerospike.cli.settings import connect, load, options
from lmcache_aerospike.config import Settings

NEAR = 10  # points from a stop-writes threshold that already count as a problem
DEFAULT_PORT = 3000
# Eviction readiness (NSUP, as/src/base/nsup.c):
MIN_EVICT_TENTHS_PCT = 10  # below 1 % a cycle frees less than a burst of writes
STICKY_GAP = 30  # stop-writes-used-pct - evict-used-pct; less is noted (DESIGN.md)
PINNED_SHARE_PCT = 50  # never-expiring records above this share of the namespace
PINNED_MIN_OBJECTS = 64  # ... of at least this many: a few records' share says nothing
MIN_WRITE_CACHE = 256 << 20  # a device's max-write-cache below this overloads under load
MAX_EVICT_PLUS_AVAIL = 90  # evict-used-pct + stop-writes-avail-pct: room defrag needs
STRIPE_SPARE_BLOCKS = 4  # free blocks a memory stripe needs at evict-used-pct
# How far a memory namespace's use climbs past evict-used-pct before NSUP's cycles
# (every 2-3 s) catch up with writers at the engine's pace: 10-17 points with 4
# writer processes of 4 MiB chunks from 512 MiB to 2 GiB; fitted (max_evict_pct).
MEMORY_OVERSHOOT_PCT = 12
# A device's free blocks kept for defrag (DRV_DEFRAG_RESERVE, drv_common.h): no
# client write takes them.
DEVICE_RESERVE_BLOCKS = 8
# How full blocks in use count as, in percent (max_evict_pct): memory stripes, and
# devices (fitted to a 512 MiB file's runs: DESIGN.md, "Every size").
MEMORY_FILL_PCT = 75
DEVICE_FILL_PCT = 60
MiB = 1 << 20
WBLOCK = 8 * MiB  # the write block of 7.1+ (memory and device)
INDEX_BYTES = 64  # the primary index's RAM a record, every copy (as_index)

EXAMPLES = """\
examples:
  lmcache-aerospike probe --hosts 10.0.0.5:3000,10.0.0.6:3000 -n lmcache
  lmcache-aerospike probe --config lmcache.yaml --instance aerospike.dr
  lmcache-aerospike probe --config l2.json --json

It reports as problems (exit status 1): seeds that do not answer; a namespace the
cluster does not have; TTL writes the namespace refuses (default_ttl_seconds > 0
with nsup-period 0 and allow-ttl-without-nsup false: the engine will not open);
stop_writes or clock_skew_stop_writes set; used or available space within 10 points
of stop-writes-used-pct / stop-writes-avail-pct; fewer nodes than seeds; nodes the
client cannot reach. And whether the namespace evicts our chunks when it fills
(NSUP) rather than stopping writes: chunks without a TTL (default_ttl_seconds -1,
or 0 with default-ttl 0) or nsup-period 0, which nothing expires or evicts;
evict-used-pct 0 (eviction off); evict-used-pct at or above stop-writes-used-pct
(or evict-sys-memory-pct at or above stop-writes-sys-memory-pct); buckets of void
time wider than a second (default_ttl_seconds / evict-hist-buckets), which NSUP
evicts whole or not at all; evict-tenths-pct below 10; never-expiring records
above half the namespace; on a device, max-write-cache below 256 MiB, and
evict-used-pct + stop-writes-avail-pct above 90 (defrag cannot keep blocks free);
evict-used-pct too high for the write blocks of a memory stripe or a device (a
small namespace: its stripes or its device run out of free blocks before NSUP
evicts; a device's post-write-cache holds blocks that it does not reuse), with the
settings and the smallest size that work.
It notes how fast NSUP can evict (records per cycle of nsup-period + 1 s), a
device's post-write-cache, files read through the host's page cache (direct-files
false: hits are RAM copies, and the page cache grows to the data's size), and what
the namespace needs at capacity: its records, the index's RAM (64 bytes a record a
copy) and a device's write and post-write caches (`lmcache-aerospike size` plans a
cluster before there is one).
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "probe", parents=[options()], help="check the cluster, namespace and derived limits",
        description=__doc__.split("\n\n", 1)[1], epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    report: dict[str, Any] = {
        "hosts": settings.hosts, "namespace": settings.namespace, "set": settings.set,
        "seeds": [reach(seed, settings.connect_timeout_ms) for seed in seeds(settings.hosts)],
        "problems": [], "notes": []}
    conn = _open(settings, report)
    if conn is not None:
        with contextlib.closing(conn):
            _survey(conn, settings, report)
    report["problems"] += seed_problems(report)
    if args.json:
        output.emit_json(report)
    else:
        _print(report)
    return 1 if report["problems"] else 0


# ----------------------------------------------------------------------- seeds


def seeds(hosts: str) -> list[tuple[str, str, int]]:
    """(as written, host, port) for host[:port], host:tls-name:port and [v6]:port."""
    out = []
    for item in filter(None, (s.strip() for s in hosts.split(","))):
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port = rest.rpartition(":")[2]
        else:
            host, *rest = item.split(":")
            port = rest[-1] if rest else ""
        out.append((item, host, int(port) if port.isdigit() else DEFAULT_PORT))
    return out


def reach(seed: tuple[str, str, int], timeout_ms: int) -> dict[str, Any]:
    """Whether the seed accepts a TCP connection (before the engine tries it)."""
    written, host, port = seed
    try:
        socket.create_connection((host, port), timeout=timeout_ms / 1000).close()
        return {"seed": written, "reachable": True, "error": None}
    except OSError as e:
        return {"seed": written, "reachable": False, "error": e.strerror or str(e)}


def seed_problems(report: dict[str, Any]) -> list[str]:
    problems = [f"seed {s['seed']} does not answer ({s['error']})"
                for s in report["seeds"] if not s["reachable"]]
    size, nodes = report.get("cluster_size"), report.get("nodes")
    if not problems and size is not None and size < len(report["seeds"]):
        problems.append(f"{len(report['seeds'])} seeds are given but the cluster has "
                        f"{size} node{'s' * (size != 1)}: seeds name one node twice, or "
                        f"nodes of another cluster")
    if size is not None and nodes is not None and len(nodes) < size:
        problems.append(f"the client reaches {len(nodes)} of the cluster's {size} nodes: "
                        f"check each node's access-address")
    return problems


# ---------------------------------------------------------------- the engine


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def engine_lines() -> Iterator[list[str]]:
    """The engine's log lines while the block runs (its limits at open are INFO
    lines: the extension hands them to the `lmcache_aerospike` logger)."""
    handler, logger = _Lines(), logging.getLogger("lmcache_aerospike")
    saved = logger.handlers[:], logger.level
    logger.handlers[:] = [handler]  # probe prints them: not on stderr as well
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.handlers[:], _ = saved
        logger.setLevel(saved[1])


def _open(settings: Settings, report: dict[str, Any]) -> _native.Connector | None:
    """The engine as LMCache opens it. When it cannot, the reason is a problem, and
    what can still be looked at is opened: without the seeds that do not answer
    (the client refuses a seed list with a dead one), or with TTLs off when the
    namespace refuses them. None when nothing opens."""
    overrides: dict[str, Any] = {}
    live = [s["seed"] for s in report["seeds"] if s["reachable"]]
    for _ in range(3):
        with engine_lines() as lines:
            try:
                conn = connect(settings, **overrides)
                report["startup"] = lines
                return conn
            except _native.TTLConfigError as e:
                report["problems"].append(str(e))
                overrides["default_ttl_seconds"] = -1
            except (_native.ConnectionError, _native.TimeoutError) as e:
                report["problems"].append(" ".join(str(e).split()))
                if not live or len(live) == len(report["seeds"]) or "hosts" in overrides:
                    return None
                overrides["hosts"] = ",".join(live)
            except (_native.NamespaceError, _native.ServerLimitError) as e:
                report["problems"].append(" ".join(str(e).split()))
                return None
    return None


def _survey(conn: _native.Connector, settings: Settings, report: dict[str, Any]) -> None:
    views = server.namespace(conn, settings.namespace)
    report.update(nodes=server.builds(conn), cluster_size=server.cluster_size(conn),
                  namespace_nodes=[v.as_dict() for v in views], limits=conn.limits())
    report["problems"] += namespace_problems(views, settings.namespace)
    report["problems"] += ttl_problems(views, settings)
    problems, eviction_notes = eviction_problems(
        views, settings, conn.limits().get("target_segment_bytes"))
    report["problems"] += problems
    report["notes"] += notes(views, settings, report["nodes"]) + eviction_notes


def namespace_problems(views: list[server.NodeNamespace], ns: str) -> list[str]:
    out = []
    for v in views:
        where = f"node {v.node} ({v.address})"
        if not v.present:
            out.append(f"{where} does not have namespace '{ns}'")
            continue
        if v.stop_writes:
            out.append(f"{where}: namespace '{ns}' is at stop-writes: it refuses writes")
        if v.clock_skew_stop_writes:
            out.append(f"{where}: namespace '{ns}' stopped writes for clock skew between "
                       f"nodes (clock_skew_stop_writes)")
        swu, swa = v.stop_writes_used_pct, v.stop_writes_avail_pct
        if v.used_pct is not None and swu is not None and v.used_pct >= swu - NEAR:
            out.append(f"{where}: namespace '{ns}' is {v.used_pct}% used, within {NEAR} "
                       f"points of stop-writes-used-pct {swu}")
        if v.avail_pct is not None and swa is not None and v.avail_pct <= swa + NEAR:
            out.append(f"{where}: namespace '{ns}' has {v.avail_pct}% available, within "
                       f"{NEAR} points of stop-writes-avail-pct {swa}")
    return out


def ttl_problems(views: list[server.NodeNamespace], settings: Settings) -> list[str]:
    """Chunks NSUP can never remove: without a TTL, or with NSUP off."""
    out, ns, ttl = [], settings.namespace, settings.default_ttl_seconds
    present = [v for v in views if v.present]
    if ttl < 0:
        out.append(f"default_ttl_seconds is {ttl}: our chunks never expire, so NSUP never "
                   f"evicts them; set default_ttl_seconds > 0")
    elif ttl == 0 and any(v.default_ttl == 0 for v in present):
        out.append(f"default_ttl_seconds is 0 and namespace '{ns}' has default-ttl 0: our "
                   f"chunks never expire, so NSUP never evicts them; set "
                   f"default_ttl_seconds > 0")
    for v in present:
        if v.nsup_period != 0:
            continue
        if ttl > 0 and not v.allow_ttl_without_nsup:
            continue  # the engine's TTLConfigError at open says it already
        out.append(f"node {v.node} ({v.address}): namespace '{ns}' has nsup-period 0: NSUP "
                   f"never runs, so nothing expires or is evicted; set nsup-period > 0")
    return out


def effective_ttl(v: server.NodeNamespace, settings: Settings) -> tuple[int, str] | None:
    """The TTL our chunks get on this node, and the setting it comes from."""
    ttl = settings.default_ttl_seconds
    if ttl > 0:
        return ttl, "default_ttl_seconds"
    if ttl == 0 and v.default_ttl:
        return v.default_ttl, "the namespace's default-ttl"
    return None


def eviction_problems(views: list[server.NodeNamespace], settings: Settings,
                      record_bytes: int | None = None) -> tuple[list[str], list[str]]:
    """(problems, notes) about eviction readiness, per node: does NSUP evict when
    the namespace fills, in time, and in small enough steps? `record_bytes` is
    the size of one of our records, for a namespace that holds none yet."""
    problems: list[str] = []
    out_notes: list[str] = []
    ns = settings.namespace
    for v in views:
        if not v.present:
            continue
        where = f"node {v.node} ({v.address}): namespace '{ns}'"
        if v.is_device:
            _device_checks(v, where, problems, out_notes)
        evict = v.evict_used_pct
        if evict is None:
            continue  # a server that does not say (6.x): nothing to judge
        swu, swa = v.stop_writes_used_pct, v.stop_writes_avail_pct
        if evict == 0:
            problems.append(f"{where} stops writes when full instead of evicting "
                            f"(storage-engine.evict-used-pct 0); set evict-used-pct below "
                            f"stop-writes-used-pct {_or_unknown(swu)} (the README's recipe)")
            continue
        if swu and evict >= swu:
            problems.append(f"{where} has evict-used-pct {evict} at or above "
                            f"stop-writes-used-pct {swu}: stop-writes comes first and NSUP "
                            f"never evicts; set evict-used-pct below {swu}")
        elif swu and swu - evict < STICKY_GAP:
            out_notes.append(f"node {v.node}: stop-writes-used-pct {swu} is {swu - evict} "
                             f"points above evict-used-pct {evict}; the server sets "
                             f"stop-writes for 10 s at a time, and a fast writer that "
                             f"overshoots between NSUP cycles is refused that long (the "
                             f"recipes leave {STICKY_GAP} or more)")
        esm, ssm = v.evict_sys_memory_pct, v.stop_writes_sys_memory_pct
        if esm and ssm and esm >= ssm:
            problems.append(f"{where} has evict-sys-memory-pct {esm} at or above "
                            f"stop-writes-sys-memory-pct {ssm}: stop-writes comes first; "
                            f"set evict-sys-memory-pct below {ssm}")
        if v.is_device and swa is not None and evict + swa > MAX_EVICT_PLUS_AVAIL:
            problems.append(f"{where} evicts from {evict}% used and stops writes below "
                            f"{swa}% available: so full, defrag (defrag-lwm-pct "
                            f"{_or_unknown(v.defrag_lwm_pct)}) cannot keep enough blocks "
                            f"free; lower evict-used-pct (now {evict}) to "
                            f"{MAX_EVICT_PLUS_AVAIL - swa} or stop-writes-avail-pct "
                            f"(now {swa})")
        if not (swu and evict >= swu):  # else NSUP never evicts: said above
            _block_check(v, where, evict, problems)
        out_notes += size_notes(v, record_bytes)
        ttl = effective_ttl(v, settings)
        buckets = v.evict_hist_buckets
        if ttl is not None and buckets:
            width = max(1, -(-ttl[0] // buckets))
            if width > 1:
                problems.append(f"{where}: NSUP evicts records in buckets of {width} seconds "
                                f"of void time: every record written within {width} seconds "
                                f"goes at once or not at all; set evict-hist-buckets (now "
                                f"{buckets}) to at least {ttl[1]} ({ttl[0]})")
        tenths = v.evict_tenths_pct
        if tenths is not None:
            if tenths < MIN_EVICT_TENTHS_PCT:
                problems.append(f"{where} evicts at most {tenths / 10:g}% of its records per "
                                f"NSUP cycle; raise evict-tenths-pct (now {tenths}) so that "
                                f"a cycle frees more than a burst of writes")
            rate = eviction_rate(v, record_bytes)
            if rate is not None:
                mib_s, records, cycle = rate
                out_notes.append(f"node {v.node}: NSUP can evict about {mib_s:.1f} MiB/s "
                                 f"({records} records per {cycle} s cycle)")
        if v.objects and v.objects >= PINNED_MIN_OBJECTS and v.non_expirable_objects is not None:
            share = 100 * v.non_expirable_objects // v.objects
            if share > PINNED_SHARE_PCT:
                problems.append(f"{where}: pinned (never-expiring) records are {share}% of "
                                f"the namespace and are never evicted; unpin what need not "
                                f"stay (lmcache-aerospike unpin)")
    return problems, out_notes


def eviction_rate(v: server.NodeNamespace,
                  record_bytes: int | None) -> tuple[float, int, int] | None:
    """(MiB/s, records per cycle, cycle seconds) NSUP evicts at most on this node:
    eligible records x evict-tenths-pct / 1000 per cycle of about nsup-period + 1 s
    (a find, then the eviction on the next wake-up). Eligible records are those
    with a TTL (objects - non_expirable_objects); below evict-used-pct they are
    estimated for the namespace at evict-used-pct, from data-size and the mean
    record size (data_used_bytes / objects, else `record_bytes`)."""
    if not v.nsup_period or not v.evict_used_pct or v.evict_tenths_pct is None:
        return None
    mean = v.mean_record_bytes() or record_bytes
    if not mean:
        return None
    objects, pinned = v.objects or 0, v.non_expirable_objects or 0
    if v.used_pct is not None and v.used_pct >= v.evict_used_pct:
        eligible = max(objects - pinned, 0)
    elif v.total_bytes:
        at_evict = v.total_bytes * v.evict_used_pct // 100 // mean
        eligible = at_evict - (at_evict * min(pinned, objects) // objects if objects else 0)
    else:
        return None
    records = eligible * v.evict_tenths_pct // 1000
    cycle = v.nsup_period + 1
    return records * mean / cycle / MiB, records, cycle


def _device_checks(v: server.NodeNamespace, where: str, problems: list[str],
                   out_notes: list[str]) -> None:
    # The write queue is the devices' together: max-write-cache times the devices
    # (ssd_init: storage_max_write_q = n_ssds x max-write-cache / 8 MiB).
    devices = v.devices or 1
    if v.max_write_cache is not None and v.max_write_cache * devices < MIN_WRITE_CACHE:
        each = f" on each of {devices} devices" if devices > 1 else ""
        problems.append(f"{where}: writes will fail with device overload under load; raise "
                        f"max-write-cache (now {output.size(v.max_write_cache)}{each})")
    if v.post_write_cache is not None:
        out_notes.append(f"node {v.node}: post-write-cache {output.size(v.post_write_cache)} "
                         f"(recently written blocks kept in memory)")
    if v.files and v.direct_files is False:
        out_notes.append(f"node {v.node}: its {v.files} file(s) are read and written through "
                         f"the host's page cache (direct-files false): hits are served from "
                         f"RAM as far as the host has it, and the page cache grows to the "
                         f"data's size, so the namespace costs DRAM as a memory one would; "
                         f"set direct-files true (the README's device recipe)")
    if v.read_page_cache:
        out_notes.append(f"node {v.node}: read-page-cache true: device reads go through the "
                         f"host's page cache")


def size_notes(v: server.NodeNamespace, record_bytes: int | None) -> list[str]:
    """What the namespace needs at capacity on this node: records, the index's RAM
    (INDEX_BYTES a record, every copy), a device's write and post-write caches, and
    the device bytes a stored byte costs (its copies)."""
    if not v.total_bytes or not v.evict_used_pct:
        return []
    mean = v.mean_record_bytes() or record_bytes
    if not mean:
        return []
    held = v.total_bytes * v.evict_used_pct // 100
    records = held // mean
    index = records * INDEX_BYTES
    line = (f"node {v.node}: at evict-used-pct {v.evict_used_pct} it holds about "
            f"{output.size(held)} in {records:,} records of {output.size(mean)}: the index "
            f"needs {output.size(index)} of RAM ({INDEX_BYTES} bytes a record"
            + (f"; {output.size(v.index_used_bytes)} now" if v.index_used_bytes is not None
               else "") + ")")
    if v.is_device:
        devices = v.devices or 1
        caches = devices * ((v.max_write_cache or 0) + max(v.post_write_cache or 0, 0))
        line += (f", and its {devices} device(s) up to {output.size(caches)} of write and "
                 f"post-write caches; every byte stored is written "
                 f"{v.replication_factor or 1} time(s) over the cluster's devices, besides "
                 f"defrag (`lmcache-aerospike size` plans a cluster)")
    else:
        line += f", beside the data-size {output.size(v.total_bytes)} it holds in RAM"
    return [line]


def max_evict_pct(blocks: int, kept: int = STRIPE_SPARE_BLOCKS,
                  fill: int = MEMORY_FILL_PCT, overshoot: int = MEMORY_OVERSHOOT_PCT) -> int:
    """The highest evict-used-pct at which a memory stripe, or a device, of this
    many write blocks keeps free blocks (DESIGN.md, "Every size"): records of many
    ages share a block and a block is reused only once defrag empties it (below
    defrag-lwm-pct), so blocks in use are `fill` percent full, and `kept` blocks
    take no new records: evict-used-pct <= fill x (1 - kept / blocks) - overshoot,
    what the namespace's use climbs past evict-used-pct before NSUP catches up. A
    stripe keeps STRIPE_SPARE_BLOCKS free; a device its defrag reserve and the
    blocks in its post-write cache, which it gives back only when they leave it,
    however much of them was freed (drv_ssd.c: ssd_post_write, ssd_block_free).
    Measured on memory with 4 writer processes of 4 MiB chunks, 5x the capacity
    offered, by the stripes' "out of space" refusals a run (the server's log) and
    the stores dropped: 8 blocks a stripe (512 MiB) 0-44 at 20 and 25 (9 runs),
    40-310 at 28 and 30 with stores dropped in 3 of 12 runs; 16 (1 GiB) 7-43 at 40,
    20-568 at 45 (150 of 575 dropped in 1 of 3), 487-725 at 50; 32 (2 GiB) 0-13 at
    50; use peaked 10-17 points past evict-used-pct (docs/measurements-cache.md,
    "Memory stripes"). A device's rule has no overshoot: its fill is fitted to runs
    that had one. A 512 MiB file (64 blocks) at evict-used-pct 50
    refused stores from 49-62 % used with the default 256 MiB post-write cache and
    from 56-66 % with 64 MiB, and took them with 64 MiB at 40; a 2 GiB file whole
    at 50. DEVICE_FILL_PCT is fitted to those runs."""
    return max(0, fill * (blocks - kept) // blocks - overshoot) if blocks > 0 else 0


def _block_check(v: server.NodeNamespace, where: str, evict: int,
                 problems: list[str]) -> None:
    if not v.total_bytes:
        return
    if v.is_device:
        _device_block_check(v, where, evict, problems)
    elif v.stripes:
        _stripe_check(v, where, evict, problems)


def _stripe_check(v: server.NodeNamespace, where: str, evict: int,
                  problems: list[str]) -> None:
    blocks = v.total_bytes // v.stripes // WBLOCK
    limit = max_evict_pct(blocks)
    if evict <= limit:
        return
    need = next((b for b in range(blocks + 1, 1 << 16) if max_evict_pct(b) >= evict), None)
    size = f", or data-size to at least {output.size(need * v.stripes * WBLOCK)}" if need else ""
    problems.append(f"{where} is {v.stripes} stripes of {blocks} write blocks of 8 MiB: at "
                    f"evict-used-pct {evict} a stripe runs out of free blocks before NSUP "
                    f"evicts (blocks hold records of many ages and are reused only once "
                    f"defrag empties them), and every store is refused; set evict-used-pct "
                    f"to at most {limit}{size}")


def device_evict_pct(blocks: int, cached: int) -> int:
    """max_evict_pct for a device of `blocks`, `cached` of them in its post-write
    cache: its defrag reserve and those take no new records."""
    return max_evict_pct(blocks, DEVICE_RESERVE_BLOCKS + cached, DEVICE_FILL_PCT, 0)


def _device_block_check(v: server.NodeNamespace, where: str, evict: int,
                        problems: list[str]) -> None:
    devices = v.devices or 1
    blocks = v.total_bytes // devices // WBLOCK
    cache = max(v.post_write_cache or 0, 0)
    cached = cache // WBLOCK
    limit = device_evict_pct(blocks, cached)
    if evict <= limit:
        return
    fixes = []
    fit = next((c for c in range(cached - 1, -1, -1) if device_evict_pct(blocks, c) >= evict),
               None)
    if fit is not None:
        fixes.append(f"post-write-cache to at most {output.size(fit * WBLOCK)}")
    fixes.append(f"evict-used-pct to at most {limit}")
    if evict < DEVICE_FILL_PCT:
        # fill x (1 - kept / b) >= evict from b = fill x kept / (fill - evict) on,
        # give or take the rounding down
        kept = DEVICE_RESERVE_BLOCKS + cached
        low = max(blocks + 1, DEVICE_FILL_PCT * kept // (DEVICE_FILL_PCT - evict) - 1)
        need = next(b for b in itertools.count(low) if device_evict_pct(b, cached) >= evict)
        fixes.append(f"each device to at least {output.size(need * WBLOCK)}")
    each = "each of its devices" if devices > 1 else "its device"
    problems.append(f"{where}: {each} has {blocks} write blocks of 8 MiB, of which "
                    f"{DEVICE_RESERVE_BLOCKS} are kept for defrag and {cached} held by "
                    f"post-write-cache {output.size(cache)} (a cached "
                    f"block's freed space is not reused until it leaves the cache): at "
                    f"evict-used-pct {evict} it runs out of free blocks before NSUP evicts, "
                    f"and stores are refused; set " + ", or ".join(fixes))


def _or_unknown(value: int | None) -> str:
    return "unknown" if value is None else str(value)


def notes(views: list[server.NodeNamespace], settings: Settings,
          nodes: list[dict[str, str]]) -> list[str]:
    out = []
    if len({n["build"] for n in nodes}) > 1:
        out.append("nodes run different builds: "
                   + ", ".join(f"{n['node']} {n['build']}" for n in nodes))
    if not settings.send_key:
        out.append("send_key is false: records do not hold their keys, so `ls` lists "
                   "digests and `--prefix` matches nothing")
    return out


# ---------------------------------------------------------------------- text


def _print(r: dict[str, Any]) -> None:
    answering = sum(s["reachable"] for s in r["seeds"])
    lines = [("seeds", f"{answering} of {len(r['seeds'])} answer: "
                       + ", ".join(s["seed"] + ("" if s["reachable"] else " (no answer)")
                                   for s in r["seeds"]))]
    if "nodes" in r:
        lines.append(("cluster", f"{r['cluster_size']} node(s); the client reaches "
                                 f"{len(r['nodes'])}"))
        lines += [("node", f"{n['node']} {n['address']} build {n['build']}")
                  for n in r["nodes"]]
        lines.append(("namespace", f"{r['namespace']}, set {r['set']}"))
        for v in r["namespace_nodes"]:
            lines += _node_rows(v)
    output.rows(lines)
    for line in r.get("startup", []):
        print(line)
    for title, items in (("notes", r["notes"]), ("problems", r["problems"])):
        if items or title == "problems":
            print(f"{title}:" if items else f"{title}: none")
            for item in items:
                print(f"  - {item}")


def _node_rows(v: dict[str, Any]) -> list[tuple[str, str]]:
    at = f"  {v['node']}"
    if not v["present"]:
        return [(at, "does not have this namespace")]
    pct = lambda x: "?" if x is None else f"{x}%"  # noqa: E731
    return [
        (f"{at} space", f"objects {v['objects']}, {output.size(v['used_bytes'])} of "
                        f"{output.size(v['total_bytes'])} used ({pct(v['used_pct'])}), "
                        f"{pct(v['avail_pct'])} available"),
        (f"{at} stop-writes", f"{_flag(v['stop_writes'])} (at used "
                              f"{pct(v['stop_writes_used_pct'])} or avail "
                              f"{pct(v['stop_writes_avail_pct'])}); clock skew "
                              f"{_flag(v['clock_skew_stop_writes'])}"),
        (f"{at} records", f"max-record-size {v['max_record_size']}, replication factor "
                          f"{v['replication_factor']}, storage-engine "
                          f"{v['storage_engine'] or 'unknown'}"),
        (f"{at} ttl", f"default-ttl {v['default_ttl']}, nsup-period {v['nsup_period']}, "
                      f"allow-ttl-without-nsup {_flag(v['allow_ttl_without_nsup'])}"),
        (f"{at} eviction", f"evict-used-pct {pct(v['evict_used_pct'])} (hwm breached "
                           f"{_flag(v['hwm_breached'])}), evict-tenths-pct "
                           f"{_or_unknown(v['evict_tenths_pct'])}, evict-hist-buckets "
                           f"{_or_unknown(v['evict_hist_buckets'])}"),
        (f"{at} nsup", f"evicted {_or_unknown(v['evicted_objects'])}, expired "
                       f"{_or_unknown(v['expired_objects'])}, never expire "
                       f"{_or_unknown(v['non_expirable_objects'])}, evict-ttl "
                       f"{_or_unknown(v['evict_ttl'])}"),
    ] + ([(f"{at} device", f"max-write-cache {output.size(v['max_write_cache'])}, "
                          f"post-write-cache {output.size(v['post_write_cache'])}, "
                          f"defrag-lwm-pct {_or_unknown(v['defrag_lwm_pct'])}")]
         if v["storage_engine"] == "device" and v["write_block_size"] is None else [])


def _flag(value: bool | None) -> str:
    return "unknown" if value is None else str(value).lower()
