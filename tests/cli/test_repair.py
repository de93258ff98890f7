"""repair: planted damage of every kind is reported by a dry run, deleted exactly by
--apply, and gone for a second repair; a put in flight (in one sweep only) stays.
Damage is made with the official Python client, as a crashed writer leaves it."""

import io
import json
import os
import sys

import aerospike
import pytest

from lmcache_aerospike import _native
from lmcache_aerospike.cli import repair
from tests.cli.conftest import NAMESPACE, SET, SMALL_SEGMENTS


def digest(reckey):
    return bytes(aerospike.calc_digest(NAMESPACE, SET, reckey)).hex()


def segments(key, n=3):
    return [f"{key}|s|{i}" for i in range(n)]


@pytest.fixture
def damage(engine, planter, three_segments):
    """Every kind of damage, and a healthy chunk next to it. Returns the record
    keys repair must delete, by (reason, kind), and the chunks it must keep."""
    def chunk(key, pin=False, size=three_segments):
        engine.put(key, os.urandom(size), pin=pin)

    chunk("orphan@1@0@01@bf16")                      # killed before its commit
    planter.remove("orphan@1@0@01@bf16|m")
    chunk("pinned@1@0@02@bf16", pin=True)            # the same, pinned: never expires
    planter.remove("pinned@1@0@02@bf16|m")
    chunk("over@1@0@03@bf16")                        # overwritten with fewer segments
    chunk("over@1@0@03@bf16", size=100)
    chunk("broken@1@0@04@bf16")                      # a segment lost
    planter.remove("broken@1@0@04@bf16|s|1")
    chunk("fine@1@0@05@bf16")
    doomed = {
        ("orphan_segment", "segment"): segments("orphan@1@0@01@bf16")
        + segments("pinned@1@0@02@bf16") + segments("over@1@0@03@bf16"),
        ("broken_meta", "meta"): ["broken@1@0@04@bf16|m"],
        ("broken_meta", "segment"): ["broken@1@0@04@bf16|s|0", "broken@1@0@04@bf16|s|2"],
    }
    return doomed, ["over@1@0@03@bf16", "fine@1@0@05@bf16"]


def repair_json(cli, *args):
    ran = cli("repair", "--interval", "0.05", "--json", *args)
    assert ran.code == 0, ran.err
    return json.loads(ran.out)


def test_dry_run_reports_every_kind_and_deletes_nothing(cli, planter, damage, three_segments):
    doomed, _ = damage
    doc = repair_json(cli)
    assert doc["applied"] is False
    found = {}
    for rec in doc["records"]:
        found.setdefault((rec["reason"], rec["kind"]), set()).add(rec["digest"])
    assert found == {group: {digest(k) for k in keys} for group, keys in doomed.items()}
    pinned = {r["digest"] for r in doc["records"] if r["pinned"]}
    assert pinned == {digest(k) for k in segments("pinned@1@0@02@bf16")}
    overwritten = {r["digest"] for r in doc["records"] if r["overwritten"]}
    assert overwritten == {digest(k) for k in segments("over@1@0@03@bf16")}
    summary = {(g["reason"], g["kind"]): (g["records"], g["pinned"], g["overwritten"],
                                          g["deleted"]) for g in doc["summary"]}
    assert summary == {("orphan_segment", "segment"): (9, 3, 3, 0),
                       ("broken_meta", "meta"): (1, 0, 0, 0),
                       ("broken_meta", "segment"): (2, 0, 0, 0)}
    broken = next(r for r in doc["records"] if r["kind"] == "meta")
    assert (broken["nseg"], broken["found"], broken["bytes"]) == (3, 2, three_segments)
    assert all(planter.exists(k) for keys in doomed.values() for k in keys)


