"""lmcache_aerospike.vllm_run reads LMCache's log for what vLLM's counters do not
say: a load that came back short, whose blocks vLLM computed again."""

from lmcache_aerospike import vllm_run


def test_a_short_load_is_read_from_lmcaches_log(tmp_path):
    log = tmp_path / "run.log"
    # As vllm_v1_adapter.py:876-886 (LMCache 0.5.6) logs it, colours and all.
    log.write_text(
        "\x1b[31m[2026-12-05 16:19:43,329] LMCache ERROR:\x1b[0m Request 0The number of "
        "retrieved tokens is less than the expected number of tokens! This should not happen!\n"
        "\x1b[31m[2026-12-05 16:19:43,329] LMCache ERROR:\x1b[0m Num retrieved tokens: 1536, "
        "num expected tokens: 2048 (vllm_v1_adapter.py:882)\n"
        "LMCache hit tokens: 2048, need to load: 2048\n")
    assert vllm_run._load_shortfalls(log) == [{"retrieved": 1536, "expected": 2048}]
    assert vllm_run._lmcache_hits(log) == [{"hit_tokens": 2048, "need_to_load": 2048}]


def test_a_run_whose_loads_were_whole_has_no_shortfall(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("LMCache hit tokens: 2048, need to load: 2048\nRetrieved 2048 tokens\n")
    assert vllm_run._load_shortfalls(log) == []
    assert vllm_run._load_shortfalls(None) == []
