"""The HiCache backend (lmcache_aerospike.hicache) through SGLang's own code: built
by its StorageBackendFactory's `dynamic` loading, on its host pools (MHA and MLA,
every layout), with the storage config SGLang hands it. Each test uses a set of
its own; run with AEROSPIKE_TEST_HOSTS to use a real server."""

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import info
from tests.sglang.harness import (
    MHA_LAYOUTS, MLA_LAYOUTS, MODEL, PAGE, backend, host_pool, page_bytes,
    pages, setname, storage_config,
)

import torch  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage  # noqa: E402

from lmcache_aerospike import _native  # noqa: E402
from lmcache_aerospike.hicache import AerospikeHiCacheStorage  # noqa: E402


@pytest.fixture
def make(aerospike_hosts):
    """make(layout, mla=False, **config) -> (backend, pool); closed afterwards."""
    made = []

    def make_one(layout="page_first", mla=False, setname_=None, pool=None, **config):
        pool = pool if pool is not None else host_pool(layout, mla)
        b = backend(storage_config(aerospike_hosts, setname_ or make_one.set, mla=mla, **config),
                    pool)
        made.append(b)
        return b, pool

    make_one.set = setname()
    yield make_one
    for b in made:
        b.close()


def stored_keys(hosts, setname_):
    c = _native.Connector(hosts=hosts, set=setname_)
    try:
        return sorted(r["key"] for r in c.scan())
    finally:
        c.close()


def batches(native):
    """Batch requests each node has taken (a real server's statistic, which the test
    server keeps too)."""
    return [int(dict(kv.split("=", 1) for kv in answer.split(";"))["batch_index_initiate"])
            for _, _, answer in native.info("statistics")]


# -- SGLang's interface ------------------------------------------------------------------


def test_the_factory_builds_it_from_the_extra_config(make):
    b, _ = make()
    assert type(b) is AerospikeHiCacheStorage and isinstance(b, HiCacheStorage)
    # Nothing of SGLang's ABC left abstract: the factory could instantiate it.
    assert not getattr(AerospikeHiCacheStorage, "__abstractmethods__", set())


@pytest.mark.parametrize("extra,named", [
    ({"namspace": "lmcache"}, "hicache-storage-backend-extra-config.namspace: unknown key "
                              "(did you mean namespace?)"),
    ({"read_timeout_ms": "soon"}, 'hicache-storage-backend-extra-config.read_timeout_ms="soon"'),
    ({"num_workers": 0}, "hicache-storage-backend-extra-config.num_workers=0"),
])
def test_a_bad_setting_is_a_config_error_naming_it(aerospike_hosts, extra, named):
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    config = storage_config(aerospike_hosts, setname())
    config.extra_config.update(extra)
    with pytest.raises(_native.ConfigError) as e:
        StorageBackendFactory.create_backend("dynamic", config, None)
    assert named in str(e.value)


def test_hosts_are_required(aerospike_hosts, monkeypatch):
    monkeypatch.delenv("LMCACHE_AEROSPIKE_HOSTS", raising=False)
    config = storage_config(aerospike_hosts, setname())
    del config.extra_config["hosts"]
    with pytest.raises(_native.ConfigError, match="hicache-storage-backend-extra-config.hosts: "
                                                  "required"):
        AerospikeHiCacheStorage(config, {})


def test_settings_fall_back_to_the_environment(aerospike_hosts, monkeypatch):
    monkeypatch.setenv("LMCACHE_AEROSPIKE_HOSTS", aerospike_hosts)
    config = storage_config(aerospike_hosts, setname())
    del config.extra_config["hosts"]
    b = AerospikeHiCacheStorage(config, {})
    try:
        assert b.settings.hosts == aerospike_hosts
    finally:
        b.close()


def test_an_unreachable_server_is_a_typed_error():
    config = storage_config("127.0.0.1:1", setname(), connect_timeout_ms=300)
    with pytest.raises(_native.ConnectionError, match="127.0.0.1:1"):
        AerospikeHiCacheStorage(config, {})


# -- zero-copy pages (interface_v1) ------------------------------------------------------


@pytest.mark.parametrize("mla,layout", [(False, x) for x in MHA_LAYOUTS] +
                                       [(True, x) for x in MLA_LAYOUTS])
