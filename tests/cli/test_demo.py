"""`lmcache-aerospike demo`: LMCache's engine stores a prompt in Aerospike,
restarts, and loads every token back from it.

In process (through the CLI's main) against the session's server, which is a
real Aerospike when AEROSPIKE_TEST_HOSTS is set; as the installed console script
with no hosts, where it must start, announce and stop the bundled stand-in.
"""

import json
import logging
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from lmcache_aerospike import _native
from lmcache_aerospike.cli import main

SCRIPT = os.path.join(os.path.dirname(sys.executable), "lmcache-aerospike")
STAND_IN = re.compile(r"no --hosts given: using the bundled protocol test server on "
                      r"127\.0\.0\.1:(\d+), a stand-in for Aerospike \(pass --hosts to use yours\)")


@pytest.fixture
def clean_process():
    """The demo runs LMCache in this process: it must leave no thread, start
    method, logger or environment variable changed behind."""
    threads = set(threading.enumerate())
    start_method = multiprocessing.get_start_method(allow_none=True)
    env = {k: os.environ.get(k) for k in ("LMCACHE_LOG_LEVEL",)}
    yield
    left = [t for t in threading.enumerate() if t not in threads and not t.daemon]
    assert left == [], f"threads left running: {left}"
    assert multiprocessing.get_start_method(allow_none=True) == start_method
    assert {k: os.environ.get(k) for k in env} == env
    from lmcache_aerospike.lmcache_names import LMCacheEngineBuilder

    for name in ("lmcache", "lmcache_aerospike", LMCacheEngineBuilder.__module__):
        assert not any(type(h).__name__ == "LMCacheLogs"
                       for h in logging.getLogger(name).handlers), name


def demo_json(capsys, *argv):
    code = main(["demo", "--json", *argv])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def set_keys(hosts, setname):
    native = _native.Connector(hosts=hosts, namespace="lmcache", set=setname)
    try:
        return native.list_keys()[0]
    finally:
        native.close()


def test_every_token_comes_back_from_aerospike_after_a_restart(
        aerospike_hosts, capsys, clean_process):
    setname = "lmca_demo_" + uuid.uuid4().hex[:8]
    code, doc, _ = demo_json(capsys, "--hosts", aerospike_hosts, "--set", setname,
                             "--tokens", "700", "--layers", "2", "--heads", "2")
    assert code == 0 and doc["ok"], doc
    assert doc["stand_in"] is False and doc["hosts"] == aerospike_hosts
    assert doc["set"] == setname and doc["namespace"] == "lmcache"
    assert doc["tokens"] == doc["lookup_hits"] == doc["hits"] == 700
    assert doc["bytes_identical"] is True
    token_bytes = 2 * 2 * 2 * 128 * 2  # K and V, layers, heads, head size, bf16
    assert doc["chunk_bytes"] == [256 * token_bytes, 256 * token_bytes, 188 * token_bytes]
    assert doc["stored_bytes"] == 700 * token_bytes
    # Every stored byte was read back by the restarted engine, none by the first.
    store, load = doc["counters"]["store"], doc["counters"]["load"]
    assert store["bytes_written"] == load["bytes_read"] == doc["stored_bytes"]
    assert store["bytes_read"] == 0 and load["bytes_written"] == 0
    assert load["fast_ops"] > 0 and load["corrupt"] == load["torn"] == 0
    assert [p["chunk_bytes"] for p in doc["segments"]] == sorted(set(doc["chunk_bytes"]),
                                                                 reverse=True)
    assert doc["load_seconds"] > 0 and doc["load_gbps"] > 0
    assert set_keys(aerospike_hosts, setname) == [], "the demo left chunks behind"


def test_it_takes_the_settings_of_the_other_commands(aerospike_hosts, capsys, clean_process,
                                                    monkeypatch, tmp_path):
    # Hosts from the environment and the set from LMCache's own YAML: no stand-in.
    setname = "lmca_demo_" + uuid.uuid4().hex[:8]
    config = tmp_path / "lmcache.yaml"
    config.write_text("remote_storage_plugins: [aerospike]\nextra_config:\n"
                      f"  remote_storage_plugin.aerospike.set: {setname}\n")
    monkeypatch.setenv("LMCACHE_AEROSPIKE_HOSTS", aerospike_hosts)
    code, doc, err = demo_json(capsys, "--config", str(config), "--tokens", "256",
                               "--layers", "1", "--heads", "1")
    assert code == 0 and doc["hits"] == 256 and doc["bytes_identical"], doc
    assert doc["stand_in"] is False and "stand-in" not in err
    assert doc["hosts"] == aerospike_hosts and doc["set"] == setname


