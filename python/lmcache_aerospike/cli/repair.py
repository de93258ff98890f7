"""`repair`: find the records no reader can use, and delete them with --apply.

The engine's sweep (Connector.sweep) reports segment records no valid meta record
claims (a put killed before its commit, an abort that could not clean up, or an
overwrite with fewer segments; pinned ones never expire), meta records whose
segments are missing (the chunk reads as a miss), and corrupt records. A put in
flight looks orphaned until it commits, so repair sweeps twice, --interval seconds
apart, and acts only on what both sweeps report with the same write id. A broken
chunk goes whole: its meta record and the segments it still has.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time
from collections import Counter
from typing import Any

from lmcache_aerospike import _native
from lmcache_aerospike.cli import output
from lmcache_aerospike.cli.settings import UsageError, connect, load, options

EXAMPLES = """\
examples:
  lmcache-aerospike repair                      # dry run: what would be deleted
  lmcache-aerospike repair --apply --interval 300
  lmcache-aerospike repair --json --interval 120

Reasons: orphan_segment (a segment no meta record claims; "overwritten" when its
chunk has a meta record of a later write, which needs send_key true to tell),
broken_meta (a chunk missing segments: its meta record, and its remaining segments
as kind segment), corrupt (a record with schema bins that fails validation). Sizes
are known for broken chunks only; a sweep does not read payloads. A put of the same key racing
the deletion can lose that chunk: it then reads as a miss, never as wrong bytes.
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "repair", parents=[options()], help="find (and with --apply delete) orphaned and "
                                            "broken records",
        description=__doc__, epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--apply", action="store_true", help="delete them (default: dry run)")
    p.add_argument("--interval", type=float, default=60.0, metavar="SECONDS",
                   help="between the two sweeps (default 60): longer than any put takes")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.interval >= 0:
        raise UsageError(f"--interval {args.interval}: expected 0 or more seconds")
    bar = output.Progress()
    try:
        with contextlib.closing(connect(load(args))) as conn:
            report = sweep_twice(conn, args.interval, bar)
            if args.apply:
                delete(conn, report["records"], bar)
    finally:
        bar.done()
    report["applied"] = args.apply
    report["summary"] = summary(report["records"])
    if args.json:
        output.emit_json(report)
    else:
        _print(report)
    return 0


def wait(seconds: float, bar: output.Progress) -> None:
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        bar.show(f"repair: second sweep in {math.ceil(left)} s")
        time.sleep(min(1.0, left))


def _identity(rec: dict[str, Any]) -> tuple:
    # The write id too: a segment rewritten by a new put between the sweeps has
    # the same digest, and is not the record the first sweep saw.
    return rec["digest"], rec["reason"], rec["wid"]


def sweep_twice(conn: _native.Connector, interval: float,
                bar: output.Progress) -> dict[str, Any]:
    bar.show("repair: first sweep")
    first = conn.sweep()
    wait(interval, bar)
    bar.show("repair: second sweep")
    second = conn.sweep()
    seen = {_identity(r) for r in first}
    both = [_record(r) for r in second if _identity(r) in seen]
    return {"interval_seconds": interval, "first_sweep": len(first),
            "second_sweep": len(second), "both_sweeps": len(both),
            "one_sweep_only": len(first) + len(second) - 2 * len(both),
            "records": (both + _look_closer(conn, both)) if both else []}


def _record(rec: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"digest": rec["digest"], "reason": rec["reason"], "kind": rec["kind"],
            "wid": rec["wid"], "ttl": rec["ttl"], "pinned": rec["ttl"] == -1,
            "nseg": rec.get("nseg", 0), "found": rec.get("found", 0), "bytes": None,
            "overwritten": None, "deleted": False, **more}


def _look_closer(conn: _native.Connector, records: list[dict[str, Any]]) -> list[dict]:
    """One scan of every record, for what the sweep does not say: the segments a
    broken chunk still has (it reports the meta record only), found by write id;
    each broken chunk's size; and, where keys are stored (send_key), whether an
    orphan segment's chunk was overwritten (it has a meta record of another write)
    rather than never committed. Returns the broken chunks' segments."""
    broken = {r["wid"]: r for r in records if r["reason"] == "broken_meta"}
    rows = conn.scan(records=True)
    chunks = {row["key"][:-2] for row in rows if row["kind"] == "meta" and row["key"]}
    keys = {row["digest"]: row["key"] for row in rows if row["key"]}
    for rec in records:
        key = keys.get(rec["digest"])
        if rec["reason"] == "orphan_segment" and key and "|s|" in key:
            rec["overwritten"] = key.rpartition("|s|")[0] in chunks
    rest = []
    for row in rows:
        meta = broken.get(row["wid"])
        if meta is not None and row["kind"] == "segment":
            rest.append(_record({**row, "reason": "broken_meta"}))
        elif meta is not None and row["digest"] == meta["digest"]:
            meta["bytes"] = row.get("tot_b")
    return rest


def delete(conn: _native.Connector, records: list[dict[str, Any]],
           bar: output.Progress) -> None:
    # Meta records first: a broken chunk stops being listed before its segments go.
    for i, rec in enumerate(sorted(records, key=lambda r: r["kind"] != "meta")):
        bar.show(f"repair: deleting {i + 1}/{len(records)}")
        rec["deleted"] = conn.remove_record(rec["digest"])


def summary(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Counts by reason and kind, the pinned among them, and the bytes known."""
    groups: dict[tuple, Counter] = {}
    for r in records:
        c = groups.setdefault((r["reason"], r["kind"]), Counter())
        c["records"] += 1
        c["pinned"] += r["pinned"]
        c["deleted"] += r["deleted"]
        c["bytes"] += r["bytes"] or 0
        c["overwritten"] += bool(r["overwritten"])
    counts = ("records", "pinned", "overwritten", "deleted", "bytes")
    return [{"reason": reason, "kind": kind, **{k: c[k] for k in counts}}
            for (reason, kind), c in sorted(groups.items())]


def _print(r: dict[str, Any]) -> None:
    print(f"first sweep: {r['first_sweep']} records; second sweep, {r['interval_seconds']:g} "
          f"s later: {r['second_sweep']}; left alone, seen in one sweep only (a put in "
          f"flight, or fixed meanwhile): {r['one_sweep_only']}")
    extra = len(r["records"]) - r["both_sweeps"]
    if extra > 0:  # the sweep reports a broken chunk by its meta record alone
        print(f"plus {extra} segment records of broken chunks, which go with their meta "
              f"record")
    for rec in r["records"]:
        gone = "" if not r["applied"] else "  deleted" if rec["deleted"] else "  already gone"
        over = "  (overwritten)" if rec["overwritten"] else ""
        print(f"  {rec['digest'].hex()}  {rec['reason']:<14} {rec['kind']:<7} "
              f"wid 0x{rec['wid']:016x}  ttl {output.ttl(rec['ttl'])}{over}{gone}")
    for g in r["summary"]:
        over = f", {g['overwritten']} of overwritten chunks" if g["overwritten"] else ""
        size = f", chunks of {output.size(g['bytes'])}" if g["bytes"] else ""
        print(f"{g['reason']:<14} {g['kind']:<7} {g['records']} records "
              f"({g['pinned']} pinned{over}{size})")
    n = len(r["records"])
    if not r["applied"]:
        print(f"would delete {n} records" + (": run again with --apply" if n else ""))
    else:
        done = sum(rec["deleted"] for rec in r["records"])
        print(f"deleted {done} records ({n - done} were already gone)")
