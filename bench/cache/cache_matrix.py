"""Several bench/cache/cache_bench.py runs side by side: one row per case (namespace, chunk
size), each tier's hit ratio by prefix token against the exact LRU of the same budget
on the same requests, requests a second, and what the namespace held at the end.

    python bench/cache/cache_matrix.py --out DIR RUN_DIR [RUN_DIR ...]

RUN_DIR: a cache_bench.py --out folder (cache_bench.json in it). What the namespace
held is its data used and its records in our run's last interval (before the run
removes its set). DRAM: a memory namespace costs its data size, and every namespace
its primary index, 64 bytes a record; an SSD file's write cache (max-write-cache) is
left out. Writes cache_matrix.md and, with matplotlib, cache_matrix.png (the ratios
against the exact LRU per case) into DIR.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cache_report import size_label  # noqa: E402

TIERS = (("ours", "ours"), ("redis", "Redis at the budget"),
         ("redis_dram", "Redis at our data size"))
# The primary index: 64 bytes of DRAM a record, on every storage engine.
INDEX_BYTES = 64


def load(run_dir):
    with open(os.path.join(run_dir, "cache_bench.json")) as f:
        return json.load(f)


def storage(doc):
    # A device namespace has no storage-engine.data-size (cache_bench reads it as None).
    settings = doc["config"]["namespace_settings"]
    return "memory" if settings.get("storage-engine.data-size") else "SSD file"


def dram(doc):
    """(DRAM bytes the namespace costs, bytes it held) in our last interval, or None."""
    rows = [r for r in doc["runs"]["ours"].get("rows", []) if r.get("objects")]
    if not rows:
        return None
    size = int(doc["config"]["data_size_bytes"])
    held = rows[-1]["used_pct"] / 100 * size
    index = rows[-1]["objects"] * INDEX_BYTES
    return (size + index if storage(doc) == "memory" else index), held, size


def case_row(doc):
    cfg = doc["config"]
    runs = doc["runs"]
    lru = runs["ours"]["totals"]["lru_prefix_hit"]
    row = {"case": f"{storage(doc)} {size_label(int(cfg['data_size_bytes']))}, "
                   f"{cfg['writers']} x {size_label(int(cfg['chunk_bytes']))}",
           "lru": lru, "budget": int(cfg["budget_bytes"])}
    for name, _ in TIERS:
        t = runs.get(name, {}).get("totals")
        if t:
            row[name] = t["tier_prefix_hit"]
            row[name + "_ratio"] = t["tier_prefix_hit"] / lru if lru else None
            row[name + "_rps"] = t["requests"] / t["seconds"] if t["seconds"] else None
    d = dram(doc)
    if d:
        row["dram_bytes"], row["held_bytes"], row["size_bytes"] = d
    return row


def fmt(x, spec=".3f"):
    return "–" if x is None else format(x, spec)


def table(rows):
    lines = ["| case | exact LRU % | ours % | ours / LRU | Redis at budget / LRU | "
             "Redis at our data size / LRU | requests/s ours / Redis | held / data size | "
             "DRAM per cached byte |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        held = dram_per = "–"
        if "held_bytes" in r:
            held = fmt(r["held_bytes"] / r["size_bytes"], ".2f")
            dram_per = fmt(r["dram_bytes"] / max(r["held_bytes"], 1), ".3g")
        lines.append(
            f"| {r['case']} | {fmt(100 * r['lru'], '.1f')} | {fmt(100 * r.get('ours', 0), '.1f')} "
            f"| {fmt(r.get('ours_ratio'))} | {fmt(r.get('redis_ratio'))} "
            f"| {fmt(r.get('redis_dram_ratio'))} "
            f"| {fmt(r.get('ours_rps'), '.1f')} / {fmt(r.get('redis_rps'), '.1f')} "
            f"| {held} | {dram_per} |")
    return lines


def chart(rows, path):
    """Grouped bars: each tier's hit ratio over the exact LRU's, per case."""
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display on a benchmark machine
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(rows)), 4.5))
    width = 0.8 / len(TIERS)
    for i, (name, label) in enumerate(TIERS):
        xs = [k + (i - 1) * width for k in range(len(rows))]
        ax.bar(xs, [r.get(name + "_ratio") or 0 for r in rows], width, label=label)
    ax.axhline(0.95, color="black", linestyle="--", linewidth=1, label="0.95 x exact LRU")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["case"] for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("hit ratio by prefix token / exact LRU's")
    ax.set_ylim(0.5, 1.15)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("A full tier under LMCache's requests, 4 writer processes")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("runs", nargs="+")
    args = ap.parse_args(argv)
    rows = [case_row(load(d)) for d in args.runs]
    os.makedirs(args.out, exist_ok=True)
    md = os.path.join(args.out, "cache_matrix.md")
    with open(md, "w") as f:
        f.write("# Cache benchmark matrix\n\n" + "\n".join(table(rows)) + "\n")
    print(f"wrote {md}")
    png = os.path.join(args.out, "cache_matrix.png")
    if chart(rows, png):
        print(f"wrote {png}")


if __name__ == "__main__":
    main()
