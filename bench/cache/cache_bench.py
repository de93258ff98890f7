"""The Aerospike tier as a cache when its namespace is full (a benchmark, not a test).

LMCache stores every new prefix and never deletes, so a remote tier is always full:
it must keep accepting stores and keep the recent and the hot chunks. This replays a
trace of multi-turn conversations (bench/cache/cache_trace.py: shared system prompts, users
with growing prefixes, Zipf popularity, a working set several times the namespace,
several writer processes, each with its own client, a hot set re-read throughout)
through

  ours       lmcache_aerospike._native.Connector, the asynchronous layer
             (submit_batch_prefix / _get / _set, completions on its event fd);
  exact LRU  a byte-accounted LRU simulation of the same budget on the same requests
             (bench/cache/cache_lru.py), beside every row;
  redis      LMCache's native RESP client on a redis-server started here with
             maxmemory = the budget and maxmemory-policy allkeys-lru, on the same
             requests (skipped, with the reason, when redis-server or LMCache's RESP
             extension is missing, or with --no-redis);
  mooncake   Mooncake Store (bench/peers/mooncake.sh), its master and one client
             lending it the budget, started here, on the same requests: its own
             eviction (skipped, with the reason, when it cannot be installed or
             started, or with --no-mooncake).

Each request looks up its chunks, loads the leading run of present ones and checks
every byte (payloads are a function of the key: bench/cache/cache_payload.py), and stores
every chunk that was not present. Every --interval it prints a row: stores ok /
retried / dropped / failed (the engine's counters, those it has), hit ratio by chunk
and by prefix token for the tier and for the LRU, the hot set's, server evictions, the
namespace's fill, debris (a sweep, with --debris-every), wrong bytes and RSS. At the
end: what share of the chunks stored last and first (a fifth of the budget each) is
still readable, a sweep for debris, and then single-get latency (p50/p95/p99, hits and
misses, 256 KiB / 4 MiB / 32 MiB). It writes cache_bench.{md,json} to --out and exits
1 when our tier returned a wrong byte.

The budget defaults to the namespace's capacity (data size x evict-used-pct, or
stop-writes-used-pct when it does not evict, summed over the cluster's nodes, over the
replication factor: bench/cache/cache_cluster.py), and the set to a fresh lmca_bench_* one,
truncated before and after.

A cluster and events, as bench/cache/cache_fill.py takes them: --hosts may name several
seeds; --event kill:NODE@0.4 / restart:NODE@+30 / pause:NODE@0.4:8 act on a node
during our run (a share of its requests, or of its duration; NODE a name of --ctl's
command, or `clock`, the node that masters the shared clock's record:
bench/cache/cache_events.py), and --writer-clock W:OFFSET runs our writer W under faketime.
Beside the hit ratios the run then reports cache_fill.py's figures for our tier
(cache_report.summary): stores and drops by cause, failed set batches by error, the
newest and oldest fifths, the hot set's re-reads after the first budget and its
conversations whole at the end, the slowest set batch per writer (and the p99), each
writer's own clocks, the shared clock's round trips per store and per second, NSUP's
refusing cycles per node (--server-log, or the loopback script's logs), debris,
wrong bytes and the events' times; --json PATH writes them as one document.

A real-server run (CE 8.x on loopback, a 2 GiB namespace; redis-server from
`scripts/install-debian-deps.sh bench`):

    ASD=/path/to/asd scripts/aerospike-loopback.sh start bench      # 127.0.0.1:3200
    .venv/bin/python bench/cache/cache_bench.py --hosts 127.0.0.1:3200 --duration 300 \\
        --chunk 4M --working-set-factor 4 --writers 4 --interval 10
    .venv/bin/python bench/cache/cache_bench.py --hosts 127.0.0.1:3200 --latency-only
    # an engine setting under trial, passed through to the Connector:
    .venv/bin/python bench/cache/cache_bench.py --hosts 127.0.0.1:3200 -o default_ttl_seconds=3600
    # the three-node cache cluster (cache0-2: replication-factor 2), the clock's node
    # paused for 8 s at 40 % of the run, a writer 30 s ahead:
    .venv/bin/python bench/cache/cache_bench.py --hosts 127.0.0.1:3600,127.0.0.1:3610 \
        --duration 120 --chunk 1M --writers 4 --no-redis --event pause:clock@0.4:8 \
        --writer-clock 1:+30s --json /tmp/bench-case.json

Whether a full namespace evicts or stops writes is the server's configuration
(evict-used-pct, stop-writes-used-pct, NSUP, TTLs): the report quotes it. `make bench`
(scripts/bench.sh) runs a short one against the protocol test server, a Python stand-in
for Aerospike: its numbers check the harness only.
"""

