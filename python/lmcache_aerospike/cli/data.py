"""One chunk at a time: put, get, rm, inspect, pin and unpin.

rm and inspect also take the digest `ls` prints for a chunk stored without its key
(send_key false, the default): 40 hex digits, the meta record's digest. The meta
record is then found by a scan of the set, and its segments by its write id (a
segment's key, and so its index, is derived from the chunk's key, which is not
stored).

Payloads go between files and the extension's buffers: a file is mapped, not read,
for put; get allocates the chunk's size from stat() and the extension receives into
that buffer, which is written out as is (binary, never decoded).
"""

from __future__ import annotations

import argparse
import contextlib
import mmap
import os
import stat
import sys
from typing import Any, Iterator

from lmcache_aerospike import _native, logs
from lmcache_aerospike.cli import ls, output
from lmcache_aerospike.cli.settings import UsageError, connect, load, options

NOT_FOUND = 1
GET_ATTEMPTS = 3  # a chunk overwritten by a larger one between stat and get: retry

EXAMPLES = {
    "put": """\
examples:
  lmcache-aerospike put mykey payload.bin
  head -c 4M /dev/urandom | lmcache-aerospike put mykey --pin
  lmcache-aerospike put mykey payload.bin --md-file metadata.bin --serde naive""",
    "get": """\
examples:
  lmcache-aerospike get mykey copy.bin
  lmcache-aerospike get mykey | sha256sum

A miss prints "KEY: not found" on stderr and exits 1 (FILE is then left alone).""",
    "rm": """\
examples:
  lmcache-aerospike rm mykey otherkey
  lmcache-aerospike ls --prefix test@ | xargs lmcache-aerospike rm
  lmcache-aerospike rm 9f3c...e1a0      # a digest ls printed (a chunk without its key)""",
    "inspect": """\
examples:
  lmcache-aerospike inspect 'Qwen/Qwen3-8B@1@0@3f2a9c@bfloat16'
  lmcache-aerospike inspect mykey --json
  lmcache-aerospike inspect 9f3c...e1a0  # a digest ls printed: found by a scan

It shows every field of the meta record, the TTL left, the pin, whether each
segment record is present and of the meta record's write, and the CRC verdict.""",
    "pin": """\
examples:
  lmcache-aerospike pin mykey otherkey
  lmcache-aerospike pin --prefix 'Qwen/Qwen3-8B@'    # needs send_key true at put

A pinned chunk's records never expire.""",
    "unpin": """\
examples:
  lmcache-aerospike unpin mykey
  lmcache-aerospike unpin --prefix 'Qwen/Qwen3-8B@'

The chunk's records get default_ttl_seconds again: give the settings LMCache uses.""",
}


