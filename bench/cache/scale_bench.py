"""Capacity beyond memory: the cache on a device namespace many times the host's
RAM, read and written directly, beside the device's own speed (a benchmark, not a
test; it takes tens of minutes and tens of GiB of disk).

For each chunk size of --chunks, on a fresh namespace (the node stopped, its files
removed, started again by --ctl):

  1. bench/cache/cache_fill.py's run: --writers processes, each with its own
     Connector, offer --factor times the capacity, re-reading a warm set every half
     capacity (--warm-distance), beside an exact LRU of the same budget;
  2. meanwhile, every --interval, the server's DRAM: the asd process's RSS (and the
     shared memory in it), the namespace's index_used_bytes, and the host's page
     cache (Cached in /proc/meminfo, against its value before the run);
  3. the device's writes: the namespace's per-file `writes` and `defrag_writes`
     (8 MiB write blocks each) over the bytes the writers stored, and the bytes the
     hits' moves rewrote (the engines' touch_bytes) over the warm hits;
  4. hit latency: --reads random chunks still held, each read by one Connector.get
     (no move: touch_on_hit off) followed by an O_DIRECT pread of the same size at a
     random offset of a file on the same disk (--device-dir), so both see the same
     moment's load.

The disk's own direct write bandwidth (8 MiB blocks, with O_DSYNC as the server
writes, and without) is measured first, on the same file. The record (JSON and
Markdown, with provenance) and a figure go to --out.

    export ASD=/path/to/asd LOOPBACK_DATA_SIZE=32G LOOPBACK_FILE_DIR=/var/tmp/lmca
    scripts/aerospike-loopback.sh start ssd
    .venv/bin/python bench/cache/scale_bench.py --hosts 127.0.0.1:3500 --node ssd \\
        --chunks 256K,1M,4M --writers 4 --factor 3 --device-dir /var/tmp/lmca \\
        --out bench/results/records/scale-$(date +%F)
    .venv/bin/python bench/cache/scale_bench.py --redraw DIR   # its Markdown and figure
"""

import argparse
import glob
import json
import os
import random
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(TOP, "python"))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from lmcache_aerospike.cli import size  # noqa: E402

import cache_cluster as cluster  # noqa: E402
from cache_backends import Ours  # noqa: E402
import cache_fill  # noqa: E402
import device_direct  # noqa: E402
import record  # noqa: E402

WBLOCK = 8 << 20
GiB = 1 << 30


