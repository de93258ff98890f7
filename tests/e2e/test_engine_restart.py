"""LMCache's own engine (LMCacheEngine, LMCache 0.5.6) on CPU tensors, with our
RemoteConnector plugin as its remote backend, survives a worker restart.

Engine A stores a 700-token prompt (chunk_size 256: two full chunks and a
partial one of 188 tokens, kept by save_unfull_chunk), its puts land in
Aerospike, then A is destroyed. Engine B, built fresh with the same config and
instance id (the restarted worker), looks the prompt up and retrieves it into
an empty KV buffer at other slots. Every token must hit, the block mapping must
name only the remote backend, our engine's bytes_read must grow by exactly the
stored bytes, and the KV must come back byte for byte.

What the tests rely on in LMCache 0.5.6 (paths under lmcache/v1/):
- LMCacheEngineBuilder.get_or_create(instance_id, config, metadata,
  gpu_connector, broadcast_fn, broadcast_object_fn) (cache_engine.py:2121-2172);
  post_init() creates the StorageManager (cache_engine.py:301-333, 324);
  LMCacheEngineBuilder.destroy(instance_id) closes the engine (its storage
  manager: backends, loop thread) and forgets the instance
  (cache_engine.py:2180-2222, storage_manager.py:1391-1427). destroy logs and
  swallows an error of close (cache_engine.py:2196-2201), so Workers.stop
  checks the outcome itself.
- LMCacheEngine.__init__ forces multiprocessing's start method to "spawn" for
  the whole process (cache_engine.py:140): the fixture puts it back.
- With remote_storage_plugins the backend is named "RemoteBackend-<plugin>"
  (storage_backend/__init__.py:259-285) and connects to plugin://<plugin>
  (remote_backend.py:43-47); failing to create it is only logged (280-285).
- LocalCPUBackend is still created, as the allocator, when local_cpu is false
  (storage_backend/__init__.py:173-189) but keeps nothing: use_hot is
  config.local_cpu (local_cpu_backend.py:65) and batched_submit_put_task
  returns at once without it (189-203); the write-back of remote hits in
  StorageManager.batched_get goes through that same method
  (storage_manager.py:482-516). So no hit can come from the CPU.
- save_unfull_chunk keeps the trailing partial chunk (token_database.py:334-356).
- store() copies with gpu_connector.batched_from_gpu(..., **kwargs) and hands
  the MemoryObjs to StorageManager.batched_put (cache_engine.py:569, 575);
  retrieve() gets a block mapping per backend and batched_get()s each
  (cache_engine.py:1780-1789), copies with batched_to_gpu(..., **kwargs)
  (935) and drops its references (948-964).
- Remote puts are asynchronous (run_coroutine_threadsafe on the storage
  manager's loop), and a batched put never enters RemoteBackend.put_tasks
  (remote_backend.py:282-340; only the single submit_put_task adds keys, 254):
  the test waits for lookup to find all tokens and for the MemoryObjs to come
  back, which InstrumentedRemoteConnector.batched_put does once our
  batched_put returns (instrumented_connector.py:174-189).
- save_chunk_meta is extra_config "save_chunk_meta" (default True) or
  use_layerwise (connector/base_connector.py:55-59); without it a partial
  chunk is rebuilt by reshape_partial_chunk (base_connector.py:86-138), which
  returns full chunks unchanged (104-106).
- MLA: metadata.use_mla gives MemoryFormat.KV_MLA_FMT (cache_engine.py:210-211,
  base_connector.py:62-64) and shapes [1, layers, tokens, hidden] for
  kv_shape (layers, 1, chunk, 1, head_size) (metadata.py:87-114);
  save_only_first_rank defaults to use_mla (cache_engine.py:117-120), so the
  MLA retrieve goes through _broadcast_or_receive_memory_objs as rank 0 of
  one (cache_engine.py:881-893, 1845-1944).
"""

import os

os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")  # no usage telemetry from tests
os.environ.setdefault("DO_NOT_TRACK", "1")

import multiprocessing  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("lmcache")

from lmcache_aerospike.lmcache_names import LMCacheEngineBuilder  # noqa: E402
from lmcache.v1.config import LMCacheEngineConfig  # noqa: E402
from lmcache.v1.memory_management import MemoryFormat  # noqa: E402
from lmcache.v1.metadata import LMCacheMetadata  # noqa: E402
from lmcache_aerospike.lmcache_names import RemoteMetadata  # noqa: E402

from lmcache_aerospike import client  # noqa: E402
from tests.e2e.cpu_connector import CPUPagedConnector  # noqa: E402

CHUNK = 256
TOKENS = 700                    # 256 + 256 + a partial chunk of 188
LAYERS, HEADS, HEAD_SIZE = 2, 2, 16
SLOTS = 1024                    # the paged KV buffer holds more tokens than the prompt
REMOTE = "RemoteBackend-aerospike"
PUT_DEADLINE_S = 20


