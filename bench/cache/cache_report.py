"""bench/cache/cache_bench.py's outputs: the per-interval line it prints, and
cache_bench.json and cache_bench.md in --out."""

import json
import os

import cache_figures as fig
from cache_events import event_line

KIB, MIB = 1024, 1024 * 1024

# Engine counters that make up the "retried" and "dropped" columns (whichever exist).
RETRIED = ("puts_retried", "write_retries")
DROPPED = ("dropped_full", "dropped_busy", "dropped_unsent")


def size_label(size):
    if size % MIB == 0:
        return f"{size // MIB} MiB"
    return f"{size // KIB} KiB" if size % KIB == 0 else f"{size} B"


def pct(x):
    return "–" if x is None else f"{100 * x:.1f}"


def debris_cell(d):
    if not d:
        return "–"
    return f"{d['debris_records']}/{d['total_records']}"


def pair(row, ratio, scope=""):
    """The tier's ratio and the simulation's, side by side: "64.6/50.0"."""
    return f"{pct(row[f'{scope}tier_{ratio}'])}/{pct(row[f'{scope}lru_{ratio}'])}"


def _engine(row, names):
    return sum(row["engine"].get(n, 0) for n in names)


# (header, cell of an interval row); the printed line and the Markdown table share them.
COLUMNS = [
    ("t s", lambda r: f"{r['t_s']:.0f}"),
    ("req", lambda r: str(r["requests"])),
    ("st ok", lambda r: str(r["stored_ok"])),
    ("retr", lambda r: str(_engine(r, RETRIED))),
    ("drop", lambda r: str(_engine(r, DROPPED))),
    ("fail", lambda r: str(r["store_failed"])),
    ("chunk% T/LRU", lambda r: pair(r, "chunk_hit")),
    ("prefix% T/LRU", lambda r: pair(r, "prefix_hit")),
    ("hot% T/LRU", lambda r: pair(r, "prefix_hit", "hot_")),
    ("evicted", lambda r: str(r["evicted"])),
    ("used%", lambda r: f"{r['used_pct']}{'!' if r['stop_writes'] else ''}"),
    ("debris", lambda r: debris_cell(r["debris"])),
    ("wrongB", lambda r: str(r["wrong_bytes"])),
    ("lost", lambda r: str(r["lost"])),
    ("hung", lambda r: str(r["hung"])),
    ("ld GB/s", lambda r: f"{r['load_gbps']:.2f}"),
    ("st GB/s", lambda r: f"{r['store_gbps']:.2f}"),
    ("RSS MiB", lambda r: f"{r['rss_kib'] / 1024:.0f}"),
]
WIDTHS = [max(len(h), 4) for h, _ in COLUMNS]


def header_line():
    return "  ".join(h.rjust(w) for (h, _), w in zip(COLUMNS, WIDTHS))


def row_line(row):
    return "  ".join(cell(row).rjust(w) for (_, cell), w in zip(COLUMNS, WIDTHS))


LEGEND = (
    "req: requests served in the interval (hot re-reads included); st ok / fail: chunks "
    "stored, by the completions; retr / drop: the engine's counters "
    f"({', '.join(RETRIED)} / {', '.join(DROPPED)}, those it has); chunk%: chunks present "
    "at lookup; prefix%: tokens in the leading run of chunks loaded intact (what LMCache "
    "uses); hot%: prefix% of the hot set's re-reads; T/LRU: the tier, then the exact LRU "
    "simulation of the "
    "budget on the same requests (it counts payload bytes only, where a tier also keeps "
    "keys and metadata); evicted: server evictions (records: one chunk is a meta "
    "record plus segments on Aerospike, one key on Redis), namespace-wide; used%: of the "
    "data size, ! when the server stopped writes; debris: orphan or broken records / "
    "records of the set (a sweep, when taken); wrongB: bytes of hits that were not the "
    "key's payload; lost: present at lookup, missing at load; hung: operations without a "
    "completion within the timeout (LMCache's RESP client never completes a GET of a "
    "missing key: the benchmark then replaces the client); RSS: the benchmark process (the "
    "Redis run's includes LMCache's imports, torch among them). Redis loads "
    "--redis-get-batch chunks per GET submit (default 1): a larger pipelined batch's "
    "replies count against maxmemory, and a full redis-server evicts the batch's own "
    "later keys to make room.")


# ------------------------------------------------------------------------ totals

def both(t, name, side="tier"):
    """A count over the user turns and the hot re-reads."""
    return t[f"{side}.{name}"] + t[f"hot_{side}.{name}"]


def wrong_bytes(t):
    """Every wrong byte of a run: in its requests and in the end-of-run reads."""
    return both(t, "wrong_bytes") + t["fifth_wrong_bytes"]


