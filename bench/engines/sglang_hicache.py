"""SGLang HiCache's storage calls at 64 pages: our backend beside SGLang's own `file`
backend, in one run.

    .venv-sglang/bin/python bench/engines/sglang_hicache.py --hosts 127.0.0.1:3000 [--pages 64]
        [--out DIR]    (sglang_hicache.md and .json with the commit, machine and command)

Both backends are built by SGLang's StorageBackendFactory and driven by the
functions of SGLang's HiCacheController that call them (managers/cache_controller.py):
a prefetch's hit query (`batch_exists`, :1308-1330) and page load, which is
`_page_get_zero_copy` (batch_get_v1, straight into the host pool) for a backend
with interface_v1 and `_generic_page_get` (batch_get into flat pages, then a copy
into the pool) otherwise: the `file` backend has only the latter. Pages are first
written by the matching backup function. Rows:

  aerospike        ours, interface_v1 (the zero-copy path)
  aerospike-copy   ours without interface_v1 (SGLang's copy path), for reference
  file             HiCacheFile in a directory (--file-dir; its files stay in the page
                   cache between rounds, so it reads from memory, not a disk)
  file-cold        the same files, the page cache dropped before each round
                   (/proc/sys/vm/drop_caches, root only): what a read from the disk costs

The host pool is SGLang's MHATokenToKVPoolHost (pin_memory off: no GPU here) with
the geometry given (default: page 64 tokens, 16 layers, 8 KV heads of 128, bf16:
4 MiB a page, 256 MiB per 64-page load). Rounds alternate the backends; the table
has the median and the best of --rounds, and every load is checked against the
pages written. A benchmark, not a test: the numbers are this machine's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import types
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import record  # noqa: E402  bench/record.py

import torch
from sglang.srt.managers.cache_controller import HiCacheController
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang.srt.mem_cache.utils import get_storage_hash_str

OURS = {"backend_name": "aerospike", "module_path": "lmcache_aerospike.hicache",
        "class_name": "AerospikeHiCacheStorage"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", default=os.environ.get("AEROSPIKE_TEST_HOSTS"),
                   help="Aerospike seeds (default $AEROSPIKE_TEST_HOSTS)")
    p.add_argument("--namespace", default="lmcache")
    p.add_argument("--pages", type=int, default=64)
    p.add_argument("--page-size", type=int, default=64, help="tokens per page")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--heads", type=int, default=8, help="KV heads")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--layout", default="page_first",
                   choices=["page_first", "page_first_direct", "layer_first", "page_head"])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--backends", default="aerospike,aerospike-copy,file,file-cold",
                   type=lambda text: [b for b in text.split(",") if b],
                   help="rows to run, of aerospike, aerospike-copy, file and file-cold "
                        "(file: the baseline of 'x file', so always run)")
    p.add_argument("--file-dir", type=Path, help="the file backend's directory "
                                                 "(default: a new one under /tmp, removed after)")
    p.add_argument("--json", type=Path, help="write the results here too")
    p.add_argument("--out", help="write a record (sglang_hicache.md, .json) here")
    args = p.parse_args(argv)
    if not args.hosts:
        p.error("--hosts (or AEROSPIKE_TEST_HOSTS) is required")
    return args


class _Op:
    """What the controller's page functions read of a prefetch operation."""
    request_id = "bench"

    @staticmethod
    def is_terminated() -> bool:
        return False


def host_pool(args) -> MHATokenToKVPoolHost:
    tokens = args.pages * args.page_size * 2
    kv = MHATokenToKVPool(tokens, args.page_size, torch.bfloat16, args.heads, args.head_dim,
                          args.layers, "cpu", False, v_head_dim=args.head_dim,
                          start_layer=0, end_layer=args.layers)
    pool = MHATokenToKVPoolHost(kv.get_device_pool_infos()[0].buffer_info, 2.0, 0,
                                args.page_size, args.layout, pin_memory=False, device="cpu",
                                device_capacity_tokens=kv.size, start_layer=0,
                                end_layer=args.layers,
                                write_back_staging=kv.hicache_write_back_staging)
    del kv
    return pool


