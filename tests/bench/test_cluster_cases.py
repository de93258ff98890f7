"""The cache benchmarks on a cluster (bench/cache/cache_cluster.py, cache_events.py,
cache_faketime.py, cache_figures.py, cache_fill.py's figures, cluster_cases.py's
table): the capacity of a cluster from its nodes' answers, the events' grammar and
their thread, the clock record's partition and its master from `replicas` bitmaps,
the report's figures from synthetic stores, a writer under faketime, and one short
fill with events on the test server's cluster where it has one.
"""

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.server.launch import running_cluster

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "cache"))  # the benchmark's modules are not a package

import cache_cluster as cluster  # noqa: E402
import cache_events as events  # noqa: E402
import cache_figures as fig  # noqa: E402

GIB = 1 << 30


def ns_answer(**kv):
    return ";".join(f"{k}={v}" for k, v in kv.items())


# ---------------------------------------------------------------------- capacity

def test_the_capacity_of_a_cluster_sums_its_nodes_over_the_replication_factor():
    nodes = [(f"F{i}", f"127.0.0.1:36{i}0", ns_answer(
        data_total_bytes=2 * GIB, effective_replication_factor=2, **{
            "replication-factor": 2, "storage-engine.evict-used-pct": 50}))
        for i in range(3)]
    assert cluster.capacity(nodes) == 3 * GIB // 2
    assert cluster.data_size(nodes) == 3 * GIB
    # One node left: the effective factor is 1, and the survivor holds it all.
    alone = [("F0", "a:1", ns_answer(data_total_bytes=2 * GIB, effective_replication_factor=1,
                                     **{"replication-factor": 2,
                                        "storage-engine.evict-used-pct": 50}))]
    assert cluster.capacity(alone) == GIB


