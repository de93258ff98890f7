"""The configurations users copy work as written: the YAML of spec 4.5.1 (single and
multi-instance) and every YAML and --l2-adapter JSON block of the README, loaded by
LMCache itself. Only the seed hosts are pointed at the test's server, and LMCache's
own local memory size is made small."""

import json
import pathlib
import re
import uuid

import pytest

from tests.glue.harness import KiB, Loop, allocated, cpu_backend, full_chunk, keys, metadata
from tests.glue.spec_configs import SPEC_MULTI_YAML, SPEC_YAML

from lmcache.v1.config import LMCacheEngineConfig  # noqa: E402
from lmcache.v1.storage_backend.remote_backend import RemoteBackend  # noqa: E402

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"

def readme_blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), re.S)


def l2_specs():
    """The JSON of every --l2-adapter '...' in the README."""
    return [json.loads(m) for m in re.findall(r"--l2-adapter '(\{.*?\})'", README.read_text(),
                                              re.S)]


def load_yaml(tmp_path, text, hosts):
    """LMCache's config from the YAML, with every hosts value replaced by ours."""
    text = re.sub(r'(\.hosts: )"[^"]*"', rf'\1"{hosts}"', text)
    path = tmp_path / f"{uuid.uuid4().hex}.yaml"
    path.write_text(text)
    config = LMCacheEngineConfig.from_file(str(path))
    config.max_local_cpu_size = 0.2  # LMCache's memory, not ours: keep the test small
    return config


def round_trip_each_plugin(config):
    """Builds a RemoteBackend per listed plugin, as LMCache's engine does, and puts
    and gets a chunk through each. Returns their connectors."""
    loop, md = Loop(), metadata(64 * KiB, chunk_size=config.chunk_size)
    cpu = cpu_backend(config, md)
    backends, connectors = [], []
    try:
        for name in config.remote_storage_plugins:
            rb = RemoteBackend(config, md, loop.loop, cpu, "cpu", plugin_name=name)
            backends.append(rb)
            assert rb.connection is not None, f"plugin {name} did not connect"
            conn = rb.connection.getWrappedConnector()
            connectors.append(conn)
            (k,) = keys(1)
            obj = full_chunk(cpu, conn)
            rb.submit_put_task(k, obj).result(30)
            got = rb.get_blocking(k)
            assert got is not None and bytes(got.byte_array) == bytes(obj.byte_array)
            got.ref_count_down()
            obj.ref_count_down()
            conn.remove_sync(k)
        assert allocated(cpu) == 0
    finally:
        for rb in backends:
            rb.close()
        cpu.close()
        loop.close()
    return connectors


def test_the_specs_yaml_works_as_written(tmp_path, aerospike_hosts):
    (conn,) = round_trip_each_plugin(load_yaml(tmp_path, SPEC_YAML, aerospike_hosts))
    s = conn.settings
    assert (s.namespace, s.set, s.target_segment_bytes, s.batch_max_in_flight) == \
        ("lmcache", "kv_chunks", 4194304, 64)
    assert (s.executor_threads, s.num_workers, s.commit_level, s.replica) == \
        (16, 16, "all", "sequence")


def test_the_specs_multi_instance_yaml_makes_two_instances(tmp_path, aerospike_hosts):
    config = load_yaml(tmp_path, "chunk_size: 256\nlocal_cpu: false\n" + SPEC_MULTI_YAML,
                       aerospike_hosts)
    primary, dr = round_trip_each_plugin(config)
    assert primary.settings.hosts == dr.settings.hosts == aerospike_hosts


def remote_blocks():
    return [b for b in readme_blocks("yaml") if "remote_storage_plugins" in b]


@pytest.mark.parametrize("index", range(len(remote_blocks())))
def test_the_readmes_remote_connector_yaml_works_as_written(tmp_path, aerospike_hosts, index):
    config = load_yaml(tmp_path, remote_blocks()[index], aerospike_hosts)
    assert round_trip_each_plugin(config)


def test_the_readme_has_the_examples_this_file_checks():
    assert len(remote_blocks()) == 2 and len(l2_specs()) == 2 and len(storage_blocks()) == 1


def storage_blocks():
    return [b for b in readme_blocks("yaml") if re.search(r"^storage_plugins:", b, re.M)]


def test_the_readmes_storage_plugin_yaml_works_as_written(tmp_path, aerospike_hosts):
    from lmcache.v1.storage_backend import CreateStorageBackends

    from lmcache_aerospike.storage import AerospikeStoragePlugin

    config = load_yaml(tmp_path, storage_blocks()[0], aerospike_hosts)
    loop, md = Loop(), metadata(64 * KiB, chunk_size=config.chunk_size)
    backends = CreateStorageBackends(config, md, loop.loop, "cpu")
    try:
        plugin, cpu = backends["aerospike"], backends["LocalCPUBackend"]
        assert isinstance(plugin, AerospikeStoragePlugin)
        (k,) = keys(1)
        obj = full_chunk(cpu, plugin.conn)
        sent = bytes(obj.byte_array)
        for f in plugin.batched_submit_put_task([k], [obj]) or []:
            f.result(30)
        obj.ref_count_down()  # as the storage manager does once submitted
        got = plugin.get_blocking(k)
        assert got is not None and bytes(got.byte_array) == sent
        got.ref_count_down()
        assert plugin.remove(k)
    finally:
        for backend in reversed(backends.values()):
            backend.close()
        loop.close()


@pytest.mark.parametrize("index", range(len(l2_specs())))
def test_the_readmes_l2_adapter_json_works_as_written(aerospike_hosts, index):
    from tests.lmcache.l2_driver import build, load, make_allocator, object_keys, objects, store

    spec = l2_specs()[index]
    spec["adapter_params"]["hosts"] = aerospike_hosts
    adapter = build(spec)
    allocator = make_allocator()
    try:
        ks = object_keys(1)
        src, dst = objects(allocator, 1, fill=1), objects(allocator, 1)
        assert store(adapter, ks, src).is_successful()
        assert load(adapter, ks, dst) == [True]
        assert bytes(src[0].byte_array) == bytes(dst[0].byte_array)
        adapter.delete(ks)
        for o in src + dst:
            o.ref_count_down()
    finally:
        adapter.close()
