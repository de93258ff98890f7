"""Our L2 adapters against LMCache's own Aerospike and RESP adapters and Mooncake Store,
side by side.

Runs `lmcache bench l2 --no-skip-verify` for, by default, five adapters:

  native_plugin  ours: LMCache's NativeConnectorL2Adapter over lmcache_aerospike._native
  plugin         ours: lmcache_aerospike.l2.AerospikeL2Adapter
  aerospike      LMCache's own Aerospike adapter (C++), built by bench/peers/peers.sh from
                 the pinned LMCache sdist against our libaerospike
  resp           LMCache's RESP adapter (C++) on a redis-server this script starts
  mooncake       Mooncake Store (its CPU build, installed by bench/peers/mooncake.sh) on
                 a master and client this script starts, through mooncake_peer.py under
                 LMCache's native_plugin adapter: a lower bound (LMCache's own mooncake
                 adapter needs a C++ extension its wheel lacks; puts and gets copy)

in one run: each round runs every chunk size and, within a size, the adapters one
after another (A B C D, then again next round), so drift on a small shared machine
hits all of them alike. It writes side_by_side.{json,md,png} to --out: per adapter and
size the median store and load GB/s (10^9 B/s) over the rounds, and ratios to our
native_plugin. A peer that cannot be built or started is skipped, and the tables say
why. The Aerospike server is yours to start (e.g. `ASD=... scripts/aerospike-loopback.sh
start bench` for 127.0.0.1:3200); each run's set is truncated afterwards.

    .venv/bin/python bench/peers/side_by_side.py --hosts 127.0.0.1:3200 \\
        [--rounds 3] [--sizes 256K,1M,4M,16M,32M] [--out bench/results]

With --peer-delay-ms D (bench/peers/latency.sh's l2 mode, whose --hosts is already a
delay proxy) redis and Mooncake's master sit behind bench/delayproxy too.
"""

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import l2run  # bench/peers/l2run.py: runs `lmcache bench l2` and reads its report
from lmcache_aerospike import mp_server  # our two adapters' --l2-adapter JSON
import side_by_side_report as report

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTERS = ("native_plugin", "plugin", "aerospike", "resp", "mooncake")
OURS = ("native_plugin", "plugin")
BASELINE = "native_plugin"
LABELS = {"native_plugin": "ours: native_plugin", "plugin": "ours: plugin",
          "aerospike": "LMCache aerospike", "resp": "LMCache resp (redis-server)",
          "mooncake": "Mooncake Store (native_plugin)"}
KIB, MIB = 1024, 1024 * 1024


class Unavailable(Exception):
    """A peer that cannot be built or started; the message says why."""


# ---------------------------------------------------------------------- adapters

def spec(name, ctx, setname):
    """The --l2-adapter JSON of `name`. Every adapter gets 8 I/O workers (LMCache's
    default) and the same TTL, so only the code paths differ."""
    if name in mp_server.ADAPTERS:  # plugin, native_plugin
        return mp_server.spec(name, ctx["hosts"], setname, namespace=ctx["namespace"],
                              default_ttl_seconds=600, num_workers=8)
    if name == "aerospike":  # keys: lmcache/v1/distributed/l2_adapters/aerospike_l2_adapter.py
        return {"type": "aerospike", "hosts": ctx["hosts"], "namespace": ctx["namespace"],
                "set_name": setname, "default_ttl_seconds": 600, "num_workers": 8}
    if name == "mooncake":
        return ctx["mooncake"].spec(num_workers=8, master=ctx.get("mooncake_master"))
    # keys: lmcache/v1/distributed/l2_adapters/resp_l2_adapter.py
    return {"type": "resp", "host": "127.0.0.1", "port": ctx["redis_port"], "num_workers": 8}


def build_aerospike_peer():
    """Runs bench/peers/peers.sh (a no-op once built); returns the directory holding
    lmcache_aerospike*.so, to be added to the `lmcache` package's path."""
    out = subprocess.run([os.path.join(HERE, "peers.sh")], capture_output=True, text=True,
                         env={**os.environ, "PYTHON": sys.executable})
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines() or ["bench/peers/peers.sh failed"]
        raise Unavailable(lines[-1].removeprefix("peers.sh: "))
    return out.stdout.strip().splitlines()[-1]