import argparse
import datetime
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid

import cache_report as report
import cache_cluster as cluster
import cache_events as events
import cache_figures as fig
from cache_backends import Hung, Mooncake, Ours, Redis, parse_info, redis_call
from cache_payload import Payloads
from cache_run import Limits, Run
from cache_trace import TraceConfig

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "peers"))  # side_by_side starts redis-server
KIB, MIB, GIB = 1024, 1024 * 1024, 1024 ** 3
LATENCY_KEYS = 4  # distinct chunks per size the latency gets cycle over
# What decides whether a full namespace evicts or refuses writes, for the report.
NAMESPACE_SETTINGS = ("storage-engine.evict-used-pct", "storage-engine.stop-writes-used-pct",
                      "nsup-period", "default-ttl", "storage-engine.data-size",
                      "default-read-touch-ttl-pct")


# ------------------------------------------------------------------ arguments

def parse_size(text):
    """'256K', '4M', '1G' or plain bytes -> bytes."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = {"K": KIB, "M": MIB, "G": GIB}.get(t[-1:], 1)
    digits = t[:-1] if unit > 1 else t
    if not digits.isdigit() or int(digits) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 256K, 4M or 1G")
    return int(digits) * unit


def parse_setting(text):
    """'KEY=VALUE' -> (key, value as int, bool or str)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"-o {text!r}: expected KEY=VALUE")
    if value.lower() in ("true", "false"):
        return key, value.lower() == "true"
    try:
        return key, int(value)
    except ValueError:
        return key, value


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", default=os.environ.get("AEROSPIKE_TEST_HOSTS"),
                   help="Aerospike seed host:port[,...] (default $AEROSPIKE_TEST_HOSTS)")
    p.add_argument("--namespace", default="lmcache")
    p.add_argument("--set", default=None, help="default: a fresh lmca_bench_* set")
    p.add_argument("--budget-bytes", type=parse_size, default=None,
                   help="the capacity compared against (default: the namespace's, "
                        "data size x evict-used-pct / 100, or x stop-writes-used-pct / "
                        "100 when it does not evict)")
    p.add_argument("--working-set-factor", type=float, default=4.0)
    p.add_argument("--chunk", type=parse_size, default=4 * MIB, help="256K..32M (default 4M)")
    p.add_argument("--writers", type=int, default=4)
    p.add_argument("--duration", type=float, default=None,
                   help="seconds of requests (default 60 unless --requests)")
    p.add_argument("--requests", type=int, default=0, help="requests to replay")
    p.add_argument("--interval", type=float, default=10.0, help="seconds per row")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--zipf", type=float, default=1.0, help="popularity exponent over users")
    p.add_argument("--max-turns", type=int, default=6, help="turns per conversation")
    p.add_argument("--hot", type=int, default=2, help="hot conversations")
    p.add_argument("--hot-every", type=int, default=0,
                   help="turns between re-reads of the hot set (default: so many that "
                        "they store at most half the budget)")
    p.add_argument("--batch-bytes", type=parse_size, default=64 * MIB,
                   help="most bytes per get or set submit (default 64M)")
    p.add_argument("--debris-every", type=int, default=0,
                   help="sweep for debris every N intervals (a full scan, and puts in flight "
                        "may count; default: only at the end, when none is)")
    p.add_argument("--no-redis", action="store_true")
    p.add_argument("--no-mooncake", action="store_true")
    p.add_argument("--redis-workers", type=int, default=8)
    p.add_argument("--no-redis-equal-dram", dest="redis_equal_dram", action="store_false",
                   help="skip the second redis-server run, with maxmemory = our namespace's "
                        "data size (the DRAM it costs) instead of the budget")
    p.add_argument("--peer-dram-bytes", type=parse_size, default=None,
                   help="lend redis-server (maxmemory) and Mooncake Store (its segment) "
                        "this much DRAM instead of the budget: the same requests at equal "
                        "DRAM, e.g. the DRAM our server used on a device namespace "
                        "(bench/cache/scale_bench.py measures it)")
    p.add_argument("--redis-get-batch", type=int, default=1,
                   help="chunks per RESP GET submit (default 1: larger batches evict their "
                        "own keys on a full redis-server, and LMCache's client then hangs)")
    p.add_argument("--latency-only", action="store_true")
    p.add_argument("--no-latency", action="store_true")
    p.add_argument("--latency-sizes", default="256K,4M,32M")
    p.add_argument("--latency-gets", type=int, default=100, help="gets per size and kind")
    p.add_argument("--latency-namespace", default=None, help="default: --namespace")
    p.add_argument("-o", dest="settings", action="append", type=parse_setting, default=[],
                   metavar="KEY=VALUE", help="engine setting for the Connector (repeatable)")
    p.add_argument("--out", default=os.path.join(HERE, "..", "results"))
    p.add_argument("--json", help="also write the case's figures (cache_fill.py's, the hit "
                              "ratios beside them) as one JSON document here")
    events.add_options(p)  # a cluster and events during our run
    a = p.parse_args(argv)
    events.parse_options(p, a)
    if not a.hosts:
        p.error("no Aerospike server: pass --hosts HOST:PORT or set AEROSPIKE_TEST_HOSTS")
    if a.duration is None and not a.requests:
        a.duration = 60.0
    if not 256 * KIB <= a.chunk <= 32 * MIB or a.chunk % 64:
        p.error("--chunk must be a multiple of 64 bytes within 256K..32M")
    a.set = a.set or "lmca_bench_" + uuid.uuid4().hex[:8]
    a.latency_sizes = [parse_size(s) for s in a.latency_sizes.split(",")]
    from lmcache_aerospike import _native

    try:  # the engine's own check, so that a bad -o fails before any run
        _native.check_settings(**engine_settings(a))
    except _native.Error as e:
        p.error(f"engine settings: {e}")
    return a