def config(extra: dict) -> HiCacheStorageConfig:
    return HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0,
                                attn_cp_size=1, is_mla_model=False, enable_storage_metrics=False,
                                is_page_first_layout=False, model_name="bench-model",
                                extra_config=extra)


class Row:
    """One backend as SGLang's controller drives it."""

    def __init__(self, name: str, kind: str, extra: dict, pool, zero_copy: bool,
                 cold: bool = False) -> None:
        self.name, self.zero_copy, self.cold = name, zero_copy, cold
        self.backend = StorageBackendFactory.create_backend(kind, config(extra), pool)
        self.backend.register_mem_pool_host(pool)
        self.ctl = types.SimpleNamespace(storage_backend=self.backend, storage_host_pool=pool,
                                         page_size=pool.page_size)
        self.times: dict[str, list[float]] = {"batch_exists": [], "load": []}

    def backup(self, hashes, indices) -> float:
        fn = HiCacheController._page_set_zero_copy if self.zero_copy \
            else HiCacheController._generic_page_set
        started = time.perf_counter()
        assert fn(self.ctl, hashes, indices), f"{self.name}: backup failed"
        return time.perf_counter() - started

    def round(self, hashes, indices) -> None:
        if self.cold:  # the files' pages leave memory; the next reads go to the disk
            os.sync()
            Path("/proc/sys/vm/drop_caches").write_text("1")
        started = time.perf_counter()
        found = self.backend.batch_exists(hashes)
        self.times["batch_exists"].append(time.perf_counter() - started)
        assert found == len(hashes), f"{self.name}: {found} of {len(hashes)} pages found"
        fn = HiCacheController._page_get_zero_copy if self.zero_copy \
            else HiCacheController._generic_page_get
        started = time.perf_counter()
        loaded = fn(self.ctl, _Op, hashes, indices)
        self.times["load"].append(time.perf_counter() - started)
        assert loaded == len(hashes), f"{self.name}: {loaded} of {len(hashes)} pages loaded"

    def close(self) -> None:
        close = getattr(self.backend, "close", None)
        if close:
            close()


def same_pages(pool, at, to, n) -> bool:
    """Whether the pages at `to` hold the bytes of those at `at`, compared in the pool
    (views, no copies: a copy of every page would weigh on the next timed call)."""
    def page(indices, i):
        return pool.get_data_page(int(indices[i * pool.page_size]), flat=False) \
            .view(torch.int16)  # bits, not values: random bf16 bits hold NaNs
    return all(torch.equal(page(to, i), page(at, i)) for i in range(n))