def test_apply_deletes_exactly_the_damage_then_finds_nothing(cli, engine, planter, damage):
    doomed, kept = damage
    before = {k: engine.stat(k)["wid"] for k in kept}
    doc = repair_json(cli, "--apply")
    assert doc["applied"] is True
    assert all(r["deleted"] for r in doc["records"])
    assert not any(planter.exists(k) for keys in doomed.values() for k in keys)
    for key in kept:  # untouched, and still whole
        meta = engine.stat(key)
        assert meta["wid"] == before[key]
        assert engine.get(key, bytearray(meta["tot_b"])) == meta["tot_b"]
    again = repair_json(cli, "--apply")
    assert again["records"] == [] and again["first_sweep"] == 0


def test_repair_works_on_chunks_stored_without_their_keys(cli, aerospike_hosts, planter,
                                                         three_segments):
    """Sweeps pair records by write id and delete by digest: no key needed. Only
    "overwritten" cannot be told then."""
    anon = _native.Connector(hosts=aerospike_hosts, namespace=NAMESPACE, set=SET,
                             default_ttl_seconds=600, **SMALL_SEGMENTS)
    try:
        anon.put("anon@1@0@01@bf16", os.urandom(three_segments))
        anon.put("anon@1@0@01@bf16", b"short")
    finally:
        anon.close()
    doc = repair_json(cli, "--apply")
    assert {r["digest"] for r in doc["records"]} == \
        {digest(k) for k in segments("anon@1@0@01@bf16")}
    assert all(r["overwritten"] is None and r["deleted"] for r in doc["records"])
    assert planter.exists("anon@1@0@01@bf16|m")


def test_text_summary_counts_and_says_what_would_go(cli, damage):
    ran = cli("repair", "--interval", "0")
    assert ran.code == 0
    lines = ran.text.splitlines()
    assert "orphan_segment segment 9 records (3 pinned, 3 of overwritten chunks)" in lines
    # The sweeps report 10 records; the broken chunk's 2 segments go with its meta.
    assert lines[0].startswith("first sweep: 10 records;")
    assert lines[1] == ("plus 2 segment records of broken chunks, which go with their meta "
                        "record")
    assert lines[-1] == "would delete 12 records: run again with --apply"
    applied = cli("repair", "--interval", "0", "--apply").text.splitlines()
    assert applied[-1] == "deleted 12 records (0 were already gone)"


def test_a_put_in_flight_is_left_alone(cli, engine, planter, monkeypatch, three_segments):
    """Segments whose meta record lands between the sweeps (a put committing), and
    segments that appear between them (a put starting), are each in one sweep
    only: repair must not touch them."""
    flight, late = "flight@1@0@01@bf16", "late@1@0@02@bf16"
    for key in (flight, late):
        engine.put(key, os.urandom(three_segments))
    _, _, meta_bins = planter.client.get((NAMESPACE, SET, flight + "|m"))
    planter.remove(flight + "|m")

    def between_sweeps(seconds, bar):
        planter.put(flight + "|m", meta_bins, ttl=600)  # its commit lands
        planter.remove(late + "|m")                     # a put begins over `late`

    monkeypatch.setattr(repair, "wait", between_sweeps)
    doc = repair_json(cli, "--apply")
    assert doc["records"] == []
    assert (doc["first_sweep"], doc["second_sweep"], doc["one_sweep_only"]) == (3, 3, 6)
    assert all(planter.exists(k) for k in segments(flight) + segments(late))
    assert engine.get(flight, bytearray(three_segments)) == three_segments


def test_progress_on_a_terminal(cli, damage, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    tty = Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    ran = cli("repair", "--interval", "0", "--apply")
    assert ran.code == 0
    assert "\rrepair: first sweep" in tty.getvalue()
    assert "\rrepair: deleting 12/12" in tty.getvalue()
    assert tty.getvalue().endswith("\r")  # the line is cleared before the summary
    assert ran.text.splitlines()[-1] == "deleted 12 records (0 were already gone)"


def test_negative_interval_is_a_usage_error(cli):
    ran = cli("repair", "--interval", "-1")
    assert ran.code == 2 and "--interval" in ran.err
