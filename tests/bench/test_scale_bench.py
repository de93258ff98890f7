"""The scale benchmark's parts (bench/cache/scale_bench.py, device_direct.py): the
disk's own direct reads and writes, the device counters from a namespace's answer,
the model check against `size`, the record's Markdown, and one short run through
every step against the session's server."""

import json
import os
import sys
import tempfile
from pathlib import Path

from lmcache_aerospike.cli import size

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "cache"))  # the benchmark's modules are not a package
sys.path.insert(0, str(REPO / "bench"))

import device_direct  # noqa: E402
import scale_bench  # noqa: E402

MiB = 1 << 20


def disk_dir():
    """A directory on the checkout's disk: O_DIRECT needs a real filesystem (a
    tmpfs /tmp refuses it)."""
    build = REPO / "build"
    build.mkdir(exist_ok=True)
    return tempfile.mkdtemp(prefix="device-direct-", dir=build)


def test_the_disks_own_direct_writes_and_reads():
    where = disk_dir()
    out = device_direct.measure(where, 32 * MiB, [4096, MiB], count=20)
    assert out["file_bytes"] == 32 * MiB
    assert out["write_Bps"] > 0 and out["write_dsync_Bps"] > 0
    for n in ("4096", str(MiB)):
        r = out["reads"][n]
        assert r["n"] == 20 and 0 < r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"] <= r["max_ms"]
    assert os.listdir(where) == []  # the file is removed
    os.rmdir(where)


def test_device_writes_sum_every_file():
    kv = {"storage-engine.file[0].writes": "10", "storage-engine.file[1].writes": "5",
          "storage-engine.file[0].defrag_writes": "2", "storage-engine.file[1].defrag_writes": "1",
          "storage-engine.file[0].partial_writes": "3", "storage-engine.file[0].defrag_reads": "7",
          "storage-engine.file[0].write_q": "4", "objects": "99"}
    assert scale_bench.device_writes(kv) == {"writes": 15, "partial_writes": 3,
                                              "defrag_writes": 3, "defrag_reads": 7}


def run_doc(chunk, held_chunks, data_used, index_used):
    fill = {"stored": 100, "offered": 100, "failed": 0, "dropped": {"dropped_full": 0},
            "newest_fifth": 1.0, "oldest_fifth": 0.0, "factor": 3.0,
            "warm": {"hit": 8, "reads_after_first_capacity": 8, "alive": 2, "size": 2},
            "lru": {"warm_hit": 8, "warm_reads": 8, "warm_alive": 2},
            "puts": {"max": 0.5}, "clock": {"clock_local": {"0": 0, "1": 0}},
            "mb_per_s": 300.0, "held_bytes": held_chunks * chunk, "capacity_bytes": 64 * chunk}
    hits = {k: {"p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": 3.0} for k in ("ours", "device")}
    return {"chunk_bytes": chunk, "fill": fill, "hits": hits,
            "disk": {"write_dsync_Bps": 3e8, "write_Bps": 6e8},
            "dram": {"rss_peak": 2 << 30, "rss_start": 1 << 30, "index_end": index_used,
                     "data_used_end": data_used},
            "dram_per_gib_held": 64 * MiB, "device_bytes_per_stored_byte": 1.2,
            "defrag_share": 0.01, "touch_bytes_per_stored_byte": 0.06}


def test_the_model_check_is_sizes_per_chunk_figures():
    layout = size.chunk_layout(4 * MiB, md=False, max_record_size=8 * MiB)
    r = run_doc(4 * MiB, 10, 10 * layout["device_bytes"], 10 * layout["records"] * 64)
    pi, mi, pd, md = scale_bench.model_check(r)
    assert (pi, pd) == (mi, md)
    off = run_doc(4 * MiB, 10, 11 * layout["device_bytes"], 10 * layout["records"] * 64)
    assert scale_bench.model_check(off)[2] < scale_bench.model_check(off)[3]


def test_the_record_has_a_row_a_size_and_the_model_check():
    doc = {"provenance": {"date": "2026-12-06", "command": "python scale_bench.py",
                          "commit": "abc", "machine": "m"},
           "namespace": {"files": 1, "bytes": 32 << 30, "direct_files": "true",
                         "disable_odsync": "true"},
           "capacity_bytes": 16 << 30, "runs": [run_doc(MiB, 5, 5 * (MiB + 192), 5 * 64),
                                                run_doc(4 * MiB, 5, 1, 1)]}
    text = scale_bench.markdown(doc)
    assert "| 1024 KiB | 100 / 100 | 0, 0 | 1.00, 0.00 |" in text
    assert "| 4096 KiB |" in text and "300 / 600" in text
    assert "(1.000)" in text  # the 1 MiB chunks' model check, exact


def test_one_short_run_through_every_step(aerospike_hosts, tmp_path):
    """On the session's server (the test server, or a real one): a tenth of the
    capacity offered in 256 KiB chunks, the DRAM sampled from a process that is
    there (this one: the server may be elsewhere), a record written."""
    pid = tmp_path / "pid"
    pid.write_text(str(os.getpid()))
    out = tmp_path / "record"
    where = disk_dir()
    try:
        scale_bench.main(["--hosts", aerospike_hosts, "--chunks", "256K", "--factor", "0.05",
                          "--writers", "2", "--reads", "5", "--device-dir", where,
                          "--device-file-size", "16M", "--pid-file", str(pid),
                          "--interval", "1", "--out", str(out)])
    finally:
        os.rmdir(where)
    doc = json.loads((out / "scale.json").read_text())
    (r,) = doc["runs"]
    assert r["fill"]["stored"] == r["fill"]["offered"] > 0
    assert r["hits"]["wrong_bytes"] == 0 and r["hits"]["ours"]["n"] > 0
    assert r["disk"]["write_Bps"] > 0 and r["dram"]["rss_peak"] > 0
    assert "| 256 KiB |" in (out / "scale.md").read_text()
