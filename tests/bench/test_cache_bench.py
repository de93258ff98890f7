"""bench/cache/cache_bench.py, the cache benchmark, and its parts: the trace generator
(deterministic, shared system prompts share keys, a turn extends the previous prefix,
Zipf skew, the hot set's period), the exact LRU simulation (budget, recency, a tiny
trace counted by hand), the payload check (a swapped or foreign chunk is caught), and
one short run against the server the tests use (report columns, no wrong byte).
"""

import collections
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "cache"))  # the benchmark's modules are not a package

import cache_lru  # noqa: E402
import cache_payload  # noqa: E402
import cache_report  # noqa: E402
import cache_trace  # noqa: E402

MIB = 1 << 20


def config(**kw):
    return cache_trace.TraceConfig(**{"budget_bytes": 256 * MIB, "chunk_bytes": MIB, **kw})


# ---------------------------------------------------------------------- trace

def test_the_trace_is_deterministic_for_a_seed():
    assert cache_trace.take(config(seed=7), 300) == cache_trace.take(config(seed=7), 300)
    a = [r.keys for r in cache_trace.take(config(seed=7), 50)]
    b = [r.keys for r in cache_trace.take(config(seed=8), 50)]
    assert a != b


def test_shared_system_prompts_give_shared_keys():
    c = config()
    reqs = cache_trace.take(c, 500)
    first_keys = collections.defaultdict(set)  # a request's first key -> users
    for r in reqs:
        first_keys[r.keys[0]].add(r.user)
    # Every request starts with one of the few system prompts, so the first key is
    # one of that many, and shared by many users.
    assert len(first_keys) <= c.system_prompts
    assert max(len(users) for users in first_keys.values()) >= 10
    trace = cache_trace.Trace(c)
    for r in reqs:
        assert any(r.keys[:len(s)] == tuple(s) for s in trace.system)


def test_a_turn_extends_the_users_previous_prefix():
    c = config()
    trace = cache_trace.Trace(c)
    system = {tuple(s) for s in trace.system}
    last, extended, restarted = {}, 0, 0
    for r in cache_trace.take(c, 1000):
        if r.hot:
            continue
        prev = last.get(r.user)
        if prev is not None and r.keys[:len(prev)] == prev:
            assert len(r.keys) == len(prev) + r.new_chunks
            extended += 1
        else:  # a new conversation: a system prompt and the new chunks
            assert r.keys[:len(r.keys) - r.new_chunks] in system
            restarted += 1
        assert r.writer == int(r.user[1:]) % c.writers  # a conversation keeps its writer
        last[r.user] = r.keys
    assert extended > 3 * restarted  # 5 of 6 turns extend with max_turns=6


def test_zipf_popularity_is_skewed_and_the_exponent_sets_it():
    def counts(zipf):
        return collections.Counter(r.user for r in cache_trace.take(config(zipf=zipf), 3000)
                                   if not r.hot)

    skewed, flat = counts(1.0), counts(0.0)
    assert skewed["u0"] > 5 * skewed["u19"]
    assert skewed.most_common(1)[0][0] == "u0"
    assert skewed["u0"] > 4 * flat["u0"]


def test_the_working_set_is_the_factor_times_the_budget():
    c = config(working_set_factor=5.0)
    per_user = c.max_turns * 2 * c.chunk_bytes  # 1..3 new chunks a turn: 2 on average
    shared = c.system_prompts * 4 * c.chunk_bytes  # prompts of 2..6 chunks: 4 on average
    assert abs(c.users() * per_user + shared - 5 * c.budget_bytes) <= per_user
    assert config(working_set_factor=10.0).users() > 1.9 * c.users()


def test_the_hot_set_is_re_read_every_period_throughout():
    c = config(hot_every=10, hot_conversations=3)
    reqs = cache_trace.take(c, 200)
    hot_at = [r.index for r in reqs if r.hot]
    assert hot_at[:6] == [0, 1, 2, 13, 14, 15]  # 3 hot, 10 turns, 3 hot, ...
    assert len(hot_at) == 3 * len(range(0, 200, 13))
    assert all(r.new_chunks == 0 and r.keys == reqs[r.index % 13].keys for r in reqs if r.hot)
    assert c.hot_period() == 10 and config().hot_period() >= 1


# ---------------------------------------------------------------------- exact LRU

def test_the_lru_never_holds_more_than_its_budget():
    lru = cache_lru.ExactLRU(100)
    rng = random.Random(3)
    for _ in range(2000):
        lru.insert(f"k{rng.randrange(60)}", rng.randint(1, 30))
        assert lru.used <= 100
        assert lru.used == sum(lru.items.values())


def test_the_lru_evicts_the_least_recently_used():
    lru = cache_lru.ExactLRU(3)
    for k in "abc":
        lru.insert(k, 1)
    lru.touch("a")  # b is now the least recent
    lru.insert("d", 1)
    assert list(lru.items) == ["c", "a", "d"] and lru.evicted == 1


