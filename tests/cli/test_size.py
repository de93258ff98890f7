"""`lmcache-aerospike size`: a cluster planned from a model's KV shape, offline.
The chunk's split is the engine's own planner (checked against a Connector's
plan on the session's server), every per-node figure follows from the chunk and
the cluster's shape, and bad input is a usage error naming the flag."""

import json

import pytest

from lmcache_aerospike import _native
from lmcache_aerospike.cli import main, size

MiB = 1 << 20
LLAMA_8B = ["--layers", "32", "--kv-heads", "8", "--head-size", "128", "--dtype", "bf16"]


def planned(capsys, *argv):
    code = main(["size", "--json", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def refused(capsys, *argv):
    code = main(["size", *argv])
    out, err = capsys.readouterr()
    assert code == 2, out
    return err


def test_a_chunk_is_k_and_v_of_every_layer_for_its_tokens(capsys):
    r = planned(capsys, *LLAMA_8B, "--tokens", "1M")
    # 2 (K, V) x 32 layers x 256 tokens x 8 heads x 128 x 2 bytes: 128 KiB a token
    assert r["chunk_bytes"] == 32 * MiB
    assert r["chunks"] == -(-1_000_000 // 256)
    mla = planned(capsys, "--layers", "61", "--head-size", "576", "--mla", "--tokens", "1M")
    assert mla["chunk_bytes"] == 61 * 256 * 576 * 2


def test_the_split_is_the_engines_plan(capsys, aerospike_hosts):
    conn = _native.Connector(hosts=aerospike_hosts, namespace="lmcache")
    try:
        for chunk in (256 << 10, 1 * MiB, 4 * MiB, 32 * MiB):
            nseg, seg_b, last_b = conn.plan(chunk)
            assert _native.plan_chunk(chunk, max_record_size=conn.limits()["server_cap"]) \
                == (nseg, seg_b, last_b)
    finally:
        conn.close()
    layout = size.chunk_layout(32 * MiB, md=True, max_record_size=8 * MiB)
    nseg, seg_b, last_b = _native.plan_chunk(32 * MiB)
    assert layout["records"] == nseg + 1 and layout["segments"] == nseg
    assert layout["device_bytes"] >= 32 * MiB
    assert size.chunk_layout(1 * MiB, md=True, max_record_size=8 * MiB)["records"] == 1


def test_per_node_figures_follow_the_cluster_shape(capsys):
    one = planned(capsys, *LLAMA_8B, "--tokens", "100M")
    three = planned(capsys, *LLAMA_8B, "--tokens", "100M", "--nodes", "3",
                    "--replication-factor", "2")
    per_chunk = one["chunk"]["records"]
    assert one["per_node"]["records"] == one["chunks"] * per_chunk
    assert one["per_node"]["index_bytes"] == one["per_node"]["records"] * size.INDEX_BYTES
    # two copies over three nodes: each node holds two thirds of the records
    assert three["per_node"]["records"] == -(-one["chunks"] * per_chunk * 2 // 3)
    assert one["per_node"]["device_bytes"] == -(-one["per_node"]["device_used_bytes"] * 100 // 50)
    at_40 = planned(capsys, *LLAMA_8B, "--tokens", "100M", "--evict-used-pct", "40")
    assert at_40["per_node"]["device_bytes"] > one["per_node"]["device_bytes"]


def test_dram_is_the_index_and_the_caches_not_the_data(capsys):
    r = planned(capsys, *LLAMA_8B, "--tokens", "20M", "--files-per-node", "4")
    n = r["per_node"]
    assert n["files"] == 4 and n["dram"]["post_write_cache"] == 4 * 256 * MiB
    assert n["dram_bytes"] == sum(n["dram"].values())
    # 20 million tokens of 128 KiB each is over 2 TiB; DRAM stays a few GiB
    assert n["device_used_bytes"] > 2 << 40 and n["dram_bytes"] < 4 << 30


def test_a_device_is_at_most_2_tib_and_a_node_has_at_most_128(capsys):
    r = planned(capsys, *LLAMA_8B, "--tokens", "100M")
    n = r["per_node"]
    assert n["files"] == -(-n["device_bytes"] // size.MAX_DEVICE_BYTES)
    assert n["file_bytes"] <= size.MAX_DEVICE_BYTES and r["problems"] == []
    big = planned(capsys, *LLAMA_8B, "--tokens", "10G")
    assert big["per_node"]["files"] == size.MAX_DEVICES
    assert "nodes or more" in big["problems"][0]


def test_bandwidth_for_a_rate_of_stores_and_hits(capsys):
    r = planned(capsys, *LLAMA_8B, "--tokens", "1G", "--nodes", "4", "--replication-factor", "2",
                "--stores-per-second", "100", "--hits-per-second", "1000")
    n, chunk = r["per_node"], r["chunk"]
    assert n["store_write_Bps"] == pytest.approx(100 * chunk["device_bytes"] * 2 / 4)
    assert n["touch_write_Bps"] == pytest.approx(n["store_write_Bps"])
    assert n["hit_read_Bps"] == pytest.approx(1000 * r["chunk_bytes"] / 4)


def test_nsups_cut_is_as_fine_as_the_writes_allow(capsys):
    """evict-tenths-pct: four times a second's writes (stores and the moves the
    touch budget allows) over the records a node holds, from 1 % to the recipe's
    30 %; without a rate, the recipe's."""
    base = [*LLAMA_8B, "--tokens", "10M", "--nodes", "4", "--replication-factor", "2"]
    r = planned(capsys, *base, "--stores-per-second", "100")
    records = r["per_node"]["records"]
    written = 100 * r["chunk"]["records"] * 2 / 4 * 2  # moves as many as stores
    assert r["evict_tenths_pct"] == max(10, -(-4000 * written // records))
    assert f"evict-tenths-pct {r['evict_tenths_pct']}" in r["settings"]
    assert 10 < r["evict_tenths_pct"] < 300
    assert planned(capsys, *base)["evict_tenths_pct"] == 300
    assert planned(capsys, *base, "--stores-per-second", "0.001")["evict_tenths_pct"] == 10
    assert planned(capsys, *base, "--stores-per-second", "1e9")["evict_tenths_pct"] == 300


def test_a_hugging_face_config_gives_the_shape(capsys, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"num_hidden_layers": 28, "num_attention_heads": 28,
                               "num_key_value_heads": 4, "hidden_size": 3584,
                               "torch_dtype": "bfloat16"}))
    r = planned(capsys, "--model-config", str(cfg), "--tokens", "1M")
    assert r["model"]["head_size"] == 128 and r["model"]["kv_heads"] == 4
    assert r["chunk_bytes"] == 2 * 28 * 256 * 4 * 128 * 2


def test_the_text_names_each_figure_and_the_settings(capsys):
    assert main(["size", *LLAMA_8B, "--tokens", "10G", "--nodes", "3",
                 "--replication-factor", "2"]) == 0
    out = capsys.readouterr().out
    for word in ("index RAM", "DRAM per GiB held", "direct-files true", "evict-used-pct 50",
                 "filesize"):
        assert word in out


@pytest.mark.parametrize("argv, named", [
    (["--tokens", "1M"], "--layers"),
    ([*LLAMA_8B, "--tokens", "many"], "many"),
    ([*LLAMA_8B, "--tokens", "1M", "--dtype", "int3"], "--dtype int3"),
    ([*LLAMA_8B, "--tokens", "1M", "--tp", "3"], "--tp 3"),
    ([*LLAMA_8B, "--tokens", "1M", "--replication-factor", "3"], "--replication-factor 3"),
    ([*LLAMA_8B, "--tokens", "1M", "--evict-used-pct", "120"], "120"),
    (["--model-config", "/nonexistent.json", "--tokens", "1M"], "/nonexistent.json"),
])
def test_bad_input_is_a_usage_error_naming_it(capsys, argv, named):
    assert named in refused(capsys, *argv)