def test_pages_round_trip_through_the_host_pools(make, mla, layout):
    """Pages written from one pool are read into another at other indices, bit for
    bit, for every layout SGLang's host pools have."""
    writer, src = make(layout, mla)
    reader, dst = make(layout, mla)
    _, keys = pages(5)
    at, to = src.alloc(5 * PAGE), dst.alloc(7 * PAGE)[2 * PAGE:]
    assert writer.batch_set_v1(keys, at) == [True] * 5
    assert reader.batch_exists(keys) == 5
    assert reader.batch_get_v1(keys, to) == [True] * 5
    assert page_bytes(dst, to, 5) == page_bytes(src, at, 5)


def test_a_page_is_stored_as_the_pools_regions(make, aerospike_hosts):
    """MHA page_first: K and V of a page, each one chunk, read and written in place
    (the engine takes slices of the pool's own memory)."""
    b, pool = make("page_first", send_key=True)
    _, keys = pages(1)
    at = pool.alloc(PAGE)
    assert b.batch_set_v1(keys, at) == [True]
    ptrs, sizes = pool.get_page_buffer_meta(at)
    assert len(ptrs) == 2 and sizes[0] == sizes[1]
    names = [f"{MODEL}@sglang@page_first-bfloat16@tp0of1@{keys[0]}@{j}" for j in (0, 1)]
    assert stored_keys(aerospike_hosts, make.set) == names
    for name, ptr, size in zip(names, ptrs, sizes):
        got = bytearray(size)
        assert b.native.get(name, got) == size
        base = pool.kv_buffer.data_ptr()
        flat = pool.kv_buffer.reshape(-1).view(torch.uint8)
        assert bytes(got) == flat[ptr - base:ptr - base + size].numpy().tobytes()


def test_batch_exists_is_the_leading_run_in_one_round_trip(make):
    writer, src = make()
    _, keys = pages(64)
    at = src.alloc(64 * PAGE)
    assert all(writer.batch_set_v1(keys[:40], at[:40 * PAGE]))
    assert all(writer.batch_set_v1(keys[41:], at[41 * PAGE:]))
    before = batches(writer.native)
    assert writer.batch_exists(keys) == 40
    # One batch call: on a cluster, one request per node, sent at once.
    assert [a - b for a, b in zip(batches(writer.native), before)] == [1] * len(before)
    assert writer.batch_exists(keys[41:]) == 23
    assert writer.batch_exists([]) == 0
    assert writer.exists(keys[0]) and not writer.exists(keys[40])


def test_a_page_missing_one_region_is_not_there(make):
    """K stored, V gone: the page is neither found nor loaded."""
    b, pool = make()
    _, keys = pages(3)
    at = pool.alloc(3 * PAGE)
    assert all(b.batch_set_v1(keys, at))
    v_of_page_1 = b._names([keys[1]])[1]
    assert b.native.remove(v_of_page_1)
    assert b.batch_exists(keys) == 1
    assert b.batch_get_v1(keys, pool.alloc(3 * PAGE)) == [True, False, True]


def test_a_record_of_another_size_is_a_miss(make):
    """A chunk under a page's key with the wrong size (another geometry, or a bad
    record) is a miss, and SGLang loads no page after it (it counts the leading
    pages read whole, cache_controller.py:1113-1127)."""
    b, pool = make()
    _, keys = pages(2)
    at = pool.alloc(2 * PAGE)
    assert all(b.batch_set_v1(keys, at))
    b.native.put(b._names([keys[0]])[0], b"x" * 100)
    to = pool.alloc(2 * PAGE)
    assert b.batch_get_v1(keys, to) == [False, True]
    assert page_bytes(pool, to, 2)[1] == page_bytes(pool, at, 2)[1]


def test_pages_already_stored_are_not_written_again(make):
    b, pool = make()
    _, keys = pages(4)
    at = pool.alloc(4 * PAGE)
    assert all(b.batch_set_v1(keys[:2], at[:2 * PAGE]))
    written = b.native.stats()["bytes_written"]
    assert all(b.batch_set_v1(keys, at))
    # Two pages of K and V: tokens, layers, heads, head dim, bf16.
    assert b.native.stats()["bytes_written"] - written == 2 * 2 * PAGE * 2 * 2 * 64 * 2


