"""lmcache_aerospike.config: every setting, its parsing, aliases, environment
fallbacks and errors. Offline: nothing here connects to a server."""

import ast
import dataclasses
import importlib.util
import json
import math
import pathlib
import subprocess
import sys

import pytest
import yaml

from lmcache_aerospike import _native
from lmcache_aerospike.config import ENV_PREFIX, Settings
from tests.glue.spec_configs import SPEC_MULTI_YAML, SPEC_YAML

HOSTS = "127.0.0.1:3000"
FIELDS = {f.name: f for f in dataclasses.fields(Settings)}
ENGINE = [n for n, f in FIELDS.items() if f.metadata["engine"]]
GLUE = [n for n, f in FIELDS.items() if not f.metadata["engine"]]

# The defaults this project promises (README and docs/, spec 4.5.2, the engine's config.c).
DEFAULTS = {
    "namespace": "lmcache", "set": "kv_chunks", "target_segment_bytes": 2097152,
    "max_segment_bytes": 0, "min_segment_bytes": 65536,
    "single_record_threshold_bytes": 0, "batch_threshold_bytes": 131072,
    "default_ttl_seconds": 86400, "read_timeout_ms": 1000, "write_timeout_ms": 2000,
    "connect_timeout_ms": 1000, "commit_level": "all", "replica": "sequence",
    "enable_crc32": False, "send_key": False, "max_conns_per_node": 64, "fast_path": True, "username": "",
    "password": "", "tls_name": "", "num_workers": 8, "read_touch_ttl_percent": -1,
    "touch_on_hit": True, "shared_clock": True,
    "backpressure_ms": 5000, "full_recheck_ms": 1000, "max_put_wait_ms": 2000, "touch_budget_percent": 100,
    "records_per_void_second": 0,
    "batch_max_in_flight": 64,
    "executor_threads": 16, "enable_list": False, "enable_repair_scan": False,
    "max_capacity_gb": 0.0, "touch_on_lock": False, "metrics": True,
}

# A valid value for each setting other than its default, typed and as a string.
OTHER = {
    "hosts": ("a:3000,b:3000", "a:3000,b:3000"), "namespace": ("ns2", "ns2"),
    "set": ("other", "other"), "target_segment_bytes": (4194304, "4194304"),
    "max_segment_bytes": (4128768, "4128768"), "min_segment_bytes": (131072, "131072"),
    "single_record_threshold_bytes": (1048576, "1048576"),
    "batch_threshold_bytes": (65536, "65536"), "default_ttl_seconds": (-1, "-1"),
    "read_timeout_ms": (1500, "1500"), "write_timeout_ms": (2500, "2500"),
    "connect_timeout_ms": (3000, "3000"), "commit_level": ("master", "master"),
    "replica": ("prefer_rack", "prefer_rack"), "enable_crc32": (True, "true"),
    "send_key": (True, "yes"), "max_conns_per_node": (16, "16"), "fast_path": (False, "no"),
    "username": ("alice", "alice"), "password": ("s3cret", "s3cret"),
    "tls_name": ("tls1", "tls1"), "num_workers": (4, "4"),
    "read_touch_ttl_percent": (100, "100"), "touch_on_hit": (False, "false"),
    "shared_clock": (False, "off"), "backpressure_ms": (0, "0"),
    "full_recheck_ms": (250, "250"), "max_put_wait_ms": (500, "500"), "touch_budget_percent": (0, "0"),
    "records_per_void_second": (40, "40"),
    "batch_max_in_flight": (8, "8"), "executor_threads": (32, "32"),
    "enable_list": (True, "on"), "enable_repair_scan": (True, "1"),
    "max_capacity_gb": (12.5, "12.5"), "touch_on_lock": (True, "true"),
    "metrics": (False, "off"),
}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """No LMCACHE_AEROSPIKE_* from the caller's shell leaks into a test."""
    import os

    for var in list(os.environ):
        if var.startswith(ENV_PREFIX):
            monkeypatch.delenv(var)


