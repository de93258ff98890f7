"""Every command line of the README runs as written against the test server (the
seed hosts pointed at it): the demo, probe, size and stats; `lmcache server` is parsed by
LMCache's own server parser and its --l2-adapter by LMCache's own config code (the
adapter itself runs in tests/glue/test_readme.py); the install lines name extras the
package has; the setup and test commands are what .ci/run runs. SGLang's launch
line is checked in its venv (tests/sglang/test_readme_command.py). A command no
test knows fails here."""

import argparse
import os
import re
import subprocess
import sys
import tomllib

import pytest

from tests.docs.readme_commands import ROOT, argv, commands, sample_output

CLI = os.path.join(os.path.dirname(sys.executable), "lmcache-aerospike")
KNOWN = ("pip install", "scripts/bootstrap.sh", "make test", "AEROSPIKE_TEST_HOSTS=",
         "lmcache server", "--l2-adapter", "python -m sglang.launch_server",
         "lmcache-aerospike probe", "lmcache-aerospike stats", "lmcache-aerospike size")


def of(prefix):
    return [c for c in commands() if c.startswith(prefix)]


def run(args, **kw):
    env = {**os.environ, "LMCACHE_TRACK_USAGE": "false"}
    env = {k: v for k, v in env.items() if not k.startswith("LMCACHE_AEROSPIKE_")}
    kw.setdefault("cwd", ROOT)
    return subprocess.run(args, capture_output=True, text=True, timeout=300, env=env, **kw)


def test_every_command_is_one_this_file_runs():
    unknown = [c for c in commands() if not c.startswith(KNOWN)]
    assert unknown == [], f"README commands no test runs: {unknown}"
    assert len(commands()) >= 9


def test_the_install_lines_name_the_packages_extras():
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
                 ["optional-dependencies"])
    lines = of("pip install")
    assert lines
    for line in lines:
        wheel = argv(line)[2]
        assert re.fullmatch(r"lmcache_aerospike-[\d.]+-cp3\d+-cp3\d+-manylinux_2_28_"
                            r"(x86_64|aarch64)\.whl(\[[\w,]+\])?", wheel), wheel
        named = re.search(r"\[([\w,]+)\]", wheel)
        assert named is None or set(named.group(1).split(",")) <= extras, wheel


def test_setup_and_tests_are_what_ci_runs():
    (setup,) = of("scripts/bootstrap.sh")
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/bootstrap.sh" in ci and "make test" in ci
    assert re.search(r"^test:", (ROOT / "Makefile").read_text(), re.M)
    assert "AEROSPIKE_TEST_HOSTS" in (ROOT / "scripts" / "test.sh").read_text() + \
        (ROOT / "tests" / "conftest.py").read_text()
    assert of("make test") and of("AEROSPIKE_TEST_HOSTS=")
    # The main job: the demo, here on the bundled stand-in as on a fresh machine.
    demo = argv(setup.split("&&")[1])
    assert demo == [".venv/bin/lmcache-aerospike", "demo"]
    done = run([CLI, "demo"])
    assert done.returncode == 0, done.stdout + done.stderr
    got = done.stdout.splitlines()
    want = sample_output()
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want):  # numbers and ports differ, the words do not
        assert shape(g) == shape(w), (g, w)


def shape(line):
    """A line's words, numbers as #. The load's hits are fresh when it comes
    within a second of the store (void times are whole seconds), and moved
    (hits_touched, touch_bytes) when it comes later: either is the demo's."""
    hits = ("hits_touched=", "hits_fresh=", "touch_bytes=")
    words = line.split(" ")
    kept = [w for w in words if not w.startswith(hits)]
    line = " ".join(kept + (["hits"] if len(kept) < len(words) else []))
    return re.sub(r"[\d.]+", "#", line)


def test_probe_runs_as_written(aerospike_hosts):
    (line,) = of("lmcache-aerospike probe")
    args = [aerospike_hosts if a == "10.0.0.5:3000" else a for a in argv(line)[1:]]
    assert aerospike_hosts in args
    done = run([CLI, *args])
    # 0: nothing wrong; 1: problems named (the test server is no cache recipe).
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert "problems:" in done.stdout


def test_size_runs_as_written():
    (line,) = of("lmcache-aerospike size")
    done = run([CLI, *argv(line)[1:]])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "index RAM" in done.stdout and "direct-files true" in done.stdout


def test_stats_runs_as_written_on_the_readmes_yaml(aerospike_hosts, tmp_path):
    from tests.glue.test_readme import readme_blocks

    (line,) = of("lmcache-aerospike stats")
    yaml = re.sub(r'(\.hosts: )"[^"]*"', rf'\1"{aerospike_hosts}"', readme_blocks("yaml")[0])
    (tmp_path / "lmcache.yaml").write_text(yaml)
    done = run([CLI, *argv(line)[1:]], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "chunks" in done.stdout


def test_lmcache_server_parses_the_readmes_commands():
    """`lmcache server ... --l2-adapter '...'` (and the native_plugin spec after it)
    through LMCache's own parser and adapter config."""
    server = pytest.importorskip("lmcache.cli.commands.server")
    from lmcache.v1.distributed.l2_adapters.config import parse_args_to_l2_adapters_config

    (line,) = of("lmcache server")
    specs = [line] + [f"lmcache server {c}" for c in of("--l2-adapter")]
    assert len(specs) == 2
    for spec in specs:
        parser = argparse.ArgumentParser()
        server.ServerCommand().add_arguments(parser)
        args = parser.parse_args(argv(spec)[2:])
        config = parse_args_to_l2_adapters_config(args)
        assert len(config.adapters) == 1, spec
        assert "lmcache_aerospike" in repr(vars(config.adapters[0])), spec