def test_wrong_indices_fail_the_batch_without_io(make, caplog):
    b, pool = make()
    _, keys = pages(2)
    before = b.native.stats()["submitted"]
    with caplog.at_level(logging.WARNING, "lmcache_aerospike.hicache"):
        assert b.batch_get_v1(keys, pool.alloc(PAGE)) == [False, False]
        assert b.batch_set_v1(keys, pool.alloc(3 * PAGE)) == [False, False]
    assert b.native.stats()["submitted"] == before
    assert "prefetch of 2 pages: 16 host indices for 2 pages of 16 tokens" in caplog.text


def test_a_region_outside_the_pool_is_refused(make):
    """Pointers that do not lie in the registered pool are never read or written."""
    b, pool = make()
    other = host_pool("page_first")
    ptrs, sizes = other.get_page_buffer_meta(other.alloc(PAGE))
    with pytest.raises(ValueError, match="lies outside the pool's 2 host buffers"):
        b._views(ptrs, sizes)
    b.mem_pool_host = other  # as if SGLang had handed another pool's indices
    assert b.batch_set_v1(pages(1)[1], other.alloc(PAGE)) == [False]


# -- keys: model, ranks, layout -----------------------------------------------------------


def _shared(make, writer_config, reader_config, layout="page_first", mla=False,
            reader_layout=None, dtype=None):
    """Whether a reader with `reader_config` finds a writer's pages."""
    w, src = make(layout, mla, **writer_config)
    pool = host_pool(reader_layout or layout, mla, dtype or torch.bfloat16) \
        if dtype or reader_layout else None
    r, _ = make(reader_layout or layout, mla, pool=pool, **reader_config)
    _, keys = pages(2)
    assert all(w.batch_set_v1(keys, src.alloc(2 * PAGE)))
    return r.batch_exists(keys) == 2


def test_tp_ranks_keep_their_own_pages(make):
    assert _shared(make, dict(tp_rank=0, tp_size=2), dict(tp_rank=0, tp_size=2))
    assert not _shared(make, dict(tp_rank=0, tp_size=2), dict(tp_rank=1, tp_size=2))
    assert not _shared(make, dict(tp_rank=0, tp_size=2), dict(tp_rank=0, tp_size=4))


def test_mla_pages_are_shared_by_every_tp_rank(make):
    assert _shared(make, dict(tp_rank=0, tp_size=4), dict(tp_rank=3, tp_size=4), mla=True)
    assert _shared(make, dict(tp_rank=0, tp_size=4), dict(tp_rank=0, tp_size=8), mla=True)


def test_only_the_mla_writer_rank_writes(make):
    """is_storage_writer (hicache_storage.py:68-74): rank 0 writes the shared MLA
    pages; another rank's store is a no-op that reports success."""
    b, pool = make(mla=True, tp_rank=1, tp_size=2)
    _, keys = pages(2)
    at = pool.alloc(2 * PAGE)
    assert b.batch_set_v1(keys, at) == [True, True]
    assert b.batch_set(keys, [pool.get_data_page(int(at[i * PAGE])) for i in (0, 1)])
    assert b.batch_exists(keys) == 0
    b.zero_copy = False  # the copy path's records: none either
    assert b.batch_exists(keys) == 0


def test_pipeline_stages_models_layouts_and_dtypes_do_not_mix(make):
    assert not _shared(make, dict(pp_rank=0, pp_size=2), dict(pp_rank=1, pp_size=2))
    assert not _shared(make, dict(model="a/b"), dict(model="a/c"))
    # Same sizes, bytes in another order.
    assert not _shared(make, {}, {}, reader_layout="page_first_direct")
    assert not _shared(make, {}, {}, reader_layout="page_first", dtype=torch.float16)


def test_model_names_with_at_signs_keep_the_key_parseable(make, aerospike_hosts):
    from lmcache_aerospike.cli.ls import model_of

    b, pool = make(model="org/m@v2", send_key=True)
    assert all(b.batch_set_v1(pages(1)[1], pool.alloc(PAGE)))
    assert {model_of(k) for k in stored_keys(aerospike_hosts, make.set)} == {"org/m%40v2"}


