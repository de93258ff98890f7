"""End to end through LMCache's multiprocess server: `lmcache server` with our L2
adapter stores KV that a vLLM-style client hands it, is killed, and a new server
(empty L1) serves the same chunks from Aerospike, byte for byte.

Per adapter (`plugin`, `native_plugin`), each run in its own set:
1. First server: the client stores N chunks. The server writes them to L2 on its
   own, after COMMIT_STORE has answered, and does not flush on exit: stopping
   only joins the store thread and drops what is in flight
   (StorageManager.close, v1/distributed/storage_manager.py:1257-1275;
   StoreController.stop and _cleanup_in_flight_tasks,
   v1/distributed/storage_controllers/store_controller.py:312-327, 798-812). So the
   test waits until the store controller is idle and a scan of the set, by our own
   extension, finds the N chunks; then it SIGKILLs the server.
2. Second server, same spec: a new process whose L1 holds nothing. A fresh client
   (zeroed KV cache) looks the tokens up: every chunk is a hit, which can only
   come from L2, and the retrieved bytes equal the stored ones. Tokens never
   stored miss. The plugin adapter's own counters (in /status) show the load:
   exactly N chunks' bytes read, nothing written.
"""

import os
import uuid

import pytest
import torch

from tests.e2e.mp_server import Engine, running, spec, wait_until

from lmcache_aerospike import _native

MODEL = "lmca-e2e-model"
CHUNK = 256                      # tokens per LMCache chunk (--chunk-size)
BLOCK = 16                       # tokens per paged block (vLLM's block size)
LAYERS, HEADS, HEAD = 4, 8, 128  # bf16: 64 KiB per block and layer
DTYPE = torch.bfloat16
N_CHUNKS = 3
TOKENS = N_CHUNKS * CHUNK
BLOCKS = TOKENS // BLOCK
# The object LMCache stores per chunk: [2, layers, chunk, heads * head] (engine-driven
# registration, v1/multiprocess/transfer_context/worker_transfer.py:830-837). 4 MiB:
# more than one Aerospike record's worth of segment, so each chunk is segmented.
CHUNK_BYTES = 2 * LAYERS * CHUNK * HEADS * HEAD * DTYPE.itemsize
PERSIST_TIMEOUT_S = 30.0


def kv_caches(num_blocks: int) -> dict[str, torch.Tensor]:
    return {f"model.layers.{i}.self_attn.attn": torch.zeros(
        num_blocks, 2, HEADS, BLOCK, HEAD, dtype=DTYPE) for i in range(LAYERS)}


def chunks_in_set(hosts: str, setname: str) -> int:
    """Chunks in the set, by a scan of our own extension (not through LMCache):
    named or not (send_key is off by default, so the adapters' are unnamed)."""
    c = _native.Connector(hosts=hosts, set=setname)
    try:
        named, unnamed = c.list_keys()
        return len(named) + unnamed
    finally:
        c.close()


@pytest.mark.parametrize("kind", ["plugin", "native_plugin"])
def test_kv_stored_before_a_restart_is_loaded_from_aerospike_after_it(
        kind, aerospike_hosts, tmp_path):
    setname = f"lmca_srv_{uuid.uuid4().hex[:8]}"
    l2 = spec(kind, aerospike_hosts, setname)
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    base = int(torch.randint(1, 20000, (1,), generator=gen))
    tokens = list(range(base, base + TOKENS))
    never_stored = list(range(base + 40000, base + 40000 + TOKENS))

    # First server: store the KV of `tokens`, held in blocks 0..BLOCKS-1.
    src = kv_caches(BLOCKS)
    for t in src.values():
        t.copy_(torch.randn(t.shape, generator=gen).to(DTYPE))
    reference = {name: t.clone() for name, t in src.items()}
    src_blocks = list(range(BLOCKS))

    with running(l2, tmp_path / "first.log", chunk_size=CHUNK) as first:
        with Engine(first.url, src, model_name=MODEL, block_size=BLOCK) as engine:
            assert engine.chunk_size == CHUNK
            assert engine.store(tokens, src_blocks), first.tail()
        # Asynchronous L2 writes: wait until they are done and in Aerospike.
        persisted = wait_until(lambda: first.store_idle() and chunks_in_set(
            aerospike_hosts, setname) == N_CHUNKS, PERSIST_TIMEOUT_S, 0.2)
        assert persisted, (f"{chunks_in_set(aerospike_hosts, setname)} of {N_CHUNKS} chunks "
                           f"in {setname}; store controller "
                           f"{first.storage()['store_controller']}\n{first.tail()}")
        if kind == "plugin":
            status = first.l2_status()
            assert status["set"] == setname, status
            assert status["engine_bytes_written"] == N_CHUNKS * CHUNK_BYTES, status
        first_pid = first.pid
        first.kill()
        assert first.process.returncode == -9

    # Second server: new process, L1 empty; the chunks can only come from L2.
    with running(l2, tmp_path / "second.log", chunk_size=CHUNK) as second:
        assert second.pid != first_pid
        l1 = second.storage()["l1_manager"]
        assert l1["total_object_count"] == 0 and l1["memory_used_bytes"] == 0, l1

        dst = kv_caches(BLOCKS + 8)  # a new worker's cache, all zeros
        dst_blocks = list(range(BLOCKS + 8 - 1, 8 - 1, -1))  # elsewhere, reversed
        with Engine(second.url, dst, model_name=MODEL, block_size=BLOCK) as engine:
            miss = "miss-" + uuid.uuid4().hex
            assert engine.lookup(never_stored, miss) == 0, second.tail()
            engine.end(miss)

            rid = "load-" + uuid.uuid4().hex
            hit = engine.lookup(tokens, rid)
            assert hit == TOKENS, f"{hit} of {TOKENS} tokens found\n{second.tail()}"
            assert engine.retrieve(tokens, dst_blocks, rid), second.tail()
            engine.end(rid)

        for name, want in reference.items():
            got = dst[name][dst_blocks]
            assert torch.equal(got.view(torch.uint8), want[src_blocks].view(torch.uint8)), (
                f"{name}: retrieved bytes differ from the stored ones")
        untouched = [b for b in range(BLOCKS + 8) if b not in dst_blocks]
        assert all(not t[untouched].any() for t in dst.values())

        if kind == "plugin":  # native_plugin's status carries no counters
            status = second.l2_status()
            assert status["engine_bytes_read"] == N_CHUNKS * CHUNK_BYTES, status
            assert status["engine_bytes_written"] == 0, status
