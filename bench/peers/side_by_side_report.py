"""bench/peers/side_by_side.py's outputs: side_by_side.json, side_by_side.md, side_by_side.png."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from record import provenance, redis_version  # noqa: E402  bench/record.py

KIB, MIB = 1024, 1024 * 1024


def size_label(size):
    return f"{size // MIB} MiB" if size % MIB == 0 else f"{size // KIB} KiB"


def fmt(x, digits=2):
    return "–" if x is None else f"{x:.{digits}f}"


# ------------------------------------------------------------------------ config

def config(args, ctx, keys_per_submit):
    """What the run was, so a table can be read (and rerun) without its command line."""
    return {
        **provenance(args.hosts, namespace=args.namespace),  # date, command, commit, machine,
        # the server's build, lmcache
        "hosts": args.hosts, "namespace": args.namespace,
        "peer_delay_ms": getattr(args, "peer_delay_ms", None),
        "redis_server": redis_version(),
        "lmcache_aerospike_peer_path": ctx["peer_path"] or None,
        "mooncake": ctx.get("mooncake_note"),
        "cpus": os.cpu_count(),
        "rounds": args.rounds, "sizes_bytes": args.sizes, "adapters": args.adapters,
        "in_flight": args.in_flight, "bench_rounds": args.bench_rounds,
        "warmup_rounds": 1, "mib_per_round": args.mib_per_round,
        "num_keys": {str(s): keys_per_submit(s, args) for s in args.sizes},
        "unit": "GB/s = 10^9 bytes/s; median over rounds of lmcache bench l2's "
                "throughput_avg (its mean over measured rounds)",
    }


# ------------------------------------------------------------------------ writers

def write_all(doc, out_dir):
    """Writes the three files; returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, "side_by_side.json"), os.path.join(out_dir, "side_by_side.md")]
    with open(paths[0], "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    with open(paths[1], "w") as f:
        f.write(markdown(doc))
    png = os.path.join(out_dir, "side_by_side.png")
    if chart(doc, png):
        paths.append(png)
    return paths


def cell(row, op):
    """A throughput cell: the median and, on a shared machine where runs differ by
    2x, the range of the rounds; marked when some rounds failed."""
    if row["status"] != "ok":
        return row["status"]
    samples = row[f"{op}_samples_gbps"]
    value = fmt(row[f"{op}_gbps"])
    if len(samples) > 1:
        value += f" ({fmt(min(samples))}–{fmt(max(samples))})"
    failed = len(row["errors"])
    return value if not failed else f"{value}, {row['runs']} of {row['runs'] + failed} runs"


def markdown(doc):
    c = doc["config"]
    lines = [
        "# `lmcache bench l2`, side by side",
        "",
        f"{c['date']}; Aerospike {c['aerospike_server']} at {c['hosts']}, "
        f"{c['redis_server'] or 'no redis-server'}, LMCache {c['lmcache']}; "
        f"{c.get('machine', str(c['cpus']) + ' CPUs')}; commit {c.get('commit', 'unknown')}. "
        f"{c['rounds']} interleaved round(s); each run: {c['in_flight']} in flight, "
        f"~{c['mib_per_round']} MiB per round, 1 warmup + {c['bench_rounds']} measured "
        f"rounds, `--no-skip-verify`. GB/s = 10^9 B/s: median over the rounds "
        f"(lowest–highest round); ratios are of medians.",
        "",
        f"Command: `{c['command']}`",
        "",
        "| size | adapter | store GB/s | load GB/s | store ÷ native_plugin | load ÷ native_plugin |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in doc["results"]:
        lines.append(f"| {size_label(r['size_bytes'])} | {r['label']} | {cell(r, 'store')} | "
                     f"{cell(r, 'load')} | {fmt(r['store_vs_native_plugin'])} | "
                     f"{fmt(r['load_vs_native_plugin'])} |")
    if doc["ours_vs_peers"]:
        lines += ["", "Ours ÷ peer (above 1: ours is faster):", "",
                  "| size | peer | native_plugin store | native_plugin load "
                  "| plugin store | plugin load |",
                  "|---|---|---:|---:|---:|---:|"]
        for e in doc["ours_vs_peers"]:
            lines.append(f"| {size_label(e['size_bytes'])} | {e['peer']} | "
                         f"{fmt(e['native_plugin_store'])} | {fmt(e['native_plugin_load'])} | "
                         f"{fmt(e['plugin_store'])} | {fmt(e['plugin_load'])} |")
    lines += notes(doc)
    return "\n".join(lines) + "\n"


def notes(doc):
    """Why an adapter was skipped, and the first line of every failure."""
    out = [f"- {name} skipped: {why}" for name, why in doc["skipped"].items()]
    if doc["config"].get("mooncake"):
        out.append(f"- mooncake: {doc['config']['mooncake']}")
    for r in doc["results"]:
        for err in r["errors"]:
            first = err.splitlines()[0]
            out.append(f"- {r['adapter']} at {size_label(r['size_bytes'])} failed, {first}")
    return ["", "Notes:", ""] + out if out else []


# ------------------------------------------------------------------------ chart

def chart(doc, path):
    """Grouped bars per size, store and load side by side. Returns False (and says
    so) when matplotlib is missing: the tables do not need it."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on a benchmark machine
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (.venv/bin/pip install -r "
              "bench/requirements-bench.txt): side_by_side.png not written", file=sys.stderr)
        return False
    sizes = doc["config"]["sizes_bytes"]
    adapters = doc["config"]["adapters"]
    by_key = {(r["size_bytes"], r["adapter"]): r for r in doc["results"]}
    width = 0.8 / len(adapters)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, op in zip(axes, ("store", "load")):
        for i, name in enumerate(adapters):
            rows = [by_key[s, name] for s in sizes]
            label = rows[0]["label"] + (" (skipped)" if rows[0]["status"] == "skipped" else "")
            values = [r[f"{op}_gbps"] or 0.0 for r in rows]
            # Error bars from the lowest to the highest round.
            low = [v - min(r[f"{op}_samples_gbps"], default=v) for v, r in zip(values, rows)]
            high = [max(r[f"{op}_samples_gbps"], default=v) - v for v, r in zip(values, rows)]
            xs = [j + (i - (len(adapters) - 1) / 2) * width for j in range(len(sizes))]
            ax.bar(xs, values, width, label=label, yerr=[low, high], capsize=2,
                   error_kw={"elinewidth": 0.8, "alpha": 0.6})
        ax.set_xticks(range(len(sizes)), [size_label(s) for s in sizes])
        ax.set_title(f"{op}: median GB/s, bars lowest to highest round")
        ax.set_xlabel("chunk size")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("GB/s (10^9 B/s)")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"lmcache bench l2 --no-skip-verify, median of {doc['config']['rounds']} "
                 f"interleaved round(s), "
                 f"Aerospike {doc['config']['aerospike_server']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
