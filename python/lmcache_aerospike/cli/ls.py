"""`ls`: the chunks of the set, from a scan of their meta records, sorted by key
and paginated. Keys are stored only when the writer had send_key true; other
chunks are listed by their meta record's digest."""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
from typing import Any

from lmcache_aerospike import _native
from lmcache_aerospike.cli import output
from lmcache_aerospike.cli.settings import UsageError, connect, load, options

EXAMPLES = """\
examples:
  lmcache-aerospike ls
  lmcache-aerospike ls --model Qwen/Qwen3-8B --long
  lmcache-aerospike ls --prefix 'Qwen/Qwen3-8B@1@0@' --limit 20 --after 'Qwen/...'
  lmcache-aerospike ls --limit 0 --json | jq '.matched'
  lmcache-aerospike ls --by-model          # chunks and bytes per model and cache salt

The model is the key's text before its first "@": LMCache writes
model@world_size@worker_id@hash@dtype (RemoteConnector, storage plugin) and
model@kv_rank@group@hash (L2 adapters). When more chunks remain than --limit, the
value to pass as --after for the next page is printed on stderr (and is
"next_after" in --json). The cache salt is the L2 key's fifth field, when LMCache
gave one (native_connector_l2_adapter._object_key_to_string); LMCache's in-process
engine hashes the salt into the chunk hash instead, so its keys show none.
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "ls", parents=[options()], help="list chunks (scans the set)",
        description=__doc__, epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prefix", metavar="P", help="keys starting with P")
    p.add_argument("--model", metavar="M", help="keys of model M")
    p.add_argument("--limit", type=int, default=100, metavar="N",
                   help="at most N chunks (default 100)")
    p.add_argument("--after", metavar="KEY", help="start after KEY (the previous page's "
                                                  "last)")
    p.add_argument("-l", "--long", action="store_true",
                   help="size, records, pin, TTL and creation time too")
    p.add_argument("--by-model", action="store_true",
                   help="chunks and bytes per model and cache salt, instead of the chunks")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def model_of(key: str) -> str:
    # Every LMCache key starts with the model name and "@": CacheEngineKey.to_string
    # (lmcache/utils.py:467-475), LayerCacheEngineKey (utils.py:607-615), and the L2
    # adapters' ObjectKey string (lmcache/v1/distributed/l2_adapters/
    # native_connector_l2_adapter.py:85-91), whose model_name may not hold "@"
    # (lmcache/v1/distributed/api.py:110, enforced at :143-146).
    return key.split("@", 1)[0]


def salt_of(key: str) -> str | None:
    """The cache salt of an L2 adapter's key (model@kv_rank as 8 hex digits@group@
    hash@salt), or None: unsalted, or a key of the in-process engine
    (model@world@worker@hash@dtype[@tags], whose salt is in the hash)."""
    fields = key.split("@")
    rank = fields[1] if len(fields) > 1 else ""
    if len(fields) == 5 and len(rank) == 8 and all(c in "0123456789abcdef" for c in rank):
        return fields[4]
    return None


def tenants(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chunks and bytes per (model, salt), largest first; chunks stored without
    their key under model None."""
    tally: dict[tuple, list[int]] = {}
    for r in rows:
        who = (None, None) if r["key"] is None else (model_of(r["key"]), salt_of(r["key"]))
        t = tally.setdefault(who, [0, 0])
        t[0] += 1
        t[1] += r["tot_b"]
    return [{"model": m, "salt": s, "chunks": n, "bytes": b}
            for (m, s), (n, b) in sorted(tally.items(),
                                         key=lambda kv: (-kv[1][1], str(kv[0])))]


def tenant_lines(rows: list[dict[str, Any]]) -> list[str]:
    return [f"{'(no key stored)' if t['model'] is None else t['model']}"
            f"{'' if t['salt'] is None else ' salt ' + t['salt']}\t{t['chunks']} chunks\t"
            f"{t['bytes']} bytes ({output.size(t['bytes'])})" for t in tenants(rows)]


def name_of(row: dict[str, Any]) -> str:
    """What a chunk is listed (and sorted, and paged) by: its key, else its digest."""
    return row["key"] if row["key"] is not None else row["digest"].hex()


def chunks(conn: _native.Connector, prefix: str | None = None,
           model: str | None = None) -> list[dict[str, Any]]:
    """The chunks (valid meta records) matching the filters, sorted by name. With
    a filter, chunks that do not hold their key cannot match: said once."""
    rows = conn.scan()
    if prefix is None and model is None:
        unnamed = sum(row["key"] is None for row in rows)
        if unnamed:
            output.warn(f"{unnamed} chunks do not hold their keys (written with send_key "
                        f"false): listed by their meta record's digest")
        return sorted(rows, key=name_of)
    named = [r for r in rows if r["key"] is not None]
    if len(named) < len(rows):
        output.warn(f"{len(rows) - len(named)} chunks do not hold their keys (written with "
                    f"send_key false): --prefix and --model cannot match them")
    return sorted((r for r in named if (prefix is None or r["key"].startswith(prefix))
                   and (model is None or model_of(r["key"]) == model)), key=name_of)


def run(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise UsageError(f"--limit {args.limit}: expected 0 or more")
    with contextlib.closing(connect(load(args))) as conn:
        rows = chunks(conn, args.prefix, args.model)
    if args.by_model:
        if args.json:
            output.emit_json({"matched": len(rows), "tenants": tenants(rows)})
        else:
            print("\n".join(tenant_lines(rows)) if rows else "no chunks")
        return 0
    if args.after is not None:
        rows = [r for r in rows if name_of(r) > args.after]
    page = rows[:args.limit]
    more = len(rows) > len(page)
    next_after = name_of(page[-1]) if more and page else None
    if args.json:
        output.emit_json({"matched": len(rows), "next_after": next_after,
                          "chunks": [_plain(r) for r in page]})
        return 0
    for row in page:
        print(_long(row) if args.long else name_of(row))
    if more and page:
        print(f"{len(rows) - len(page)} more; next page: --after {shlex.quote(next_after)}",
              file=sys.stderr)
    elif more:
        print(f"{len(rows)} chunks match", file=sys.stderr)
    return 0


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    keep = ("key", "digest", "tot_b", "nseg", "seg_b", "pin", "ttl", "created_at", "serde",
            "ttl_class", "crc32", "wid")
    return {k: row.get(k) for k in keep}


def _long(row: dict[str, Any]) -> str:
    pin = "pinned" if row["pin"] else "-"
    return (f"{name_of(row)}\t{row['tot_b']}\t{row['nseg']}\t{pin}\t"
            f"{output.ttl(row['ttl'])}\t{output.when(row['created_at'])}")