def test_split_heads_name_each_head_group_by_its_lcm_rank(make, aerospike_hosts):
    """tp_lcm_size: a TP2 rank's page_head pages are the union of two TP4 ranks'
    (cache_controller.py:777-788), so a TP4 rank reads its half of them."""
    w, src = make("page_head", tp_rank=0, tp_size=2, send_key=True)
    w.config.should_split_heads, w.config.tp_lcm_size = True, 4
    w.register_mem_pool_host(src)
    _, keys = pages(1)
    assert w.batch_set_v1(keys, src.alloc(PAGE)) == [True]
    shards = {k.split("@")[3] for k in stored_keys(aerospike_hosts, make.set)}
    assert shards == {"tp0of4", "tp1of4"}


# -- the copy path (no interface_v1) ------------------------------------------------------


def test_the_copy_path_stores_flat_pages(make):
    b, pool = make(v1=False)
    assert not b.zero_copy
    _, keys = pages(3)
    at = pool.alloc(3 * PAGE)
    flat = [pool.get_data_page(int(at[i * PAGE])) for i in range(3)]
    assert b.batch_set(keys, flat)
    assert b.batch_exists(keys) == 3
    targets = [pool.get_dummy_flat_data_page() for _ in range(4)]
    got = b.batch_get(keys + [pages(1)[1][0]], targets)
    assert got[3] is None
    assert [g.view(torch.uint8).numpy().tobytes() for g in got[:3]] == \
        [f.view(torch.uint8).numpy().tobytes() for f in flat]
    one = b.get(keys[1])  # no target: a tensor of the pool's dtype
    assert one.dtype == pool.dtype and torch.equal(one.view(torch.int16),
                                                   flat[1].view(torch.int16))
    assert b.set(keys[0], flat[0]) and b.exists(keys[0])


def test_the_two_paths_keep_their_own_records(make):
    """The zero-copy path's regions and the copy path's flat pages are different
    records: each path looks up its own."""
    v1, pool = make()
    copy, _ = make(v1=False, pool=pool)
    _, keys = pages(1)
    assert all(v1.batch_set_v1(keys, pool.alloc(PAGE)))
    assert v1.batch_exists(keys) == 1 and copy.batch_exists(keys) == 0


# -- a full or failing server ---------------------------------------------------------------


def test_a_full_namespace_drops_stores_quietly(make, fixture_only, caplog):
    b, pool = make(backpressure_ms=200)
    _, keys = pages(2)
    assert info(fixture_only, "fixture-fault:kind=result;code=8;op=write") == "ok"
    try:
        with caplog.at_level(logging.WARNING, "lmcache_aerospike.hicache"):
            assert b.batch_set_v1(keys, pool.alloc(2 * PAGE)) == [False, False]
    finally:
        info(fixture_only, "fixture-clear-faults")
    assert "hicache" not in caplog.text  # the engine counts drops and warns itself
    assert b.native.stats()["dropped_full"] >= 1
    assert b.batch_exists(keys) == 0


def test_a_read_error_is_a_miss(make, fixture_only, caplog):
    b, pool = make()
    _, keys = pages(2)
    at = pool.alloc(2 * PAGE)
    assert all(b.batch_set_v1(keys, at))
    assert info(fixture_only, "fixture-fault:kind=drop;op=read") == "ok"
    try:
        with caplog.at_level(logging.WARNING, "lmcache_aerospike.hicache"):
            assert b.batch_get_v1(keys, pool.alloc(2 * PAGE)) == [False, False]
            assert b.batch_exists(keys) == 0
    finally:
        info(fixture_only, "fixture-clear-faults")
    assert "aerospike HiCache: E" in caplog.text  # the engine's typed error
    assert not any(k in caplog.text for k in keys)  # records named by digest, no keys
    assert b.batch_get_v1(keys, pool.alloc(2 * PAGE)) == [True, True]


# -- stats, pools, clear, close --------------------------------------------------------------


def test_get_stats_is_sglangs_storage_metrics_with_the_engines_counters(make):
    from sglang.srt.observability.metrics_collector import StorageMetrics

    b, pool = make(metrics=True)
    _, keys = pages(3)
    assert all(b.batch_set_v1(keys, pool.alloc(3 * PAGE)))
    assert all(b.batch_get_v1(keys, pool.alloc(3 * PAGE)))
    stats = b.get_stats()
    assert isinstance(stats, StorageMetrics)
    assert stats.backup_pgs == [3] and stats.prefetch_pgs == [3]
    assert len(stats.prefetch_bandwidth) == 1 and stats.prefetch_bandwidth[0] > 0
    assert stats.engine["bytes_written"] > 0 and stats.engine["bytes_read"] > 0
    assert b.get_stats().prefetch_pgs == []  # drained, as SGLang's other backends do


