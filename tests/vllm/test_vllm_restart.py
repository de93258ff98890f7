"""vLLM + LMCache with this project as the remote tier: cache hits across a worker
restart, on every surface vLLM reaches.

- remote: LMCache's engine inside vLLM (LMCacheConnectorV1), our RemoteConnector
  plugin as its only store;
- storage: the same with our storage plugin;
- mp-plugin, mp-native_plugin: vLLM's LMCacheMPConnector to `lmcache server`,
  whose L2 adapter is ours, and the server restarted between the runs.

Per surface, in a set of its own (the `restarted` fixture): run 1, a vLLM process
(lmcache_aerospike.vllm_run), generates two prompts of 4 chunks and a tail and
waits until their chunks are in Aerospike, then ends. Between the runs the chunks
of prompt 1 get the bytes of prompt 0's (same size, valid records, another
prompt's KV). Run 2, a fresh vLLM process (and a fresh server, L1 empty),
generates both prompts again.

- Prompt 0: run 2 loads every full chunk from Aerospike (num_cached_tokens 1024,
  vLLM's external prefix-cache hits 1024, nothing from vLLM's own cache) and its
  output tokens and logprobs are run 1's, to the bit. Bit equality is possible
  because both runs prefill the tail in a step of its own (vllm_run's docstring).
- Prompt 1, the control: its chunks, valid records holding prompt 0's KV, are
  loaded, and the output changes: the KV was really used.

Each vLLM run takes 30 s (in-process surfaces: one process) to 90 s (mp: vLLM's
engine core and worker processes) on two cores.
"""

import importlib.util
import uuid

import pytest

from lmcache_aerospike import _native, mp_server, vllm_run

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None or importlib.util.find_spec("lmcache") is None,
    reason="needs vLLM and LMCache: .venv-vllm (scripts/bootstrap.sh vllm)")

CHUNK = vllm_run.CHUNK_SIZE
PROMPT_TOKENS = vllm_run.PROMPT_TOKENS  # 4 chunks and a tail
FULL = PROMPT_TOKENS // CHUNK * CHUNK   # tokens in full chunks: what a restart can load
CHECKED, CONTROL = 0, 1                 # the prompts
SURFACES = ["remote", "storage", "mp-plugin", "mp-native_plugin"]
TTL_S = 3600                            # a run killed before its cleanup leaves records an hour


def clear(hosts: str, setname: str) -> None:
    """Removes every record of the set (meta records and segments)."""
    c = _native.Connector(hosts=hosts, set=setname)
    try:
        for rec in c.scan(records=True):
            c.remove_record(rec["digest"])
    finally:
        c.close()


def copy_payloads(hosts: str, setname: str, src: list[str], dst: list[str]) -> None:
    """Chunk dst[i] gets the payload of src[i], keeping its own metadata: valid
    records of the same size, holding another prompt's KV. (Moving a prompt's own
    chunks around would not do: attention takes the cached K and V as a set, and
    the set would stay the same.)"""
    assert len(src) == len(dst) >= 1 and not set(src) & set(dst), (src, dst)
    c = _native.Connector(hosts=hosts, set=setname)
    try:
        for s, d in zip(src, dst):
            s_meta, d_meta = c.stat(s), c.stat(d)
            assert s_meta["tot_b"] == d_meta["tot_b"], (s_meta, d_meta)
            buf = bytearray(s_meta["tot_b"])
            assert c.get(s, buf) == len(buf), s
            c.put(d, buf, md=d_meta["md"], serde=d_meta["serde"] or None,
                  ttl_class=d_meta["ttl_class"] or None)
    finally:
        c.close()


def change_control(hosts: str, setname: str, cold: dict) -> None:
    """The control prompt's chunks get the checked prompt's bytes."""
    copy_payloads(hosts, setname, cold["prompts"][CHECKED]["new_keys"],
                  cold["prompts"][CONTROL]["new_keys"])


def run(surface: str, phase: str, hosts: str, setname: str, model, tmp, **kw) -> dict:
    """One vLLM process generating both prompts; its JSON (vllm_run)."""
    return vllm_run.run(surface, hosts=hosts, setname=setname, model=model,
                        out=tmp / f"{phase}.json", prompts=2, **kw)


