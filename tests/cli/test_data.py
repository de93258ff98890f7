"""put, get, rm, inspect, pin and unpin: one chunk at a time, byte for byte."""

import json
import os

import pytest

from lmcache_aerospike import logs
from tests.cli.conftest import SET
from tests.conftest import TTL_SPREAD_S


def test_put_get_round_trip_through_files(cli, tmp_path, three_segments):
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    payload = os.urandom(three_segments)
    src.write_bytes(payload)
    put = cli("put", "files@1@0@aa@bf16", str(src))
    assert put.code == 0, put.err
    assert f"stored {len(payload)} bytes as a meta record and 3 segments" in put.text
    got = cli("get", "files@1@0@aa@bf16", str(dst))
    assert got.code == 0, got.err
    assert dst.read_bytes() == payload


@pytest.mark.parametrize("size", [0, 1, 4096])
def test_put_from_stdin_get_to_stdout_byte_for_byte(cli, size):
    # Bytes that are not text (a NUL, invalid UTF-8, CR LF) must not be decoded.
    payload = (b"\x00\xff\xfe\r\n" + os.urandom(size))[:size]
    assert cli("put", "stdin@1@0@bb@bf16", stdin=payload).code == 0
    assert cli("put", "dash@1@0@bb@bf16", "-", stdin=payload).code == 0
    for key, extra in (("stdin@1@0@bb@bf16", ()), ("dash@1@0@bb@bf16", ("-",))):
        got = cli("get", key, *extra)
        assert got.code == 0, got.err
        assert got.out == payload


def test_put_stores_md_serde_ttl_class_and_pin(cli, tmp_path, engine):
    md = tmp_path / "md.bin"
    md.write_bytes(b"\x01metadata\x00")
    assert cli("put", "tags@1@0@cc@bf16", "--md-file", str(md), "--serde", "naive",
               "--ttl-class", "session", "--pin", stdin=b"payload").code == 0
    meta = engine.stat("tags@1@0@cc@bf16")
    assert (meta["md"], meta["serde"], meta["ttl_class"], meta["pin"]) == \
           (b"\x01metadata\x00", "naive", "session", True)


def test_get_miss_is_exit_1_and_leaves_the_file_alone(cli, tmp_path):
    dst = tmp_path / "keep.bin"
    dst.write_bytes(b"old")
    got = cli("get", "absent@1@0@dd@bf16", str(dst))
    assert got.code == 1
    assert got.err.strip() == "absent@1@0@dd@bf16: not found"
    assert got.out == b""
    assert dst.read_bytes() == b"old"


def test_put_of_a_missing_file_is_exit_2_naming_it(cli, tmp_path):
    missing = tmp_path / "nope.bin"
    ran = cli("put", "k@1@0@ee@bf16", str(missing))
    assert ran.code == 2
    assert str(missing) in ran.err and "No such file" in ran.err


def test_rm_removes_and_reports_misses(cli, engine):
    engine.put("rm1@1@0@ff@bf16", b"x")
    engine.put("rm2@1@0@ff@bf16", b"y")
    ran = cli("rm", "rm1@1@0@ff@bf16", "gone@1@0@ff@bf16", "rm2@1@0@ff@bf16")
    assert ran.code == 1
    assert ran.text.splitlines() == ["rm1@1@0@ff@bf16: removed", "rm2@1@0@ff@bf16: removed"]
    assert ran.err.strip() == "gone@1@0@ff@bf16: not found"
    assert not engine.exists("rm1@1@0@ff@bf16") and not engine.exists("rm2@1@0@ff@bf16")
    assert cli("rm", "rm1@1@0@ff@bf16").code == 1


def test_inspect_shows_every_field(cli, engine, three_segments):
    key = "insp@1@0@ab@bf16"
    engine.put(key, os.urandom(three_segments), md=b"m" * 40, serde="naive",
               ttl_class="long")
    meta = engine.stat(key)
    ran = cli("inspect", key, "--json")
    assert ran.code == 0, ran.err
    doc = json.loads(ran.out)
    assert doc["key"] == key
    assert doc["digest"] == logs.digest(SET, key + "|m")
    assert (doc["tot_b"], doc["nseg"], doc["seg_b"], doc["wid"]) == \
           (three_segments, 3, meta["seg_b"], meta["wid"])
    assert doc["segments"] == ["ok", "ok", "ok"] and doc["readable"] is True
    assert doc["md"] == (b"m" * 40).hex() and doc["serde"] == "naive"
    assert doc["pin"] is False and 0 < doc["ttl"] <= 600 + TTL_SPREAD_S
    text = cli("inspect", key).text
    for line in ("readable   yes", "segments   3 of 3 ok", f"write id   0x{meta['wid']:016x}",
                 "ttl_class  long", "md         40 bytes: " + (b"m" * 32).hex() + "..."):
        assert line in text


def test_inspect_names_a_missing_segment(cli, engine, planter, three_segments):
    key = "torn@1@0@ab@bf16"
    engine.put(key, os.urandom(three_segments))
    planter.remove(key + "|s|1")
    ran = cli("inspect", key)
    assert ran.code == 0
    assert "segments   2 of 3 ok; 1: missing" in ran.text
    assert "readable   no: a get misses" in ran.text
    assert cli("inspect", "nothing@1@0@00@bf16").code == 1


