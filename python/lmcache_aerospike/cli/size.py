"""`size`: what a cache of so many tokens needs, before there is a cluster.

From a model's KV shape (or its Hugging Face config.json), the chunk size in
tokens, the tokens to keep and the cluster's shape, it works out a chunk's bytes,
the records the engine splits it into (the planner the engine uses, offline), and
per node: the records, the primary index's RAM, the device bytes held and the
device to give them at evict-used-pct, the server's other DRAM, and, for a rate
of stores and hits, the device bandwidth they need. Then the namespace settings
(the README's device recipe) for those sizes. No server is asked.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from typing import Any

from lmcache_aerospike import _native
from lmcache_aerospike.cli import output

# What the server holds per record (CE 8.1.2.0, measured: docs/capacity.md, "The
# model behind `size`"): the primary index keeps INDEX_BYTES in RAM for every
# copy of every record (as_index); on the device a record is its payload, its
# bins and the record's own header, rounded up to RBLOCK bytes. Chunks of 256
# KiB and 1 MiB took 192 bytes besides their payload, 4 MiB (a meta record and
# 3 segments) 432, 32 MiB (and 17) 1,552, each with a 28-byte md.
INDEX_BYTES = 64
RBLOCK = 16
META_RECORD_BYTES = 164    # a segmented chunk's meta record, without `md`
SEGMENT_OVERHEAD = 80      # a segment record besides its payload
INLINE_OVERHEAD = 164      # a one-record chunk's meta record besides its payload
# LMCache's RemoteMetadata blob for one KV group: 4 x (2 + 5 x groups) bytes
# (lmcache/v1/protocol.py:81-87, init_remote_metadata_info, 0.5.6).
MD_BYTES = 28
# The server's DRAM besides the index and the write caches: its own heap,
# buffers and threads (asd's RSS with one empty device namespace, 8.1.2.0: 192 MiB).
SERVER_BASE_BYTES = 192 << 20
WBLOCK = 8 << 20
# A namespace's devices or files on a node: at most 128, of at most 2 TiB each
# (AS_STORAGE_MAX_DEVICES, AS_STORAGE_MAX_DEVICE_SIZE in as/include/storage/storage.h).
MAX_DEVICES = 128
RECIPE_EVICT_TENTHS = 300  # the README's recipe: NSUP cuts 30 % a cycle
MAX_DEVICE_BYTES = 2 << 40

DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2,
               "half": 2, "fp8": 1, "float8": 1, "int8": 1, "uint8": 1}
_COUNT = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)\s*", re.I)
_SCALE = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}

EXAMPLES = """\
examples:
  # Llama-3.1-8B (32 layers, 8 KV heads of 128, bf16), 256-token chunks, ten
  # billion tokens on three nodes with two copies:
  lmcache-aerospike size --layers 32 --kv-heads 8 --head-size 128 --dtype bf16 \\
      --tokens 10G --nodes 3 --replication-factor 2
  lmcache-aerospike size --model-config config.json --tokens 2T --nodes 12 \\
      --stores-per-second 400 --hits-per-second 4000 --json