def engine_config(hosts, setname, extra=None):
    prefix = "remote_storage_plugin.aerospike."
    extra_config = {prefix + "module_path": "lmcache_aerospike.adapter",
                    prefix + "class_name": "AerospikeConnectorAdapter",
                    prefix + "hosts": hosts,
                    prefix + "default_ttl_seconds": 60,
                    prefix + "set": setname}
    extra_config.update(extra or {})
    # remote_url stays unset: RemoteBackend builds plugin://aerospike itself.
    return LMCacheEngineConfig.from_defaults(
        chunk_size=CHUNK, local_cpu=False, max_local_cpu_size=0.02,
        save_unfull_chunk=True, remote_storage_plugins=["aerospike"],
        extra_config=extra_config)


def engine_metadata(use_mla=False):
    kv, heads = (1, 1) if use_mla else (2, HEADS)
    return LMCacheMetadata(model_name="lmca-e2e", world_size=1, local_world_size=1,
                           worker_id=0, local_worker_id=0, kv_dtype=torch.bfloat16,
                           kv_shape=(LAYERS, kv, CHUNK, heads, HEAD_SIZE),
                           use_mla=use_mla, chunk_size=CHUNK)


def kv_buffer(md, random):
    """The worker's KV cache: [kv_size, layers, slots, hidden], random bits or zeros."""
    shape = (md.kv_shape[1], LAYERS, SLOTS, md.kv_shape[3] * HEAD_SIZE)
    if not random:
        return torch.zeros(shape, dtype=torch.bfloat16)
    bits = torch.randint(-(1 << 15), 1 << 15, shape, dtype=torch.int16)
    return bits.view(torch.bfloat16)


def bits(t):
    """A bf16 tensor as its int16 bit patterns, to compare byte for byte."""
    return t.contiguous().view(torch.int16)


def allocated(engine):
    """Bytes the engine's LocalCPUBackend has handed out and not had back."""
    cpu = engine.storage_manager.storage_backends["LocalCPUBackend"]
    return cpu.memory_allocator.pin_allocator.total_allocated_size


class Workers:
    """Starts and restarts LMCache engines under one instance id, and stops
    whatever a failing test leaves running."""

    def __init__(self, hosts):
        self.hosts = hosts
        self.set = "lmca_e2e_" + uuid.uuid4().hex[:8]
        self.instance_id = "lmca-e2e-" + uuid.uuid4().hex[:8]

    def start(self, config, md, kv):
        engine = LMCacheEngineBuilder.get_or_create(
            self.instance_id, config, md, CPUPagedConnector(kv),
            lambda tensor, src: None,   # one rank: nothing to broadcast
            lambda obj, src: obj)
        engine.post_init()
        assert engine.storage_manager is not None
        return engine

    def stop(self):
        manager = LMCacheEngineBuilder.get(self.instance_id).storage_manager
        LMCacheEngineBuilder.destroy(self.instance_id)
        assert LMCacheEngineBuilder.get(self.instance_id) is None
        assert not manager.thread.is_alive(), "the storage manager's loop still runs"
        # Our connector closed with it: no engine of ours is left on this set.
        assert [e for e in client._engines.values() if e.settings.set == self.set] == []


@pytest.fixture
def workers(aerospike_hosts):
    start_method = multiprocessing.get_start_method(allow_none=True)
    threads = set(threading.enumerate())
    w = Workers(aerospike_hosts)
    yield w
    if LMCacheEngineBuilder.get(w.instance_id) is not None:
        LMCacheEngineBuilder.destroy(w.instance_id)
    # LMCacheEngine.__init__ forces the "spawn" start method on the whole process.
    multiprocessing.set_start_method(start_method, force=True)
    left = [t for t in threading.enumerate() if t not in threads and not t.daemon]
    assert left == [], f"threads left running: {left}"


def remote_connector(engine):
    """Our connector inside the engine's one remote backend."""
    names = list(engine.storage_manager.storage_backends)
    assert [n for n in names if n.startswith("RemoteBackend")] == [REMOTE], names
    backend = engine.storage_manager.storage_backends[REMOTE]
    assert backend.connection is not None, "the plugin did not connect"
    return backend, backend.connection.getWrappedConnector()


def chunks(engine, tokens):
    return list(engine.token_database.process_tokens(tokens=tokens))


def wait_for_puts(engine, tokens):
    """Remote puts are asynchronous, and a batched put is not in
    RemoteBackend.put_tasks: wait until the engine's lookup finds every token
    in Aerospike and every put has handed its MemoryObjs back (the wrapper
    drops them when our batched_put returns)."""
    deadline = time.monotonic() + PUT_DEADLINE_S
    while time.monotonic() < deadline:
        if engine.lookup(tokens) == len(tokens) and allocated(engine) == 0:
            return
        time.sleep(0.01)
    pytest.fail(f"puts did not finish in {PUT_DEADLINE_S} s: lookup finds "
                f"{engine.lookup(tokens)} of {len(tokens)} tokens, "
                f"{allocated(engine)} bytes still allocated")


