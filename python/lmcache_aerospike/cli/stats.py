"""`stats`: what the set holds (a scan of its meta records; per model and cache salt
too, as `ls --by-model`), how full the namespace is (its info), what NSUP has
evicted and expired on each node, and about how many more chunks fit before it
stops writes."""

from __future__ import annotations

import argparse
import contextlib
import statistics
from typing import Any

from lmcache_aerospike.cli import ls, output, server
from lmcache_aerospike.cli.settings import connect, load, options

MARGIN = 64 * 1024  # room per record besides its payload (DESIGN.md, LMCA_RECORD_MARGIN)
DEFAULT_CHUNK = 4 << 20

EXAMPLES = """\
examples:
  lmcache-aerospike stats --config lmcache.yaml
  lmcache-aerospike stats --chunk-size 256K --json

The room estimate (an estimate, not a promise):
  bytes left  = per node, the smaller of
                  data-size x stop-writes-used-pct - data used, and
                  data-size x (data_avail_pct - stop-writes-avail-pct),
                i.e. the space before min(stop-writes-used-pct,
                100 - stop-writes-avail-pct) is reached, counting blocks that
                fragmentation holds; the fullest node decides, times the nodes,
                divided by the replication factor
  chunk cost  = the chunk's records as Connector.plan() lays them out (one record
                up to the single-record threshold, else a meta record and its
                segments), each with the 64 KiB packing margin DESIGN.md describes
  chunks      = bytes left / chunk cost
SIZE is --chunk-size (4M, 256K or bytes), by default the median stored chunk (4M
when the set is empty). Capacity is the namespace's, shared with other sets.

Per node it also shows what NSUP did, from the namespace's statistics:
evicted_objects, expired_objects, evict_ttl, hwm_breached (eviction triggered),
stop_writes, non_expirable_objects and client_write_error.
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "stats", parents=[options()], help="chunks, bytes, pins, capacity, room left",
        description=__doc__, epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunk-size", type=_size_arg, metavar="SIZE",
                   help="chunk size for the room estimate (default: the median stored)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def _size_arg(text: str) -> int:
    try:
        return output.parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    with contextlib.closing(connect(settings)) as conn:
        rows = conn.scan()
        views = [v for v in server.namespace(conn, settings.namespace) if v.present]
        sizes = [r["tot_b"] for r in rows]
        chunk = args.chunk_size
        if chunk is None:
            chunk = statistics.median_low(sizes) if sizes else DEFAULT_CHUNK
        cost = chunk_cost(conn.plan(chunk))
    report = {
        "namespace": settings.namespace, "set": settings.set,
        "chunks": len(rows), "bytes": sum(sizes), "pinned": sum(bool(r["pin"]) for r in rows),
        "records": sum(r["nseg"] + (r["nseg"] > 1) for r in rows),
        "tenants": ls.tenants(rows),
        "capacity": [v.as_dict() for v in views],
        "estimate": estimate(views, chunk, cost, args.chunk_size is not None, bool(sizes)),
    }
    if args.json:
        output.emit_json(report)
    else:
        _print(report)
    return 0


def chunk_cost(plan: tuple[int, int, int]) -> dict[str, int]:
    """Bytes one chunk takes on the server: its records, each with the margin."""
    nseg, seg_b, last_b = plan
    records = 1 if nseg == 1 else nseg + 1  # the meta record holds the payload, or not
    payload = seg_b * (nseg - 1) + last_b
    return {"records": records, "stored_bytes": payload + records * MARGIN}


def estimate(views: list[server.NodeNamespace], chunk: int, cost: dict[str, int],
             given: bool, stored: bool) -> dict[str, Any]:
    lefts = [v.bytes_left() for v in views]
    known = [b for b in lefts if b is not None]
    rf = max(1, min((v.replication_factor or 1 for v in views), default=1))
    left = min(known) * len(views) // rf if known and len(known) == len(lefts) else None
    return {
        "chunk_bytes": chunk,
        "chunk_size_from": "--chunk-size" if given else "median" if stored else "default",
        **cost,
        "bytes_left": left,
        "chunks_left": None if left is None else left // cost["stored_bytes"],
    }


def _print(r: dict[str, Any]) -> None:
    e = r["estimate"]
    lines = [
        ("set", f"{r['namespace']}/{r['set']}"),
        ("chunks", f"{r['chunks']} ({r['pinned']} pinned), {r['records']} records"),
        ("bytes", f"{r['bytes']} ({output.size(r['bytes'])})"),
    ]
    for t in r["tenants"]:
        who = ("chunks without their key" if t["model"] is None else
               f"model {t['model']}" + ("" if t["salt"] is None else f", salt {t['salt']}"))
        lines.append((who, f"{t['chunks']} chunks, {output.size(t['bytes'])}"))
    for v in r["capacity"]:
        lines.append((f"node {v['node']}", f"{output.size(v['used_bytes'])} of "
                      f"{output.size(v['total_bytes'])} used ({_pct(v['used_pct'])}), "
                      f"{_pct(v['avail_pct'])} available; stop-writes at used "
                      f"{_pct(v['stop_writes_used_pct'])} or avail "
                      f"{_pct(v['stop_writes_avail_pct'])}"))
        lines.append((f"node {v['node']} nsup", nsup_line(v)))
    source = {"--chunk-size": "--chunk-size", "median": "the median stored chunk",
              "default": "no chunk stored yet"}[e["chunk_size_from"]]
    room = ("unknown (the namespace does not report its thresholds)"
            if e["chunks_left"] is None else
            f"about {e['chunks_left']} more chunks of {output.size(e['chunk_bytes'])} "
            f"({source}) before stop-writes: {output.size(e['bytes_left'])} left, "
            f"{output.size(e['stored_bytes'])} per chunk in {e['records']} record"
            f"{'s' * (e['records'] != 1)} "
            f"(an estimate; see --help)")
    lines.append(("room", room))
    output.rows(lines)


def nsup_line(v: dict[str, Any]) -> str:
    """What NSUP has done on a node, and whether it refuses writes."""
    def n(key: str) -> str:
        return "?" if v[key] is None else str(v[key])

    def flag(key: str) -> str:
        return "?" if v[key] is None else ("yes" if v[key] else "no")

    return (f"evicted {n('evicted_objects')}, expired {n('expired_objects')}, evict-ttl "
            f"{n('evict_ttl')}, hwm breached {flag('hwm_breached')}, stop-writes "
            f"{flag('stop_writes')}, never expire {n('non_expirable_objects')}, client write "
            f"errors {n('client_write_error')}")


def _pct(value: int | None) -> str:
    return "?" if value is None else f"{value}%"