def test_without_an_effective_factor_the_configured_one_and_without_eviction_stop_writes():
    nodes = [("F0", "a:1", ns_answer(data_total_bytes=GIB, **{
        "replication-factor": 2, "storage-engine.stop-writes-used-pct": 70}))] * 2
    assert cluster.capacity(nodes) == 2 * (GIB * 70 // 100) // 2


def test_namespace_counters_add_up_the_nodes():
    nodes = [("a", "x:1", ns_answer(objects=10, master_objects=6, evicted_objects=3,
                                    data_used_pct=40, stop_writes="false")),
             ("b", "x:2", ns_answer(objects=8, evicted_objects=1, data_used_pct=55,
                                    stop_writes="true", effective_replication_factor=2))]
    c = cluster.namespace_counters(nodes)
    assert (c["objects"], c["evicted_objects"], c["data_used_pct"], c["stop_writes"]) == \
        (18, 4, 55, True)
    assert c["master_objects"] == 6 + 8 // 2  # each record once


def test_evictions_count_per_node_and_a_restarted_node_from_its_start():
    before = [("a", "h:1", "evicted_objects=100"), ("b", "h:2", "evicted_objects=50")]
    after = [("a", "h:1", "evicted_objects=130"), ("b", "h:2", "evicted_objects=7"),
             ("c", "h:3", "evicted_objects=4")]
    assert cluster.evicted_since(before, after) == 30 + 7 + 4


# ---------------------------------------------------------------------- the clock's node

def test_the_clock_record_lies_in_partition_3310():
    digest = cluster.clock_digest()
    assert digest.hex() == "ee8c250c8e2904a6bad1849e6c01518b1e268140"
    try:  # RIPEMD-160 of set, key type 3 (a string) and key, where OpenSSL has it
        assert digest == hashlib.new("ripemd160", b"lmca_clock\x03void-clock").digest()
    except ValueError:
        pass
    assert cluster.partition_id(digest) == 0x8cee & 0xFFF == 3310


def bitmap(pids):
    raw = bytearray(512)
    for pid in pids:
        raw[pid >> 3] |= 0x80 >> (pid & 7)
    return base64.b64encode(bytes(raw)).decode()


def replicas(regime, master, prole, other="small"):
    return (f"{other}:0,1,{bitmap([])};"
            f"lmcache:{regime},2,{bitmap(master)},{bitmap(prole)};")


def test_the_master_is_the_node_whose_first_bitmap_has_the_partition():
    answers = {"127.0.0.1:3600": replicas(0, [1, 2], [3310]),
               "127.0.0.1:3610": replicas(0, [3310, 7], [1]),
               "127.0.0.1:3620": replicas(0, [3], [2, 7])}
    assert cluster.master_of(answers, "lmcache", 3310) == "127.0.0.1:3610"
    assert cluster.master_of(answers, "lmcache", 3) == "127.0.0.1:3620"
    assert cluster.master_of(answers, "lmcache", 4000) is None
    assert cluster.master_of(answers, "small", 3310) is None
    maps = cluster.replica_maps(answers["127.0.0.1:3600"])
    assert maps["lmcache"][0] == 0 and len(maps["lmcache"][1]) == 2
    assert cluster.owns(maps["lmcache"][1][1], 3310) and not cluster.owns(maps["lmcache"][1][0],
                                                                          3310)


def test_of_two_claims_the_higher_regime_wins():
    answers = {"a:1": replicas(3, [3310], []), "b:2": replicas(4, [3310], [])}
    assert cluster.master_of(answers, "lmcache", 3310) == "b:2"


def test_nodes_are_named_by_the_loopback_ports_the_fixture_index_or_the_option():
    addresses = ["127.0.0.1:3600", "127.0.0.1:3610", "127.0.0.1:3620", "127.0.0.1:4000"]
    names = cluster.node_names(addresses)
    assert names == {"127.0.0.1:3600": "cache0", "127.0.0.1:3610": "cache1",
                     "127.0.0.1:3620": "cache2"}
    assert cluster.node_names(addresses, [("127.0.0.1:4000", "far")])["127.0.0.1:4000"] == "far"
    assert cluster.parse_ctl_node("10.0.0.1:3000=n1") == ("10.0.0.1:3000", "n1")
    with pytest.raises(ValueError):
        cluster.parse_ctl_node("10.0.0.1=n1")
    table = cluster.fixture_names("0:BB9:5001:up:true;1:BB8:4999:up:true", [])
    assert table == {5001: "0", 4999: "1"}
    by_port = cluster.fixture_names("", ["h:7", "h:5"])
    assert by_port == {5: "0", 7: "1"}


def test_whole_needs_every_node_in_a_cluster_of_the_size_with_nothing_to_migrate():
    assert cluster.whole({"a": (3, 0), "b": (3, 0)}, 3)
    assert not cluster.whole({"a": (3, 0), "b": (2, 0)}, 3)
    assert not cluster.whole({"a": (3, 5), "b": (3, 0)}, 3)
    assert not cluster.whole({"a": (3, 0), "b": None}, 3)


# ---------------------------------------------------------------------- events

def test_events_parse_a_share_seconds_a_relative_time_and_a_hold():
    plan = events.plan(["kill:clock@0.4", "restart:clock@+30", "pause:cache1@12s:8",
                        "resume:cache2@.5"])
    kill, restart, pause, resume, held = plan
    assert (kill.action, kill.node, kill.share) == ("kill", "clock", 0.4)
    assert (restart.after_s, restart.prev) == (30.0, 0)
    assert (pause.at_s, pause.hold_s) == (12.0, 8.0)
    assert resume.share == 0.5
    assert (held.action, held.node, held.after_s, held.prev) == ("resume", "cache1", 8.0, 2)
    assert events.parse_event("restart:x@+5s").after_s == 5.0


@pytest.mark.parametrize("text", ["stop:cache0@0.4", "kill:@0.4", "kill:cache0", "kill:c@1.5",
                                  "kill:c@0.4:8", "kill:c@soon", "restart:c@+30"])
def test_bad_events_are_refused(text):
    with pytest.raises(ValueError):
        events.plan([text])


class FakeControl:
    """Records what it was told to do; `clock` resolves through nodes."""

    def __init__(self):
        self.calls = []
        self.nodes = cluster.Nodes(["h:1", "h:2"], {"h:1": "n1", "h:2": "n2"}, "lmcache")

    def act(self, action, name):
        self.calls.append((action, name, time.monotonic()))
        return True, ""


def test_the_events_thread_fires_at_shares_and_after_the_previous_event(monkeypatch):
    monkeypatch.setattr(events, "clock_master", lambda addresses, ns: "h:2")
    done = {"share": 0.0}
    control = FakeControl()
    ev = events.Events(events.plan(["kill:clock@0.5", "restart:clock@+0.3",
                                    "pause:n1@0.9:0.2", "kill:n1@0.95"]),
                       control, lambda: done["share"], log=lambda line: None)
    t0 = time.monotonic()
    ev.start(t0)
    time.sleep(0.2)
    assert control.calls == []
    done["share"] = 0.6
    time.sleep(0.2)
    assert [c[:2] for c in control.calls] == [("kill", "n2")]
    time.sleep(0.3)  # the restart, 0.3 s after the kill, on the node the kill took
    assert [c[:2] for c in control.calls] == [("kill", "n2"), ("restart", "n2")]
    assert control.calls[1][2] - control.calls[0][2] >= 0.3
    done["share"] = 0.9
    time.sleep(0.15)
    records = ev.finish()  # the pause's resume still runs; the kill at 0.95 never does
    assert [c[:2] for c in control.calls][2:] == [("pause", "n1"), ("resume", "n1")]
    by_event = {r["event"]: r for r in records}
    assert by_event["kill:n1@0.95"]["detail"] == "not reached"
    assert by_event["kill:n1@0.95"]["t_s"] is None
    assert by_event["kill:clock@0.5"]["node"] == "n2" and by_event["kill:clock@0.5"]["ok"]
    assert by_event["kill:clock@0.5"]["share_done"] == 0.6
    resume = next(r for r in records if r["action"] == "resume")
    assert resume["after_run"] and resume["t_s"] >= by_event["pause:n1@0.9:0.2"]["t_s"] + 0.2


def test_a_restore_not_reached_runs_at_the_end():
    control = FakeControl()
    ev = events.Events(events.plan(["pause:n1@0.1", "resume:n1@0.9"]), control,
                       lambda: 0.5, log=lambda line: None)
    ev.start(time.monotonic())
    time.sleep(0.15)
    ev.finish()
    assert [c[:2] for c in control.calls] == [("pause", "n1"), ("resume", "n1")]


def test_the_control_command_is_run_with_the_scripts_verbs(tmp_path):
    log = tmp_path / "calls"
    script = tmp_path / "ctl.sh"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n")
    script.chmod(0o755)
    control = events.Control(cluster.Nodes([], {}, "lmcache"), str(script))
    assert control.act("restart", "cache1")[0] and control.act("kill", "cache1")[0]
    assert log.read_text().split("\n")[:2] == ["start cache1", "kill cache1"]


# ---------------------------------------------------------------------- figures

def test_the_fill_figures_follow_the_order_the_stores_returned():
    import cache_fill

    chunk, cap = 1 << 20, 10 << 20  # 10 chunks; a fifth: 2
    # Two writers, interleaved in time; writer 1's store 2 failed; 20 offered.
    stores0 = [(1.0 + 2 * i, i, None, 0.01 * (i + 1)) for i in range(10)]
    stores1 = [(2.0 + 2 * i, i, "EBUSY" if i == 2 else None, 0.02) for i in range(10)]
    results = [
        {"w": 0, "stores": stores0, "reads": [(5.0, 9, True, 0), (30.0, 15, True, 1)],
         "rss": [20, 22], "stats": {"clock_reservations": 8, "clock_local": 1,
                                    "dropped_paced": 1}},
        {"w": 1, "stores": stores1, "reads": [(31.0, 19, False, 1)], "read_errors": ["ETIMEOUT"],
         "rss": [21, 23],
         "stats": {"clock_reservations": 4, "clock_fallbacks": 2, "clock_busy": 1,
                   "dropped_full": 3}},
    ]
    order = [k for _, k in sorted([(t, f"T/0/{i}") for t, i, _, _ in stores0] +
                                  [(t, f"T/1/{i}") for t, i, _, _ in stores1])]
    hit = {k: n >= 10 for n, k in enumerate(order)}  # the newest 10 alive
    hit["T/1/9"] = False  # the newest of all lost
    hit["T/warm/0"], hit["T/warm/1"] = True, False
    s = cache_fill.figures({"capacity": cap, "chunk": chunk, "offered": 20, "tag": "T",
                            "warm": 2, "seconds": 10.0, "data_size": 4 * cap}, results, hit, 0)
    assert (s["stored"], s["failed"], s["failed_by_error"]) == (19, 1, {"EBUSY": 1})
    # The failed store (writer 1's third, 6th overall) came before the first capacity.
    assert (s["after_first_capacity"], s["failed_after_first_capacity"]) == (10, 0)
    assert s["newest_fifth"] == 0.5 and s["oldest_fifth"] == 0.0
    assert s["tenths"] == [0.0] * 5 + [1.0] * 4 + [0.5]
    # Warm chunk 1, lost by the end, hit at 15 and missed at 19, its read failed.
    assert s["warm"] == {"size": 2, "reads_after_first_capacity": 2, "hit": 1, "alive": 1,
                         "read_errors": {"ETIMEOUT": 1},
                         "missed_at": [19], "lost": {"1": [[15, True], [19, False]]}}
    assert s["held_bytes"] == 10 * chunk and s["held_of_capacity"] == 1.0
    assert s["dropped"] == {"dropped_full": 3, "dropped_busy": 0, "dropped_unsent": 0,
                            "dropped_unreachable": 0, "dropped_paced": 1}
    assert s["puts"]["max"] == 0.1 and s["puts"]["max_per_writer"] == {"0": 0.1, "1": 0.02}
    assert s["puts"]["p99"] == 0.1 and s["puts"]["n"] == 20
    assert s["clock"]["clock_reservations"] == 12 and s["clock"]["per_store"] == 0.6
    assert s["clock"]["per_second"] == 1.2
    assert s["clock"]["clock_local"] == {"0": 1, "1": 0}
    assert s["clock"]["clock_fallbacks"] == {"0": 0, "1": 2}
    assert s["clock"]["clock_busy"] == 1
    json.dumps(s)  # the --json document


def test_an_exact_lru_of_the_same_budget_replays_the_run():
    import cache_fill

    # Capacity 4 chunks over 2 nodes; a warm chunk, stores at t = 1..6, the warm chunk
    # read at 2.5 and again at 5.5 (offered 2 and 5, after the first capacity: 4).
    chunk = 1 << 20
    run = {"capacity": 4 * chunk, "chunk": chunk, "tag": "T", "warm": 1}
    results = [{"w": 0, "stores": [(float(t), t - 1, None, 0.01) for t in range(1, 7)],
                "reads": [(2.5, 2, True, 0), (5.5, 5, True, 0)]}]
    whole = cache_fill.exact_lru(run, results, [])
    # Read at 2.5, the warm chunk is the newest of 4 at 5.5: a hit, and it stays.
    assert whole == {"warm_hit": 1, "warm_reads": 1, "warm_alive": 1,
                     "newest_fifth": 1.0, "oldest_fifth": 0.0}
    # One node of two killed at 3.5 and back at 7: the budget is 2 chunks meanwhile, and
    # the stores at 4 and 5 push the warm chunk out before its read at 5.5.
    events = [{"action": "kill", "node": "n1", "t_s": 3.5, "ok": True},
              {"action": "restart", "node": "n1", "t_s": 7.0, "ok": True},
              {"action": "pause", "node": "n0", "t_s": None, "ok": False}]
    shares = cache_fill.budget_shares(events, 0.0, 2)
    assert shares == [(3.5, 0.5), (7.0, 1.0)]
    assert cache_fill.exact_lru(run, results, shares) == {
        "warm_hit": 0, "warm_reads": 1, "warm_alive": 0, "newest_fifth": 1.0,
        "oldest_fifth": 0.0}
    # A store that failed is not in the LRU either.
    results[0]["stores"][-1] = (6.0, 5, "ETIMEOUT", 2.0)
    assert cache_fill.exact_lru(run, results, [])["newest_fifth"] == 0.0


def test_put_times_and_percentiles():
    assert fig.percentile([], 99) is None
    assert fig.percentile(list(range(1, 101)), 99) == 99
    assert fig.percentile([3, 1, 2], 50) == 2
    t = fig.put_times({0: [0.1, 0.5], 1: []})
    assert t == {"max_per_writer": {"0": 0.5, "1": None}, "max": 0.5, "p99": 0.5, "n": 2}


def test_nsup_refusals_per_node_from_their_logs(tmp_path):
    since = 1_800_000_000
    stamp = time.strftime("%b %d %Y %H:%M:%S", time.gmtime(since + 5))
    old = time.strftime("%b %d %Y %H:%M:%S", time.gmtime(since - 5))
    refuse = "{lmcache} no records below eviction void-time 123 - count 224 > target 136"
    done = "{lmcache} nsup-done: non-expirable 0 expired (0,0) evicted (%d,0)"
    lines = [f"{old} GMT: WARNING (nsup): {refuse}"] + \
        [f"{stamp} GMT: WARNING (nsup): {refuse}"] * 3 + \
        [f"{stamp} GMT: INFO (nsup): {done % 5}", f"{stamp} GMT: WARNING (nsup): {refuse}",
         f"{stamp} GMT: INFO (nsup): {done % 0}", f"{stamp} GMT: WARNING (nsup): {refuse}",
         f"{stamp} GMT: WARNING (nsup): {{small}} no records below eviction void-time 1"]
    a = tmp_path / "node-cache0" / "aerospike.log"
    a.parent.mkdir()
    a.write_text("\n".join(lines) + "\n")
    assert fig.nsup_refusals(str(a), "lmcache", since) == (5, 3)
    logs = fig.server_logs([], ["cache0", "cache1"], loopback_dir=str(tmp_path))
    assert logs == [("cache0", str(a))]  # cache1 has no log there
    assert fig.server_logs(["n2=/x.log", "/y.log"], ["cache0"]) == [("n2", "/x.log"),
                                                                    ("log1", "/y.log")]
    per = fig.nsup_per_node(logs + [("gone", str(tmp_path / "none.log"))], "lmcache", since)
    assert per["cache0"] == {"refused": 5, "longest_run": 3, "out_of_space": 0}
    assert "error" in per["gone"]


def test_writes_refused_out_of_space_from_the_logs(tmp_path):
    since = 1_800_000_000
    stamp = time.strftime("%b %d %Y %H:%M:%S", time.gmtime(since + 5))
    old = time.strftime("%b %d %Y %H:%M:%S", time.gmtime(since - 5))
    warn = "GMT: WARNING (drv-mem): (drv_mem.c:2493)"
    log = tmp_path / "aerospike.log"
    log.write_text("\n".join([
        f"{old} {warn} {{lmcache}} out of space",  # before the run
        f"{stamp} {warn} {{lmcache}} out of space",
        f"{stamp} {warn} (repeated:42) {{lmcache}} out of space",
        f"{stamp} {warn} (repeated:7) {{small}} out of space",  # another namespace
        f"{stamp} GMT: INFO (info): (ticker.c:564) {{lmcache}} data-usage: avail-pct 3"]) + "\n")
    assert fig.out_of_space(str(log), "lmcache", since) == 43
    per = fig.nsup_per_node([("cache", str(log))], "lmcache", since)
    assert per["cache"]["out_of_space"] == 43
    assert fig.nsup_line(per) == ("NSUP refused cache: 0 cycles, at most 0 in a row "
                                  "(43 writes out of space)")


def test_the_cases_table_has_a_row_per_case():
    import cluster_cases

    s = {"case": "kill", "writers": 4, "chunk_bytes": 1 << 20, "stored": 5000, "offered": 5120,
         "failed_by_error": {"EBUSY": 120}, "dropped": {"dropped_full": 0, "dropped_busy": 120},
         "mb_per_s": 160.4, "newest_fifth": 1.0, "oldest_fifth": 0.0,
         "warm": {"hit": 250, "reads_after_first_capacity": 256, "alive": 32, "size": 32},
         "lru": {"warm_hit": 256, "warm_reads": 256, "warm_alive": 32, "newest_fifth": 1.0,
                 "oldest_fifth": 0.0},
         "puts": {"max": 2.5, "p99": 0.4},
         "nsup": {"cache0": {"refused": 2, "longest_run": 1, "out_of_space": 43}},
         "clock": {"per_store": 0.33, "per_second": 50.1, "clock_local": {"0": 3, "1": 4},
                   "clock_fallbacks": {"0": 10, "1": 0}, "clock_busy": 2},
         "debris": 1, "objects": 900, "wrong_bytes": 0,
         "writer_clocks": {"1": "+30s"}, "wall_offset_s": {"1": 30.0},
         "events": [{"event": "kill:clock@0.4", "action": "kill", "node": "cache1",
                     "t_s": 12.3, "share_done": 0.4, "after_run": False, "ok": True},
                    {"event": "restart:clock@+30", "action": "restart", "node": "cache1",
                     "t_s": 42.3, "share_done": 1.0, "after_run": True, "ok": True}]}
    lines = cluster_cases.table([s, {"case": "pause", "error": "cache_fill.py exited 1"}])
    assert len(lines) == 4 and all(line.count("|") == len(cluster_cases.COLUMNS) + 1
                                   for line in lines)
    row = lines[2]
    for cell in ("| 4 x 1 MiB |", "| 5,000 / 5,120 |", "| EBUSY 120 |", "| busy 120 |",
                 "| 250 / 256 |", "| 256 / 256, 32 / 32 |", "| 2.5 (0.4) |", "| 0.33, 50.1 (2) |", "| 7 (10) |",
                 "| cache0: 2 (1), 43 out of space |",
                 "kill cache1 12 s (40 %); restart cache1 42 s (after the fill)",
                 "writer 1 clock +30s (measured 30.0 s)"):
        assert cell in row
    assert cluster_cases.parse_shape("8x256k") == (8, "256K")


def test_the_table_is_a_record_with_its_provenance(tmp_path):
    import argparse

    import cluster_cases

    a = argparse.Namespace(out=str(tmp_path), hosts="127.0.0.1:3600", factor=5.0)
    prov = {"date": "2026-12-05T22:00:00+00:00", "command": "python bench/cache/cluster_cases.py",
            "commit": "fb2e16c0ffee", "machine": "a CPU, 2 CPUs, 8 GiB",
            "aerospike_server": "8.1.2.0"}
    cases = [{"case": "pause", "error": "cache_fill.py exited 1"}]
    path = cluster_cases.write_table(a, cases, prov)
    md = Path(path).read_text()
    assert path == str(tmp_path / "cluster_cases.md")
    assert "Aerospike 8.1.2.0" in md and "commit fb2e16c0ffee" in md
    assert "    python bench/cache/cluster_cases.py\n" in md and "| pause |" in md
    doc = json.loads((tmp_path / "cluster_cases.json").read_text())
    assert doc == {"provenance": prov, "cases": cases}


# ---------------------------------------------------------------------- faketime

class Counter:
    def __init__(self):
        self.values = []

    def put(self, value):
        self.values.append(value)


def report_clocks(n, out):
    """A writer's stand-in: its wall clock and monotonic clock, through `out`."""
    for _ in range(n):
        out.put((time.time(), time.monotonic()))


@pytest.mark.skipif(shutil.which("faketime") is None, reason="needs Debian's faketime")
def test_a_writer_under_faketime_has_its_wall_clock_off_and_the_hosts_monotonic_one():
    from cache_faketime import FaketimeProcess, writer_clocks

    assert writer_clocks(["1:+30s", "2:-300s"], 3) == {1: "+30s", 2: "-300s"}
    with pytest.raises(ValueError):
        writer_clocks(["3:+1s"], 3)
    with pytest.raises(ValueError):
        writer_clocks(["1:30s"], 3)
    out = Counter()
    p = FaketimeProcess(__name__, "report_clocks", (3,), [out], "-300s")
    p.start()
    p.join(60)
    assert p.exitcode == 0 and len(out.values) == 3
    wall, mono = out.values[-1]
    assert abs(wall - time.time() + 300) < 10
    assert 0 <= time.monotonic() - mono < 10


# ---------------------------------------------------------------------- end to end

# The README's memory recipe, small, on every node of the test server's cluster.
CACHE_NS = ("lmcache:max-record-size=8M,nsup-period=1,default-ttl=0,data-size=32M,"
            "evict-used-pct=50,stop-writes-used-pct=90,evict-tenths-pct=300,"
            "evict-hist-buckets=1000000")

def test_a_short_fill_with_events_on_the_test_servers_cluster(tmp_path):
    with running_cluster(nodes=3, rf=2, args=["--namespace", CACHE_NS]) as ports:
        out = tmp_path / "case.json"
        cmd = [sys.executable, str(REPO / "bench" / "cache" / "cache_fill.py"),
               "--hosts", f"127.0.0.1:{ports[0]}", "--writers", "2", "--chunk", "256K",
               "--factor", "1", "--interval", "2", "--event", "pause:clock@0.2:1",
               "--json", str(out)]
        if shutil.which("faketime"):
            cmd += ["--writer-clock", "1:+30s"]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
        s = json.loads(out.read_text())
        state = cluster.cluster_state([f"127.0.0.1:{p}" for p in ports])
    assert s["capacity_bytes"] == 3 * (32 << 20) // 2 // 2
    assert len(s["nodes"]) == 3 and {n["name"] for n in s["nodes"]} == {"0", "1", "2"}
    assert s["stored"] + s["failed"] == s["offered"] and s["wrong_bytes"] == 0
    pause, resume = s["events"]
    assert pause["action"] == "pause" and pause["ok"] and pause["node"] in ("0", "1", "2")
    assert resume["action"] == "resume" and resume["node"] == pause["node"] and resume["ok"]
    assert resume["t_s"] >= pause["t_s"] + 1
    if shutil.which("faketime"):
        assert abs(s["wall_offset_s"]["1"] - 30) < 5
    assert all(v is not None for v in state.values())
    assert "slowest put" in run.stdout and "event pause:clock@0.2:1" in run.stdout
    # Beside ours, an exact LRU replayed the run, its budget a third smaller while paused.
    lru = s["lru"]
    assert set(lru) == {"warm_hit", "warm_reads", "warm_alive", "newest_fifth", "oldest_fifth"}
    assert lru["warm_alive"] <= s["warm"]["size"]
    assert "an exact LRU of the same budget" in run.stdout


def test_a_short_cache_bench_with_an_event_reports_the_fill_figures(tmp_path):
    with running_cluster(nodes=3, rf=2, args=["--namespace", CACHE_NS]) as ports:
        cmd = [sys.executable, str(REPO / "bench" / "cache" / "cache_bench.py"),
               "--hosts", f"127.0.0.1:{ports[0]}", "--chunk", "256K", "--duration", "6",
               "--interval", "2", "--writers", "2", "--no-redis", "--no-mooncake", "--no-latency",
               "--event", "pause:clock@0.3:1", "--json", str(tmp_path / "case.json"),
               "--out", str(tmp_path)]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    s = json.loads((tmp_path / "case.json").read_text())
    assert s["capacity_bytes"] == 3 * (32 << 20) // 2 // 2 and len(s["nodes"]) == 3
    assert s["offered"] == s["stored"] + s["failed"] and s["wrong_bytes"] == 0
    assert set(s["dropped"]) == set(fig.DROPS) and s["puts"]["n"] > 0
    assert set(s["clock"]["clock_local"]) == {"0", "1"}
    assert [r["action"] for r in s["events"]] == ["pause", "resume"]
    assert all(r["ok"] for r in s["events"])
    assert "## Ours: the cluster, events and writers" in (tmp_path / "cache_bench.md").read_text()
