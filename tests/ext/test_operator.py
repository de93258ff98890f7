"""The operator's calls of lmcache_aerospike._native.Connector (what the CLI's
probe, stats, ls, inspect and repair use): info, cluster_size, scan, sweep,
remove_record and inspect. Damage is planted with the official Python client,
bypassing the engine (tests/ext/plant.py)."""

import uuid

import aerospike
import pytest

from lmcache_aerospike import _native
from tests.conftest import TTL_SPREAD_S
from tests.ext.plant import Planter, meta_bins

SET = "lmca_operator"  # only these tests write here, so scans and sweeps see only them
KiB = 1 << 10
CHUNK = 200 * KiB  # four segments of 64 KiB minus the margin's grid


def open_connector(hosts, **settings):
    base = dict(hosts=hosts, namespace="lmcache", set=SET, default_ttl_seconds=60,
                target_segment_bytes=64 * KiB, min_segment_bytes=16 * KiB, num_workers=1)
    return _native.Connector(**{**base, **settings})


@pytest.fixture
def op(aerospike_hosts):
    """Keys stored, CRCs on: what an operator of a well-configured tier sees."""
    c = open_connector(aerospike_hosts, send_key=True, enable_crc32=True)
    yield c
    c.close()


@pytest.fixture
def anon(aerospike_hosts):
    """The defaults: keys only hashed, no CRC."""
    c = open_connector(aerospike_hosts)
    yield c
    c.close()


@pytest.fixture
def plant(aerospike_hosts):
    p = Planter(aerospike_hosts, "lmcache", SET)
    yield p
    p.close()


def new_key(tag):
    return f"model@1@0@{uuid.uuid4().hex}@{tag}"


def digest(reckey):
    return bytes(aerospike.calc_digest("lmcache", SET, reckey))


def as_bin(wid):
    """A write id as its bin holds it: the engine stores the 64 bits as a signed
    integer, and the Python client takes no larger int."""
    return wid - (1 << 64) if wid >= 1 << 63 else wid


def by_digest(rows):
    return {row["digest"]: row for row in rows}


# -- info ------------------------------------------------------------------------


def test_info_answers_once_per_node(op):
    rows = op.info("build")
    assert len(rows) == op.cluster_size() >= 1
    names = op.info("node")
    for (node, address, build), (node2, _, name) in zip(rows, names):
        assert build[0].isdigit() and "\t" not in build and not build.endswith("\n")
        assert ":" in address
        assert node == node2 == name  # the node's own name, as the client knows it
    stats = dict(kv.split("=", 1) for kv in op.info("statistics")[0][2].split(";") if "=" in kv)
    assert int(stats["cluster_size"]) == op.cluster_size()


def test_info_refuses_bad_commands_naming_them(op):
    with pytest.raises(_native.InvalidArgumentError, match=r'"build\\nnode" holds a newline'):
        op.info("build\nnode")
    with pytest.raises(ValueError, match="holds a tab"):
        op.info("get-config:a\tb")
    with pytest.raises(_native.InvalidArgumentError, match="empty command"):
        op.info("")
    with pytest.raises(_native.InvalidArgumentError, match="must be a str"):
        op.info(b"build")
    with pytest.raises(_native.InvalidArgumentError, match='"no-such-command" on node') as exc:
        op.info("no-such-command")
    assert exc.value.as_code == 4


# -- scan ------------------------------------------------------------------------


def test_scan_lists_chunks_with_their_keys_when_stored(op, anon):
    named, unnamed = new_key("named"), new_key("unnamed")
    op.put(named, bytearray(CHUNK), pin=True, serde="naive", ttl_class="session")
    anon.put(unnamed, bytearray(100))
    rows = by_digest(op.scan())
    a, b = rows[digest(named + "|m")], rows[digest(unnamed + "|m")]
    assert a["key"] == named and b["key"] is None
    assert (a["pin"], a["ttl"]) == (True, -1)
    assert b["pin"] is False and 0 < b["ttl"] <= 60 + TTL_SPREAD_S
    assert (a["tot_b"], a["nseg"], b["tot_b"], b["nseg"]) == (CHUNK, 4, 100, 1)
    assert a["seg_b"] * 3 < CHUNK <= a["seg_b"] * 4 and b["seg_b"] == 100
    assert (a["serde"], a["ttl_class"], b["serde"]) == ("naive", "session", "")
    assert isinstance(a["crc32"], int) and b["crc32"] is None
    assert a["wid"] == op.stat(named)["wid"] and a["created_at"] == op.stat(named)["created_at"]
    assert "kind" not in a
    assert len(op.scan(limit=1)) == 1 and op.scan(limit=0) == []
    assert op.remove(named)  # pinned: it would stay