def config_error(d, where="", match=None):
    with pytest.raises(_native.ConfigError) as info:
        Settings.from_dict(d, where=where)
    msg = str(info.value)
    if match is not None:
        assert match in msg, msg
    assert isinstance(info.value, ValueError)
    assert info.value.status == _native.STATUS_ECONFIG and info.value.name == "ECONFIG"
    return msg


# ------------------------------------------------------------------ defaults, types


def test_tables_cover_every_setting():
    assert set(DEFAULTS) | {"hosts"} == set(FIELDS) == set(OTHER)


def test_defaults():
    s = Settings.from_dict({"hosts": HOSTS})
    assert s.hosts == HOSTS
    for name, want in DEFAULTS.items():
        got = getattr(s, name)
        assert got == want and type(got) is type(want), name


@pytest.mark.parametrize("name", sorted(OTHER))
def test_typed_and_string_values(name):
    typed, text = OTHER[name]
    base = {"hosts": HOSTS}
    a = Settings.from_dict({**base, name: typed})
    b = Settings.from_dict({**base, name: text})
    assert getattr(a, name) == typed and getattr(b, name) == typed
    assert type(getattr(b, name)) is FIELDS[name].type
    assert a == b


@pytest.mark.parametrize("text,want", [
    ("true", True), ("TRUE", True), (" yes ", True), ("on", True), ("1", True),
    ("false", False), ("False", False), ("no", False), ("OFF", False), ("0", False),
    (True, True), (False, False), (1, True), (0, False),
])
def test_bool_spellings(text, want):
    assert Settings.from_dict({"hosts": HOSTS, "enable_list": text}).enable_list is want


@pytest.mark.parametrize("value", ["4194304", " 4194304 ", 4194304, 4194304.0, "+4194304"])
def test_int_forms(value):
    assert Settings.from_dict({"hosts": HOSTS, "target_segment_bytes": value}) \
        .target_segment_bytes == 4194304


def test_spec_table_keys_all_accepted():
    """Every key of spec 4.5.2 (module_path and class_name are LMCache's, ignored)."""
    keys = {
        "module_path": "lmcache_aerospike.adapter", "class_name": "AerospikeConnectorAdapter",
        "hosts": HOSTS, "namespace": "lmcache", "set": "kv_chunks",
        "target_segment_bytes": 4194304, "max_segment_bytes": 4128768,
        "min_segment_bytes": 65536, "single_record_threshold_bytes": 1048576,
        "default_ttl_seconds": 3600, "read_timeout_ms": 900, "write_timeout_ms": 1900,
        "batch_max_in_flight": 32, "executor_threads": 12, "enable_list": True,
        "enable_crc32": True, "enable_repair_scan": True, "commit_level": "master",
        "replica": "any", "username": "u", "password": "p", "tls_name": "t",
    }
    s = Settings.from_dict(keys)
    for key, value in keys.items():
        if key not in ("module_path", "class_name"):
            assert getattr(s, key) == value, key


