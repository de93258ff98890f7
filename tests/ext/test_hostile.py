"""Records the engine did not write, planted with the official Python client and
read through the extension: its blocking calls (the C API) and its batch
submissions (the asynchronous layer). Each must read as a miss, counted and
logged, never as a crash, a write past the buffer or wrong bytes. The C twin
is tests/c/test_hostile.c."""

import logging
import os
import select
import uuid

import aerospike
import pytest

from lmcache_aerospike import _native
from tests.ext.plant import meta_bins, planter  # noqa: F401 (fixture)

PAYLOAD = os.urandom(64)
SEG = 4096
SEGMENTED = os.urandom(2 * SEG + 100)
WID = 0x1234567890ABCDEF

# (name, changes to a valid one-record chunk, what sees it):
#   "core"    a bin that makes a chunk present is bad: every read misses;
#   "detail"  another small bin is bad: stat and get miss, lookups say present;
#   "get"     what only a get reads is bad (payload, unknown bin): it misses.
INLINE = [
    ("nseg 0", {"nseg": 0}, "core"),
    ("nseg -1", {"nseg": -1}, "core"),
    ("nseg 70000", {"nseg": 70000}, "core"),
    ("tot_b huge", {"tot_b": 2**63 - 1, "seg_b": 2**63 - 1}, "core"),
    ("payload longer than tot_b", {"tot_b": 32, "seg_b": 32}, "get"),
    ("payload shorter than tot_b", {"tot_b": 128, "seg_b": 128}, "get"),
    ("older schema version", {"ver": 1}, "core"),
    ("ver a string", {"ver": "2"}, "core"),
    ("state missing", {"state": None}, "core"),
    ("state unknown", {"state": "weird"}, "core"),
    ("payload a string", {"b": "not bytes"}, "get"),
    ("payload a float", {"b": 1.5}, "get"),
    ("payload a list", {"b": [1, 2]}, "get"),
    ("md over 8 KiB", {"md": b"m" * 9000}, "detail"),
    ("md a map", {"md": {"a": 1}}, "detail"),
    ("serde an integer", {"serde": 5}, "detail"),
    ("wid 0", {"wid": 0}, "core"),
    ("wid missing", {"wid": None}, "core"),
    ("pin 7", {"pin": 7}, "detail"),
    ("crc32 negative", {"crc32": -1}, "detail"),
    ("unknown bin", {"zzz": 1}, "get"),
]


def hostile_key():
    return f"model@1@0@{uuid.uuid4().hex}@hostile"


@pytest.fixture
def connector(aerospike_hosts):
    c = _native.Connector(hosts=aerospike_hosts, namespace="lmcache", set="lmca_pytest",
                          default_ttl_seconds=60, num_workers=2)
    yield c
    c.close()


def wait(c, future_id, timeout=60):
    while True:
        ready, _, _ = select.select([c.event_fd()], [], [], timeout)
        assert ready, f"no completion for {future_id}"
        for done in c.drain_completions():
            assert done[0] == future_id
            return done


def read_everywhere(c, key, size):
    """Every read path: (get, stat, exists, prefix, async get, async prefix).
    The buffer has a canary tail that no path may touch."""
    buf = bytearray(b"\xa5" * (size + 4096))
    view = memoryview(buf)[:size]
    got = c.get(key, view)
    stat, exists, prefix = c.stat(key), c.exists(key), c.prefix([key])
    _, ok, error, hit = wait(c, c.submit_batch_get([key], [view]))
    assert ok, error
    view.release()
    _, ok, _, present = wait(c, c.submit_batch_prefix([key]))
    assert buf[size:] == b"\xa5" * 4096, "a read wrote past its buffer"
    return got, stat, exists, prefix, hit[0], present[0]


@pytest.mark.parametrize("name,changes,seen_by", INLINE, ids=[c[0] for c in INLINE])
def test_hostile_one_record_chunks_read_as_misses(connector, planter, caplog, name, changes,
                                                  seen_by):
    key = hostile_key()
    planter.put(key + "|m", meta_bins(PAYLOAD, WID, changes))
    before = connector.stats()["corrupt"]
    with caplog.at_level(logging.WARNING, logger="lmcache_aerospike"):
        got, stat, exists, prefix, hit, present = read_everywhere(connector, key, len(PAYLOAD))
    assert got is None and not hit
    # One rule for "present": exists and both prefix lookups agree.
    assert (exists, prefix, present) == (seen_by != "core",) * 3
    assert (stat is not None) == (seen_by == "get")
    assert connector.stats()["corrupt"] > before
    # Named by the record's digest, which asadm and aql show; never by its key.
    digest = aerospike.calc_digest("lmcache", "lmca_pytest", key + "|m").hex()
    assert "is corrupt" in caplog.text and digest in caplog.text and key not in caplog.text


def test_a_valid_planted_chunk_is_a_hit(connector, planter):
    """The control: the planted layout is the engine's, so the cases above miss
    for their change alone."""
    key = hostile_key()
    planter.put(key + "|m", meta_bins(PAYLOAD, WID))
    out = bytearray(len(PAYLOAD))
    assert connector.get(key, out) == len(PAYLOAD) and out == PAYLOAD
    assert connector.stat(key)["wid"] == WID


def plant_segmented(planter, key, segment_changes=None, drop=None):
    meta = meta_bins(b"", WID, {"nseg": 3, "seg_b": SEG, "tot_b": len(SEGMENTED), "b": None})
    planter.put(key + "|m", meta)
    for i in range(3):
        if i == drop:
            continue
        bins = {"b": SEGMENTED[i * SEG:(i + 1) * SEG], "wid": WID}
        if i == 1 and segment_changes:
            bins.update(segment_changes)
            bins = {k: v for k, v in bins.items() if v is not None}
        planter.put(f"{key}|s|{i}", bins)


SEGMENTS = [
    ("segment larger than its slot", {"b": b"x" * 8000}, "corrupt"),
    ("segment shorter", {"b": b"x" * 100}, "corrupt"),
    ("segment payload a string", {"b": "x"}, "corrupt"),
    ("segment with an extra bin", {"extra": 1}, "corrupt"),
    ("segment without wid", {"wid": None}, "corrupt"),
    ("segment of another write", {"wid": 12345}, "torn"),
]


@pytest.mark.parametrize("name,changes,counter", SEGMENTS, ids=[s[0] for s in SEGMENTS])
def test_hostile_segments_read_as_misses(connector, planter, name, changes, counter):
    key = hostile_key()
    plant_segmented(planter, key, changes)
    before = connector.stats()[counter]
    got, stat, exists, prefix, hit, present = read_everywhere(connector, key, len(SEGMENTED))
    assert got is None and not hit
    assert stat is not None and exists and prefix == 1 and present  # the meta record is valid
    assert connector.stats()[counter] > before


def test_a_missing_segment_is_a_torn_miss(connector, planter):
    key = hostile_key()
    plant_segmented(planter, key, drop=2)
    before = connector.stats()["torn"]
    got, *_, hit, _ = read_everywhere(connector, key, len(SEGMENTED))
    assert got is None and not hit
    assert connector.stats()["torn"] > before


def test_valid_planted_segments_are_a_hit(connector, planter):
    key = hostile_key()
    plant_segmented(planter, key)
    out = bytearray(len(SEGMENTED))
    assert connector.get(key, out) == len(SEGMENTED) and out == SEGMENTED
