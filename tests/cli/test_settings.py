"""Settings from flags, --config (LMCache's YAML or an L2 adapter JSON) and the
environment, in that order, with errors naming the key as the user wrote it.
`lmcache-aerospike settings --json` shows what the commands would use, offline."""

import json

import pytest

from lmcache_aerospike.cli import main
from lmcache_aerospike.config import Settings

YAML = """\
chunk_size: 256
remote_storage_plugins: ["aerospike.primary", "aerospike.dr"]
storage_plugins: ["aerospike"]
extra_config:
  remote_storage_plugin.aerospike.primary.module_path: lmcache_aerospike.adapter
  remote_storage_plugin.aerospike.primary.class_name: AerospikeConnectorAdapter
  remote_storage_plugin.aerospike.primary.hosts: "as-primary:3000"
  remote_storage_plugin.aerospike.primary.namespace: primary_ns
  remote_storage_plugin.aerospike.dr.module_path: lmcache_aerospike.adapter
  remote_storage_plugin.aerospike.dr.class_name: AerospikeConnectorAdapter
  remote_storage_plugin.aerospike.dr.hosts: "as-dr:3000"
  remote_storage_plugin.aerospike.dr.set_name: dr_set
  storage_plugin.aerospike.module_path: lmcache_aerospike.storage
  storage_plugin.aerospike.class_name: AerospikeStoragePlugin
  storage_plugin.aerospike.hosts: "as-local:3000"
  storage_plugin.other.module_path: someone_else.plugin
  storage_plugin.other.hosts: "not-ours:1"
"""


