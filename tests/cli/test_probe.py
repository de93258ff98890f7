"""probe: the cluster's builds and size, the namespace's state, the engine's
derived limits, and one sentence per problem (exit status 1)."""

import json
import re

import pytest

from lmcache_aerospike.cli import main, probe, server
from tests.cli.conftest import NAMESPACE

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


def view(**changes):
    text = REAL_8_1
    for key, value in changes.items():
        text = re.sub(rf"(?<=;){key}=[^;]*", f"{key}={value}", text)
    return server.NodeNamespace.parse("A10", "127.0.0.1:3000", text)


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


def test_probe_prints_build_cluster_and_limits(cli, engine):
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


def test_probe_reports_a_seed_that_does_not_answer(capsys, aerospike_hosts):
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


def test_probe_reports_more_seeds_than_nodes(capsys, aerospike_hosts, engine):
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


def test_probe_reports_ttl_the_namespace_refuses(capsys, aerospike_hosts, without_nsup):
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
    assert code == 0 and "chunks never expire (default_ttl_seconds -1)" in doc["notes"]



def test_engine_lines_at_open_are_printed_once(capsys, aerospike_hosts):
    """The engine's warning at open (a target above namespace small's 1 MiB cap is
    clamped) is part of probe's report, and not repeated on stderr."""
    code = main(["probe", "--hosts", aerospike_hosts, "-n", "small",
                 "-o", "target_segment_bytes=4194304"])
    out, err = capsys.readouterr()
    assert code == 0
    assert "target_segment_bytes=4194304 exceeds the server-derived" in out
    assert err == ""