def totals_rows(runs):
    """(row name, cells) of the totals table: per run its tier's value, then the exact
    LRU's on the same requests ("–" where the simulation has no such figure)."""
    def fifth(x):
        return pct(x) if x is not None else "–"

    def stores(t):
        e = t["engine"]
        return (f"{both(t, 'stored_ok')} / {sum(e.get(n, 0) for n in RETRIED)} / "
                f"{sum(e.get(n, 0) for n in DROPPED)} / {both(t, 'store_failed')}")

    def shared_order(t):
        e = t["engine"]
        names = ("puts_paced", "clock_reservations", "hits_touched", "hits_fresh")
        return " / ".join(str(e[n]) for n in names) if all(n in e for n in names) else "–"

    def rss(t):
        r = t["rss_kib"]
        return "–" if not r else " / ".join(str(r[k] // 1024) for k in ("first", "last", "max"))

    def debris(t):
        d = t["debris"]
        if not d:
            return "n/a"
        share = d["debris_records"] / d["total_records"] if d["total_records"] else 0.0
        return f"{pct(share)} ({debris_cell(d)})"

    rows = [
        ("requests", lambda t: str(t["requests"]), lambda t: str(t["requests"])),
        ("hit ratio by chunk %", lambda t: pct(t["tier_chunk_hit"]),
         lambda t: pct(t["lru_chunk_hit"])),
        ("hit ratio by prefix token %", lambda t: pct(t["tier_prefix_hit"]),
         lambda t: pct(t["lru_prefix_hit"])),
        ("hot set, by prefix token %", lambda t: pct(t["hot_tier_prefix_hit"]),
         lambda t: pct(t["hot_lru_prefix_hit"])),
        ("hot set, by chunk %", lambda t: pct(t["hot_tier_chunk_hit"]),
         lambda t: pct(t["hot_lru_chunk_hit"])),
        ("newest fifth of the budget readable at the end %",
         lambda t: fifth(t["newest_fifth"]), lambda t: fifth(t["lru_newest_fifth"])),
        ("oldest fifth of the budget readable at the end %",
         lambda t: fifth(t["oldest_fifth"]), lambda t: fifth(t["lru_oldest_fifth"])),
        ("stores ok / retried / dropped / failed", stores,
         lambda t: str(both(t, "stored_ok", "lru"))),
        ("puts paced / clock round trips / hits moved / hits fresh", shared_order, None),
        ("evictions (records)", lambda t: str(t["evicted"]), lambda t: str(t["lru_evicted"])),
        ("lost between lookup and load (chunks)", lambda t: str(both(t, "lost")), None),
        ("hung operations", lambda t: str(both(t, "hung")), None),
        ("wrong bytes (chunks)", lambda t: f"{wrong_bytes(t)} ({both(t, 'wrong_chunks')})", None),
        ("debris % (records)", debris, None),
        ("RSS MiB first / last / max", rss, None),
        ("seconds", lambda t: f"{t['seconds']:.0f}", None),
    ]
    return [(name, [cell for _, t in runs for cell in (tier(t), lru(t) if lru else "–")])
            for name, tier, lru in rows]


# ------------------------------------------------------------------------ per case

def summary(doc):
    """Our run's figures as bench/cache/cache_fill.py reports them (stores and drops by
    cause, the newest and oldest fifths, the warm set, the slowest set batch, each
    writer's clocks, NSUP per node, debris, wrong bytes, events), the hit ratios
    beside them: the document --json writes, one case of bench/cache/cluster_cases.py's."""
    c, t = doc["config"], doc["runs"]["ours"]["totals"]
    e, d = t["engine"], t.get("debris") or {}
    stored, failed = both(t, "stored_ok"), both(t, "store_failed")
    lru = t["lru_prefix_hit"]
    return {
        "command": c.get("command"), "server": c.get("server"), "nodes": c.get("nodes"),
        "writers": c["writers"], "chunk_bytes": c["chunk_bytes"],
        "capacity_bytes": c["budget_bytes"], "writer_clocks": c.get("writer_clocks"),
        "control": c.get("control"), "events": t.get("events", []),
        "requests": t["requests"], "seconds": t["seconds"],
        "hit_by_prefix_token": t["tier_prefix_hit"], "lru_hit_by_prefix_token": lru,
        "ours_over_lru": t["tier_prefix_hit"] / lru if lru else None,
        "hit_by_chunk": t["tier_chunk_hit"], "lru_hit_by_chunk": t["lru_chunk_hit"],
        "hot_by_prefix_token": t["hot_tier_prefix_hit"],
        "offered": stored + failed, "stored": stored, "failed": failed,
        "failed_by_error": t.get("set_errors", {}),
        "dropped": {k: e.get(k, 0) for k in fig.DROPS},
        "newest_fifth": t["newest_fifth"], "oldest_fifth": t["oldest_fifth"],
        "warm": t.get("warm"), "puts": t.get("sets"),
        "clock": fig.clocks({w: x for w, x in t.get("engines_by_writer", {}).items()}, stored,
                            t["seconds"]),
        "nsup": t.get("nsup"),
        "debris": d.get("debris_records"), "objects": d.get("total_records"),
        "wrong_bytes": wrong_bytes(t),
    }


def summary_lines(s):
    """The case's figures as lines (printed, and in cache_bench.md)."""
    w, p, c = s["warm"] or {}, s["puts"] or {}, s["clock"]
    lines = [
        f"stored {s['stored']} of {s['offered']} offered; failed {s['failed']} "
        f"(set batches by error: {s['failed_by_error'] or 0}); dropped by cause: "
        + ", ".join(f"{k[8:]} {v}" for k, v in s["dropped"].items()),
        f"newest fifth readable {pct(s['newest_fifth'])} %, oldest fifth "
        f"{pct(s['oldest_fifth'])} %",
        f"hot set after the first budget: {w.get('hit')} / {w.get('reads_after_first_budget')} "
        f"re-reads whole (exact LRU {w.get('lru_hit')}); {w.get('alive')} / "
        f"{w.get('conversations')} conversations whole at the end",
        f"slowest set batch {p.get('max')} s (p99 {p.get('p99')} s; per writer "
        f"{p.get('max_per_writer')})",
        f"clock: round trips {c['clock_reservations']} ({c['per_store']} a store, "
        f"{c['per_second']} a second); own clocks per writer {c['clock_local']}, fallbacks "
        f"{c['clock_fallbacks']}, key busy {c.get('clock_busy', 0)}",
        fig.nsup_line(s["nsup"]),
        f"debris {s['debris']} of {s['objects']} records; wrong bytes {s['wrong_bytes']}",
    ]
    if s.get("writer_clocks"):
        lines.append(f"writers' wall clocks (faketime): {s['writer_clocks']}")
    for r in s["events"]:
        lines.append(f"event {r['event']}: {event_line(r)}")
    return lines


# ------------------------------------------------------------------------ latency

def latency_table(latency):
    """latency: {tier label: {size: {"hit": {...}, "miss": {...}}}} -> Markdown lines."""
    lines = ["| tier | chunk | hit p50 / p95 / p99 ms | miss p50 / p95 / p99 ms | miss by |",
             "|---|---|---:|---:|---|"]
    for label, sizes in latency.items():
        for size, m in sizes.items():
            cells = [_percentiles(m.get(kind)) for kind in ("hit", "miss")]
            lines.append(f"| {label} | {size_label(int(size))} | {cells[0]} | {cells[1]} | "
                         f"{m.get('miss_by', 'get')} |")
    return lines


def _percentiles(p):
    if not p:
        return "–"
    return " / ".join(f"{p[k] * 1e3:.2f}" for k in ("p50", "p95", "p99"))


# ------------------------------------------------------------------------ files

def write_all(doc, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, "cache_bench.json"), os.path.join(out_dir, "cache_bench.md")]
    with open(paths[0], "w") as f:
        json.dump(doc, f, indent=2, default=str)
        f.write("\n")
    with open(paths[1], "w") as f:
        f.write(markdown(doc))
    return paths


def markdown(doc):
    c = doc["config"]
    lines = ["# Cache benchmark: a full tier under a stream of new prefixes", "",
             f"{c['date']}; {c['server']}; {c['note']}", "",
             f"Budget {c['budget_bytes'] / 1e9:.3f} GB ({c['budget_source']}), chunks of "
             f"{size_label(c['chunk_bytes'])}, working set {c['working_set_factor']}x the "
             f"budget ({c['users']} users, Zipf {c['zipf']}, {c['system_prompts']} system "
             f"prompts), {c['writers']} writers, hot set of {c['hot_conversations']} "
             f"conversations re-read every {c['hot_every']} turns, seed {c['seed']}. "
             f"Engine settings: `{c['engine_settings']}`.", "",
             "Namespace: " + (", ".join(f"{k}={v}" for k, v in
                                        (c.get("namespace_settings") or {}).items()) or "–")
             + ".", "",
             f"Command: `{c['command']}`", ""]
    runs = [(doc["runs"][name]["label"], doc["runs"][name]["totals"])
            for name in doc["runs"] if doc["runs"][name].get("totals")]
    if runs:
        lines += ["## Totals", "",
                  "Each tier's column is followed by the exact LRU of the budget on the "
                  "same requests.", "",
                  "| | " + " | ".join(f"{label} | exact LRU" for label, _ in runs) + " |",
                  "|---|" + "---:|" * (2 * len(runs))]
        for name, cells in totals_rows(runs):
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    if doc["runs"].get("ours", {}).get("totals"):
        lines += ["## Ours: the cluster, events and writers", "",
                  *[f"- {line}" for line in summary_lines(summary(doc))], ""]
    for name, run in doc["runs"].items():
        lines += [f"## {run['label']}: per interval", ""]
        if run.get("skipped"):
            lines += [f"Skipped: {run['skipped']}", ""]
            continue
        lines += ["| " + " | ".join(h for h, _ in COLUMNS) + " |",
                  "|" + "---:|" * len(COLUMNS)]
        lines += ["| " + " | ".join(cell(r) for _, cell in COLUMNS) + " |" for r in run["rows"]]
        lines.append("")
    lines += ["Columns: " + LEGEND, ""]
    if doc.get("latency"):
        lines += ["## Single get latency", "", *latency_table(doc["latency"]), "",
                  doc.get("latency_note", ""), ""]
    return "\n".join(lines) + "\n"