def engine_settings(args, namespace=None):
    """The Connector's keywords: the benchmark's defaults, then every -o."""
    settings = {"hosts": args.hosts, "namespace": namespace or args.namespace,
                "set": args.set, "default_ttl_seconds": 86400, "num_workers": 8}
    settings.update(dict(args.settings))
    return settings


# ------------------------------------------------------------------ cache runs

def trace_config(args, budget):
    return TraceConfig(budget_bytes=budget, chunk_bytes=args.chunk, seed=args.seed,
                       working_set_factor=args.working_set_factor, zipf=args.zipf,
                       writers=args.writers, max_turns=args.max_turns,
                       hot_conversations=args.hot, hot_every=args.hot_every)


def cache_run(backend, config, args, nonce, requests, duration, control=None):
    """One tier through the trace; prints its rows; returns {label, rows, totals}.
    With a control (ours only), the events and the writers' clocks apply."""
    print(f"\n== {backend.label}")
    print(report.header_line())
    limits = Limits(requests=requests, duration_s=duration or 0.0,
                    interval_s=args.interval, debris_every=args.debris_every)
    # A submit never holds more than an eighth of the budget: redis-server counts
    # a pipelined batch against maxmemory and refuses it when it does not fit.
    batch = max(config.chunk_bytes, min(args.batch_bytes, config.budget_bytes // 8))
    run = Run(backend, config, limits, batch, nonce,
              on_row=lambda r: print(report.row_line(r), flush=True),
              clocks=args.clocks if control else None)
    if control and args.events:
        run.events = events.Events(args.events, control, run.progress,
                                   log=lambda line: print(line, flush=True))
    return {"label": backend.label, **run.execute()}


# ------------------------------------------------------------------ latency

def percentiles(samples):
    if not samples:
        return None
    q = statistics.quantiles(samples, n=100, method="inclusive") if len(samples) > 1 \
        else [samples[0]] * 99
    return {"p50": q[49], "p95": q[94], "p99": q[98], "n": len(samples)}


def timed(fn, *args):
    t0 = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - t0, result


def latency(backend, sizes, gets, nonce, miss_by="get"):
    """Single-get latency per size: hits over LATENCY_KEYS stored chunks (each byte
    checked), misses on keys never stored (by `miss_by`: "get", or "exists" where a
    get of a missing key would hang)."""
    out = {}
    for size in sizes:
        p = Payloads(size, nonce)
        keys = [f"latency:{size}:{i}" for i in range(LATENCY_KEYS)]
        for k in keys:  # one at a time: a 32 MiB batch would not fit a small budget
            backend.set([k], [p.fill(k, p.buffer())])
        hits, misses, bad = _sample(backend, p, keys, gets, miss_by)
        m = out[str(size)] = {"hit": percentiles(hits), "miss": percentiles(misses),
                              "miss_by": miss_by, "wrong_or_missing": bad}
        print(f"  latency {report.size_label(size):>7}: hit p50 {m['hit']['p50'] * 1e3:.2f} ms, "
              f"miss p50 {m['miss']['p50'] * 1e3:.2f} ms ({miss_by})", flush=True)
        backend.cleanup()
    return out


def _sample(backend, p, keys, gets, miss_by):
    """(hit seconds, miss seconds, hits that failed or were wrong), one get at a time;
    the first of each kind warms up and is not counted."""
    buf, hits, misses, bad = p.buffer(), [], [], 0
    for i in range(gets + 1):
        k = keys[i % len(keys)]
        try:
            dt, (_, _, got) = timed(backend.get, [k], [buf])
        except Hung:
            buf, bad = p.buffer(), bad + 1  # the client may still write the old one
            continue
        bad += not got[0] or p.wrong_bytes(k, buf) > 0
        hits += [dt] if i else []
        absent = [f"latency:{p.chunk_bytes}:absent:{i}"]
        dt, (_, _, got) = (timed(backend.get, absent, [buf]) if miss_by == "get"
                           else timed(backend.lookup, absent))
        bad += bool(got[0])
        misses += [dt] if i else []
    return hits, misses, bad


# ------------------------------------------------------------------ the tiers

def run_ours(args, doc, nonce):
    ours = Ours(engine_settings(args))
    try:
        ours.cleanup()  # a given --set may hold an earlier run's chunks
        doc["config"].update(server_config(ours, args))
        c = doc["config"]
        print(f"{c['server']}: budget {c['budget_bytes'] / 1e9:.3f} GB ({c['budget_source']}); "
              + " ".join(f"{k}={v}" for k, v in c["namespace_settings"].items()), flush=True)
        if not args.latency_only:
            config = trace_config(args, doc["config"]["budget_bytes"])
            doc["config"].update(trace_fields(config))
            nodes = cluster.Nodes.discover(ours.native, args.namespace, args.ctl_nodes)
            control = events.Control.choose(nodes, args.ctl)
            doc["config"].update({"nodes": nodes.describe(), "control": control.describe(),
                                  "writer_clocks": {str(w): o for w, o in args.clocks.items()}})
            since = time.time()
            doc["runs"]["ours"] = cache_run(ours, config, args, nonce, args.requests,
                                            args.duration, control)
            logs = fig.server_logs(args.server_log, [nodes.names[x] for x in nodes.addresses
                                                     if x in nodes.names])
            doc["runs"]["ours"]["totals"]["nsup"] = fig.nsup_per_node(logs, args.namespace,
                                                                      since)
    finally:
        ours.cleanup()
        ours.close()
    if not args.no_latency:
        lat = Ours(engine_settings(args, args.latency_namespace))
        try:
            lat.cleanup()
            doc["latency"][Ours.label] = latency(lat, args.latency_sizes, args.latency_gets,
                                                 nonce)
        finally:
            lat.cleanup()
            lat.close()


def start_redis_tier(args, workdir, budget):
    """(redis-server process, Redis tier) or raises side_by_side.Unavailable."""
    import side_by_side  # starts redis-server as bench/peers/side_by_side.py does

    try:
        from lmcache.lmcache_redis import LMCacheRedisClient  # noqa: F401
    except ImportError as e:
        raise side_by_side.Unavailable(f"LMCache's RESP extension does not import ({e})")
    proc, port = side_by_side.start_redis(workdir)
    try:
        redis_call(port, "CONFIG", "SET", "maxmemory", budget)
        redis_call(port, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
        return proc, Redis(port, num_workers=args.redis_workers,
                           max_get_chunks=args.redis_get_batch)
    except BaseException:
        side_by_side.stop(proc)
        raise


def run_redis(args, doc, nonce):
    """The same requests as ours (its count), on redis-server with maxmemory = the
    budget, and again with maxmemory = our namespace's data size (equal DRAM); each
    skipped with a reason."""
    c = doc["config"]
    if args.peer_dram_bytes:
        run_redis_at(args, doc, nonce, "redis", args.peer_dram_bytes,
                     f"{Redis.label}, maxmemory {args.peer_dram_bytes / 2**30:.2f} GiB "
                     f"(equal DRAM)", with_latency=True)
        return
    run_redis_at(args, doc, nonce, "redis", c["budget_bytes"], Redis.label, with_latency=True)
    if args.redis_equal_dram and not args.latency_only and \
            c["data_size_bytes"] > c["budget_bytes"]:
        run_redis_at(args, doc, nonce, "redis_dram", c["data_size_bytes"],
                     f"{Redis.label}, maxmemory = our data size (equal DRAM)", with_latency=False)


def run_redis_at(args, doc, nonce, name, maxmemory, label, with_latency):
    import side_by_side

    with tempfile.TemporaryDirectory(prefix="cache-bench-redis-") as workdir:
        try:
            proc, redis = start_redis_tier(args, workdir, maxmemory)
        except side_by_side.Unavailable as e:
            print(f"skipping redis: {e}", file=sys.stderr)
            doc["runs"][name] = {"label": label, "skipped": str(e)}
            return
        redis.label = label
        try:
            doc["config"]["redis_server"] = side_by_side.report.redis_version()
            if not args.latency_only:
                config = trace_config(args, doc["config"]["budget_bytes"])
                ours = doc["runs"]["ours"]["totals"]
                # Ours' requests, within a bound: a stalled client must not stall the run.
                cap = max(30.0, 3 * ours["seconds"])
                doc["runs"][name] = cache_run(redis, config, args, nonce, ours["requests"],
                                              cap)
                redis.cleanup()
            if with_latency and not args.no_latency:
                redis_call(redis.port, "CONFIG", "SET", "maxmemory", 0)  # no evictions here
                doc["latency"][Redis.label] = latency(redis, args.latency_sizes, args.latency_gets,
                                                      nonce, miss_by="exists")
        finally:
            redis.close()
            side_by_side.stop(proc)


def run_mooncake(args, doc, nonce):
    """The same requests as ours (its count), on Mooncake Store lending it the budget."""
    import side_by_side  # starts Mooncake Store as bench/peers/side_by_side.py does

    c = doc["config"]
    with tempfile.TemporaryDirectory(prefix="cache-bench-mooncake-") as workdir:
        try:
            store, note = side_by_side.start_mooncake(
                workdir, segment=str(args.peer_dram_bytes or c["budget_bytes"]))
        except side_by_side.Unavailable as e:
            print(f"skipping mooncake: {e}", file=sys.stderr)
            doc["runs"]["mooncake"] = {"label": Mooncake.label, "skipped": str(e)}
            return
        try:
            tier = Mooncake(store.master_addr, store.metadata, store=store)
        except Exception:
            store.stop()
            raise
        if args.peer_dram_bytes:
            tier.label = (f"{Mooncake.label}, segment {args.peer_dram_bytes / 2**30:.2f} GiB "
                          f"(equal DRAM)")
        try:
            c["mooncake"] = note
            if not args.latency_only:
                config = trace_config(args, c["budget_bytes"])
                ours = doc["runs"]["ours"]["totals"]
                cap = max(30.0, 3 * ours["seconds"])
                doc["runs"]["mooncake"] = cache_run(tier, config, args, nonce, ours["requests"],
                                                    cap)
                tier.cleanup()
            if not args.no_latency:
                doc["latency"][Mooncake.label] = latency(tier, args.latency_sizes,
                                                         args.latency_gets, nonce)
        finally:
            tier.close()
            store.stop()


# ------------------------------------------------------------------ config

def server_config(ours, args):
    nodes = ours.native.info(f"namespace/{args.namespace}")
    kv = parse_info(nodes[0][2])
    test_server = is_test_server(ours)
    budget = args.budget_bytes or cluster.capacity(nodes)
    if budget <= 0:
        sys.exit(f"cannot read namespace {args.namespace}'s capacity: pass --budget-bytes")
    build = ours.native.info("build")[0][2]
    return {
        "server": f"{'the protocol test server' if test_server else 'Aerospike'} {build} "
                  f"at {args.hosts} ({len(nodes)} node(s)), namespace {args.namespace}, "
                  f"set {args.set}",
        "note": ("HARNESS ONLY: the protocol test server (Python) stands in for Aerospike; "
                 "these numbers check the benchmark, they say nothing about Aerospike."
                 if test_server else "real server"),
        "namespace_settings": {k: kv.get(k) for k in NAMESPACE_SETTINGS},
        "test_server": test_server,
        "budget_bytes": budget,
        # What our namespace costs in DRAM (a memory namespace's data size, over the
        # replication factor): the maxmemory of Redis at equal DRAM.
        "data_size_bytes": cluster.data_size(nodes),
        "budget_source": "--budget-bytes" if args.budget_bytes else
                         "namespace data size x evict-used-pct (or stop-writes-used-pct), "
                         "summed over the nodes, over the replication factor",
    }


def is_test_server(ours):
    """The test server answers its own fixture-stats command; Aerospike refuses it."""
    try:
        ours.native.info("fixture-stats")
        return True
    except Exception:
        return False


def trace_fields(config):
    return {"users": config.users(), "hot_every": config.hot_period(), "zipf": config.zipf,
            "system_prompts": config.system_prompts, "chunk_bytes": config.chunk_bytes,
            "working_set_factor": config.working_set_factor, "writers": config.writers,
            "hot_conversations": config.hot_conversations, "seed": config.seed,
            "max_turns": config.max_turns, "tokens_per_chunk": config.tokens_per_chunk}


def base_config(args):
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
            "engine_settings": " ".join(f"{k}={'***' if k == 'password' else v}"
                                        for k, v in engine_settings(args).items()),
            "chunk_bytes": args.chunk, "working_set_factor": args.working_set_factor,
            "writers": args.writers, "seed": args.seed, "zipf": args.zipf,
            "hot_conversations": args.hot, "users": None, "hot_every": None,
            "redis_get_batch": args.redis_get_batch,
            "system_prompts": None, "interval_s": args.interval, "cpus": os.cpu_count()}


LATENCY_NOTE = ("One key per get, submitted and awaited through each client's completion "
                "path (a drain thread on the event fd), after a warm-up get; hits are "
                "checked byte for byte. Redis misses are EXISTS: LMCache's RESP client never "
                "completes a GET of a missing key, and its adapter only gets after EXISTS.")


def main(argv=None):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: stop redis, clean up
    nonce = uuid.uuid4().bytes  # this run's payloads; an earlier run's bytes read as wrong
    doc = {"config": base_config(args), "runs": {}, "latency": {}, "latency_note": LATENCY_NOTE}
    run_ours(args, doc, nonce)
    if not args.no_redis:
        run_redis(args, doc, nonce)
    if not args.no_mooncake:
        run_mooncake(args, doc, nonce)
    print(f"\n{doc['config']['note']}")
    for path in report.write_all(doc, args.out):
        print(f"wrote {path}", file=sys.stderr)
    if doc["runs"].get("ours", {}).get("totals"):
        print("\n".join(report.summary_lines(report.summary(doc))))
        if args.json:
            fig.write_json(args.json, report.summary(doc))
            print(f"wrote {args.json}", file=sys.stderr)
    totals = doc["runs"].get("ours", {}).get("totals")
    wrong = totals and report.wrong_bytes(totals)
    bad_latency = any(m["wrong_or_missing"] for m in doc["latency"].get(Ours.label, {}).values())
    return 1 if wrong or bad_latency else 0


if __name__ == "__main__":
    sys.exit(main())
