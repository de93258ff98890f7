"""bench/engines/sglang_hicache.py runs (a small geometry, one round): every row's pages are
loaded and checked against the pages written, and the table has every row."""

import importlib.util
import json
import pathlib

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "engines" / "sglang_hicache.py"


def test_the_benchmark_loads_and_checks_every_row(aerospike_hosts, tmp_path, capsys):
    pytest.importorskip("sglang.srt.mem_cache.hicache_storage")
    spec = importlib.util.spec_from_file_location("sglang_hicache", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "r.json"
    bench.main(["--hosts", aerospike_hosts, "--pages", "4", "--layers", "1", "--heads", "2",
                "--page-size", "16", "--rounds", "2", "--backends", "aerospike,aerospike-copy",
                "--file-dir", str(tmp_path / "files"), "--json", str(out),
                "--out", str(tmp_path / "record")])
    rows = {(r["backend"], r["op"]) for r in json.loads(out.read_text())["results"]}
    assert rows == {(b, op) for b in ("aerospike", "aerospike-copy", "file")
                    for op in ("batch_exists", "load")}
    assert "x file" in capsys.readouterr().out
    # The record: the same results, with what produced them, and a table of every row.
    doc = json.loads((tmp_path / "record" / "sglang_hicache.json").read_text())
    assert doc["results"] == json.loads(out.read_text())["results"]
    assert doc["provenance"]["commit"] and "--pages 4" in doc["provenance"]["command"]
    md = (tmp_path / "record" / "sglang_hicache.md").read_text()
    assert f"commit {doc['provenance']['commit']}" in md
    assert sum(line.startswith("| aerospike") for line in md.splitlines()) == 4
