"""The command line as a whole: help with exit codes and examples, usage errors,
and errors of the engine as exit statuses with one line and no traceback."""

import subprocess

import pytest

from lmcache_aerospike import _native
from lmcache_aerospike.cli import main, stats
from tests.cli.conftest import SCRIPT

OURS = ["probe", "stats", "put", "get", "rm", "inspect", "pin", "unpin", "ls", "repair",
        "settings"]


def test_installed_script_help_has_commands_and_exit_codes():
    ran = subprocess.run([SCRIPT, "--help"], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert "exit status:" in ran.stdout
    for code in ("0 ", "1 ", "2 ", "3 "):
        assert f"\n  {code}" in ran.stdout
    for command in OURS + ["demo"]:
        assert f"\n    {command} " in ran.stdout


@pytest.mark.parametrize("command", OURS)
def test_every_command_has_help_with_examples(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert f"usage: lmcache-aerospike {command}" in out
    assert "examples:\n  lmcache-aerospike " + command in out
    assert "--config FILE" in out and "--instance NAME" in out


def test_version_names_the_engine_and_libaerospike(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert _native.__version__ in out and _native.aerospike_client_version in out


@pytest.mark.parametrize("argv", [[], ["nosuchcommand"], ["ls", "--limit", "many"],
                                  ["stats", "--chunk-size", "4X"], ["get"]])
def test_usage_errors_exit_2(argv, capsys):
    assert main(argv) == 2
    assert "usage: lmcache-aerospike" in capsys.readouterr().err


def test_unreachable_host_exits_3_with_one_clear_line(capsys):
    code = main(["stats", "--hosts", "127.0.0.1:1", "-o", "connect_timeout_ms=300"])
    err = capsys.readouterr().err
    assert code == 3
    assert err.startswith("lmcache-aerospike: ECONNECTION: ")
    assert "127.0.0.1:1" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_script_reports_server_errors_without_traceback():
    ran = subprocess.run([SCRIPT, "get", "k", "--hosts", "127.0.0.1:1", "-o",
                          "connect_timeout_ms=300"], capture_output=True, timeout=60)
    assert ran.returncode == 3
    assert b"ECONNECTION" in ran.stderr and b"Traceback" not in ran.stderr
    assert ran.stdout == b""


@pytest.mark.parametrize("name, code", [("EFULL", 3), ("ETIMEOUT", 3), ("EBUSY", 3),
                                        ("ENAMESPACE", 3), ("ECONFIG", 2), ("EINVAL", 2)])
def test_engine_errors_map_to_exit_statuses(name, code, monkeypatch, capsys):
    def fails(args):
        raise _native.error_from(f"{name}: what the engine said")

    monkeypatch.setattr(stats, "run", fails)
    assert main(["stats", "--hosts", "h:3000"]) == code
    err = capsys.readouterr().err
    assert "what the engine said" in err and "Traceback" not in err


def test_a_bad_setting_exits_2_naming_it(capsys):
    code = main(["stats", "--hosts", "127.0.0.1:1", "-o", "read_timeout_ms=soon"])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        'lmcache-aerospike: config -o read_timeout_ms="soon": expected an integer')