def restart_in_process(surface, hosts, setname, model, tmp) -> dict:
    cold = run(surface, "cold", hosts, setname, model, tmp)
    change_control(hosts, setname, cold)
    return {"cold": cold, "warm": run(surface, "warm", hosts, setname, model, tmp)}


def restart_server(kind, hosts, setname, model, tmp) -> dict:
    l2 = mp_server.spec(kind, hosts, setname, send_key=True, default_ttl_seconds=TTL_S)
    with mp_server.running(l2, tmp / "server-1.log", chunk_size=CHUNK) as first:
        cold = run("mp", "cold", hosts, setname, model, tmp, mp_port=first.port)
        # vllm_run waited for the chunks in the set; nothing may be left to store.
        assert first.store_idle(), first.storage()["store_controller"]
    change_control(hosts, setname, cold)
    with mp_server.running(l2, tmp / "server-2.log", chunk_size=CHUNK) as second:
        assert second.pid != first.pid
        warm = run("mp", "warm", hosts, setname, model, tmp, mp_port=second.port)
        return {"cold": cold, "warm": warm, "server_prefetches": second.prefetches(),
                "server_log": second.tail()}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """One tiny model for every run: LMCache's keys name it by its path."""
    return vllm_run.write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module", params=SURFACES)
def restarted(request, aerospike_hosts, model, tmp_path_factory):
    """Run 1, the control's bytes changed, run 2 (after a server restart for mp),
    in a set of its own, removed afterwards."""
    surface = request.param
    setname = f"lmca_vllm_{uuid.uuid4().hex[:8]}"
    tmp = tmp_path_factory.mktemp(surface)
    try:
        if surface.startswith("mp-"):
            runs = restart_server(surface[3:], aerospike_hosts, setname, model, tmp)
        else:
            runs = restart_in_process(surface, aerospike_hosts, setname, model, tmp)
        yield {"surface": surface, **runs}
    finally:
        clear(aerospike_hosts, setname)


def outputs(result: dict, index: int) -> tuple[list, list]:
    p = result["prompts"][index]
    return p["output_token_ids"], p["logprobs"]


def test_a_fresh_vllm_process_loads_every_full_chunk_from_aerospike(restarted):
    cold, warm = restarted["cold"], restarted["warm"]
    assert warm["pid"] != cold["pid"]
    c, w = cold["prompts"][CHECKED], warm["prompts"][CHECKED]

    # Run 1 computed everything and stored every full chunk.
    assert c["num_cached_tokens"] == 0 and c["prefix_cache"]["external_hits"] == 0, c
    assert len(c["new_keys"]) == FULL // CHUNK, (c["new_keys"], cold["log"])

    # Run 2: every full chunk from Aerospike, none from vLLM's own cache, nothing stored.
    assert w["num_cached_tokens"] == FULL, (w, warm["log"])
    assert w["prefix_cache"]["external_hits"] == FULL and w["prefix_cache"]["hits"] == 0, w
    assert w["new_keys"] == [], w["new_keys"]
    if restarted["surface"].startswith("mp-"):
        # The restarted server found the chunks in L2, none in its (empty) L1.
        first = restarted["server_prefetches"][0]
        assert first == {"hits": FULL // CHUNK, "keys": FULL // CHUNK, "l1": 0,
                         "l2": FULL // CHUNK}, restarted["server_log"]
    else:
        assert warm["lmcache_hits"][CHECKED] == {"hit_tokens": FULL, "need_to_load": FULL}

    # The same output, to the bit.
    assert outputs(warm, CHECKED) == outputs(cold, CHECKED)


def test_changed_bytes_in_aerospike_change_the_output(restarted):
    cold, warm = restarted["cold"], restarted["warm"]
    # The changed chunks are valid records (their own metadata, a payload of the
    # same size), so they must be loaded: a miss here would hide the check below.
    assert warm["prompts"][CONTROL]["prefix_cache"]["external_hits"] == FULL, warm["log"]
    assert outputs(warm, CONTROL) != outputs(cold, CONTROL), (
        "run 2 loaded the control's changed chunks and still produced run 1's output")