def test_a_tiny_trace_gives_the_hit_counts_worked_out_by_hand():
    # Budget: two chunks. Cache contents after each request, least recent first:
    #   [a]   miss, store a                      -> a
    #   [a b] a hit (prefix 1), store b          -> a b
    #   [c]   miss, store c, evict a             -> b c
    #   [a b] b hit after a gap (prefix 0), store a, evict b      -> c a
    #   [a b] a hit (prefix 1, touched), store b, evict c         -> a b
    #   [c]   miss, store c, evict a             -> b c
    lru = cache_lru.ExactLRU(2)
    outcomes = [lru.serve(list(keys), 1, 256) for keys in ("a", "ab", "c", "ab", "ab", "c")]
    assert [o.chunk_hits for o in outcomes] == [0, 1, 0, 1, 1, 0]
    assert [o.prefix_tokens // 256 for o in outcomes] == [0, 1, 0, 0, 1, 0]
    assert sum(o.stored_ok for o in outcomes) == 6
    assert lru.evicted == 4 and list(lru.items) == ["b", "c"]


def test_fifths_are_the_newest_and_oldest_distinct_stores():
    log = [("a", 10), ("b", 10), ("a", 10), ("c", 10), ("d", 10)]
    newest, oldest = cache_lru.fifths(log, 100)  # a fifth: 20 bytes
    assert newest == ["d", "c"] and oldest == ["a", "b"]


# ---------------------------------------------------------------------- payloads

@pytest.mark.parametrize("size", [256 << 10, 4 * MIB + 4096])
def test_the_payload_check_catches_swapped_foreign_and_stale_chunks(size):
    p = cache_payload.Payloads(size, b"run-1")
    a, b = p.fill("A", p.buffer()), p.fill("B", p.buffer())
    assert p.wrong_bytes("A", a) == 0
    assert p.wrong_bytes("A", b) > size // 2  # another key's chunk
    half = size // 2
    swapped = np.concatenate([a[half:], a[:half]])  # two segments swapped
    assert p.wrong_bytes("A", swapped) > 0
    stale = cache_payload.Payloads(size, b"run-0").fill("A", p.buffer())  # an earlier run's
    assert p.wrong_bytes("A", stale) > size // 2
    one = a.copy()
    one[size - 1] ^= 0x40
    assert p.wrong_bytes("A", one) == 1


# ---------------------------------------------------------------------- end to end

def test_a_short_run_reports_every_column_and_no_wrong_byte(aerospike_hosts, tmp_path):
    cmd = [sys.executable, str(REPO / "bench" / "cache" / "cache_bench.py"), "--hosts", aerospike_hosts,
           "--budget-bytes", "4M", "--chunk", "256K", "--duration", "2", "--interval", "1",
           "--writers", "2", "--no-redis", "--no-mooncake", "--latency-sizes", "256K",
           "--latency-gets", "3",
           "--out", str(tmp_path)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads((tmp_path / "cache_bench.json").read_text())
    ours = doc["runs"]["ours"]
    assert ours["rows"] and ours["totals"]["requests"] > 0
    for row in ours["rows"]:
        for _, cell in cache_report.COLUMNS:
            cell(row)  # every column has its field
    t = ours["totals"]
    assert cache_report.wrong_bytes(t) == 0
    assert t["tier.chunk_hits"] + t["hot_tier.chunk_hits"] > 0  # so bytes were checked
    assert t["tier_chunk_hit"] is not None and t["lru_prefix_hit"] is not None
    assert t["debris"]["debris_records"] == 0
    lat = doc["latency"]["ours (lmcache_aerospike._native)"][str(256 << 10)]
    assert lat["wrong_or_missing"] == 0 and lat["hit"]["p50"] > 0
    md = (tmp_path / "cache_bench.md").read_text()
    assert "| " + " | ".join(h for h, _ in cache_report.COLUMNS) + " |" in md
    assert "hit ratio by prefix token" in md and "Single get latency" in md
    assert cache_report.header_line() in out.stdout


# ---------------------------------------------------------------------- matrix

def _bench_doc(ours, lru, redis=None, storage="memory", objects=1000, used_pct=40.0):
    """A cache_bench.json with the fields bench/cache/cache_matrix.py reads."""
    settings = {"storage-engine.data-size": str(2 << 30)}
    if storage == "ssd":
        settings = {"storage-engine.data-size": None}
    totals = lambda hit: {"tier_prefix_hit": hit, "lru_prefix_hit": lru,  # noqa: E731
                          "requests": 100, "seconds": 10.0}
    runs = {"ours": {"totals": totals(ours),
                     "rows": [{"objects": 1, "used_pct": 1.0},
                              {"objects": objects, "used_pct": used_pct}]}}
    if redis is not None:
        runs["redis"] = {"totals": totals(redis)}
    return {"config": {"namespace_settings": settings, "data_size_bytes": 2 << 30,
                       "budget_bytes": 1 << 30, "writers": 4, "chunk_bytes": 4 * MIB},
            "runs": runs}


def test_the_matrix_puts_each_tier_against_the_exact_lru_and_counts_dram(tmp_path):
    import cache_matrix

    mem, ssd = tmp_path / "mem", tmp_path / "ssd"
    for d, doc in ((mem, _bench_doc(0.72, 0.80, redis=0.60)),
                   (ssd, _bench_doc(0.76, 0.80, storage="ssd", objects=2000, used_pct=50.0))):
        d.mkdir()
        (d / "cache_bench.json").write_text(json.dumps(doc))
    out = tmp_path / "out"
    cache_matrix.main(["--out", str(out), str(mem), str(ssd)])
    lines = (out / "cache_matrix.md").read_text().splitlines()
    mem_row = next(line for line in lines if line.startswith("| memory"))
    ssd_row = next(line for line in lines if line.startswith("| SSD file"))
    assert "| 0.900 |" in mem_row and "| 0.750 |" in mem_row  # 0.72 / 0.80, 0.60 / 0.80
    assert "| 0.950 |" in ssd_row
    # Held: the last interval's data used; memory costs its data size and the index,
    # an SSD file only its index (64 bytes a record).
    assert "| 0.40 |" in mem_row and "| 0.50 |" in ssd_row
    held = 0.4 * (2 << 30)
    assert mem_row.rstrip(" |").endswith(f" {((2 << 30) + 64000) / held:.3g}")
    assert ssd_row.rstrip(" |").endswith(f" {2000 * 64 / (0.5 * (2 << 30)):.3g}")