def test_bytes_that_come_back_wrong_exit_1(aerospike_hosts, capsys, clean_process,
                                           monkeypatch):
    import torch

    from lmcache_aerospike.cli import demo_kv

    to_gpu = demo_kv.CPUPagedConnector.to_gpu

    def corrupting(self, memory_obj, start, end, **kwargs):
        to_gpu(self, memory_obj, start, end, **kwargs)
        self.kv.view(torch.int16)[0, 0, kwargs["slot_mapping"][start], 0] ^= 1  # one bit

    monkeypatch.setattr(demo_kv.CPUPagedConnector, "to_gpu", corrupting)
    code, doc, err = demo_json(capsys, "--hosts", aerospike_hosts, "--tokens", "256",
                               "--layers", "1", "--heads", "1")
    assert code == 1 and not doc["ok"]
    assert doc["hits"] == 256 and doc["bytes_identical"] is False
    assert "KV bytes DIFFER" in err


def test_an_unreachable_server_exits_3_with_its_error(capsys, clean_process):
    assert main(["demo", "--hosts", "127.0.0.1:1"]) == 3
    out, err = capsys.readouterr()
    assert "no --hosts given" not in out
    assert re.search(r'^lmcache-aerospike: ECONNECTION: cannot connect to hosts '
                     r'"127\.0\.0\.1:1"', err, re.M), err


def test_help_shows_an_example(capsys):
    assert main(["demo", "--help"]) == 0
    out = capsys.readouterr().out
    assert "lmcache-aerospike demo --hosts" in out and "--tokens" in out


# -- the console script, with no hosts: the stand-in ------------------------------------


def stand_ins():
    """Pids of running bundled test servers (the stand-in's command line)."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"lmcache_aerospike.testserver" in f.read():
                    found.add(int(pid))
        except OSError:
            pass
    return found


def script(tmp_path, *argv):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LMCACHE_AEROSPIKE_")}
    # From another directory: the demo must not need the repository's tests/.
    return subprocess.Popen([SCRIPT, "demo", *argv], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def assert_gone(port, before):
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert stand_ins() - before == set(), "a stand-in server is still running"


def test_without_hosts_the_script_runs_on_the_stand_in_and_stops_it(tmp_path):
    before = stand_ins()
    proc = script(tmp_path, "--tokens", "512")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out, err)
    lines = out.splitlines()
    port = int(STAND_IN.fullmatch(lines[0])[1])
    assert "retrieved 512 of 512 tokens from Aerospike after a restart; KV bytes identical" \
        in lines
    assert any(line.startswith("engine counters (load): ") for line in lines)
    assert "LMCache INFO" not in out + err, "LMCache's logging is not quiet"
    assert_gone(port, before)


def test_ctrl_c_stops_the_stand_in(tmp_path):
    before = stand_ins()
    proc = script(tmp_path, "--tokens", "512")
    port = int(STAND_IN.fullmatch(proc.stdout.readline().rstrip("\n"))[1])
    # Half a second on, the demo is loading torch and LMCache. (Sooner, it may be
    # opening its probe engine, and a SIGINT that lands while the extension hands
    # its log lines to Python is lost: src/ext/logsink.c clears it.)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "lmcache-aerospike: interrupted" in err
    assert_gone(port, before)


def test_a_killed_demo_takes_the_stand_in_with_it(tmp_path):
    # No finally runs on SIGKILL: the kernel stops the server (PR_SET_PDEATHSIG).
    before = stand_ins()
    proc = script(tmp_path, "--tokens", "512")
    port = int(STAND_IN.fullmatch(proc.stdout.readline().rstrip("\n"))[1])
    proc.kill()
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while stand_ins() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert_gone(port, before)


def test_engine_vllm_without_vllm_exits_2_naming_the_venv(capsys, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else find_spec(name, *a))
    assert main(["demo", "--engine", "vllm", "--hosts", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "demo --engine vllm needs vllm" in err and ".venv-vllm" in err, err


@pytest.mark.parametrize("tokens, chunk, named", [
    (32761, 256, "--tokens 32761: the demo's model takes at most 32760 prompt tokens"),
    (100, 256, "--tokens 100: fewer than a chunk (256)"),
])
def test_engine_vllm_refuses_a_prompt_the_tiny_model_cannot_take(tokens, chunk, named):
    from lmcache_aerospike.cli import demo_vllm

    assert named in demo_vllm.bad_tokens(tokens, chunk)
    assert demo_vllm.bad_tokens(2080, 256) is None


def test_without_lmcache_the_demo_names_the_extra_to_install(capsys, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "lmcache" else find_spec(name, *a))
    assert main(["demo", "--hosts", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "demo needs lmcache" in err and "pip install 'lmcache-aerospike[lmcache]'" in err