How it counts (docs/capacity.md has the measurements behind each term):
  chunk bytes   2 (K and V; 1 with --mla) x layers x chunk tokens x KV heads x
                head size x dtype bytes / tensor-parallel ranks (each rank
                stores its own chunk)
  records       the engine's plan for that size (Connector.plan, offline): one
                record up to the single-record threshold, else a meta record and
                its segments
  device bytes  each record's payload and overhead, rounded to 16 bytes, for
                every copy; the device is that over evict-used-pct
  index RAM     64 bytes for every copy of every record, on the node holding it
  other DRAM    per file, max-write-cache (full only while writes outpace the
                device) and post-write-cache, and the server's own base
  bandwidth     stores x device bytes x copies, and touches up to
                touch_budget_percent of that, written; hits x chunk bytes read
                (one copy), spread over the nodes
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "size", help="plan a cluster for a number of cached tokens (no server needed)",
        description=__doc__, epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    m = p.add_argument_group("the model's KV (or --model-config)")
    m.add_argument("--model-config", metavar="FILE",
                   help="a Hugging Face config.json: num_hidden_layers, "
                        "num_key_value_heads, head_dim and torch_dtype")
    m.add_argument("--layers", type=_positive, help="attention layers")
    m.add_argument("--kv-heads", type=_positive, help="KV heads (all ranks together)")
    m.add_argument("--head-size", type=_positive, help="head dimension")
    m.add_argument("--dtype", help="KV dtype: bf16, fp16, fp8, fp32 (default bf16)")
    m.add_argument("--mla", action="store_true",
                   help="one latent a token and layer (DeepSeek's MLA): --head-size is "
                        "its width, --kv-heads 1")
    m.add_argument("--tp", type=_positive, default=1,
                   help="tensor-parallel ranks: each stores its share as its own chunk")
    m.add_argument("--chunk-tokens", type=_positive, default=256,
                   help="LMCache's chunk_size (default 256)")
    c = p.add_argument_group("the cache")
    c.add_argument("--tokens", type=_count, required=True,
                   help="tokens to keep cached, e.g. 500M, 10G, 2T (decimal)")
    c.add_argument("--nodes", type=_positive, default=1)
    c.add_argument("--replication-factor", type=_positive, default=1)
    c.add_argument("--evict-used-pct", type=_pct, default=50,
                   help="the namespace's evict-used-pct (the recipe's 50)")
    c.add_argument("--files-per-node", type=_positive, default=1,
                   help="devices or files a node's namespace has, at least (each has its "
                        "own write and post-write cache; more where one would pass 2 TiB)")
    c.add_argument("--max-write-cache", type=_size, default=256 << 20)
    c.add_argument("--post-write-cache", type=_size, default=256 << 20)
    c.add_argument("--no-md", action="store_true",
                   help="chunks stored without LMCache's metadata blob (save_chunk_meta off)")
    c.add_argument("--max-record-size", type=_size, default=8 << 20,
                   help="the namespace's max-record-size (the recipe's 8M)")
    r = p.add_argument_group("the load (cluster-wide, chunks a second)")
    r.add_argument("--stores-per-second", type=float, default=0.0)
    r.add_argument("--hits-per-second", type=float, default=0.0)
    r.add_argument("--touch-budget-percent", type=float, default=100.0,
                   help="the engine's touch_budget_percent (moves rewrite at most this "
                        "share of what stores write)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    shape = model_shape(args)
    report = plan(shape, tokens=args.tokens, nodes=args.nodes, rf=args.replication_factor,
                  evict_pct=args.evict_used_pct, files=args.files_per_node,
                  write_cache=args.max_write_cache, post_cache=args.post_write_cache,
                  md=not args.no_md, max_record_size=args.max_record_size,
                  stores=args.stores_per_second, hits=args.hits_per_second,
                  touch_pct=args.touch_budget_percent)
    if args.json:
        output.emit_json(report)
    else:
        _print(report)
    return 0


# ---------------------------------------------------------------- the model


def model_shape(args: argparse.Namespace) -> dict[str, Any]:
    """layers, kv_heads, head_size, dtype_bytes, kv (2 or 1), tp, chunk_tokens:
    from the flags, over what --model-config says."""
    found: dict[str, Any] = {}
    if args.model_config:
        found = from_hf_config(args.model_config)
    for key in ("layers", "kv_heads", "head_size"):
        if getattr(args, key) is not None:
            found[key] = getattr(args, key)
    dtype = args.dtype or found.get("dtype") or "bf16"
    if dtype.lower() not in DTYPE_BYTES:
        raise _native.error_from(f"ECONFIG: --dtype {dtype}: expected one of "
                                 f"{', '.join(sorted(DTYPE_BYTES))}")
    if args.mla:
        found["kv_heads"] = 1
    missing = [f"--{k.replace('_', '-')}" for k in ("layers", "kv_heads", "head_size")
               if k not in found]
    if missing:
        raise _native.error_from(f"ECONFIG: the model's KV shape needs {', '.join(missing)} "
                                 f"(or --model-config)")
    if found["kv_heads"] % args.tp and not args.mla:
        raise _native.error_from(f"ECONFIG: --tp {args.tp}: does not divide --kv-heads "
                                 f"{found['kv_heads']}")
    return {"layers": found["layers"], "kv_heads": found["kv_heads"],
            "head_size": found["head_size"], "dtype": dtype.lower(),
            "dtype_bytes": DTYPE_BYTES[dtype.lower()], "kv": 1 if args.mla else 2,
            "tp": args.tp, "chunk_tokens": args.chunk_tokens}


def from_hf_config(path: str) -> dict[str, Any]:
    """The KV shape a Hugging Face config.json states (text_config for the
    multimodal ones)."""
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise _native.error_from(f"ECONFIG: --model-config {path}: {e}") from None
    cfg = cfg.get("text_config", cfg)
    out: dict[str, Any] = {}
    if "num_hidden_layers" in cfg:
        out["layers"] = int(cfg["num_hidden_layers"])
    heads = cfg.get("num_key_value_heads", cfg.get("num_attention_heads"))
    if heads is not None:
        out["kv_heads"] = int(heads)
    if cfg.get("head_dim"):
        out["head_size"] = int(cfg["head_dim"])
    elif cfg.get("hidden_size") and cfg.get("num_attention_heads"):
        out["head_size"] = int(cfg["hidden_size"]) // int(cfg["num_attention_heads"])
    if isinstance(cfg.get("torch_dtype"), str):
        out["dtype"] = cfg["torch_dtype"]
    return out


# ----------------------------------------------------------------- the plan


def record_bytes(payload: int, overhead: int) -> int:
    """A record's bytes on the device: payload and overhead, in RBLOCKs."""
    return -(-(payload + overhead) // RBLOCK) * RBLOCK


def chunk_layout(chunk: int, md: bool, max_record_size: int, **settings: Any) -> dict[str, int]:
    """A chunk's records and their device bytes, one copy, as the engine plans it
    (with these engine settings, e.g. target_segment_bytes)."""
    nseg, seg_b, last_b = _native.plan_chunk(chunk, max_record_size=max_record_size, **settings)
    md_bytes = MD_BYTES if md else 0
    if nseg == 1:
        return {"records": 1, "segments": 0, "device_bytes":
                record_bytes(chunk + md_bytes, INLINE_OVERHEAD)}
    device = record_bytes(md_bytes, META_RECORD_BYTES)
    device += (nseg - 1) * record_bytes(seg_b, SEGMENT_OVERHEAD)
    device += record_bytes(last_b, SEGMENT_OVERHEAD)
    return {"records": nseg + 1, "segments": nseg, "segment_bytes": seg_b,
            "last_segment_bytes": last_b, "device_bytes": device}


def plan(shape: dict[str, Any], *, tokens: int, nodes: int, rf: int, evict_pct: int,
         files: int, write_cache: int, post_cache: int, md: bool, max_record_size: int,
         stores: float, hits: float, touch_pct: float) -> dict[str, Any]:
    """Everything `size` reports, as one document."""
    if rf > nodes:
        raise _native.error_from(f"ECONFIG: --replication-factor {rf}: more copies than "
                                 f"--nodes {nodes}")
    chunk = (shape["kv"] * shape["layers"] * shape["chunk_tokens"] * shape["kv_heads"]
             * shape["head_size"] * shape["dtype_bytes"] // shape["tp"])
    layout = chunk_layout(chunk, md, max_record_size)
    chunks = math.ceil(tokens / shape["chunk_tokens"]) * shape["tp"]
    per_node = lambda total: math.ceil(total * rf / nodes)  # noqa: E731
    records = per_node(chunks * layout["records"])
    device_used = per_node(chunks * layout["device_bytes"])
    device = math.ceil(device_used * 100 / evict_pct)
    index = records * INDEX_BYTES
    problems = []
    if math.ceil(device / files) > MAX_DEVICE_BYTES:
        files = math.ceil(device / MAX_DEVICE_BYTES)
    if files > MAX_DEVICES:
        fit = math.ceil(device * nodes / (MAX_DEVICES * MAX_DEVICE_BYTES))
        problems.append(f"a node needs {output.size(device)} of device, past the {MAX_DEVICES} "
                        f"devices of {output.size(MAX_DEVICE_BYTES)} a namespace may have on "
                        f"a node: plan {fit} nodes or more")
        files = MAX_DEVICES
    caches = files * (write_cache + post_cache)
    store_write = stores * layout["device_bytes"] * rf / nodes
    touch_write = store_write * touch_pct / 100
    tenths = evict_tenths(records, stores * layout["records"] * rf / nodes * (1 + touch_pct / 100))
    return {
        "model": shape, "tokens": tokens, "chunk_bytes": chunk, "chunk": layout,
        "chunks": chunks, "nodes": nodes, "replication_factor": rf,
        "per_node": {
            "records": records, "index_bytes": index, "device_used_bytes": device_used,
            "device_bytes": device, "files": files,
            "file_bytes": math.ceil(device / files / WBLOCK) * WBLOCK,
            "dram_bytes": index + caches + SERVER_BASE_BYTES,
            "dram": {"index": index, "max_write_cache": files * write_cache,
                     "post_write_cache": files * post_cache, "server": SERVER_BASE_BYTES},
            "dram_per_gib_held": (index + caches + SERVER_BASE_BYTES) / (device_used / 2**30)
            if device_used else None,
            "store_write_Bps": store_write, "touch_write_Bps": touch_write,
            "hit_read_Bps": hits * chunk / nodes,
            "nsup_records_per_second": stores * layout["records"] * rf / nodes,
        },
        "evict_tenths_pct": tenths,
        "settings": settings_for(evict_pct, tenths, files, write_cache, post_cache, device),
        "problems": problems,
    }


def evict_tenths(records: int, written_per_second: float) -> int:
    """evict-tenths-pct for a node holding `records` that stores and moves
    `written_per_second` records: NSUP's cut a cycle is that share of the records,
    and the namespace holds between the cut and all of its capacity, so the cut
    is as fine as the writes allow. The engine's clock gives a second of void
    time half a cut, so a cut must be twice a second's writes, and twice again
    for bursts. Without a rate, the recipe's 300 (a 2 GiB namespace's: every
    size from there up keeps pace with it, holding 70-100 % of its capacity)."""
    if written_per_second <= 0 or records <= 0:
        return RECIPE_EVICT_TENTHS
    return max(10, min(RECIPE_EVICT_TENTHS, math.ceil(4000 * written_per_second / records)))


def settings_for(evict_pct: int, tenths: int, files: int, write_cache: int, post_cache: int,
                 device: int) -> list[str]:
    """The namespace lines (the README's device recipe) for these sizes."""
    each = math.ceil(device / files / WBLOCK) * WBLOCK
    return (["nsup-period 1", "evict-hist-buckets 1000000", f"evict-tenths-pct {tenths}",
             "default-ttl 0", "max-record-size 8M", "storage-engine device {"]
            + [f"    file /data/lmcache-{i}.dat   # or: device /dev/nvme{i}n1"
               for i in range(files)]
            + [f"    filesize {_conf_size(each)}", "    direct-files true",
               f"    max-write-cache {_conf_size(write_cache)}",
               f"    post-write-cache {_conf_size(post_cache)}",
               f"    evict-used-pct {evict_pct}", "    stop-writes-used-pct 90",
               "    stop-writes-avail-pct 1", "}"])


def _conf_size(n: int) -> str:
    for unit, scale in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


# --------------------------------------------------------------------- text


def _print(r: dict[str, Any]) -> None:
    m, n, c = r["model"], r["per_node"], r["chunk"]
    rate = lambda bps: f"{bps / 1e6:,.1f} MB/s"  # noqa: E731
    kv = "latent" if m["kv"] == 1 else "K and V"
    ranks = f" / {m['tp']} ranks" if m["tp"] > 1 else ""
    split = ("one record" if c["records"] == 1 else
             f"a meta record and {c['segments']} segments of {output.size(c['segment_bytes'])}"
             f" (the last {output.size(c['last_segment_bytes'])})")
    output.rows([
        ("chunk", f"{output.size(r['chunk_bytes'])}: {m['chunk_tokens']} tokens x "
                  f"{m['layers']} layers x {m['kv_heads']} heads of {m['head_size']} "
                  f"{m['dtype']} ({kv}){ranks}"),
        ("records a chunk", f"{split}; {output.size(c['device_bytes'])} on the device a copy"),
        ("chunks", f"{r['chunks']:,} for {r['tokens']:,} tokens, {r['replication_factor']} "
                   f"cop{'ies' if r['replication_factor'] > 1 else 'y'} on {r['nodes']} "
                   f"node{'s' * (r['nodes'] > 1)}"),
        ("a node holds", f"{n['records']:,} records, {output.size(n['device_used_bytes'])}"),
        ("  index RAM", output.size(n["index_bytes"])),
        ("  device", f"{output.size(n['device_bytes'])} in {n['files']} device(s) or file(s)"
                     f" of {output.size(n['file_bytes'])} (held at evict-used-pct)"),
        ("  DRAM", f"{output.size(n['dram_bytes'])}: index {output.size(n['dram']['index'])}, "
                   f"write caches {output.size(n['dram']['max_write_cache'])} at most, "
                   f"post-write caches {output.size(n['dram']['post_write_cache'])}, server "
                   f"{output.size(n['dram']['server'])}"),
        ("  DRAM per GiB held", "n/a" if n["dram_per_gib_held"] is None
         else output.size(int(n["dram_per_gib_held"]))),
        ("  device writes", f"{rate(n['store_write_Bps'])} for stores, up to "
                            f"{rate(n['touch_write_Bps'])} for touches"),
        ("  device reads", f"{rate(n['hit_read_Bps'])} for hits"),
        ("  NSUP evicts", f"{n['nsup_records_per_second']:,.0f} records a second; a cycle's cut "
                          f"{r['evict_tenths_pct'] / 10:g} % (evict-tenths-pct "
                          f"{r['evict_tenths_pct']}: the namespace holds "
                          f"{100 - r['evict_tenths_pct'] / 10:g}-100 % of its capacity)"),
    ])
    print("namespace settings (each node):")
    for line in r["settings"]:
        print(f"  {line}")
    for problem in r["problems"]:
        print(f"problem: {problem}")


# -------------------------------------------------------------- arguments


def _count(text: str) -> int:
    m = _COUNT.fullmatch(text)
    if m is None:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a count like 500M, 10G, 2T")
    n = int(float(m[1]) * _SCALE[m[2].upper()])
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be above 0")
    return n


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number above 0")
    return n


def _pct(text: str) -> int:
    n = _positive(text)
    if n > 100:
        raise argparse.ArgumentTypeError(f"{text!r}: a percentage, 1 to 100")
    return n


def _size(text: str) -> int:
    try:
        return output.parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