def test_pin_and_unpin_show_in_inspect(cli, engine):
    keys = ["pin1@1@0@aa@bf16", "pin2@1@0@aa@bf16"]
    for key in keys:
        engine.put(key, b"data")
    ran = cli("pin", *keys)
    assert ran.code == 0
    assert ran.text.splitlines() == [f"{k}: pinned" for k in keys]
    for key in keys:
        doc = json.loads(cli("inspect", key, "--json").out)
        assert doc["pin"] is True and doc["ttl"] == -1
    assert cli("unpin", keys[0]).code == 0
    doc = json.loads(cli("inspect", keys[0], "--json").out)
    assert doc["pin"] is False and 0 < doc["ttl"] <= 600 + TTL_SPREAD_S
    assert json.loads(cli("inspect", keys[1], "--json").out)["pin"] is True


def test_pin_by_prefix_touches_only_matching_keys(cli, engine):
    for key in ("modelA@1@0@01@bf16", "modelA@1@0@02@bf16", "modelB@1@0@01@bf16"):
        engine.put(key, b"data")
    ran = cli("pin", "--prefix", "modelA@")
    assert ran.code == 0
    assert sorted(ran.text.splitlines()) == ["modelA@1@0@01@bf16: pinned",
                                             "modelA@1@0@02@bf16: pinned"]
    assert "pinned 2 chunks under 'modelA@'" in ran.err
    assert [engine.stat(k)["pin"] for k in ("modelA@1@0@01@bf16", "modelA@1@0@02@bf16",
                                            "modelB@1@0@01@bf16")] == [True, True, False]


def test_pin_of_a_missing_key_is_exit_1(cli):
    ran = cli("pin", "nope@1@0@aa@bf16")
    assert ran.code == 1 and ran.err.strip() == "nope@1@0@aa@bf16: not found"


def test_pin_needs_keys_or_prefix(cli):
    assert cli("pin").code == 2
    assert cli("unpin", "k", "--prefix", "p").code == 2


@pytest.fixture
def keyless(aerospike_hosts, planter):
    """An engine that stores chunks without their keys (send_key false, the default)."""
    from tests.cli.conftest import NAMESPACE, SMALL_SEGMENTS

    from lmcache_aerospike import _native

    c = _native.Connector(hosts=aerospike_hosts, namespace=NAMESPACE, set=SET,
                          default_ttl_seconds=600, **SMALL_SEGMENTS)
    yield c
    c.close()


def listed_digests(cli):
    ran = cli("ls", "--json")
    assert ran.code == 0, ran.err
    return [row["digest"] for row in json.loads(ran.out)["chunks"] if row["key"] is None]


def test_rm_takes_the_digest_ls_prints_and_removes_every_record(
        cli, keyless, engine, three_segments):
    keyless.put("anon@1@0@ab@bf16", os.urandom(three_segments))
    keyless.put("other@1@0@ab@bf16", os.urandom(three_segments))
    [first, second] = sorted(listed_digests(cli))
    assert len(keyless.scan(records=True)) == 8  # two meta records, six segments
    ran = cli("rm", first, "0" * 40)
    assert ran.code == 1
    assert ran.text.splitlines() == [f"{first}: removed (meta record and 3 segment records)"]
    assert ran.err.strip() == f"{'0' * 40}: not found"
    assert listed_digests(cli) == [second]
    left = keyless.scan(records=True)
    assert len(left) == 4 and {r["kind"] for r in left} == {"meta", "segment"}
    assert len({r["wid"] for r in left}) == 1, "removed segments of the other chunk"
    assert cli("rm", first).code == 1  # gone


def test_inspect_takes_the_digest_ls_prints(cli, keyless, planter, three_segments):
    keyless.put("anon@1@0@cd@bf16", os.urandom(three_segments), serde="naive")
    [digest] = listed_digests(cli)
    ran = cli("inspect", digest, "--json")
    assert ran.code == 0, ran.err
    doc = json.loads(ran.out)
    assert doc["key"] is None and doc["digest"] == digest
    assert (doc["tot_b"], doc["nseg"], doc["serde"]) == (three_segments, 3, "naive")
    assert doc["segments"] == ["ok", "ok", "ok"] and doc["readable"] is True
    assert doc["crc"] == "unread" and doc["md"] is None
    text = cli("inspect", digest).text
    assert "key        not stored (send_key false)" in text
    assert "segments   3 of 3 records of this write found" in text
    # A segment gone: the chunk reads as a miss, and inspect says so.
    planter.remove("anon@1@0@cd@bf16|s|1")
    doc = json.loads(cli("inspect", digest, "--json").out)
    assert doc["segments"] == ["ok", "ok", "missing"] and doc["readable"] is False
    assert cli("inspect", "f" * 40).code == 1


def test_a_key_of_forty_hex_digits_is_still_a_key(cli, engine):
    key = "ab" * 20  # the shape of a digest, but no digest of this set
    engine.put(key, b"payload")
    doc = json.loads(cli("inspect", key, "--json").out)
    assert doc["key"] == key and doc["tot_b"] == 7
    ran = cli("rm", key)
    assert ran.code == 0 and ran.text.strip() == f"{key}: removed"
    assert not engine.exists(key)