def test_frozen_and_password_not_in_repr():
    s = Settings.from_dict({"hosts": HOSTS, "password": "hunter2"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.namespace = "x"
    assert "hunter2" not in repr(s)


# ----------------------------------------------------------------------- aliases


def test_aliases():
    s = Settings.from_dict({"hosts": HOSTS, "set_name": "s1", "max_record_bytes": "1048576"})
    assert s.set == "s1" and s.max_segment_bytes == 1048576


def test_upstream_auto_target_is_our_default():
    assert Settings.from_dict({"hosts": HOSTS, "target_segment_bytes": 0}) \
        .target_segment_bytes == DEFAULTS["target_segment_bytes"]
    assert Settings.from_dict({"hosts": HOSTS, "target_segment_bytes": "0"}) \
        .target_segment_bytes == DEFAULTS["target_segment_bytes"]


def test_alias_with_same_value_is_fine():
    s = Settings.from_dict({"hosts": HOSTS, "set": "a", "set_name": "a",
                            "max_segment_bytes": 1048576, "max_record_bytes": "1048576"})
    assert s.set == "a" and s.max_segment_bytes == 1048576


@pytest.mark.parametrize("key,alias,a,b", [
    ("set", "set_name", "a", "b"),
    ("max_segment_bytes", "max_record_bytes", 1048576, 2097152),
])
def test_alias_conflict_names_both(key, alias, a, b):
    msg = config_error({"hosts": HOSTS, alias: b, key: a}, where="x.")
    assert f"x.{key}=" in msg and f"x.{alias}=" in msg


# -------------------------------------------------------------------- bad input


def test_unknown_key_is_named():
    msg = config_error({"hosts": HOSTS, "namspace": "x"}, where="w.", match="w.namspace")
    assert "unknown" in msg and "namespace" in msg  # the suggestion


def test_lmcache_keys_ignored():
    s = Settings.from_dict({"hosts": HOSTS, "module_path": "m", "class_name": "C",
                            "config_class_name": "CC"})
    assert s.hosts == HOSTS


def test_not_a_mapping():
    config_error(["hosts"], match="mapping")


WHERE = "remote_storage_plugin.aerospike.primary."


@pytest.mark.parametrize("key,value,why", [
    # parsed here
    ("target_segment_bytes", "big", "expected an integer"),
    ("target_segment_bytes", 4.5, "expected an integer"),
    ("target_segment_bytes", "4.0", "expected an integer"),
    ("target_segment_bytes", True, "expected an integer"),
    ("target_segment_bytes", "0x10", "expected an integer"),
    ("read_timeout_ms", [1], "expected an integer"),
    ("enable_crc32", "maybe", "true or false"),
    ("enable_crc32", 2, "true or false"),
    ("namespace", 123, "expected a string"),
    ("max_capacity_gb", "lots", "expected a number"),
    ("max_capacity_gb", True, "expected a number"),
    ("max_capacity_gb", "inf", "finite"),
    ("max_capacity_gb", -1, "at least 0"),
    ("batch_max_in_flight", 0, "must be"),
    ("executor_threads", 0, "must be"),
    ("executor_threads", 257, "must be"),
    ("touch_on_lock", "sometimes", "expected true or false"),
    # checked by the engine, relabeled with `where`
    ("hosts", "h:99999", "port"),
    ("namespace", "n" * 32, "1 to 31 bytes"),
    ("set", "s" * 64, "63 bytes"),
    ("min_segment_bytes", 0, "positive"),
    ("target_segment_bytes", 16 * 1024 * 1024, "8 MiB"),
    ("max_segment_bytes", 1000, "below min_segment_bytes"),
    ("max_record_bytes", 1000, "below min_segment_bytes"),
    ("default_ttl_seconds", -5, "must be"),
    ("read_timeout_ms", 0, "positive"),
    ("write_timeout_ms", "-3", "negative"),
    ("connect_timeout_ms", 2**40, "too large"),
    ("max_conns_per_node", 0, "positive"),
    ("commit_level", "some", "all or master"),
    ("replica", "nearest", "sequence"),
    ("num_workers", 0, "1 to 256"),
    ("num_workers", 1000, "1 to 256"),
])
def test_bad_value_names_full_key(key, value, why):
    msg = config_error({"hosts": HOSTS, key: value}, where=WHERE)
    assert f"{WHERE}{key}" in msg, msg
    assert why in msg, msg


def test_error_example_from_brief():
    msg = config_error({"hosts": HOSTS, "target_segment_bytes": "big"}, where=WHERE)
    assert f'{WHERE}target_segment_bytes="big": expected an integer' in msg


def test_password_never_echoed():
    msg = config_error({"hosts": HOSTS, "password": 98765}, where="p.", match="p.password")
    assert "98765" not in msg


def test_hosts_required_names_key_and_env():
    msg = config_error({"namespace": "x"}, where="w.", match="w.hosts")
    assert f"{ENV_PREFIX}HOSTS" in msg
    config_error({"hosts": ""}, match=f"{ENV_PREFIX}HOSTS")


# ------------------------------------------------------------------ environment


@pytest.mark.parametrize("name", sorted(OTHER))
def test_env_fallback_for_every_setting(name, monkeypatch):
    _, text = OTHER[name]
    monkeypatch.setenv(ENV_PREFIX + name.upper(), text)
    d = {} if name == "hosts" else {"hosts": HOSTS}
    assert getattr(Settings.from_dict(d), name) == OTHER[name][0]


def test_upstream_env_names(monkeypatch):
    for var, value in [("HOSTS", "e:3000"), ("NAMESPACE", "ens"), ("SET", "eset"),
                       ("USERNAME", "eu"), ("PASSWORD", "ep")]:
        monkeypatch.setenv(ENV_PREFIX + var, value)
    s = Settings.from_dict({})
    assert (s.hosts, s.namespace, s.set, s.username, s.password) == \
        ("e:3000", "ens", "eset", "eu", "ep")


def test_precedence(monkeypatch):
    monkeypatch.setenv(ENV_PREFIX + "HOSTS", "env:3000")
    monkeypatch.setenv(ENV_PREFIX + "NAMESPACE", "envns")
    monkeypatch.setenv(ENV_PREFIX + "SET", "envset")
    s = Settings.from_dict({"hosts": "map:3000", "set_name": "mapset"})
    assert s.hosts == "map:3000"        # mapping over environment
    assert s.set == "mapset"            # also through an alias
    assert s.namespace == "envns"       # environment over default
    assert s.read_timeout_ms == DEFAULTS["read_timeout_ms"]


def test_empty_or_none_falls_back(monkeypatch):
    monkeypatch.setenv(ENV_PREFIX + "PASSWORD", "from-env")
    s = Settings.from_dict({"hosts": HOSTS, "password": "", "namespace": None})
    assert s.password == "from-env" and s.namespace == DEFAULTS["namespace"]
    monkeypatch.setenv(ENV_PREFIX + "NAMESPACE", "")  # empty variable: not set
    assert Settings.from_dict({"hosts": HOSTS}).namespace == DEFAULTS["namespace"]


def test_bad_env_value_names_variable(monkeypatch):
    var = ENV_PREFIX + "READ_TIMEOUT_MS"
    monkeypatch.setenv(var, "soon")
    config_error({"hosts": HOSTS}, where="w.", match=f'{var}="soon": expected an integer')
    # The mapping wins, so the bad variable is never read.
    assert Settings.from_dict({"hosts": HOSTS, "read_timeout_ms": 5}).read_timeout_ms == 5


def test_engine_error_on_env_value_names_variable(monkeypatch):
    var = ENV_PREFIX + "DEFAULT_TTL_SECONDS"
    monkeypatch.setenv(var, "-5")
    msg = config_error({"hosts": HOSTS}, where="w.", match=var)
    assert "w.default_ttl_seconds" not in msg


def test_hosts_from_env_only(monkeypatch):
    monkeypatch.setenv(ENV_PREFIX + "HOSTS", "h:1")
    assert Settings.from_dict({}).hosts == "h:1"


# ------------------------------------------------------- executor_threads / workers


def test_executor_threads_sizes_workers_when_num_workers_absent(monkeypatch):
    assert Settings.from_dict({"hosts": HOSTS, "executor_threads": 24}).num_workers == 24
    s = Settings.from_dict({"hosts": HOSTS, "executor_threads": 24, "num_workers": 6})
    assert (s.num_workers, s.executor_threads) == (6, 24)
    assert Settings.from_dict({"hosts": HOSTS}).num_workers == DEFAULTS["num_workers"]
    monkeypatch.setenv(ENV_PREFIX + "EXECUTOR_THREADS", "20")
    assert Settings.from_dict({"hosts": HOSTS}).num_workers == 20
    monkeypatch.setenv(ENV_PREFIX + "NUM_WORKERS", "3")
    assert Settings.from_dict({"hosts": HOSTS}).num_workers == 3


# ----------------------------------------------------------------- extra_config


def test_from_extra_config_two_instances():
    extra = {
        "remote_storage_plugin.aerospike.primary.module_path": "lmcache_aerospike.adapter",
        "remote_storage_plugin.aerospike.primary.class_name": "AerospikeConnectorAdapter",
        "remote_storage_plugin.aerospike.primary.hosts": "as-primary:3000",
        "remote_storage_plugin.aerospike.primary.set": "p",
        "remote_storage_plugin.aerospike.primary.read_timeout_ms": "700",
        "remote_storage_plugin.aerospike.dr.hosts": "as-dr:3000",
        "remote_storage_plugin.aerospike.dr.namespace": "drns",
        "remote_storage_plugin.redis.hosts": "ignored",
        "remote_storage_plugin.redis.bogus": "ignored too",
        "some_other_key": 1,
    }
    p = Settings.from_extra_config(extra, "remote_storage_plugin.aerospike.primary.")
    dr = Settings.from_extra_config(extra, "remote_storage_plugin.aerospike.dr")  # no dot
    assert (p.hosts, p.set, p.read_timeout_ms, p.namespace) == \
        ("as-primary:3000", "p", 700, "lmcache")
    assert (dr.hosts, dr.set, dr.read_timeout_ms, dr.namespace) == \
        ("as-dr:3000", "kv_chunks", 1000, "drns")
    assert p.identity() != dr.identity()


def test_from_extra_config_error_names_prefixed_key():
    prefix = "remote_storage_plugin.aerospike.dr."
    extra = {prefix + "hosts": HOSTS, prefix + "write_timeout_ms": "slow"}
    with pytest.raises(_native.ConfigError, match=rf"{prefix}write_timeout_ms=\"slow\""):
        Settings.from_extra_config(extra, prefix)
    with pytest.raises(_native.ConfigError, match=rf"{prefix}bogus"):
        Settings.from_extra_config({prefix + "hosts": HOSTS, prefix + "bogus": 1}, prefix)


def test_from_extra_config_nested_instance_ignored():
    """The single-instance prefix does not see another instance's keys as unknown."""
    extra = {"storage_plugin.aerospike.hosts": "one:3000",
             "storage_plugin.aerospike.dr.hosts": "two:3000"}
    assert Settings.from_extra_config(extra, "storage_plugin.aerospike.").hosts == "one:3000"


def test_from_extra_config_none_uses_env(monkeypatch):
    monkeypatch.setenv(ENV_PREFIX + "HOSTS", "env:3000")
    assert Settings.from_extra_config(None, "storage_plugin.aerospike.").hosts == "env:3000"



def test_spec_yaml_example():
    doc = yaml.safe_load(SPEC_YAML)
    prefix = "remote_storage_plugin.aerospike."
    s = Settings.from_extra_config(doc["extra_config"], prefix)
    for key, value in doc["extra_config"].items():
        name = key[len(prefix):]
        if name not in ("module_path", "class_name"):
            assert getattr(s, name) == value, name
    assert s.hosts == "aerospike-0:3000,aerospike-1:3000"
    assert s.num_workers == 16  # the spec's executor_threads sizes the engine's pool


def test_spec_yaml_multi_instance_example():
    doc = yaml.safe_load(SPEC_MULTI_YAML)
    got = {name: Settings.from_extra_config(doc["extra_config"],
                                            f"remote_storage_plugin.{name}.")
           for name in doc["remote_storage_plugins"]}
    assert got["aerospike.primary"].hosts == "as-primary:3000"
    assert got["aerospike.dr"].hosts == "as-dr:3000"


def test_upstream_adapter_json():
    d = json.loads('{"hosts": "127.0.0.1:3000", "namespace": "lmcache", '
                   '"set_name": "kv_chunks", "num_workers": 8, "read_timeout_ms": 1000, '
                   '"write_timeout_ms": 2000, "default_ttl_seconds": 86400, '
                   '"target_segment_bytes": 0, "max_record_bytes": 0, "username": "", '
                   '"password": "", "max_capacity_gb": 10}')
    s = Settings.from_dict(d)
    assert (s.set, s.num_workers, s.max_segment_bytes, s.max_capacity_gb) == \
        ("kv_chunks", 8, 0, 10.0)
    assert s.target_segment_bytes == DEFAULTS["target_segment_bytes"]


def test_every_upstream_adapter_key_accepted():
    """Read the keys LMCache's own AerospikeL2AdapterConfig takes from its source
    (importing it would pull in torch), and feed each back with its default."""
    spec = importlib.util.find_spec("lmcache")
    if spec is None or spec.origin is None:
        pytest.skip("lmcache is not installed")
    path = (pathlib.Path(spec.origin).parent
            / "v1/distributed/l2_adapters/aerospike_l2_adapter.py")
    tree = ast.parse(path.read_text())
    init = next(n for n in ast.walk(tree)
                if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    args = [a.arg for a in init.args.args[1:]]
    defaults = dict(zip(args[len(args) - len(init.args.defaults):],
                        (ast.literal_eval(d) for d in init.args.defaults)))
    assert "hosts" in args and "set_name" in args
    s = Settings.from_dict({"hosts": HOSTS, **defaults})
    assert s.hosts == HOSTS and s.set == defaults["set_name"]


# ------------------------------------------------------------------ the outputs


def test_engine_kwargs_round_trip():
    s = Settings.from_dict({"hosts": HOSTS, **{k: v for k, (v, _) in OTHER.items()
                                               if k != "hosts"}})
    kw = s.engine_kwargs()
    assert set(kw) == set(ENGINE)
    assert all(type(v) in (str, int, bool) for v in kw.values())
    _native.check_settings(**kw)  # raises if the engine would refuse them
    again = Settings.from_dict(kw)
    assert again.identity() == s.identity()


def test_engine_kwargs_omit_empty_credentials():
    kw = Settings.from_dict({"hosts": HOSTS}).engine_kwargs()
    assert not {"username", "password", "tls_name"} & set(kw)
    assert not set(GLUE) & set(kw)
    _native.check_settings(**kw)
    kw = Settings.from_dict({"hosts": HOSTS, "username": "u", "password": "p"}).engine_kwargs()
    assert (kw["username"], kw["password"]) == ("u", "p") and "tls_name" not in kw


def test_identity():
    a = Settings.from_dict({"hosts": HOSTS})
    assert hash(a.identity()) == hash(Settings.from_dict({"hosts": HOSTS}).identity())
    assert a.identity() != Settings.from_dict({"hosts": HOSTS, "set": "x"}).identity()
    assert a.identity() != Settings.from_dict({"hosts": HOSTS,
                                               "read_timeout_ms": 5}).identity()
    # Glue settings do not split engines.
    assert a.identity() == Settings.from_dict({"hosts": HOSTS,
                                               "batch_max_in_flight": 3}).identity()
    assert {name for name, _ in a.identity()} == set(ENGINE)


def test_redacted():
    s = Settings.from_dict({"hosts": HOSTS, "password": "hunter2", "username": "u"})
    r = s.redacted()
    assert r["password"] == "***" and "hunter2" not in repr(r)
    assert set(r) == set(FIELDS) and r["username"] == "u" and r["hosts"] == HOSTS
    assert Settings.from_dict({"hosts": HOSTS}).redacted()["password"] == ""


def test_help_lists_every_key_and_env():
    text = Settings.help()
    for name, f in FIELDS.items():
        line = next(ln for ln in text.splitlines() if ln.startswith(f"- {name} ("))
        assert f.type.__name__ in line
        if name != "hosts":
            assert repr(f.default) in line
    for alias in ("set_name", "max_record_bytes"):
        assert alias in text
    assert f"{ENV_PREFIX}HOSTS" in text and f"{ENV_PREFIX}PASSWORD" in text


def test_import_is_light():
    code = ("import sys, lmcache_aerospike.config; "
            "bad = [m for m in ('torch', 'lmcache', 'yaml') if m in sys.modules]; "
            "print(','.join(bad))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"imported at module level: {done.stdout}"


def test_max_capacity_is_float():
    s = Settings.from_dict({"hosts": HOSTS, "max_capacity_gb": 3})
    assert s.max_capacity_gb == 3.0 and isinstance(s.max_capacity_gb, float)
    assert not math.isnan(s.max_capacity_gb)