def start_mooncake(workdir, segment="1 GB"):
    """Mooncake Store's master and client on loopback (bench/peers/mooncake.sh installs
    it outside the repo); its site goes on PYTHONPATH for the benchmark's children."""
    out = subprocess.run([os.path.join(HERE, "mooncake.sh")], capture_output=True, text=True,
                         env={**os.environ, "PYTHON": sys.executable})
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines() or ["bench/peers/mooncake.sh failed"]
        raise Unavailable(lines[-1].removeprefix("mooncake.sh: "))
    site = out.stdout.strip().splitlines()[-1]
    sys.path.insert(0, site)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (site, HERE, os.environ.get("PYTHONPATH")) if p)
    import mooncake_peer

    try:
        store = mooncake_peer.Store(site, workdir, segment=segment)
    except RuntimeError as e:
        raise Unavailable(str(e)) from None
    version = os.path.basename(os.path.dirname(site)).removeprefix("mooncake-")
    debug = store.debug_build()
    build = (f"`mooncake_master --version` says \"{debug}\" (a line its bundled gflags "
             "prints): its numbers may understate a release build's" if debug
             else "`mooncake_master --version` names no debug build")
    return store, f"mooncake-transfer-engine-non-cuda {version} over TCP on loopback; {build}"


# ------------------------------------------------------------------------ redis

def resp_command(port, *words, timeout=2.0):
    """Sends one RESP command to 127.0.0.1:port and returns the reply's first line."""
    msg = f"*{len(words)}\r\n" + "".join(f"${len(w)}\r\n{w}\r\n" for w in words)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(msg.encode())
        return s.recv(4096).decode(errors="replace").split("\r\n")[0]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(workdir):
    """A private redis-server on a free loopback port, without persistence (the
    benchmark's data is throwaway, and snapshots would steal CPU from the runs)."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise Unavailable("redis-server is not installed (scripts/install-debian-deps.sh bench)")
    port = free_port()
    log = os.path.join(workdir, "redis.log")
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", workdir, "--logfile", log],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    for _ in range(100):
        if proc.poll() is not None:
            tail = open(log).read().strip().splitlines()[-1:] if os.path.exists(log) else []
            raise Unavailable(f"redis-server exited ({proc.returncode}): {' '.join(tail)}")
        try:
            if resp_command(port, "PING") == "+PONG":
                return proc, port
        except OSError:
            pass
        time.sleep(0.1)
    stop(proc)
    raise Unavailable(f"redis-server did not answer PING on port {port} within 10 s")


# ------------------------------------------------------------------ network delay

def start_delay_proxy(port, delay_ms, workdir):
    """bench/delayproxy in front of 127.0.0.1:port, holding every chunk of bytes
    delay_ms in each direction (as latency.sh puts it in front of the Aerospike
    node); returns (process, its port)."""
    top = os.path.join(HERE, "..", "..")
    exe = os.path.join(top, "build", "bench", "delayproxy")
    if not os.access(exe, os.X_OK):
        subprocess.run(["make", "-s", "-C", top, "build/bench/delayproxy"], check=True)
    port_file = os.path.join(workdir, f"proxy-{port}.port")
    proc = subprocess.Popen([exe, "--listen", "127.0.0.1:0", "--to", f"127.0.0.1:{port}",
                             "--delay-ms", str(delay_ms), "--port-file", port_file])
    for _ in range(100):
        if os.path.exists(port_file) and os.path.getsize(port_file):
            return proc, int(open(port_file).read())
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    stop(proc)
    raise Unavailable(f"bench/delayproxy in front of port {port} did not start")


def delay_peers(ctx, delay_ms, workdir):
    """Routes the peers' own servers through the proxy (--peer-delay-ms): redis as a
    whole; Mooncake's master only, since its client learns where the data goes
    from the metadata server, so its transfers stay undelayed (a lower bound of
    its cost at that delay). Returns the proxies' processes."""
    procs = []
    if ctx.get("redis_port"):
        proc, ctx["redis_port"] = start_delay_proxy(ctx["redis_port"], delay_ms, workdir)
        procs.append(proc)
    if ctx.get("mooncake"):
        master_port = int(ctx["mooncake"].master_addr.rsplit(":", 1)[1])
        proc, port = start_delay_proxy(master_port, delay_ms, workdir)
        procs.append(proc)
        ctx["mooncake_master"] = f"127.0.0.1:{port}"
        ctx["mooncake_note"] += (f"; its master behind a {delay_ms} ms delay proxy, "
                                 "its data transfers undelayed")
    return procs


def stop(proc):
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ----------------------------------------------------------------------- runs

