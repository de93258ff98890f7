"""probe: the cluster's builds and size, the namespace's state, the engine's
derived limits, and one sentence per problem (exit status 1)."""

import json
import re
import time

import pytest

from lmcache_aerospike import _native
from lmcache_aerospike.cli import main, probe, server
from lmcache_aerospike.config import Settings
from tests.cli.conftest import NAMESPACE
from tests.server.launch import running

# A CE 8.1.2.0 memory namespace's answer to "namespace/lmcache" (statistics and
# configuration; per-stripe, benchmark and geo fields cut), as a real node sent it.
REAL_8_1 = (
    "ns_cluster_size=1;effective_replication_factor=1;objects=117;tombstones=0;"
    "master_objects=117;prole_objects=0;dead_partitions=0;unavailable_partitions=0;"
    "clock_skew_stop_writes=false;stop_writes=false;hwm_breached=false;"
    "current_time=533790338;non_expirable_objects=97;expired_objects=94;evicted_objects=0;"
    "index_used_bytes=7488;set_index_used_bytes=0;sindex_used_bytes=0;"
    "data_total_bytes=2147483648;data_used_bytes=401923520;data_used_pct=18;"
    "data_avail_pct=68;data_compression_ratio=1.000;client_write_success=524;"
    "allow-ttl-without-nsup=false;apply-ttl-reductions=true;default-ttl=0;"
    "max-record-size=8388608;nsup-hist-period=3600;nsup-period=1;nsup-threads=1;"
    "replication-factor=1;stop-writes-sys-memory-pct=90;strong-consistency=false;"
    "storage-engine=memory;storage-engine.data-size=2147483648;"
    "storage-engine.defrag-lwm-pct=50;storage-engine.stop-writes-avail-pct=5;"
    "storage-engine.stop-writes-used-pct=70;storage-engine.tomb-raider-sleep=1000")


# Fields of the same answer that the capture above cut (cfg_info.c and thr_info.c
# print them for every 8.1 memory namespace), with their defaults.
EVICTION_8_1 = (
    ";evict_ttl=0;evict_void_time=0;smd_evict_void_time=0;client_write_error=0;"
    "evict-hist-buckets=10000;evict-tenths-pct=5;storage-engine.evict-used-pct=0;"
    "storage-engine.max-write-cache=67108864")


def view(text=REAL_8_1 + EVICTION_8_1, **changes):
    for key, value in changes.items():
        key = key.replace("__", "-").replace("_dot_", ".")
        if re.search(rf"(?<=;){re.escape(key)}=", text):
            text = re.sub(rf"(?<=;){re.escape(key)}=[^;]*", f"{key}={value}", text)
        else:
            text += f";{key}={value}"
    return server.NodeNamespace.parse("A10", "127.0.0.1:3000", text)


def ready(**changes):
    """The REAL_8_1 node made eviction-ready: evict-used-pct 60, 1 % per cycle,
    buckets of 1 s for TTLs up to a day, and 7 of its 117 records never expiring."""
    return view(**{"storage-engine_dot_evict__used__pct": 60, "evict__tenths__pct": 10,
                   "evict__hist__buckets": 86400, "non_expirable_objects": 7, **changes})