def main(argv=None) -> None:
    args = parse_args(argv)
    pool = host_pool(args)
    n, ps = args.pages, args.page_size
    src = pool.alloc(n * ps)
    pool.kv_buffer.view(torch.uint8).random_()
    tokens = [int(x) for x in torch.randint(0, 100_000, (n * ps,))]
    hashes = get_storage_hash_str(tokens, None, page_size=ps)
    page_bytes = pool.get_data_page(int(src[0])).numel() * pool.dtype.itemsize
    page_mib = page_bytes / (1 << 20)

    setname = "sgbench" + uuid.uuid4().hex[:8]
    ours = dict(OURS, hosts=args.hosts, namespace=args.namespace, set=setname,
                default_ttl_seconds=3600)
    file_dir = args.file_dir or Path(tempfile.mkdtemp(prefix="sglang-hicache-file-"))
    rows = [Row("aerospike", "dynamic", dict(ours, interface_v1=1), pool, True),
            Row("aerospike-copy", "dynamic", ours, pool, False),
            Row("file", "file", {"file_storage_path": str(file_dir)}, pool, False),
            Row("file-cold", "file", {"file_storage_path": str(file_dir)}, pool, False,
                cold=True)]
    rows = [r for r in rows if r.name in args.backends or r.name == "file"]
    print(f"{n} pages of {page_mib:.1f} MiB ({args.layout}, {args.layers} layers, "
          f"{args.heads} KV heads of {args.head_dim}, page {ps} tokens, bf16); "
          f"{args.rounds} rounds; set {setname}; file backend in {file_dir}")
    backups = {r.name: r.backup(hashes, src) for r in rows}
    dst = pool.alloc(n * ps)
    blank = pool.get_dummy_flat_data_page()
    for _ in range(args.rounds):
        for r in rows:
            for i in range(n):  # the last round's pages must not pass for this one's
                pool.set_from_flat_data_page(int(dst[i * ps]), blank)
            r.round(hashes, dst)
            assert same_pages(pool, src, dst, n), f"{r.name}: pages differ"

    results = []
    medians = {(r.name, op): statistics.median(t) for r in rows for op, t in r.times.items()}
    bases = [b for b in ("file", "file-cold") if b in args.backends or b == "file"]
    print(f"\n{'backend':<16}{'op':<14}{'median ms':>10}{'best ms':>9}{'GB/s':>7}"
          + "".join(f"{'x ' + b:>12}" for b in bases))
    for r in rows:
        for op, times in r.times.items():
            med, best = medians[r.name, op], min(times)
            gbps = n * page_mib / 1024 / med if op == "load" else None
            vs = {b: medians[b, op] / med for b in bases}
            results.append({"backend": r.name, "op": op, "median_s": med, "best_s": best,
                            "gbps": gbps, "vs": vs})
            print(f"{r.name:<16}{op:<14}{med * 1e3:>10.2f}{best * 1e3:>9.2f}"
                  f"{'' if gbps is None else f'{gbps:.2f}':>7}"
                  + "".join(f"{vs[b]:>11.2f}x" for b in bases))
    print("\nbackup (once, " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in backups.items())
          + "); x B: how many times faster than row B, by the medians (above 1: faster)")
    for r in rows:
        if r.name.startswith("aerospike"):  # our chunks go; the file backend's directory
            for name in r.backend._names(hashes, flat=not r.zero_copy):
                r.backend.native.remove(name)
        r.close()
    if args.file_dir is None:
        shutil.rmtree(file_dir, ignore_errors=True)
    doc = {"args": {k: str(v) for k, v in vars(args).items()}, "page_bytes": page_bytes,
           "backup_s": backups, "results": results}
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
    if args.out:
        doc["provenance"] = record.provenance(args.hosts, ("sglang", "torch"),
                                              script=__file__, argv=argv, namespace=args.namespace)
        md = (f"# SGLang HiCache: hit query and page load at {n} pages\n\n"
              + record.header_line(doc["provenance"])
              + f"\n{n} pages of {page_mib:.1f} MiB ({args.layout}, {args.layers} layers, "
              f"{args.heads} KV heads of {args.head_dim}, page {ps} tokens, bf16); "
              f"{args.rounds} rounds, medians.\n\n" + markdown_table(results, bases))
        for path in record.write(args.out, "sglang_hicache", doc, md):
            print(f"wrote {path}", file=sys.stderr)


def markdown_table(results, bases):
    """The results as a Markdown table: ms, GB/s for loads, and how many times faster
    than each base row (the file backend, warm and cold)."""
    lines = ["| backend | op | median ms | best ms | GB/s | "
             + " | ".join(f"x {b}" for b in bases) + " |",
             "|---|---|---:|---:|---:|" + "---:|" * len(bases)]
    for r in results:
        gbps = "" if r["gbps"] is None else f"{r['gbps']:.2f}"
        lines.append(f"| {r['backend']} | {r['op']} | {r['median_s'] * 1e3:.2f} | "
                     f"{r['best_s'] * 1e3:.2f} | {gbps} | "
                     + " | ".join(f"{r['vs'][b]:.2f}x" for b in bases) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