def register(subparsers: Any) -> None:
    def add(name: str, help: str, func: Any) -> argparse.ArgumentParser:
        p = subparsers.add_parser(name, parents=[options()], help=help, description=help,
                                  epilog=EXAMPLES[name],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(func=func)
        return p

    p = add("put", "store FILE (or stdin) as the chunk KEY", put)
    p.add_argument("key", metavar="KEY")
    p.add_argument("file", metavar="FILE", nargs="?", default="-", help="- for stdin")
    p.add_argument("--pin", action="store_true", help="never expire")
    p.add_argument("--md-file", metavar="FILE", help="the md blob (LMCache's metadata)")
    p.add_argument("--serde", help="the serde tag to store")
    p.add_argument("--ttl-class", help="the ttl_class tag to store")

    p = add("get", "write the chunk KEY to FILE (or stdout)", get)
    p.add_argument("key", metavar="KEY")
    p.add_argument("file", metavar="FILE", nargs="?", default="-", help="- for stdout")

    p = add("rm", "remove chunks (meta record, then segments)", rm)
    p.add_argument("keys", metavar="KEY", nargs="+", help="a chunk key, or the digest ls "
                                                           "prints for a chunk without one")

    p = add("inspect", "take one chunk apart: meta fields, segments, CRC", inspect)
    p.add_argument("key", metavar="KEY", help="a chunk key, or the digest ls prints for a "
                                              "chunk without one")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")

    for name, verb in (("pin", "never expire"), ("unpin", "expire by TTL again")):
        p = add(name, f"make chunks {verb}", pin if name == "pin" else unpin)
        p.add_argument("keys", metavar="KEY", nargs="*")
        p.add_argument("--prefix", metavar="P", help="every chunk whose key starts with P")


def connected(args: argparse.Namespace) -> contextlib.closing[_native.Connector]:
    return contextlib.closing(connect(load(args)))


def not_found(keys: list[str]) -> int:
    for key in keys:
        print(f"{key}: not found", file=sys.stderr)
    return NOT_FOUND if keys else 0


# ------------------------------------------------------------------ put, get


@contextlib.contextmanager
def payload(path: str) -> Iterator[Any]:
    """The bytes to store: a regular file mapped (no copy on our side), else read."""
    if path == "-":
        yield sys.stdin.buffer.read()
        return
    with open(path, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
            yield f.read()
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            yield mapped


def put(args: argparse.Namespace) -> int:
    md = None
    if args.md_file:
        with open(args.md_file, "rb") as f:
            md = f.read()
    with connected(args) as conn, payload(args.file) as buf:
        conn.put(args.key, buf, md=md, pin=args.pin, serde=args.serde,
                 ttl_class=args.ttl_class)
        nbytes = len(buf)
        nseg = conn.plan(nbytes)[0]
    layout = "1 record" if nseg == 1 else f"a meta record and {nseg} segments"
    print(f"{args.key}: stored {nbytes} bytes as {layout}" + (", pinned" if args.pin else ""))
    return 0


def read_chunk(conn: _native.Connector, key: str) -> memoryview | None:
    """The chunk's bytes in a buffer sized from its meta record; None on a miss."""
    for _ in range(GET_ATTEMPTS):
        meta = conn.stat(key)
        if meta is None:
            return None
        buf = bytearray(meta["tot_b"])
        try:
            got = conn.get(key, buf)
        except _native.InvalidArgumentError:  # overwritten by a larger chunk since
            continue
        return None if got is None else memoryview(buf)[:got]
    raise _native.error_from(f"EBUSY: {key}: overwritten while being read, "
                             f"{GET_ATTEMPTS} times")


def get(args: argparse.Namespace) -> int:
    with connected(args) as conn:
        data = read_chunk(conn, args.key)
    if data is None:
        return not_found([args.key])
    if args.file == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:  # opened only now, so a miss leaves FILE as it was
        with open(args.file, "wb") as f:
            f.write(data)
    return 0


# ------------------------------------------------------------------ rm, pin


def is_digest(text: str) -> bool:
    """A meta record's digest as ls prints it: 40 hex digits. (An LMCache key always
    holds "@"; a key of 40 hex digits that is no digest is then tried as a key.)"""
    return len(text) == 40 and all(c in "0123456789abcdefABCDEF" for c in text)


def by_digest(conn: _native.Connector, digests: list[str]) -> dict[str, dict[str, Any]]:
    """{digest: its meta record's scan row, with "segment_digests": the segment
    records of its write} for the digests found, from one scan of the set."""
    wanted = {bytes.fromhex(d): d for d in digests}
    rows = conn.scan(records=True)
    metas = {wanted[r["digest"]]: r for r in rows
             if r["kind"] == "meta" and r["digest"] in wanted}
    for meta in metas.values():
        meta["segment_digests"] = [r["digest"] for r in rows
                                   if r["kind"] == "segment" and r["wid"] == meta["wid"]]
    return metas


def rm(args: argparse.Namespace) -> int:
    missing = []
    with connected(args) as conn:
        digests = [k for k in args.keys if is_digest(k)]
        found = by_digest(conn, digests) if digests else {}
        for key in args.keys:
            if key in found:
                # The meta record first: the chunk is a miss from then on, and a
                # segment left behind by a failure is an orphan `repair` removes.
                meta = found[key]
                conn.remove_record(meta["digest"])
                gone = sum(conn.remove_record(d) for d in meta["segment_digests"])
                print(f"{key}: removed (meta record and {gone} segment records)")
            elif conn.remove(key):  # a key (even one of 40 hex digits)
                print(f"{key}: removed")
            else:
                missing.append(key)
    return not_found(missing)


def _touch(args: argparse.Namespace, pinned: bool) -> int:
    if bool(args.keys) == (args.prefix is not None):
        raise UsageError("give KEYs or --prefix P, not both or neither")
    verb = "pinned" if pinned else "unpinned"
    missing = []
    with connected(args) as conn:
        keys = args.keys or [row["key"] for row in ls.chunks(conn, prefix=args.prefix)]
        for key in keys:
            if conn.touch(key, pin=pinned):
                print(f"{key}: {verb}")
            else:
                missing.append(key)
    if args.prefix is not None:
        print(f"{verb} {len(keys) - len(missing)} chunks under {args.prefix!r}",
              file=sys.stderr)
    return not_found(missing)


def pin(args: argparse.Namespace) -> int:
    return _touch(args, True)


def unpin(args: argparse.Namespace) -> int:
    return _touch(args, False)


# -------------------------------------------------------------------- inspect

CRC_VERDICTS = {
    "absent": "not stored",
    "ok": "ok (matches the payload)",
    "mismatch": "MISMATCH: the chunk reads as a miss",
    "unchecked": "stored, not checked (a segment is unusable)",
    "unread": "not checked (reading the payload needs the chunk's key)",
}


def inspect(args: argparse.Namespace) -> int:
    settings = load(args)
    with contextlib.closing(connect(settings)) as conn:
        found = _inspect_digest(conn, args.key) if is_digest(args.key) else None
        if found is None:  # a key (even one of 40 hex digits)
            found = conn.inspect(args.key)
            if found is not None:
                found = {"key": args.key,
                         "digest": logs.digest(settings.set, args.key + "|m"), **found}
                found["readable"] = readable(found)
    if found is None:
        return not_found([args.key])
    if args.json:
        output.emit_json(found)
    else:
        output.rows(_inspect_rows(found))
    return 0


def _inspect_digest(conn: _native.Connector, digest: str) -> dict[str, Any] | None:
    """What a scan tells of a chunk without its key: the meta record's fields, and
    how many segment records of its write there are (which index each holds, and
    the CRC, would take the key). Readable: every segment there."""
    meta = by_digest(conn, [digest]).get(digest)
    if meta is None:
        return None
    present = len(meta.pop("segment_digests"))
    expected = meta["nseg"] if meta["nseg"] > 1 else 0
    found = {k: v for k, v in meta.items() if k not in ("digest", "kind")}
    found.update(key=None, digest=digest, md=None, crc="unread",
                 segments=["ok"] * min(present, expected) + ["missing"] * max(0, expected - present),
                 readable=present >= expected)
    return found


def readable(m: dict[str, Any]) -> bool:
    """Whether a get would return the chunk: every segment of this write, and the
    CRC (when stored) matching."""
    return all(s == "ok" for s in m["segments"]) and m["crc"] in ("absent", "ok", "unread")


def _inspect_rows(m: dict[str, Any]) -> list[tuple[str, Any]]:
    segs = m["segments"]
    bad = [f"{i}: {s}" for i, s in enumerate(segs) if s != "ok"]
    layout = ("1 record (the payload is in the meta record)" if m["nseg"] == 1 else
              f"{m['nseg']} segments of {m['seg_b']} bytes "
              f"(the last {m['tot_b'] - (m['nseg'] - 1) * m['seg_b']})")
    crc = "none" if m["crc32"] is None else f"0x{m['crc32']:08x}"
    return [
        ("key", m["key"] if m["key"] is not None else "not stored (send_key false)"),
        ("digest", f"{m['digest']} (meta record)"),
        ("readable", "yes" if m["readable"] else "no: a get misses"),
        ("size", f"{m['tot_b']} bytes ({output.size(m['tot_b'])})"),
        ("layout", layout),
        ("segments", "none" if not segs else
         f"{len(segs) - len(bad)} of {len(segs)} records of this write found (which "
         "index each holds needs the chunk's key)" if m["key"] is None else
         f"{len(segs) - len(bad)} of {len(segs)} ok" + (f"; {', '.join(bad)}" if bad else "")),
        ("crc32", f"{crc}: {CRC_VERDICTS.get(m['crc'], m['crc'])}"),
        ("pin", "yes" if m["pin"] else "no"),
        ("ttl", output.ttl(m["ttl"])),
        ("created", f"{output.when(m['created_at'])} ({m['created_at']})"),
        ("write id", f"0x{m['wid']:016x}"),
        ("schema", f"version {m['ver']}"),
        ("serde", m["serde"] or "-"),
        ("ttl_class", m["ttl_class"] or "-"),
        ("md", "not read (the chunk's key is needed)" if m["md"] is None else
               f"{len(m['md'])} bytes" + (f": {m['md'][:32].hex()}"
                                          + ("..." if len(m["md"]) > 32 else "")
                                          if m["md"] else "")),
    ]