def restart_round_trip(workers, extra=None, use_mla=False):
    """Store with engine A, restart, retrieve with engine B. Returns engine B
    and its connector, so a test can check more before the fixture stops it."""
    config = engine_config(workers.hosts, workers.set, extra)
    md = engine_metadata(use_mla)
    tokens = torch.randint(0, 32000, (TOKENS,))

    # -- worker A stores the prompt --------------------------------------------
    kv_a = kv_buffer(md, random=True)
    slots_a = torch.randperm(SLOTS)[:TOKENS]
    engine_a = workers.start(config, md, kv_a)
    _, conn_a = remote_connector(engine_a)
    assert conn_a.settings.set == workers.set
    layout = chunks(engine_a, tokens)
    assert [(s, e) for s, e, _ in layout] == [(0, 256), (256, 512), (512, TOKENS)]
    assert engine_a.lookup(tokens) == 0, "a fresh set already holds the prompt"

    engine_a.store(tokens, slot_mapping=slots_a)
    wait_for_puts(engine_a, tokens)
    token_bytes = conn_a.single_token_size
    stored = 0
    for start, end, key in layout:
        record = conn_a.native.stat(key.to_string())
        assert record is not None, f"chunk {start}:{end} is not in Aerospike"
        assert record["tot_b"] == (end - start) * token_bytes, (start, end, record["tot_b"])
        if conn_a.save_chunk_meta:
            rm = RemoteMetadata.deserialize(record["md"])
            assert rm.length == record["tot_b"] and rm.shapes[0][2] == end - start
        else:
            assert record["md"] == b"", "save_chunk_meta false stored an md"
        stored += record["tot_b"]

    # -- the restart -------------------------------------------------------------
    workers.stop()
    assert conn_a.native.closed

    kv_b = kv_buffer(md, random=False)
    slots_b = torch.randperm(SLOTS)[:TOKENS]
    assert not torch.equal(slots_a, slots_b)
    engine_b = workers.start(config, md, kv_b)
    assert engine_b is not engine_a
    _, conn_b = remote_connector(engine_b)
    assert conn_b.native is not conn_a.native
    assert conn_b.save_chunk_meta == conn_a.save_chunk_meta

    # -- worker B finds and loads it, from Aerospike ------------------------------
    assert engine_b.lookup(tokens) == TOKENS
    hit, mapping = engine_b.storage_manager.batched_contains([k for _, _, k in layout])
    assert hit == len(layout) and list(mapping) == [REMOTE], mapping

    reshaped = []
    if not conn_b.save_chunk_meta:
        reshape = conn_b.reshape_partial_chunk

        def spy(obj, nbytes):
            out = reshape(obj, nbytes)
            reshaped.append((nbytes, tuple(out.get_shape())))
            return out
        conn_b.reshape_partial_chunk = spy

    read_before = conn_b.native.stats()["bytes_read"]
    ret = engine_b.retrieve(tokens, slot_mapping=slots_b)
    assert ret.dtype == torch.bool and int(ret.sum()) == TOKENS, int(ret.sum())
    assert conn_b.native.stats()["bytes_read"] - read_before == stored
    assert allocated(engine_b) == 0, "engine B holds MemoryObjs after retrieve"

    # Byte for byte, each chunk on its own (the partial one is the last).
    for start, end, _ in layout:
        assert torch.equal(bits(kv_b[:, :, slots_b[start:end]]),
                           bits(kv_a[:, :, slots_a[start:end]])), f"tokens {start}:{end}"
    unused = torch.ones(SLOTS, dtype=torch.bool)
    unused[slots_b] = False
    assert not bits(kv_b[:, :, unused]).any(), "retrieve wrote outside the prompt's slots"

    if not conn_b.save_chunk_meta:
        # Every chunk went through reshape_partial_chunk; only the last changed shape.
        kv_size, hidden = md.kv_shape[1], md.kv_shape[3] * HEAD_SIZE
        assert sorted(reshaped) == sorted(
            ((e - s) * token_bytes, (kv_size, LAYERS, e - s, hidden)) for s, e, _ in layout
        ), reshaped

    for _, _, key in layout:  # leave nothing behind (the TTL would, in 60 s)
        conn_b.remove_sync(key)
    return engine_b, conn_b


def test_a_restarted_engine_loads_every_chunk_from_aerospike(workers):
    # The partial chunk comes back by the md stored with it (save_chunk_meta).
    engine, conn = restart_round_trip(workers)
    assert conn.save_chunk_meta and engine.config.remote_url is None


def test_without_chunk_meta_the_partial_chunk_is_rebuilt_by_reshape(workers):
    engine, conn = restart_round_trip(workers, extra={"save_chunk_meta": False})
    assert not conn.save_chunk_meta


def test_mla_chunks_survive_a_restart(workers):
    engine, conn = restart_round_trip(workers, use_mla=True)
    assert conn.meta_fmt == MemoryFormat.KV_MLA_FMT and engine.fmt == MemoryFormat.KV_MLA_FMT
    assert conn.meta_shapes == [torch.Size([1, LAYERS, CHUNK, HEAD_SIZE])]
    # One rank of an MLA model: retrieve went through the leader's broadcast.
    assert engine.save_only_first_rank and not engine._is_passive()