def resolved(capsys, *argv):
    code = main(["settings", "--json", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def failed(capsys, *argv):
    code = main(["settings", *argv])
    return code, capsys.readouterr().err.strip()


@pytest.fixture
def lmcache_yaml(tmp_path):
    path = tmp_path / "lmcache.yaml"
    path.write_text(YAML)
    return str(path)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("instance, hosts, namespace, setname", [
    ("aerospike.primary", "as-primary:3000", "primary_ns", "kv_chunks"),
    ("primary", "as-primary:3000", "primary_ns", "kv_chunks"),
    ("remote_storage_plugin.aerospike.dr", "as-dr:3000", "lmcache", "dr_set"),
    ("storage_plugin.aerospike", "as-local:3000", "lmcache", "kv_chunks"),
])
def test_yaml_instance_is_picked_by_its_name(capsys, lmcache_yaml, instance, hosts,
                                             namespace, setname):
    got = resolved(capsys, "--config", lmcache_yaml, "--instance", instance)
    assert (got["hosts"], got["namespace"], got["set"]) == (hosts, namespace, setname)


def test_yaml_with_several_instances_needs_instance(capsys, lmcache_yaml, tmp_path):
    code, err = failed(capsys, "--config", lmcache_yaml)
    assert code == 2
    assert "has 3 Aerospike instances" in err and "pick one with --instance" in err
    for name in ("remote_storage_plugin.aerospike.dr", "remote_storage_plugin.aerospike.primary",
                 "storage_plugin.aerospike"):
        assert name in err
    assert "storage_plugin.other" not in err  # not lmcache_aerospike's
    both = write(tmp_path, "both.yaml", "extra_config:\n"
                 "  remote_storage_plugin.aerospike.hosts: r:3000\n"
                 "  storage_plugin.aerospike.module_path: lmcache_aerospike.storage\n"
                 "  storage_plugin.aerospike.hosts: s:3000\n")
    code, err = failed(capsys, "--config", both, "--instance", "aerospike")
    assert code == 2 and "--instance aerospike matches several" in err
    code, err = failed(capsys, "--config", lmcache_yaml, "--instance", "nope")
    assert code == 2 and "--instance nope is not one" in err


def test_yaml_single_instance_and_remote_url(capsys, tmp_path):
    single = write(tmp_path, "one.yaml", "extra_config:\n"
                   "  remote_storage_plugin.aerospike.hosts: h1:3000\n"
                   "  remote_storage_plugin.aerospike.default_ttl_seconds: 3600\n")
    got = resolved(capsys, "--config", single)
    assert (got["hosts"], got["default_ttl_seconds"]) == ("h1:3000", 3600)
    url = write(tmp_path, "url.yaml", "remote_url: aerospike://h2:3000,h3:3000/ns2/set2\n"
                "extra_config:\n  remote_storage_plugin.aerospike.send_key: true\n")
    got = resolved(capsys, "--config", url)
    assert (got["hosts"], got["namespace"], got["set"], got["send_key"]) == \
           ("h2:3000,h3:3000", "ns2", "set2", True)


@pytest.mark.parametrize("doc, where", [
    ({"type": "plugin", "module_path": "lmcache_aerospike.l2", "class_name":
      "AerospikeL2Adapter", "adapter_params": {"hosts": "a:1", "set": "s1",
                                               "num_workers": 4}}, "adapter_params."),
    ({"type": "native_plugin", "module_path": "lmcache_aerospike._native",
      "class_name": "Connector", "adapter_params": {"hosts": "a:1", "set": "s1",
                                                    "num_workers": 4},
      "max_capacity_gb": 10}, "adapter_params."),
    ({"type": "aerospike", "hosts": "a:1", "set_name": "s1", "num_workers": 4,
      "target_segment_bytes": 0, "max_capacity_gb": 10}, ""),
])
def test_l2_adapter_json(capsys, tmp_path, doc, where):
    path = write(tmp_path, "l2.json", json.dumps(doc))
    got = resolved(capsys, "--config", path)
    assert (got["hosts"], got["set"], got["num_workers"]) == ("a:1", "s1", 4)
    bad = dict(doc)
    if where:
        bad["adapter_params"] = {**doc["adapter_params"], "num_workers": "many"}
    else:
        bad["num_workers"] = "many"
    path = write(tmp_path, "bad.json", json.dumps(bad))
    code, err = failed(capsys, "--config", path)
    assert code == 2
    assert err == f'lmcache-aerospike: config {where}num_workers="many": expected an integer'


def test_l2_json_of_another_adapter_is_refused(capsys, tmp_path):
    code, err = failed(capsys, "--config", write(tmp_path, "fs.json", '{"type": "fs"}'))
    assert code == 2 and "type 'fs' is not an Aerospike L2 adapter" in err
    other = {"type": "plugin", "module_path": "x.y", "adapter_params": {"hosts": "a:1"}}
    code, err = failed(capsys, "--config", write(tmp_path, "x.json", json.dumps(other)))
    assert code == 2 and "'x.y' is not lmcache_aerospike's" in err


def test_precedence_flags_then_file_then_environment_then_defaults(capsys, monkeypatch,
                                                                   tmp_path):
    path = write(tmp_path, "c.yaml", "extra_config:\n"
                 "  remote_storage_plugin.aerospike.hosts: file:3000\n"
                 "  remote_storage_plugin.aerospike.namespace: file_ns\n"
                 "  remote_storage_plugin.aerospike.set_name: file_set\n")
    monkeypatch.setenv("LMCACHE_AEROSPIKE_NAMESPACE", "env_ns")
    monkeypatch.setenv("LMCACHE_AEROSPIKE_READ_TIMEOUT_MS", "1234")
    got = resolved(capsys, "--config", path, "--set", "flag_set")
    assert got["hosts"] == "file:3000"            # file only
    assert got["namespace"] == "file_ns"          # file over environment
    assert got["set"] == "flag_set"               # flag over the file's alias set_name
    assert got["read_timeout_ms"] == 1234         # environment over default
    assert got["write_timeout_ms"] == Settings.__dataclass_fields__["write_timeout_ms"].default
    got = resolved(capsys, "--hosts", "flag:3000", "-o", "read_timeout_ms=99")
    assert (got["hosts"], got["namespace"], got["read_timeout_ms"]) == ("flag:3000", "env_ns",
                                                                         99)


def test_errors_name_the_key_where_it_was_written(capsys, monkeypatch, tmp_path):
    path = write(tmp_path, "c.yaml", "extra_config:\n"
                 "  remote_storage_plugin.aerospike.hosts: h:3000\n"
                 "  remote_storage_plugin.aerospike.target_segment_bytes: big\n")
    code, err = failed(capsys, "--config", path)
    assert code == 2 and err == ('lmcache-aerospike: config remote_storage_plugin.aerospike.'
                                 'target_segment_bytes="big": expected an integer')
    # The same setting given as a flag: the flag is named, not the file's key.
    code, err = failed(capsys, "--config", path, "-o", "target_segment_bytes=huge")
    assert code == 2 and 'config -o target_segment_bytes="huge"' in err
    code, err = failed(capsys, "--config", path, "-o", "target_segment_bytes=4194304",
                       "--namespace", "n" * 40)
    assert code == 2 and "--namespace" in err and "remote_storage_plugin" not in err
    monkeypatch.setenv("LMCACHE_AEROSPIKE_COMMIT_LEVEL", "some")
    code, err = failed(capsys, "--hosts", "h:1")
    assert code == 2 and "LMCACHE_AEROSPIKE_COMMIT_LEVEL" in err
    code, err = failed(capsys, "--hosts", "h:1", "-o", "tagret_segment_bytes=1")
    assert code == 2 and "did you mean target_segment_bytes" in err


@pytest.mark.parametrize("argv, why", [
    (["-o", "novalue"], "-o novalue: expected KEY=VALUE"),
    (["--instance", "dr"], "--instance dr: names an instance of --config FILE"),
    (["--config", "/nonexistent/lmcache.yaml"], "No such file"),
    (["--config", "BAD_YAML"], "not valid YAML"),
    (["--config", "NO_INSTANCE"], "no Aerospike instance"),
])
def test_bad_command_lines_and_files_exit_2(capsys, tmp_path, argv, why):
    files = {"BAD_YAML": write(tmp_path, "bad.yaml", "extra_config: [unclosed\n"),
             "NO_INSTANCE": write(tmp_path, "none.yaml", "chunk_size: 256\n")}
    code, err = failed(capsys, "--hosts", "h:1", *[files.get(a, a) for a in argv])
    assert code == 2 and why in err


def test_settings_without_any_lists_every_key(capsys):
    assert main(["settings"]) == 0
    assert capsys.readouterr().out.strip() == Settings.help()


def test_settings_hide_the_password(capsys):
    got = resolved(capsys, "--hosts", "h:1", "-o", "password=hunter2", "-o", "username=u")
    assert got["password"] == "***" and got["username"] == "u"
    assert main(["settings", "--hosts", "h:1", "-o", "password=hunter2"]) == 0
    assert "hunter2" not in capsys.readouterr().out


def test_a_yaml_config_without_pyyaml_names_the_extra(capsys, monkeypatch, tmp_path):
    import sys

    config = tmp_path / "lmcache.yaml"
    config.write_text("remote_storage_plugins: [aerospike]\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml raises ImportError
    assert main(["settings", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"--config {config}: reading YAML needs PyYAML" in err
    assert "pip install 'lmcache-aerospike[yaml]'" in err