def options(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", required=True, help="the device node's host:port")
    p.add_argument("--namespace", default="lmcache")
    p.add_argument("--node", default="ssd", help="its name for --ctl (default ssd)")
    p.add_argument("--ctl", default=os.path.join(TOP, "scripts", "aerospike-loopback.sh"))
    p.add_argument("--files-dir", default=os.environ.get("LOOPBACK_FILE_DIR"),
                   help="where the node's files are, removed between runs (default "
                        "$LOOPBACK_FILE_DIR; none: the namespace is not made afresh)")
    p.add_argument("--pid-file", default=None,
                   help="the asd process's pid file (default: the loopback node's)")
    p.add_argument("--chunks", default="256K,1M,4M")
    p.add_argument("--writers", type=int, default=4)
    p.add_argument("--factor", type=float, default=3.0)
    p.add_argument("--warm-distance", type=float, default=0.5)
    p.add_argument("--reads", type=int, default=400, help="timed hits a chunk size")
    p.add_argument("--device-dir", required=True, help="a directory on the device's disk")
    p.add_argument("--device-file-size", default="4G")
    p.add_argument("--interval", type=float, default=10.0)
    p.add_argument("-o", action="append", default=[], metavar="KEY=VALUE",
                   help="an engine setting for every Connector")
    p.add_argument("--out", required=True, help="the record's directory")
    return p.parse_args(argv)


# ------------------------------------------------------------------ the server

def fresh_node(a):
    """The node stopped, its files removed and started again: an empty namespace."""
    if not a.files_dir:
        return
    subprocess.run([a.ctl, "stop", a.node], check=True)
    for path in glob.glob(os.path.join(a.files_dir, f"lmcache-{a.node}-*.dat")):
        os.remove(path)
    subprocess.run([a.ctl, "start", a.node], check=True)


def asd_pid(a):
    path = a.pid_file or os.path.join(
        os.environ.get("AEROSPIKE_LOOPBACK_DIR", "/tmp/aerospike-loopback"),
        f"node-{a.node}", "asd.pid")
    with open(path) as f:
        return int(f.read().strip())


def proc_kib(path, names):
    """{name: kB} from a /proc file of `Name:   123 kB` lines."""
    out = {}
    with open(path) as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in names:
                out[name] = int(rest.split()[0])
    return out


def namespace(a):
    return cluster.parse_info(cluster.info_at(a.hosts, f"namespace/{a.namespace}"))


def device_writes(kv):
    """The namespace's device writes, summed over its files or devices: full write
    blocks (client and replica writes), partial flushes, defrag's blocks."""
    out = {"writes": 0, "partial_writes": 0, "defrag_writes": 0, "defrag_reads": 0}
    for key, value in kv.items():
        for name in out:
            if key.startswith("storage-engine.") and key.endswith("]." + name):
                out[name] += int(value)
    return out


class DramSampler(threading.Thread):
    """The server's DRAM every `every` seconds while a run lasts: asd's RSS and the
    shared memory in it, the index's bytes, the host's page cache over its start."""

    def __init__(self, a, every):
        super().__init__(daemon=True)
        self.a, self.every, self.pid = a, every, asd_pid(a)
        self.cached0 = proc_kib("/proc/meminfo", {"Cached"})["Cached"]
        self.samples, self.stop = [], threading.Event()
        self.sample()  # the empty namespace's

    def sample(self):
        st = proc_kib(f"/proc/{self.pid}/status", {"VmRSS", "RssShmem", "RssAnon"})
        mem = proc_kib("/proc/meminfo", {"Cached"})
        try:
            kv = namespace(self.a)
        except OSError:
            kv = {}
        self.samples.append({
            "t": time.monotonic(), "rss": st["VmRSS"] << 10, "rss_shmem": st["RssShmem"] << 10,
            "rss_anon": st["RssAnon"] << 10,
            "index": int(kv.get("index_used_bytes", 0)),
            "data_used": int(kv.get("data_used_bytes", 0)),
            "page_cache_growth": (mem["Cached"] - self.cached0) << 10})

    def run(self):
        while not self.stop.wait(self.every):
            self.sample()

    def finish(self):
        self.stop.set()
        self.join()
        self.sample()
        peak = lambda k: max(s[k] for s in self.samples)  # noqa: E731
        last = self.samples[-1]
        return {"rss_start": self.samples[0]["rss"], "rss_peak": peak("rss"),
                "rss_end": last["rss"], "rss_shmem_peak":
                peak("rss_shmem"), "index_end": last["index"], "data_used_end":
                last["data_used"], "page_cache_growth_peak": peak("page_cache_growth"),
                "samples": len(self.samples)}


# ------------------------------------------------------------------- hits

def hit_latency(settings, keys, chunk, reads, dfile, rng):
    """`reads` gets of random chunks still held, one at a time through the pool
    (submit_batch_get, as LMCache's surfaces get), each followed by the device's
    own direct read of the same size: (ours, the device's, wrong bytes)."""
    tier = Ours({**settings, "touch_on_hit": False, "read_touch_ttl_percent": -1})
    ours, device, wrong, buf = [], [], 0, bytearray(chunk)
    try:
        for key in rng.sample(keys, min(reads, len(keys))):
            t0 = time.perf_counter()
            _, _, hit = tier.get([key], [buf])
            t1 = time.perf_counter()
            if not hit[0]:
                continue  # evicted since the readback: not a hit
            ours.append(t1 - t0)
            wrong += buf != cache_fill.payload(key, chunk)
            device += dfile.reads(chunk, 1, rng)
    finally:
        tier.close()
    return device_direct.percentiles(ours), device_direct.percentiles(device), wrong


# ------------------------------------------------------------------- a run

def device_writes_now(dfile):
    """The disk's direct write bandwidth now (its speed moves between runs on a
    shared disk: measured beside each run, not once)."""
    return {"write_dsync_Bps": dfile.write(dsync=True), "write_Bps": dfile.write(dsync=False)}


def one_size(a, chunk, dfile, rng):
    fresh_node(a)
    disk = device_writes_now(dfile)
    print(f"the disk's direct write: {disk['write_dsync_Bps'] / 1e6:.0f} MB/s (O_DSYNC), "
          f"{disk['write_Bps'] / 1e6:.0f} MB/s", flush=True)
    before = namespace(a)
    sampler = DramSampler(a, a.interval)
    sampler.start()
    fill_argv = ["--hosts", a.hosts, "--namespace", a.namespace, "--chunk", str(chunk),
                 "--writers", str(a.writers), "--factor", str(a.factor),
                 "--warm-distance", str(a.warm_distance), "--interval", str(a.interval)]
    for kv in a.o:
        fill_argv += ["-o", kv]
    out = cache_fill.run(cache_fill.options(fill_argv))
    dram = sampler.finish()
    after = namespace(a)
    s = out["figures"]
    cache_fill.print_report(s)
    alive = [k for k, ok in out["hit"].items() if ok and "/warm/" not in k]
    ours, device, wrong = hit_latency(out["settings"], alive, chunk, a.reads, dfile, rng)
    w0, w1 = device_writes(before), device_writes(after)
    written = {k: w1[k] - w0[k] for k in w0}
    stored = s["stored"] * chunk
    held = dram["data_used_end"]
    engines = s["engines"]
    warm_hits = s["warm"]["hit"]
    result = {
        "chunk_bytes": chunk, "disk": disk, "fill": s, "dram": dram,
        "device_writes": written,
        "device_bytes_per_stored_byte": round(
            (written["writes"] + written["defrag_writes"]) * WBLOCK / max(1, stored), 3),
        "defrag_share": round(written["defrag_writes"] / max(1, written["writes"]
                                                             + written["defrag_writes"]), 3),
        "touch_bytes": engines.get("touch_bytes", 0),
        "touch_bytes_per_stored_byte": round(engines.get("touch_bytes", 0) / max(1, stored), 4),
        "touch_bytes_per_warm_hit": round(engines.get("touch_bytes", 0) / max(1, warm_hits)),
        "held_bytes": held,
        "dram_per_gib_held": round(dram["rss_peak"] / max(1, held) * GiB),
        "index_per_gib_held": round(dram["index_end"] / max(1, held) * GiB),
        "hits": {"ours": ours, "device": device, "wrong_bytes": wrong,
                 "p50_ratio": round(ours["p50_ms"] / device["p50_ms"], 2)},
    }
    return result


def model_check(r):
    """What `lmcache-aerospike size` says the chunks held at the end cost (its
    records, their index bytes and device bytes, cache_fill's md-less puts),
    beside what the namespace said: (predicted index, measured, predicted data,
    measured)."""
    planned = {k: int(v) for k, v in (kv.split("=", 1) for kv in r["fill"].get("settings", []))
               if k in ("target_segment_bytes", "max_segment_bytes", "min_segment_bytes",
                        "single_record_threshold_bytes")}  # what the writers planned with
    layout = size.chunk_layout(r["chunk_bytes"], md=False, max_record_size=8 << 20, **planned)
    chunks = r["fill"]["held_bytes"] // r["chunk_bytes"]
    return (chunks * layout["records"] * size.INDEX_BYTES, r["dram"]["index_end"],
            chunks * layout["device_bytes"], r["dram"]["data_used_end"])


def markdown(doc):
    p = doc["provenance"]
    lines = ["# Capacity beyond memory: a device namespace read directly\n",
             record.header_line(p),
             f"Device: {doc['namespace']['files']} file(s), {doc['namespace']['bytes'] / GiB:.0f} "
             f"GiB, direct-files {doc['namespace']['direct_files']}; capacity "
             f"{doc['capacity_bytes'] / GiB:.1f} GiB (evict-used-pct), disable-odsync "
             f"{doc['namespace']['disable_odsync']}. The disk's own direct write is measured "
             f"before each run, with O_DSYNC (as the server writes unless disable-odsync) and "
             f"without; its direct read beside each hit.\n",
             "| chunk | stored / offered | raised, dropped | newest, oldest fifth | warm reads hit, "
             "alive (LRU) | slowest put s | own clocks | store MB/s | the disk's direct write "
             "MB/s, O_DSYNC / not | hit p50 / p95 / p99 ms | the disk's read p50 / p95 / p99 ms "
             "| DRAM peak, idle (index) | DRAM per GiB held | device bytes per stored byte "
             "(defrag share) | touch bytes per stored byte |",
             "|" + "---|" * 15]
    for r in doc["runs"]:
        s, h = r["fill"], r["hits"]
        lru, w = s["lru"], s["warm"]
        rate = s["mb_per_s"]
        lines.append(
            f"| {r['chunk_bytes'] >> 10} KiB | {s['stored']:,} / {s['offered']:,} | "
            f"{s['failed']}, {sum(s['dropped'].values())} | {s['newest_fifth']:.2f}, "
            f"{s['oldest_fifth']:.2f} | {w['hit']}/{w['reads_after_first_capacity']}, "
            f"{w['alive']}/{w['size']} ({lru['warm_hit']}/{lru['warm_reads']}, "
            f"{lru['warm_alive']}/{w['size']}) | {s['puts']['max']} | "
            f"{sum(s['clock']['clock_local'].values())} | {rate:.0f} | "
            f"{r['disk']['write_dsync_Bps'] / 1e6:.0f} / {r['disk']['write_Bps'] / 1e6:.0f} | "
            f"{h['ours']['p50_ms']} / "
            f"{h['ours']['p95_ms']} / {h['ours']['p99_ms']} | {h['device']['p50_ms']} / "
            f"{h['device']['p95_ms']} / {h['device']['p99_ms']} | "
            f"{r['dram']['rss_peak'] / 2**20:.0f}, {r['dram']['rss_start'] / 2**20:.0f} MiB "
            f"({r['dram']['index_end'] / 2**20:.2f}) | "
            f"{r['dram_per_gib_held'] / 2**20:.1f} MiB | {r['device_bytes_per_stored_byte']} "
            f"({r['defrag_share']}) | {r['touch_bytes_per_stored_byte']} |")
    lines += ["", "What `lmcache-aerospike size` predicts for the chunks held at the end (the "
                  "records its plan gives, 64 bytes of index each, its device bytes a chunk), "
                  "beside the namespace's own index_used_bytes and data_used_bytes:", "",
              "| chunk | chunks held | index predicted / measured | device bytes predicted / "
              "measured |", "|---|---|---|---|"]
    for r in doc["runs"]:
        pi, mi, pd, md = model_check(r)
        lines.append(f"| {r['chunk_bytes'] >> 10} KiB | "
                     f"{r['fill']['held_bytes'] // r['chunk_bytes']:,} | "
                     f"{pi / 2**20:.2f} / {mi / 2**20:.2f} MiB ({pi / max(1, mi):.3f}) | "
                     f"{pd / GiB:.2f} / {md / GiB:.2f} GiB ({pd / max(1, md):.3f}) |")
    return "\n".join(lines) + "\n"


def figure(doc, path):
    """scale.png: per chunk size, the hit's latency beside the disk's own direct
    read (p50, bars to p99), and the store rate beside the disk's direct write;
    False (and a line on stderr) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on a benchmark machine
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (.venv/bin/pip install -r "
              "bench/requirements-bench.txt): scale.png not written", file=sys.stderr)
        return False
    runs = doc["runs"]
    labels = [f"{r['chunk_bytes'] >> 10} KiB" for r in runs]
    xs = range(len(runs))
    fig, (lat, rate) = plt.subplots(1, 2, figsize=(11, 4.2))
    for k, (who, name) in enumerate((("ours", "a hit (pool get)"),
                                     ("device", "the disk's O_DIRECT pread"))):
        p50 = [r["hits"][who]["p50_ms"] for r in runs]
        p99 = [r["hits"][who]["p99_ms"] - v for r, v in zip(runs, p50)]
        lat.bar([x + (k - 0.5) * 0.38 for x in xs], p50, 0.38, yerr=[[0] * len(runs), p99],
                capsize=3, label=name)
    lat.set_xticks(list(xs), labels)
    lat.set_ylabel("ms (p50, bar to p99)")
    lat.set_title("hit latency beside the disk's own read")
    lat.legend(fontsize=8)
    for k, (value, name) in enumerate((
            (lambda r: r["fill"]["mb_per_s"], "stores (4 writer processes)"),
            (lambda r: r["disk"]["write_Bps"] / 1e6, "the disk's O_DIRECT write"),
            (lambda r: r["disk"]["write_dsync_Bps"] / 1e6, "... with O_DSYNC"))):
        rate.bar([x + (k - 1) * 0.27 for x in xs], [value(r) for r in runs], 0.27, label=name)
    rate.set_xticks(list(xs), labels)
    rate.set_ylabel("MB/s")
    rate.set_title("store rate beside the disk's own write")
    rate.legend(fontsize=8)
    ns = doc["namespace"]
    fig.suptitle(f"{ns['bytes'] / GiB:.0f} GiB device namespace, direct-files "
                 f"{ns['direct_files']}, disable-odsync {ns['disable_odsync']}, "
                 f"{doc['runs'][0]['fill']['factor']:g}x its capacity offered; "
                 f"{doc['provenance']['machine']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv=None):
    if argv is None and sys.argv[1:2] == ["--redraw"]:  # a record's Markdown and figure again
        out = sys.argv[2]
        with open(os.path.join(out, "scale.json")) as f:
            doc = json.load(f)
        record.write(out, "scale", doc, markdown(doc))
        figure(doc, os.path.join(out, "scale.png"))
        return
    a = options(argv)
    rng = random.Random(1)
    dfile = device_direct.DirectFile(
        os.path.join(a.device_dir, "device-direct.dat"), device_direct.parse_size(a.device_file_size))
    try:
        fresh_node(a)
        # After the start: the server's build is asked of it.
        prov = record.provenance(hosts=a.hosts, namespace=a.namespace, packages=())
        kv = namespace(a)
        files = sum(1 for k in kv if k.startswith("storage-engine.file[") and k.endswith("].age"))
        ns = {"files": files, "bytes": int(kv.get("data_total_bytes", 0)),
              "direct_files": kv.get("storage-engine.direct-files"),
              "disable_odsync": kv.get("storage-engine.disable-odsync"),
              "post_write_cache": int(kv.get("storage-engine.post-write-cache", 0)),
              "max_write_cache": int(kv.get("storage-engine.max-write-cache", 0))}
        runs = [one_size(a, device_direct.parse_size(c), dfile, rng) for c in a.chunks.split(",")]
    finally:
        dfile.remove()
    doc = {"provenance": prov, "device_file_bytes": dfile.size, "namespace": ns,
           "capacity_bytes": runs[0]["fill"]["capacity_bytes"] if runs else None, "runs": runs}
    os.makedirs(a.out, exist_ok=True)
    record.write(a.out, "scale", doc, markdown(doc))
    figure(doc, os.path.join(a.out, "scale.png"))
    print(markdown(doc))


if __name__ == "__main__":
    main()