def keys_per_submit(size, args):
    """Keys per submit such that a round moves about --mib-per-round MiB at any chunk
    size: a run then fits the namespace (and L1 buffer) whatever the size."""
    return max(1, args.mib_per_round * MIB // (size * args.in_flight))


def run_one(name, size, ctx, args):
    """One `lmcache bench l2` run; returns (store GB/s, load GB/s). The records go
    afterwards, so every run starts from an empty set (or database)."""
    setname = "lmca_sbs_" + uuid.uuid4().hex[:8]
    try:
        ops = l2run.bench_l2(spec(name, ctx, setname), num_keys=keys_per_submit(size, args),
                             in_flight=args.in_flight, data_size_kb=size // KIB,
                             rounds=args.bench_rounds,
                             lmcache_extra_path=ctx["peer_path"] if name == "aerospike" else "")
        l2run.check_complete(ops)
    finally:
        if name == "resp":
            resp_command(ctx["redis_port"], "FLUSHALL", timeout=60)
        elif name == "mooncake":
            ctx["mooncake"].clear()  # a put of a key it holds would not copy
        else:
            l2run.truncate(ctx["hosts"], ctx["namespace"], setname)
    # LMCache's throughput is MiB/s (lmcache/cli/commands/bench/l2_adapter_bench/result.py).
    return tuple(ops[op]["throughput_avg_mbps"] * MIB / 1e9 for op in ("Store", "Load"))


def measure(adapters, sizes, ctx, args):
    """Interleaved runs: {(size, name): {"store": [...], "load": [...], "errors": [...]}}."""
    samples = {(size, name): {"store": [], "load": [], "errors": []}
               for size in sizes for name in adapters}
    t0 = time.monotonic()
    for r in range(args.rounds):
        for size in sizes:
            for name in adapters:
                s = samples[size, name]
                where = f"[{time.monotonic() - t0:6.0f} s] round {r + 1}/{args.rounds} " \
                        f"{report.size_label(size):>7} {name:<13}"
                try:
                    store, load = run_one(name, size, ctx, args)
                except (l2run.BenchFailed, OSError) as e:  # OSError: redis went away
                    s["errors"].append(f"round {r + 1}: {e}")
                    print(f"{where} FAILED: {str(e).splitlines()[0]}", file=sys.stderr)
                    continue
                s["store"].append(store)
                s["load"].append(load)
                print(f"{where} store {store:6.2f} GB/s  load {load:6.2f} GB/s",
                      file=sys.stderr)
    return samples


def summarize(samples, adapters, sizes, skipped):
    """Rows for the tables: medians, status and ratios to native_plugin."""
    rows = []
    for size in sizes:
        for name in adapters:
            s = samples.get((size, name), {"store": [], "load": [], "errors": []})
            status = "skipped" if name in skipped else ("ok" if s["store"] else "failed")
            rows.append({"size_bytes": size, "adapter": name, "label": LABELS[name],
                         "status": status, "skip_reason": skipped.get(name),
                         "runs": len(s["store"]), "errors": s["errors"],
                         "store_samples_gbps": s["store"], "load_samples_gbps": s["load"],
                         "store_gbps": statistics.median(s["store"]) if s["store"] else None,
                         "load_gbps": statistics.median(s["load"]) if s["load"] else None})
    by_key = {(r["size_bytes"], r["adapter"]): r for r in rows}
    for r in rows:
        base = by_key.get((r["size_bytes"], BASELINE))
        for op in ("store", "load"):
            r[f"{op}_vs_{BASELINE}"] = ratio(r[f"{op}_gbps"], base and base[f"{op}_gbps"])
    return rows


def ratio(a, b):
    return a / b if a is not None and b else None


def ours_vs_peers(rows):
    """For each size and peer that ran: each of our adapters' GB/s over the peer's."""
    by_key = {(r["size_bytes"], r["adapter"]): r for r in rows}
    out = []
    for r in rows:
        if r["adapter"] in OURS or r["status"] != "ok":
            continue
        entry = {"size_bytes": r["size_bytes"], "peer": r["adapter"]}
        for ours in OURS:
            mine = by_key.get((r["size_bytes"], ours))
            for op in ("store", "load"):
                entry[f"{ours}_{op}"] = ratio(mine and mine[f"{op}_gbps"], r[f"{op}_gbps"])
        out.append(entry)
    return out


# ----------------------------------------------------------------------- main

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", default=os.environ.get("AEROSPIKE_TEST_HOSTS"),
                   help="Aerospike seed host:port[,...] (default $AEROSPIKE_TEST_HOSTS)")
    p.add_argument("--namespace", default="lmcache")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--sizes", default="256K,1M,4M,16M,32M",
                   help="chunk sizes, K or M suffix (default 256K,1M,4M,16M,32M)")
    p.add_argument("--adapters", default=",".join(ADAPTERS),
                   help=f"subset of {','.join(ADAPTERS)} (default: all)")
    p.add_argument("--mib-per-round", type=int, default=64,
                   help="data per lmcache bench round; sets --num-keys (default 64)")
    p.add_argument("--in-flight", type=int, default=2)
    p.add_argument("--bench-rounds", type=int, default=3,
                   help="lmcache bench l2 --rounds (after 1 warmup round; default 3)")
    p.add_argument("--peer-delay-ms", type=float, default=None,
                   help="route the peers' own servers (redis; Mooncake's master) through "
                        "bench/delayproxy holding each chunk this many ms each way, as "
                        "--hosts may already be (bench/peers/latency.sh; default: direct)")
    p.add_argument("--out", default=os.path.join(HERE, "..", "results"))
    args = p.parse_args()
    if args.peer_delay_ms is not None and args.peer_delay_ms < 0:
        p.error(f"--peer-delay-ms: {args.peer_delay_ms} is negative")
    if not args.hosts:
        p.error("no Aerospike server: pass --hosts HOST:PORT or set AEROSPIKE_TEST_HOSTS "
                "(e.g. ASD=... scripts/aerospike-loopback.sh start bench, then "
                "--hosts 127.0.0.1:3200)")
    try:
        args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    except ValueError as e:
        p.error(str(e))
    args.adapters = [a.strip() for a in args.adapters.split(",")]
    unknown = set(args.adapters) - set(ADAPTERS)
    if unknown or BASELINE not in args.adapters:
        p.error(f"--adapters: unknown {sorted(unknown)}" if unknown
                else f"--adapters must include {BASELINE}, the baseline of the ratios")
    return args


