"""SGLang's HiCache controller with our backend as its storage tier, across a
restart: HybridCacheController (the controller SGLang 0.5.23 builds for a model
with one KV pool) attaches the backend through `--hicache-storage-backend dynamic`
and its extra config, its backup thread writes host pages, and a second controller
over fresh host memory (a restarted server) finds them with its query thread and
loads them with its IO thread. What runs is SGLang's code: the factory, the page
hashes, batch_exists, batch_get_v1/batch_set_v1 (or, without interface_v1, its
copy path), the rank reductions and the acks. Only the model is absent: SGLang's
CPU engine needs sgl-kernel's CPU build, which PyPI does not ship (docs/surfaces.md,
"SGLang on a CPU-only machine")."""

import pytest

from tests.sglang.harness import (
    MHA_LAYOUTS, MLA_LAYOUTS, PAGE, Controller, extra_config, host_pool, page_bytes,
    pages, setname,
)

from lmcache_aerospike import _native  # noqa: E402


@pytest.fixture
def controllers():
    made = []

    def make(host, extra_):
        c = Controller(host, extra_)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.mark.parametrize("v1", [True, False], ids=["interface_v1", "copy"])
@pytest.mark.parametrize("mla,layout", [(False, x) for x in MHA_LAYOUTS] +
                                       [(True, x) for x in MLA_LAYOUTS])
def test_pages_survive_a_restart(aerospike_hosts, controllers, mla, layout, v1):
    config = extra_config(aerospike_hosts, setname(), v1)
    first = controllers(host_pool(layout, mla), config)
    assert first.ctl.page_get_func.__name__ == \
        ("_page_get_zero_copy" if v1 else "_generic_page_get")
    tokens, hashes = pages(5)
    at, written = first.backup(tokens, hashes)
    assert written == 5 * PAGE

    second = controllers(host_pool(layout, mla), config)  # fresh host memory
    hit, to, loaded = second.prefetch(tokens)
    assert hit == loaded == 5 * PAGE
    assert page_bytes(second.host, to, 5) == page_bytes(first.host, at, 5)


def test_a_prefix_of_the_pages_is_found_and_loaded(aerospike_hosts, controllers):
    config = extra_config(aerospike_hosts, setname())
    first = controllers(host_pool("page_first"), config)
    tokens, hashes = pages(6)
    at, written = first.backup(tokens[:4 * PAGE], hashes[:4])
    assert written == 4 * PAGE
    second = controllers(host_pool("page_first"), config)
    hit, to, loaded = second.prefetch(tokens)
    assert hit == loaded == 4 * PAGE
    assert page_bytes(second.host, to, 4) == page_bytes(first.host, at, 4)
    assert second.prefetch(pages(2)[0])[0] == 0  # nothing stored: no hit


def test_a_page_lost_after_the_query_ends_the_load_there(aerospike_hosts, controllers):
    """Pages evicted between SGLang's query and its load: the load stops at the
    first missing page, and SGLang keeps what came before it."""
    config = extra_config(aerospike_hosts, setname())
    first = controllers(host_pool("page_first"), config)
    tokens, hashes = pages(5)
    first.backup(tokens, hashes)
    second = controllers(host_pool("page_first"), config)
    backend = second.backend
    lost = backend._names([hashes[3]])
    original = backend.batch_exists

    def exists_then_evict(keys, extra_info=None):
        count = original(keys, extra_info)
        for name in lost:
            backend.native.remove(name)
        return count

    backend.batch_exists = exists_then_evict
    hit, _, loaded = second.prefetch(tokens)
    assert (hit, loaded) == (5 * PAGE, 3 * PAGE)


def test_a_bad_extra_config_fails_the_attach_naming_the_key(aerospike_hosts):
    config = extra_config(aerospike_hosts, setname(), max_conns_per_node=-1)
    with pytest.raises(_native.ConfigError,
                       match=r"hicache-storage-backend-extra-config.max_conns_per_node=\"-1\": "
                             "must not be negative"):
        Controller(host_pool("page_first"), config)


def test_the_writer_rank_rule_comes_from_sglangs_config(aerospike_hosts, controllers):
    """A one-rank MLA deployment: rank 0 is the storage writer, and its pages are
    keyed for every TP rank ("mla")."""
    config = extra_config(aerospike_hosts, setname())
    c = controllers(host_pool("page_first", mla=True), config)
    assert c.backend.config.is_mla_model and c.backend.config.is_storage_writer
    tokens, hashes = pages(2)
    c.backup(tokens, hashes)
    assert all("@mla@" in name for name in c.backend._names(hashes))
    assert c.backend.batch_exists(hashes) == 2


def test_the_readmes_extra_config_works_as_written(aerospike_hosts, controllers):
    """The README's --hicache-storage-backend-extra-config, its seed hosts and set
    pointed at this test's."""
    import json
    import pathlib
    import re

    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    (text,) = re.findall(r"--hicache-storage-backend-extra-config '(\{.*?\})'", readme, re.S)
    config = dict(json.loads(text), hosts=aerospike_hosts, set=setname(),
                  default_ttl_seconds=600)
    assert config["module_path"] == "lmcache_aerospike.hicache" and config["interface_v1"]
    first = controllers(host_pool("page_first"), config)
    tokens, hashes = pages(3)
    at, _ = first.backup(tokens, hashes)
    second = controllers(host_pool("page_first"), config)
    hit, to, loaded = second.prefetch(tokens)
    assert hit == loaded == 3 * PAGE
    assert page_bytes(second.host, to, 3) == page_bytes(first.host, at, 3)


def test_the_readmes_launch_line_parses_with_sglangs_own_arguments():
    """The README's `python -m sglang.launch_server ...` line, through SGLang's own
    argument parser (ServerArgs.add_cli_args): the flags exist and take the values
    written; the extra config itself runs in the test above."""
    import argparse
    import json

    from sglang.srt.server_args import ServerArgs

    from tests.docs.readme_commands import argv, commands

    (line,) = [c for c in commands() if c.startswith("python -m sglang.launch_server")]
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(argv(line)[3:])
    assert args.enable_hierarchical_cache and args.hicache_mem_layout == "page_first"
    assert args.hicache_storage_backend == "dynamic"
    extra = json.loads(args.hicache_storage_backend_extra_config)
    assert extra["module_path"] == "lmcache_aerospike.hicache"
