"""ls: a scan of the meta records, filtered by key prefix or model, sorted by key,
paginated with --limit and --after."""

import json

import pytest

from lmcache_aerospike import _native
from tests.cli.conftest import NAMESPACE, SET

KEYS = [  # the two shapes LMCache writes: CacheEngineKey and the L2 adapters' ObjectKey
    "Qwen/Qwen3-8B@1@0@0a1b@bfloat16",
    "Qwen/Qwen3-8B@1@0@ff00@bfloat16",
    "Qwen/Qwen3-8B-Instruct@1@0@0a1b@bfloat16",
    "meta-llama/Llama-3.1-8B@00000001@0@c0ffee",
    "meta-llama/Llama-3.1-8B@00000001@0@beef@salt",
]


@pytest.fixture
def stored(engine):
    for i, key in enumerate(KEYS):
        engine.put(key, bytes(10 + i))
    return sorted(KEYS)


def test_ls_lists_every_key_sorted(cli, stored):
    ran = cli("ls")
    assert ran.code == 0, ran.err
    assert ran.text.splitlines() == stored
    assert ran.err == ""


def test_ls_model_matches_the_whole_model_name(cli, stored):
    ran = cli("ls", "--model", "Qwen/Qwen3-8B")
    assert ran.text.splitlines() == [k for k in stored if k.startswith("Qwen/Qwen3-8B@")]
    ran = cli("ls", "--model", "meta-llama/Llama-3.1-8B")
    assert ran.text.splitlines() == [k for k in stored if k.startswith("meta-llama/")]


def test_ls_prefix(cli, stored):
    ran = cli("ls", "--prefix", "Qwen/Qwen3-8B")
    assert ran.text.splitlines() == [k for k in stored if k.startswith("Qwen/")]


def test_ls_pages_through_everything_with_after(cli, stored):
    seen, after = [], []
    for _ in range(len(stored)):
        ran = cli("ls", "--limit", "2", *after)
        assert ran.code == 0
        page = ran.text.splitlines()
        assert 1 <= len(page) <= 2
        seen += page
        if "next page: --after" not in ran.err:
            break
        doc = json.loads(cli("ls", "--limit", "2", "--json", *after).out)
        assert [c["key"] for c in doc["chunks"]] == page
        after = ["--after", doc["next_after"]]
        assert doc["next_after"] == page[-1]
        assert doc["matched"] == len(stored) - len(seen) + len(page)
    assert seen == stored


def test_ls_json_and_long_carry_sizes_and_pins(cli, engine, stored):
    engine.touch(stored[0], pin=True)
    doc = json.loads(cli("ls", "--json").out)
    by_key = {c["key"]: c for c in doc["chunks"]}
    assert [by_key[k]["tot_b"] for k in KEYS] == [10 + i for i in range(len(KEYS))]
    assert by_key[stored[0]]["pin"] is True and by_key[stored[0]]["ttl"] == -1
    assert doc["next_after"] is None
    first = cli("ls", "--long").text.splitlines()[0].split("\t")
    assert first[0] == stored[0] and first[3] == "pinned" and first[4] == "never expires"


def test_ls_without_send_key_lists_digests_and_says_so_once(cli, aerospike_hosts, planter):
    anon = _native.Connector(hosts=aerospike_hosts, namespace=NAMESPACE, set=SET,
                             default_ttl_seconds=600)
    try:
        for key in ("x@1@0@01@bf16", "y@1@0@02@bf16"):
            anon.put(key, b"data")
        digests = sorted(row["digest"].hex() for row in anon.scan())
    finally:
        anon.close()
    ran = cli("ls")
    assert ran.text.splitlines() == digests
    assert ran.err.count("do not hold their keys") == 1
    filtered = cli("ls", "--prefix", "x@")
    assert filtered.text == "" and "cannot match them" in filtered.err


def test_ls_rejects_a_negative_limit(cli):
    assert cli("ls", "--limit", "-1").code == 2


def test_ls_by_model_counts_chunks_and_bytes_per_model_and_salt(cli, stored, aerospike_hosts):
    anon = _native.Connector(hosts=aerospike_hosts, namespace=NAMESPACE, set=SET,
                             default_ttl_seconds=600)
    try:
        anon.put("z@1@0@01@bf16", bytes(7))  # no key stored
    finally:
        anon.close()
    doc = json.loads(cli("ls", "--by-model", "--json").out)
    assert doc["matched"] == 6
    # KEYS[i] holds 10 + i bytes; largest first.
    assert doc["tenants"] == [
        {"model": "Qwen/Qwen3-8B", "salt": None, "chunks": 2, "bytes": 10 + 11},
        {"model": "meta-llama/Llama-3.1-8B", "salt": "salt", "chunks": 1, "bytes": 14},
        {"model": "meta-llama/Llama-3.1-8B", "salt": None, "chunks": 1, "bytes": 13},
        {"model": "Qwen/Qwen3-8B-Instruct", "salt": None, "chunks": 1, "bytes": 12},
        {"model": None, "salt": None, "chunks": 1, "bytes": 7},
    ]
    text = cli("ls", "--by-model").text.splitlines()
    assert text[0] == "Qwen/Qwen3-8B\t2 chunks\t21 bytes (21 B)"
    assert text[1] == "meta-llama/Llama-3.1-8B salt salt\t1 chunks\t14 bytes (14 B)"
    assert text[-1] == "(no key stored)\t1 chunks\t7 bytes (7 B)"
    only = json.loads(cli("ls", "--by-model", "--model", "meta-llama/Llama-3.1-8B",
                          "--json").out)
    assert [(t["salt"], t["chunks"]) for t in only["tenants"]] == [("salt", 1), (None, 1)]