def parse_size(text):
    """'256K' or '256KiB' -> 262144, '4M' -> 4194304 (whole KiB, as lmcache takes KB)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = {"K": KIB, "M": MIB}.get(t[-1:])
    if unit is None or not t[:-1].isdigit() or int(t[:-1]) <= 0:
        raise ValueError(f"--sizes: {text!r} is not a size like 256K or 4M")
    return int(t[:-1]) * unit


def main():
    args = parse_args()
    # A SIGTERM unwinds like Ctrl-C, so the finally blocks stop the peers' servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    skipped = {}
    ctx = {"hosts": args.hosts, "namespace": args.namespace, "peer_path": "", "redis_port": 0}
    if "aerospike" in args.adapters:
        try:
            ctx["peer_path"] = build_aerospike_peer()
        except Unavailable as e:
            skipped["aerospike"] = str(e)
    redis = mooncake = None
    proxies = []
    with tempfile.TemporaryDirectory(prefix="sbs-peers-") as workdir:
        try:
            if "resp" in args.adapters:
                try:
                    redis, ctx["redis_port"] = start_redis(workdir)
                except Unavailable as e:
                    skipped["resp"] = str(e)
            if "mooncake" in args.adapters:
                try:
                    mooncake, ctx["mooncake_note"] = start_mooncake(workdir)
                    ctx["mooncake"] = mooncake
                except Unavailable as e:
                    skipped["mooncake"] = str(e)
            if args.peer_delay_ms is not None:
                proxies = delay_peers(ctx, args.peer_delay_ms, workdir)
            for name, why in skipped.items():
                print(f"skipping {name}: {why}", file=sys.stderr)
            active = [a for a in args.adapters if a not in skipped]
            samples = measure(active, args.sizes, ctx, args)
        finally:
            for proc in proxies:
                stop(proc)
            stop(redis)
            if mooncake is not None:
                mooncake.stop()
    rows = summarize(samples, args.adapters, args.sizes, skipped)
    doc = {"config": report.config(args, ctx, keys_per_submit), "skipped": skipped,
           "results": rows, "ours_vs_peers": ours_vs_peers(rows)}
    for path in report.write_all(doc, args.out):
        print(f"wrote {path}", file=sys.stderr)
    # Our adapters must pass every verified run; a peer's failure is only reported.
    return 1 if any(r["errors"] for r in rows if r["adapter"] in OURS) else 0


if __name__ == "__main__":
    sys.exit(main())