def test_hybrid_models_extra_pools_are_refused(make):
    b, pool = make()
    b.register_mem_host_pool_v2(pool, "kv")
    b.on_host_pools_registered()
    b.register_mem_host_pool_v2(pool, "mamba")
    with pytest.raises(_native.ConfigError, match=r"\['mamba'\]: hybrid models' extra pools"):
        b.on_host_pools_registered()


def test_clear_removes_this_models_pages_only(make, aerospike_hosts):
    mine, pool = make(send_key=True)
    theirs, _ = make(send_key=True, model="other", pool=pool)
    _, keys = pages(2)
    at = pool.alloc(2 * PAGE)
    assert all(mine.batch_set_v1(keys, at)) and all(theirs.batch_set_v1(keys, at))
    assert mine.clear() is True
    assert mine.batch_exists(keys) == 0 and theirs.batch_exists(keys) == 2


def test_clear_without_stored_keys_removes_nothing_and_says_why(make, caplog):
    b, pool = make()
    _, keys = pages(1)
    assert all(b.batch_set_v1(keys, pool.alloc(PAGE)))
    with caplog.at_level(logging.WARNING, "lmcache_aerospike.hicache"):
        assert b.clear() is False
    assert "clear needs send_key true" in caplog.text
    assert b.batch_exists(keys) == 1


def test_close_is_idempotent_and_calls_after_it_miss(make):
    b, pool = make()
    b.close()
    b.close()
    assert b.batch_set_v1(pages(1)[1], pool.alloc(PAGE)) == [False]


# -- the operator's tools ----------------------------------------------------------------------


def test_ls_and_inspect_show_the_pages(make, aerospike_hosts):
    b, pool = make(send_key=True)
    _, keys = pages(2)
    assert all(b.batch_set_v1(keys, pool.alloc(2 * PAGE)))
    cli = str(Path(sys.executable).with_name("lmcache-aerospike"))

    def run(*args):
        return subprocess.run([cli, *args, "--hosts", aerospike_hosts, "--set", make.set],
                              capture_output=True, text=True, check=True).stdout

    listed = run("ls", "--model", MODEL).split()
    assert listed == sorted(b._names(keys))
    assert f"{MODEL}\t4 chunks" in run("ls", "--by-model")
    shown = run("inspect", listed[0])
    assert str(PAGE * 2 * 2 * 64 * 2) in shown  # a K region: tokens, layers, heads, dim, bf16


def test_a_strided_target_is_a_miss_not_a_lost_read(make):
    """A read into a copy of a strided tensor would vanish: such a target is refused."""
    b, pool = make(v1=False)
    _, keys = pages(1)
    at = pool.alloc(PAGE)
    page = pool.get_data_page(int(at[0]))
    assert b.batch_set(keys, [page])
    strided = torch.empty(page.numel() * 2, dtype=page.dtype)[::2]
    assert b.batch_get(keys, [strided]) == [None]
    assert b.batch_get(keys, [torch.empty_like(page)])[0] is not None


def test_bad_copy_path_input_is_false_and_stores_nothing(make, caplog):
    b, pool = make(v1=False)
    _, keys = pages(2)
    page = pool.get_data_page(int(pool.alloc(PAGE)[0]))
    with caplog.at_level(logging.WARNING, "lmcache_aerospike.hicache"):
        assert b.set(keys[0], None) is False
        assert b.batch_set(keys, [page]) is False
        assert b.batch_get(keys, [page]) == [None, None]
    assert "batch_set of 1 pages: a value is not a CPU tensor" in caplog.text
    assert "batch_set of 2 pages with 1 values" in caplog.text
    assert "batch_get of 2 pages with 1 targets" in caplog.text
    assert b.batch_exists(keys) == 0


def test_a_record_claiming_another_size_sizes_nothing(make):
    """A get without a target reads into a flat page of the pool's own size, never
    one the server's record claims: a chunk of another size under the key is a miss."""
    b, _ = make(v1=False)
    _, keys = pages(1)
    b.native.put(b._names(keys, flat=True)[0], b"x" * 100)
    assert b.get(keys[0]) is None