def test_parse_reads_the_real_answer():
    v = view()
    assert (v.present, v.objects, v.used_bytes, v.total_bytes, v.used_pct, v.avail_pct) == \
           (True, 117, 401923520, 2147483648, 18, 68)
    assert (v.stop_writes_used_pct, v.stop_writes_avail_pct, v.nsup_period, v.default_ttl,
            v.max_record_size, v.replication_factor) == (70, 5, 1, 0, 8388608, 1)
    assert (v.stop_writes, v.clock_skew_stop_writes, v.allow_ttl_without_nsup) == \
           (False, False, False)
    assert v.bytes_left() == min(2147483648 * 70 // 100 - 401923520,
                                 2147483648 * (68 - 5) // 100)
    assert not server.NodeNamespace.parse("A", "a", "type=unknown").present


def test_a_healthy_namespace_has_no_problems():
    assert probe.namespace_problems([view()], "lmcache") == []
    # Eviction-ready, with our chunks' TTL of a day: no eviction problem either.
    healthy = ready(**{"storage-engine_dot_stop__writes__used__pct": 90})
    problems, notes = probe.eviction_problems([healthy], settings(86400))
    assert problems == []
    assert notes == probe.size_notes(healthy, None) + [rate_note(healthy)]


def test_stop_writes_close_above_eviction_is_noted():
    """Stop-writes, once set, refuses every write for up to 10 s; a writer that
    overshoots evict-used-pct between NSUP cycles meets it (DESIGN.md)."""
    problems, notes = probe.eviction_problems([ready()], settings(86400))  # 60 and 70
    assert problems == []
    assert notes[0] == ("node A10: stop-writes-used-pct 70 is 10 points above "
                        "evict-used-pct 60; the server sets stop-writes for 10 s at a "
                        "time, and a fast writer that overshoots between NSUP cycles is "
                        "refused that long (the recipes leave 30 or more)")


def settings(ttl, namespace="lmcache"):
    return Settings.from_dict({"hosts": "127.0.0.1:3000", "namespace": namespace,
                               "default_ttl_seconds": ttl})


def rate_note(v, record_bytes=None):
    mib_s, records, cycle = probe.eviction_rate(v, record_bytes)
    return f"node {v.node}: NSUP can evict about {mib_s:.1f} MiB/s ({records} records per {cycle} s cycle)"


WHERE = "node A10 (127.0.0.1:3000): namespace 'lmcache'"


def test_parse_reads_the_eviction_fields():
    v = view(hwm_breached="true", evicted_objects=12, evict_ttl=-3, client_write_error=7)
    assert (v.non_expirable_objects, v.expired_objects, v.evicted_objects, v.evict_ttl) == \
           (97, 94, 12, -3)
    assert (v.hwm_breached, v.client_write_error, v.storage_engine, v.is_device) == \
           (True, 7, "memory", False)
    assert (v.evict_used_pct, v.evict_tenths_pct, v.evict_hist_buckets, v.max_write_cache,
            v.stop_writes_sys_memory_pct, v.evict_sys_memory_pct, v.defrag_lwm_pct) == \
           (0, 5, 10000, 64 << 20, 90, None, 50)


@pytest.mark.parametrize("ttl, default_ttl, says", [
    (-1, 0, "default_ttl_seconds is -1: our chunks never expire, so NSUP never evicts them; "
            "set default_ttl_seconds > 0"),
    (0, 0, "default_ttl_seconds is 0 and namespace 'lmcache' has default-ttl 0: our chunks "
           "never expire, so NSUP never evicts them; set default_ttl_seconds > 0"),
    (0, 3600, None),
    (600, 0, None),
])
def test_chunks_without_a_ttl_are_a_problem(ttl, default_ttl, says):
    problems = probe.ttl_problems([view(default__ttl=default_ttl)], settings(ttl))
    assert problems == ([says] if says else [])
    off = view(nsup__period=0)
    nsup_off = (f"{WHERE} has nsup-period 0: NSUP never runs, so nothing expires or is "
                f"evicted; set nsup-period > 0")
    assert nsup_off in probe.ttl_problems([off], settings(-1))
    # With a TTL and nsup-period 0 the engine's open already says it (TTLConfigError).
    assert nsup_off not in probe.ttl_problems([off], settings(600))


@pytest.mark.parametrize("changes, ttl, says", [
    ({"storage-engine_dot_evict__used__pct": 0}, 86400,
     "stops writes when full instead of evicting (storage-engine.evict-used-pct 0); set "
     "evict-used-pct below stop-writes-used-pct 70 (the README's recipe)"),
    ({"storage-engine_dot_evict__used__pct": 70}, 86400,
     "has evict-used-pct 70 at or above stop-writes-used-pct 70: stop-writes comes first "
     "and NSUP never evicts; set evict-used-pct below 70"),
    ({"evict__sys__memory__pct": 90}, 86400,
     "has evict-sys-memory-pct 90 at or above stop-writes-sys-memory-pct 90: stop-writes "
     "comes first; set evict-sys-memory-pct below 90"),
    ({"evict__hist__buckets": 10000}, 86400,
     ": NSUP evicts records in buckets of 9 seconds of void time: every record written "
     "within 9 seconds goes at once or not at all; set evict-hist-buckets (now 10000) to "
     "at least default_ttl_seconds (86400)"),
    ({"evict__tenths__pct": 9}, 86400,
     "evicts at most 0.9% of its records per NSUP cycle; raise evict-tenths-pct (now 9) so "
     "that a cycle frees more than a burst of writes"),
    ({"non_expirable_objects": 59, "objects": 117}, 86400,
     ": pinned (never-expiring) records are 50% of the namespace and are never evicted; "
     "unpin what need not stay (lmcache-aerospike unpin)"),
    ({"non_expirable_objects": 60, "objects": 117}, 86400,
     ": pinned (never-expiring) records are 51% of the namespace and are never evicted; "
     "unpin what need not stay (lmcache-aerospike unpin)"),
])
def test_each_eviction_problem_is_one_sentence(changes, ttl, says):
    problems, _ = probe.eviction_problems([ready(**changes)], settings(ttl))
    if "50%" in says:  # at the threshold: no problem
        assert problems == []
        return
    assert problems == [WHERE + ("" if says.startswith(":") else " ") + says]
    # Off one step further, it is no problem.
    assert probe.eviction_problems([ready()], settings(ttl))[0] == []


def test_a_few_pinned_records_are_not_judged():
    """Fewer than 64 records (a test's leftovers, a handful of pinned chunks): no share."""
    problems, _ = probe.eviction_problems(
        [ready(non_expirable_objects=3, objects=3)], settings(86400))
    assert problems == []


def test_stop_writes_sys_memory_pct_0_means_no_comparison():
    problems, _ = probe.eviction_problems(
        [ready(evict__sys__memory__pct=95, stop__writes__sys__memory__pct=0)], settings(600))
    assert problems == []


DEVICE = (";storage-engine=device;storage-engine.post-write-cache=268435456;"
          "storage-engine.flush-size=1048576;storage-engine.filesize=4294967296")


def device(**changes):
    text = REAL_8_1 + EVICTION_8_1
    text = text.replace(";storage-engine=memory;storage-engine.data-size=2147483648", DEVICE)
    return view(text, **{"storage-engine_dot_evict__used__pct": 50, "evict__tenths__pct": 10,
                         "evict__hist__buckets": 86400, "non_expirable_objects": 7,
                         "storage-engine_dot_max__write__cache": 256 << 20, **changes})


def test_device_problems_and_notes():
    problems, notes = probe.eviction_problems([device()], settings(600))
    assert problems == []
    assert "node A10: post-write-cache 256.0 MiB (recently written blocks kept in memory)" \
           in notes
    small = device(**{"storage-engine_dot_max__write__cache": 64 << 20})
    assert probe.eviction_problems([small], settings(600))[0] == [
        f"{WHERE}: writes will fail with device overload under load; raise max-write-cache "
        f"(now 64.0 MiB)"]
    full = device(**{"storage-engine_dot_evict__used__pct": 86,
                     "storage-engine_dot_stop__writes__used__pct": 90})
    assert probe.eviction_problems([full], settings(600))[0] == [
        f"{WHERE} evicts from 86% used and stops writes below 5% available: so full, defrag "
        f"(defrag-lwm-pct 50) cannot keep enough blocks free; lower evict-used-pct (now 86) "
        f"to 85 or stop-writes-avail-pct (now 5)",
        f"{WHERE}: its device has 256 write blocks of 8 MiB, of which 8 are kept for defrag "
        f"and 32 held by post-write-cache 256.0 MiB (a cached block's freed space is not "
        f"reused until it leaves the cache): at evict-used-pct 86 it runs out of free blocks "
        f"before NSUP evicts, and stores are refused; set evict-used-pct to at most 50"]
    # A memory namespace has no write queue and no defrag to starve.
    assert probe.eviction_problems([ready(**{"storage-engine_dot_evict__used__pct": 86,
                                             "storage-engine_dot_stop__writes__used__pct": 90})],
                                   settings(600))[0] == []


def test_the_write_queue_is_every_devices():
    # Four files of 64 MiB queue as much as one of 256 MiB: no problem.
    four = device(**{f"storage-engine_dot_file[{i}]": f"/data/{i}.dat" for i in range(4)},
                  **{"storage-engine_dot_max__write__cache": 64 << 20})
    assert four.devices == 4
    assert not any("max-write-cache" in p for p in probe.eviction_problems([four], settings(600))[0])
    two = device(**{f"storage-engine_dot_file[{i}]": f"/data/{i}.dat" for i in range(2)},
                 **{"storage-engine_dot_max__write__cache": 64 << 20})
    assert any("max-write-cache (now 64.0 MiB on each of 2 devices)" in p
               for p in probe.eviction_problems([two], settings(600))[0])


def test_files_read_through_the_page_cache_are_noted():
    files = {"storage-engine_dot_file[0]": "/data/lmcache-0.dat"}
    cached = device(**files, **{"storage-engine_dot_direct__files": "false"})
    assert (cached.files, cached.devices, cached.direct_files) == (1, 1, False)
    _, notes = probe.eviction_problems([cached], settings(600))
    assert any("read and written through the host's page cache" in n
               and "set direct-files true" in n for n in notes), notes
    direct = device(**files, **{"storage-engine_dot_direct__files": "true"})
    _, notes = probe.eviction_problems([direct], settings(600))
    assert not any("page cache" in n for n in notes)
    # Raw devices are opened O_DIRECT: only read-page-cache routes them through it.
    raw = device(**{"storage-engine_dot_device[0]": "/dev/nvme0n1",
                    "storage-engine_dot_read__page__cache": "true"})
    assert (raw.files, raw.devices) == (None, 1)
    _, notes = probe.eviction_problems([raw], settings(600))
    assert any("read-page-cache true" in n for n in notes)


def test_what_the_namespace_needs_at_capacity_is_noted():
    # 2 GiB held at evict-used-pct 50 in records of the mean size now.
    v = device(index_used_bytes=7488)
    mean = 401923520 // 117
    records = 2147483648 * 50 // 100 // mean
    (note,) = probe.size_notes(v, None)
    assert f"{records:,} records" in note
    assert f"the index needs {probe.output.size(records * 64)} of RAM" in note
    assert "7.3 KiB now" in note
    # A device: its write and post-write caches (256 MiB each, one device).
    assert "up to 512.0 MiB of write and post-write caches" in note
    # Memory: the data itself is the DRAM.
    assert "data-size 2.0 GiB it holds in RAM" in probe.size_notes(ready(), None)[0]
    # Nothing to hold yet and no size given: nothing to say.
    empty = ready(objects=0, data_used_bytes=0)
    assert probe.size_notes(empty, None) == []
    assert "records of 1.0 MiB" in probe.size_notes(empty, 1 << 20)[0]


def test_eviction_rate_estimate():
    # Below evict-used-pct: the records the namespace holds at 60 % of 2 GiB, of the
    # mean size now (401923520 / 117), less the never-expiring share (7 of 117).
    v = ready()
    mean = 401923520 // 117
    at_evict = 2147483648 * 60 // 100 // mean
    eligible = at_evict - at_evict * 7 // 117
    mib_s, records, cycle = probe.eviction_rate(v, None)
    assert (records, cycle) == (eligible * 10 // 1000, 2)
    assert mib_s == pytest.approx(records * mean / 2 / (1 << 20))
    # At or above it: the records with a TTL that are there.
    full = ready(data_used_pct=61, objects=100000, non_expirable_objects=0,
                 data_used_bytes=1300000000)
    assert probe.eviction_rate(full, None)[1:] == (100000 * 10 // 1000, 2)
    # An empty namespace: our record size stands in for the mean.
    empty = ready(objects=0, non_expirable_objects=0, data_used_bytes=0, data_used_pct=0)
    assert probe.eviction_rate(empty, 1 << 20)[1] == 2147483648 * 60 // 100 // (1 << 20) // 100
    assert probe.eviction_rate(ready(nsup__period=0), None) is None


@pytest.mark.parametrize("changes, says", [
    ({"stop_writes": "true"}, "is at stop-writes: it refuses writes"),
    ({"clock_skew_stop_writes": "true"},
     "stopped writes for clock skew between nodes (clock_skew_stop_writes)"),
    ({"data_used_pct": 60}, "is 60% used, within 10 points of stop-writes-used-pct 70"),
    ({"data_avail_pct": 15}, "has 15% available, within 10 points of stop-writes-avail-pct 5"),
])
def test_each_problem_is_one_sentence(changes, says):
    problems = probe.namespace_problems([view(**changes)], "lmcache")
    assert problems == [f"node A10 (127.0.0.1:3000): namespace 'lmcache' {says}"]
    # One point further from the threshold is no problem.
    for key, value in changes.items():
        if isinstance(value, int):
            farther = value - 1 if "used" in key else value + 1
            assert probe.namespace_problems([view(**{key: farther})], "lmcache") == []


def test_seeds_parse_every_form():
    assert probe.seeds("a:3001, b ,c:tls-name:4333,[::1]:3002,[fe80::1]") == [
        ("a:3001", "a", 3001), ("b", "b", 3000), ("c:tls-name:4333", "c", 4333),
        ("[::1]:3002", "::1", 3002), ("[fe80::1]", "fe80::1", 3000)]


def probe_json(capsys, *argv):
    code = main(["probe", "--json", *argv])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_probe_prints_build_cluster_and_limits(cli, engine, eviction_ready):
    ran = cli("probe")
    assert ran.code == 0, ran.text + ran.err
    nodes = engine.info("build")
    for node, address, build in nodes:
        assert f"{node} {address} build {build.strip()}" in ran.text
    limits = engine.limits()
    assert f"namespace '{NAMESPACE}' record-size limits discovered:" in ran.text
    assert (f"  effective: target_segment_bytes={limits['target_segment_bytes']}, "
            f"single_record_threshold_bytes={limits['single_record_threshold_bytes']}"
            in ran.text)
    assert f"cap={limits['server_cap']} from {limits['cap_source']}" in ran.text
    assert ran.text.rstrip().endswith("problems: none")
    assert re.search(r"eviction +evict-used-pct 50% \(hwm breached false\), "
                     r"evict-tenths-pct 10, evict-hist-buckets 100000$", ran.text, re.M)
    assert re.search(r"nsup +evicted \d+, expired \d+, never expire \d+, evict-ttl -?\d+$",
                     ran.text, re.M)
    assert re.search(r"^  - node \S+: NSUP can evict about [0-9.]+ MiB/s \(\d+ records per "
                     r"2 s cycle\)$", ran.text, re.M)
    doc = json.loads(cli("probe", "--json").out)
    assert doc["limits"] == limits and doc["problems"] == []
    assert [n["build"] for n in doc["nodes"]] == [b.strip() for _, _, b in nodes]
    assert doc["cluster_size"] >= len(nodes) and all(s["reachable"] for s in doc["seeds"])


def test_probe_reports_a_missing_namespace(capsys, aerospike_hosts):
    code, doc, _ = probe_json(capsys, "--hosts", aerospike_hosts, "-n", "nosuchns")
    assert code == 1
    assert len(doc["problems"]) == 1
    assert 'namespace "nosuchns" is unknown to the cluster' in doc["problems"][0]
    assert main(["probe", "--hosts", aerospike_hosts, "-n", "nosuchns"]) == 1
    assert "problems:\n  - namespace \"nosuchns\"" in capsys.readouterr().out


def test_probe_reports_a_seed_that_does_not_answer(capsys, aerospike_hosts, eviction_ready):
    hosts = aerospike_hosts + ",127.0.0.1:1"
    code, doc, _ = probe_json(capsys, "--hosts", hosts)
    assert code == 1
    # LMCache's open fails too (the client wants every seed), which is said first.
    assert doc["problems"][0].startswith(f'cannot connect to hosts "{hosts}"')
    assert doc["problems"][1:] == ["seed 127.0.0.1:1 does not answer (Connection refused)"]
    assert doc["limits"]["server_cap"] > 0  # then opened on the live seed, to look


def test_probe_with_no_seed_answering(capsys):
    code, doc, _ = probe_json(capsys, "--hosts", "127.0.0.1:1", "-o", "connect_timeout_ms=300")
    assert code == 1
    assert doc["problems"][0].startswith('cannot connect to hosts "127.0.0.1:1"')
    assert doc["problems"][1] == "seed 127.0.0.1:1 does not answer (Connection refused)"
    assert "limits" not in doc


def test_probe_reports_more_seeds_than_nodes(capsys, aerospike_hosts, engine, eviction_ready):
    # Every node by its address, and one of them again under another name.
    addresses = [address for _, address, _ in engine.info("build")]
    port = addresses[0].rpartition(":")[2]
    hosts = ",".join(addresses + [f"localhost:{port}"])
    code, doc, _ = probe_json(capsys, "--hosts", hosts)
    size = len(addresses)
    assert code == 1
    assert doc["problems"] == [f"{size + 1} seeds are given but the cluster has {size} "
                               f"node{'s' * (size != 1)}: seeds name one node twice, or "
                               f"nodes of another cluster"]


@pytest.fixture
def without_nsup(engine):
    """Namespace small with nsup-period 0 for the test (tests/aerospike-test.conf:
    tests may switch it for a moment; it is restored to 1)."""
    def set_nsup(period):
        answers = engine.info(f"set-config:context=namespace;id=small;nsup-period={period}")
        assert all(a.strip() == "ok" for _, _, a in answers), answers

    set_nsup(0)
    yield "small"
    set_nsup(1)


def test_probe_reports_ttl_the_namespace_refuses(capsys, aerospike_hosts, without_nsup, tune):
    ready_for_eviction(tune, without_nsup)
    code, doc, _ = probe_json(capsys, "--hosts", aerospike_hosts, "-n", without_nsup,
                              "-o", "default_ttl_seconds=600")
    assert code == 1
    assert doc["problems"] == [
        f'default_ttl_seconds=600 but namespace "{without_nsup}" has nsup-period 0, so the '
        "server refuses every write with a TTL; set nsup-period > 0 in the namespace "
        "config, or default_ttl_seconds to -1 or 0"]
    assert doc["limits"]["server_cap"] > 0  # looked at with TTLs off
    assert all(n["nsup_period"] == 0 for n in doc["namespace_nodes"])
    code, doc, _ = probe_json(capsys, "--hosts", aerospike_hosts, "-n", without_nsup,
                              "-o", "default_ttl_seconds=-1")
    assert code == 1
    assert doc["problems"] == [
        "default_ttl_seconds is -1: our chunks never expire, so NSUP never evicts them; set "
        "default_ttl_seconds > 0"] + [
        f"node {n['node']} ({n['address']}): namespace '{without_nsup}' has nsup-period 0: "
        f"NSUP never runs, so nothing expires or is evicted; set nsup-period > 0"
        for n in doc["namespace_nodes"]]



def test_engine_lines_at_open_are_printed_once(capsys, aerospike_hosts, tune):
    """The engine's warning at open (a target above namespace small's 1 MiB cap is
    clamped) is part of probe's report, and not repeated on stderr."""
    ready_for_eviction(tune, "small")
    code = main(["probe", "--hosts", aerospike_hosts, "-n", "small",
                 "-o", "target_segment_bytes=4194304"])
    out, err = capsys.readouterr()
    assert code == 0
    assert "target_segment_bytes=4194304 exceeds the server-derived" in out
    assert err == ""


# -- eviction readiness on a server -------------------------------------------------


@pytest.fixture
def tune(engine):
    """tune(ns, key, value) sets a namespace setting with set-config on every node
    and restores it after the test; False when the server refuses the setting."""
    saved = []

    def set_(ns, key, value):
        olds = []
        for _, _, answer in engine.info(f"namespace/{ns}"):
            kv = server.pairs(answer)
            olds.append(kv.get(key, kv.get("storage-engine." + key, "0")))
        try:
            answers = engine.info(f"set-config:context=namespace;id={ns};{key}={value}")
        except _native.Error:
            return False
        assert all(a.strip() == "ok" for _, _, a in answers), answers
        saved.append((ns, key, olds[0]))
        return True

    yield set_
    for ns, key, old in reversed(saved):
        engine.info(f"set-config:context=namespace;id={ns};{key}={old}")


def ready_for_eviction(tune, ns):
    """Near the README's recipe: evict at 50 % used, 1 % per cycle, buckets of 1 s up
    to our default TTL of a day (and more)."""
    for key, value in (("evict-used-pct", 50), ("evict-tenths-pct", 10),
                       ("evict-hist-buckets", 100000)):
        assert tune(ns, key, value)


@pytest.fixture
def eviction_ready(tune):
    ready_for_eviction(tune, NAMESPACE)
    return NAMESPACE


def probe_doc(capsys, hosts, *options, namespace=NAMESPACE):
    args = ["--hosts", hosts, "-n", namespace]
    for option in options:
        args += ["-o", option]
    return probe_json(capsys, *args)


def node_where(doc, namespace=NAMESPACE):
    return [f"node {n['node']} ({n['address']}): namespace '{namespace}'"
            for n in doc["namespace_nodes"]]


def test_probe_reports_chunks_without_a_ttl(capsys, aerospike_hosts, eviction_ready, engine):
    code, doc, _ = probe_doc(capsys, aerospike_hosts, "default_ttl_seconds=-1")
    assert code == 1 and doc["problems"] == [
        "default_ttl_seconds is -1: our chunks never expire, so NSUP never evicts them; set "
        "default_ttl_seconds > 0"]
    if any(server.pairs(a).get("default-ttl") != "0" for _, _, a in
           engine.info(f"namespace/{NAMESPACE}")):
        pytest.skip("the namespace has a default-ttl")
    code, doc, _ = probe_doc(capsys, aerospike_hosts, "default_ttl_seconds=0")
    assert code == 1 and doc["problems"] == [
        f"default_ttl_seconds is 0 and namespace '{NAMESPACE}' has default-ttl 0: our chunks "
        f"never expire, so NSUP never evicts them; set default_ttl_seconds > 0"]


def test_probe_reports_eviction_off(capsys, aerospike_hosts, eviction_ready, tune):
    assert tune(NAMESPACE, "evict-used-pct", 0)
    code, doc, _ = probe_doc(capsys, aerospike_hosts, "default_ttl_seconds=600")
    assert code == 1
    assert doc["problems"] == [
        f"{where} stops writes when full instead of evicting (storage-engine.evict-used-pct "
        f"0); set evict-used-pct below stop-writes-used-pct {n['stop_writes_used_pct']} "
        f"(the README's recipe)" for where, n in zip(node_where(doc), doc["namespace_nodes"])]


def test_probe_reports_eviction_after_stop_writes(capsys, aerospike_hosts, eviction_ready,
                                                  tune, engine):
    swu = int(server.pairs(engine.info(f"namespace/{NAMESPACE}")[0][2])
              ["storage-engine.stop-writes-used-pct"])
    assert tune(NAMESPACE, "evict-used-pct", swu)
    code, doc, _ = probe_doc(capsys, aerospike_hosts, "default_ttl_seconds=600")
    assert code == 1 and doc["problems"] == [
        f"{where} has evict-used-pct {swu} at or above stop-writes-used-pct {swu}: "
        f"stop-writes comes first and NSUP never evicts; set evict-used-pct below {swu}"
        for where in node_where(doc)]
    assert tune(NAMESPACE, "evict-used-pct", 50)
    if not tune(NAMESPACE, "evict-sys-memory-pct", 95):
        pytest.skip("evict-sys-memory-pct is a 7.0 setting (8.1 refuses it)")
    assert tune(NAMESPACE, "stop-writes-sys-memory-pct", 90)
    code, doc, _ = probe_doc(capsys, aerospike_hosts, "default_ttl_seconds=600")
    assert code == 1 and doc["problems"] == [
        f"{where} has evict-sys-memory-pct 95 at or above stop-writes-sys-memory-pct 90: "
        f"stop-writes comes first; set evict-sys-memory-pct below 90" for where in node_where(doc)]


def test_probe_reports_wide_eviction_buckets(capsys, aerospike_hosts, eviction_ready, tune):
    assert tune(NAMESPACE, "evict-hist-buckets", 100)
    code, doc, _ = probe_doc(capsys, aerospike_hosts, "default_ttl_seconds=600")
    assert code == 1 and doc["problems"] == [
        f"{where}: NSUP evicts records in buckets of 6 seconds of void time: every record "
        f"written within 6 seconds goes at once or not at all; set evict-hist-buckets (now "
        f"100) to at least default_ttl_seconds (600)" for where in node_where(doc)]


def test_probe_reports_a_small_eviction_step_and_notes_the_rate(capsys, aerospike_hosts,
                                                               eviction_ready, tune):
    assert tune(NAMESPACE, "evict-tenths-pct", 5)
    code, doc, _ = probe_doc(capsys, aerospike_hosts, "default_ttl_seconds=600")
    assert code == 1 and doc["problems"] == [
        f"{where} evicts at most 0.5% of its records per NSUP cycle; raise evict-tenths-pct "
        f"(now 5) so that a cycle frees more than a burst of writes" for where in node_where(doc)]
    views = [server.NodeNamespace(**n) for n in doc["namespace_nodes"]]
    assert [n for n in doc["notes"] if "NSUP can evict" in n] == [
        rate_note(v, doc["limits"]["target_segment_bytes"]) for v in views]
    assert all(" per 2 s cycle)" in n for n in doc["notes"] if "NSUP can evict" in n)


# Namespaces of a test server of this module's own, for what the session's server
# (and the real one in tests/aerospike-test.conf) does not have: devices, and a
# namespace this test alone fills with pinned records.
READY = "nsup-period=1,evict-used-pct=50,evict-tenths-pct=10,evict-hist-buckets=100000"
OWN_NAMESPACES = [
    f"ready:storage-engine=device,data-size=2G,max-record-size=1M,{READY},max-write-cache=256M",
    f"dev:storage-engine=device,data-size=1G,max-record-size=1M,{READY}".replace(
        "evict-used-pct=50", "evict-used-pct=86,stop-writes-used-pct=90"),
    f"pinned:data-size=2G,max-record-size=1M,{READY}",  # 1G at 50: stripes too small
]


@pytest.fixture(scope="module")
def own_server():
    args = []
    for spec in OWN_NAMESPACES:
        args += ["--namespace", spec]
    with running(args=args) as port:
        yield f"127.0.0.1:{port}"


def test_an_eviction_ready_device_namespace_has_no_problems(capsys, own_server):
    code, doc, _ = probe_doc(capsys, own_server, "default_ttl_seconds=86400", namespace="ready")
    assert (code, doc["problems"]) == (0, [])
    node = doc["namespace_nodes"][0]["node"]
    assert f"node {node}: post-write-cache 256.0 MiB (recently written blocks kept in memory)" \
           in doc["notes"]
    assert any(n.startswith(f"node {node}: NSUP can evict about ") for n in doc["notes"])
    main(["probe", "--hosts", own_server, "-n", "ready"])
    text = capsys.readouterr().out
    assert re.search(r"device +max-write-cache 256.0 MiB, post-write-cache 256.0 MiB, "
                     r"defrag-lwm-pct 50$", text, re.M)
    assert "storage-engine device" in text


def test_probe_reports_device_write_cache_and_defrag_room(capsys, own_server):
    code, doc, _ = probe_doc(capsys, own_server, "default_ttl_seconds=86400", namespace="dev")
    (where,) = node_where(doc, "dev")
    assert code == 1 and doc["problems"] == [
        f"{where}: writes will fail with device overload under load; raise max-write-cache "
        f"(now 64.0 MiB)",
        f"{where} evicts from 86% used and stops writes below 5% available: so full, defrag "
        f"(defrag-lwm-pct 50) cannot keep enough blocks free; lower evict-used-pct (now 86) "
        f"to 85 or stop-writes-avail-pct (now 5)",
        f"{where}: its device has 128 write blocks of 8 MiB, of which 8 are kept for defrag "
        f"and 32 held by post-write-cache 256.0 MiB (a cached block's freed space is not "
        f"reused until it leaves the cache): at evict-used-pct 86 it runs out of free blocks "
        f"before NSUP evicts, and stores are refused; set evict-used-pct to at most 41"]


def test_probe_reports_a_namespace_mostly_pinned(capsys, own_server):
    c = _native.Connector(hosts=own_server, namespace="pinned", set="lmca_cli",
                          default_ttl_seconds=600)
    try:
        for i in range(48):  # a share of fewer than 64 records is not judged
            c.put(f"pinned{i}@1@0@01@bf16", bytes(100), pin=True)
        for i in range(16):
            c.put(f"expiring{i}@1@0@01@bf16", bytes(100))

        def non_expirable():  # counted by the namespace's next NSUP cycle
            return server.namespace(c, "pinned")[0].non_expirable_objects

        deadline = time.monotonic() + 5
        while non_expirable() != 48 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        c.close()
    code, doc, _ = probe_doc(capsys, own_server, "default_ttl_seconds=86400", namespace="pinned")
    (where,) = node_where(doc, "pinned")
    assert code == 1 and doc["problems"] == [
        f"{where}: pinned (never-expiring) records are 75% of the namespace and are never "
        f"evicted; unpin what need not stay (lmcache-aerospike unpin)"]


@pytest.mark.parametrize("size, cache, devices, evict, says, fixes", [
    # The 512 MiB file of the loopback recipe at evict-used-pct 50: out of space at
    # 51-63 % used with the default post-write cache, at 53 % with 64 MiB
    # (DESIGN.md, "Every size").
    (512 << 20, 256 << 20, 1, 50, "its device has 64 write blocks of 8 MiB, of which 8 are "
     "kept for defrag and 32 held by post-write-cache 256.0 MiB", "set post-write-cache to at "
     "most 16.0 MiB, or evict-used-pct to at most 22, or each device to at least 1.9 GiB"),
    (512 << 20, 64 << 20, 1, 50, "its device has 64 write blocks of 8 MiB, of which 8 are "
     "kept for defrag and 8 held by post-write-cache 64.0 MiB", "set post-write-cache to at "
     "most 16.0 MiB, or evict-used-pct to at most 45, or each device to at least 768.0 MiB"),
    (512 << 20, 64 << 20, 1, 40, None, None),  # the recipe's cache, measured whole at 40
    (2 << 30, 256 << 20, 1, 50, None, None),  # the README's recipe
    # Two files of 1 GiB: each has its own reserve and cache.
    (2 << 30, 256 << 20, 2, 50, "each of its devices has 128 write blocks of 8 MiB, of "
     "which 8 are kept for defrag and 32 held by post-write-cache 256.0 MiB", "set "
     "post-write-cache to at most 104.0 MiB, or evict-used-pct to at most 41, or each device "
     "to at least 1.9 GiB"),
    (1 << 30, 0, 1, 58, "its device has 128 write blocks of 8 MiB, of which 8 are kept for "
     "defrag and 0 held by post-write-cache 0 B", "set evict-used-pct to at most 56, or each "
     "device to at least 1.9 GiB"),
    (1 << 30, 0, 1, 70, "its device has 128 write blocks of 8 MiB, of which 8 are kept for "
     "defrag and 0 held by post-write-cache 0 B", "set evict-used-pct to at most 56"),
])
def test_a_device_too_small_for_its_reserve_and_cache_is_a_problem(size, cache, devices,
                                                                   evict, says, fixes):
    files = {f"storage-engine_dot_file[{i}]": f"/data/{i}.dat" for i in range(devices)}
    v = device(**{"data_total_bytes": size, "storage-engine_dot_post__write__cache": cache,
                  "storage-engine_dot_evict__used__pct": evict,
                  "storage-engine_dot_stop__writes__used__pct": 90,
                  "storage-engine_dot_stop__writes__avail__pct": 1, **files})
    assert (v.is_device, v.devices) == (True, devices)
    problems, _ = probe.eviction_problems([v], settings(86400))
    if says is None:
        assert problems == []
        return
    assert problems == [f"{WHERE}: {says} (a cached block's freed space is not reused until it "
                        f"leaves the cache): at evict-used-pct {evict} it runs out of free "
                        f"blocks before NSUP evicts, and stores are refused; {fixes}"]


def stripes(data_size):
    """The per-stripe statistics REAL_8_1 cut: 8 stripes, as an 8.1 memory node sends."""
    return {f"storage-engine_dot_stripe[{i}]_dot_used_bytes": data_size // 16 for i in range(8)}


@pytest.mark.parametrize("size, evict, says", [
    (512 << 20, 50, "set evict-used-pct to at most 25, or data-size to at least 1.5 GiB"),
    (1 << 30, 60, "set evict-used-pct to at most 44, or data-size to at least 6.2 GiB"),
    (512 << 20, 28, "set evict-used-pct to at most 25, or data-size to at least 576.0 MiB"),
    (512 << 20, 25, None),  # measured whole at 25, refusals and drops at 28
    (2 << 30, 50, None),  # the README's recipe
])
def test_a_memory_namespace_too_small_for_its_stripes_is_a_problem(size, evict, says):
    v = ready(**{"storage-engine_dot_data__size": size, "data_total_bytes": size,
                 "storage-engine_dot_evict__used__pct": evict, **stripes(size)})
    assert v.stripes == 8
    problems, _ = probe.eviction_problems([v], settings(86400))
    if says is None:
        assert problems == []
        return
    blocks = size // 8 // (8 << 20)
    assert problems == [f"{WHERE} is 8 stripes of {blocks} write blocks of 8 MiB: at "
                        f"evict-used-pct {evict} a stripe runs out of free blocks before NSUP "
                        f"evicts (blocks hold records of many ages and are reused only once "
                        f"defrag empties them), and every store is refused; {says}"]
