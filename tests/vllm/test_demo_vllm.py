"""`lmcache-aerospike demo --engine vllm`, as a user runs it from .venv-vllm: two
vLLM processes, the second taking every full chunk of the prompt from Aerospike."""

import importlib.util
import json
import os
import re
import subprocess
import sys
import uuid

import pytest

from lmcache_aerospike import _native

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None or importlib.util.find_spec("lmcache") is None,
    reason="needs vLLM and LMCache: .venv-vllm (scripts/bootstrap.sh vllm)")

SCRIPT = os.path.join(os.path.dirname(sys.executable), "lmcache-aerospike")


def demo(*argv, timeout=900):
    return subprocess.run([SCRIPT, "demo", "--engine", "vllm", *argv], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_the_restarted_vllm_takes_every_full_chunk_and_answers_the_same(aerospike_hosts):
    setname = "lmca_demo_" + uuid.uuid4().hex[:8]
    # Reads given 10 s, not 1: on a loaded CI machine the test server can stall a
    # read past a second, and a chunk that times out is computed again by vLLM
    # (a short load, below), whose logprobs then differ in the last bits.
    done = demo("--hosts", aerospike_hosts, "--set", setname, "--json",
                "-o", "read_timeout_ms=10000")
    assert done.returncode == 0, done.stderr[-4000:]
    doc = json.loads(done.stdout)
    assert doc["ok"] and doc["stand_in"] is False, doc
    assert doc["tokens"] == 2080 and doc["full_chunks"] == 8 and doc["stored_chunks"] == 8
    assert doc["load_shortfalls"] == [], doc  # every chunk LMCache asked for came back
    assert doc["retrieved_tokens"] == doc["cached_tokens"] == 2048
    assert doc["num_cached_tokens"] == 2048
    assert doc["outputs_identical"] and doc["max_logprob_diff"] == 0.0, doc
    assert doc["pids"][0] != doc["pids"][1]
    assert doc["cold_prefill_s"] > 0 and doc["warm_prefill_s"] > 0
    c = _native.Connector(hosts=aerospike_hosts, set=setname)
    try:
        assert c.list_keys() == ([], 0), "the demo left chunks behind"
    finally:
        c.close()


def test_without_hosts_it_runs_on_the_stand_in_and_says_what_it_retrieved():
    done = demo("--tokens", "600")
    assert done.returncode == 0, done.stderr[-4000:]
    out = done.stdout
    assert re.search(r"no --hosts given: using the bundled protocol test server", out), out
    assert re.search(r"run 1 \(cold, pid \d+\): prefill [\d.]+ s, stored 2 chunks", out), out
    assert re.search(r"run 2: prefill [\d.]+ s; retrieved 512 of 600 prompt tokens "
                     r"from the cache", out), out
    assert "outputs identical" in out, out