def test_scan_records_tells_kinds_apart(op, plant):
    key, bad = new_key("records"), new_key("bad")
    op.put(key, bytearray(CHUNK))
    plant.put(bad + "|m", meta_bins(b"xyz", changes={"nseg": 0}))  # fails validation
    rows = by_digest(op.scan(records=True))
    wid = op.stat(key)["wid"]
    meta = rows[digest(key + "|m")]
    assert (meta["kind"], meta["key"], meta["wid"], meta["nseg"]) == ("meta", key + "|m", wid, 4)
    for i in range(4):
        seg = rows[digest(f"{key}|s|{i}")]
        assert (seg["kind"], seg["key"], seg["wid"]) == ("segment", f"{key}|s|{i}", wid)
        assert "nseg" not in seg
    assert rows[digest(bad + "|m")]["kind"] == "unknown"
    assert digest(bad + "|m") not in by_digest(op.scan())  # chunks are valid meta records
    assert len(op.scan(records=True, limit=2)) == 2
    with pytest.raises(ValueError, match="limit=-1"):
        op.scan(limit=-1)


# -- sweep and remove_record -------------------------------------------------------


def test_sweep_finds_orphans_and_broken_chunks_and_repair_clears_them(op, plant):
    # Every record of this set first (an earlier run's too), so the sweep sees only
    # ours: removing a broken chunk's meta record alone would orphan its segments.
    for rec in op.scan(records=True):
        op.remove_record(rec["digest"])
    orphaned, broken = new_key("orphaned"), new_key("broken")
    op.put(orphaned, bytearray(CHUNK))
    op.put(broken, bytearray(CHUNK))
    wid = op.stat(orphaned)["wid"]
    plant.remove(orphaned + "|m")  # as a writer killed before its commit leaves it
    plant.remove(broken + "|s|2")

    found = op.sweep()
    orphans = {r["digest"]: r for r in found if r["reason"] == "orphan_segment"}
    assert set(orphans) == {digest(f"{orphaned}|s|{i}") for i in range(4)}
    assert all(r["kind"] == "segment" and r["wid"] == wid and 0 < r["ttl"] <= 60 + TTL_SPREAD_S
               for r in orphans.values())
    [bad] = [r for r in found if r["reason"] == "broken_meta"]
    assert (bad["digest"], bad["kind"], bad["nseg"], bad["found"]) == (digest(broken + "|m"),
                                                                      "meta", 4, 3)
    assert len(found) == 5

    assert all(op.remove_record(r["digest"]) for r in found)
    # The broken chunk's meta record is gone: its three segments are orphans now,
    # which the next round of a repair removes.
    again = op.sweep()
    assert {r["digest"] for r in again} == {digest(f"{broken}|s|{i}") for i in (0, 1, 3)}
    assert all(op.remove_record(r["digest"]) for r in again)
    assert op.sweep() == []


def test_remove_record_of_a_gone_digest_is_false_and_bad_digests_are_refused(op):
    key = new_key("gone")
    op.put(key, bytearray(10))
    assert op.remove_record(bytearray(digest(key + "|m"))) is True
    assert op.remove_record(digest(key + "|m")) is False
    assert op.get(key, bytearray(10)) is None
    with pytest.raises(_native.InvalidArgumentError, match="20 bytes, got 19"):
        op.remove_record(b"x" * 19)
    with pytest.raises(ValueError, match="got 21"):
        op.remove_record(memoryview(b"x" * 21))
    with pytest.raises(TypeError):
        op.remove_record("x" * 20)


# -- inspect -----------------------------------------------------------------------


def test_inspect_a_whole_chunk(op, anon):
    key = new_key("whole")
    op.put(key, bytearray(CHUNK), md=b"remote-md", serde="naive")
    got = op.inspect(key)
    stat = op.stat(key)
    assert got["segments"] == ["ok"] * 4 and got["crc"] == "ok"
    assert {k: got[k] for k in stat if k != "ttl"} == {k: stat[k] for k in stat if k != "ttl"}
    assert got["md"] == b"remote-md" and 0 < got["ttl"] <= 60 + TTL_SPREAD_S
    plain = new_key("plain")
    anon.put(plain, bytearray(CHUNK), pin=True)
    got = anon.inspect(plain)
    assert (got["segments"], got["crc"], got["ttl"]) == (["ok"] * 4, "absent", -1)
    assert anon.remove(plain)
    small = new_key("small")
    op.put(small, bytearray(100))
    assert (op.inspect(small)["segments"], op.inspect(small)["crc"]) == ([], "ok")


def test_inspect_names_missing_and_foreign_segments(op, plant):
    key = new_key("damaged")
    op.put(key, bytearray(CHUNK))
    plant.remove(key + "|s|1")
    got = op.inspect(key)
    assert got["segments"] == ["ok", "missing", "ok", "ok"] and got["crc"] == "unchecked"
    seg_b = got["seg_b"]
    plant.put(key + "|s|3", {"b": bytes(CHUNK - 3 * seg_b), "wid": as_bin(got["wid"] ^ 1)})
    plant.put(key + "|s|0", {"b": bytes(seg_b + 1), "wid": as_bin(got["wid"])})
    assert op.inspect(key)["segments"] == ["corrupt", "missing", "ok", "other_write"]
    assert op.get(key, bytearray(CHUNK)) is None  # what a reader makes of it


def test_inspect_of_an_absent_key_is_none(op):
    assert op.inspect(new_key("absent")) is None
    with pytest.raises(_native.InvalidArgumentError):
        op.inspect("")
