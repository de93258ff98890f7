"""stats: counts from a scan of the set, the namespace's capacity, and the room
estimate built from Connector.plan() and the stop-writes thresholds."""

import json
import re

import pytest

from lmcache_aerospike.cli import output, stats

MARGIN = 64 * 1024


def stats_json(cli, *args):
    ran = cli("stats", "--json", *args)
    assert ran.code == 0, ran.err
    return json.loads(ran.out)


def expected_cost(engine, size):
    nseg, seg_b, last_b = engine.plan(size)
    records = 1 if nseg == 1 else nseg + 1
    return records, seg_b * (nseg - 1) + last_b + records * MARGIN


def test_stats_of_an_empty_set(cli, engine):
    doc = stats_json(cli)
    assert (doc["chunks"], doc["bytes"], doc["pinned"], doc["records"]) == (0, 0, 0, 0)
    est = doc["estimate"]
    assert (est["chunk_bytes"], est["chunk_size_from"]) == (4 << 20, "default")
    assert (est["records"], est["stored_bytes"]) == expected_cost(engine, 4 << 20)
    assert est["bytes_left"] > 0
    assert est["chunks_left"] == est["bytes_left"] // est["stored_bytes"]
    node = doc["capacity"][0]
    assert est["bytes_left"] <= node["total_bytes"] * node["stop_writes_used_pct"] // 100


def test_stats_counts_known_puts(cli, engine, three_segments):
    engine.put("s1@1@0@01@bf16", bytes(100))
    engine.put("s2@1@0@02@bf16", bytes(200), pin=True)
    engine.put("s3@1@0@03@bf16", bytes(three_segments))
    doc = stats_json(cli)
    assert (doc["chunks"], doc["bytes"], doc["pinned"]) == (3, 300 + three_segments, 1)
    assert doc["records"] == 1 + 1 + 4
    est = doc["estimate"]
    assert (est["chunk_bytes"], est["chunk_size_from"]) == (200, "median")
    assert (est["records"], est["stored_bytes"]) == expected_cost(engine, 200)
    text = cli("stats").text
    assert re.search(r"^chunks +3 \(1 pinned\), 6 records$", text, re.M)
    assert re.search(rf"^bytes +{300 + three_segments} ", text, re.M)
    assert "(the median stored chunk) before stop-writes" in text and "an estimate" in text


@pytest.mark.parametrize("given, size", [("256K", 256 << 10), ("4M", 4 << 20),
                                         ("4MiB", 4 << 20), ("1048577", 1048577),
                                         ("1g", 1 << 30)])
def test_chunk_size_option(cli, engine, given, size):
    est = stats_json(cli, "--chunk-size", given)["estimate"]
    assert (est["chunk_bytes"], est["chunk_size_from"]) == (size, "--chunk-size")
    assert (est["records"], est["stored_bytes"]) == expected_cost(engine, size)


def test_parse_size_refuses_nonsense():
    for text in ("", "4X", "-1", "1.5M", "M"):
        with pytest.raises(ValueError):
            output.parse_size(text)


def test_estimate_takes_the_fullest_node_and_the_replication_factor():
    from tests.cli.test_probe import view

    roomy, full = view(), view(data_used_bytes=1400000000, data_avail_pct=40)
    roomy.replication_factor = full.replication_factor = 2
    est = stats.estimate([roomy, full], 1000, {"records": 1, "stored_bytes": 1000},
                         True, True)
    assert est["bytes_left"] == full.bytes_left() * 2 // 2
    assert full.bytes_left() < roomy.bytes_left()
    assert est["chunks_left"] == est["bytes_left"] // 1000


NSUP_FIELDS = ("evicted_objects", "expired_objects", "evict_ttl", "hwm_breached",
               "stop_writes", "non_expirable_objects", "client_write_error")


def test_stats_shows_what_nsup_did_on_each_node(cli, engine):
    doc = stats_json(cli)
    for node in doc["capacity"]:
        assert all(node[key] is not None for key in NSUP_FIELDS), node
        assert isinstance(node["hwm_breached"], bool) and isinstance(node["stop_writes"], bool)
        assert node["evicted_objects"] >= 0 and node["client_write_error"] >= 0
    text = cli("stats").text
    for node in doc["capacity"]:
        assert re.search(rf"^node {node['node']} nsup +evicted \d+, expired \d+, evict-ttl -?\d+, "
                         rf"hwm breached (yes|no), stop-writes (yes|no), never expire \d+, "
                         rf"client write errors \d+$", text, re.M), text


def test_nsup_line_says_unknown_for_what_a_node_does_not_report():
    from tests.cli.test_probe import REAL_8_1, view

    known = view(hwm_breached="true", evicted_objects=4, client_write_error=2).as_dict()
    assert stats.nsup_line(known) == ("evicted 4, expired 94, evict-ttl 0, hwm breached yes, "
                                      "stop-writes no, never expire 97, client write errors 2")
    bare = view(REAL_8_1).as_dict()
    assert stats.nsup_line(bare).endswith("client write errors ?")


def test_stats_breaks_chunks_and_bytes_down_by_model_and_salt(cli, engine):
    engine.put("m1@1@0@01@bf16", bytes(100))
    engine.put("m1@1@0@02@bf16", bytes(50))
    engine.put("m2@0000000a@0@03@tenant-b", bytes(30))
    doc = stats_json(cli)
    assert doc["tenants"] == [
        {"model": "m1", "salt": None, "chunks": 2, "bytes": 150},
        {"model": "m2", "salt": "tenant-b", "chunks": 1, "bytes": 30},
    ]
    text = cli("stats").text
    assert re.search(r"^model m1 +2 chunks, 150 B$", text, re.M), text
    assert re.search(r"^model m2, salt tenant-b +1 chunks, 30 B$", text, re.M), text
