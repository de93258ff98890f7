"""Running the CLI in process against the session's server (a real Aerospike when
AEROSPIKE_TEST_HOSTS is set), in a set only these tests write, emptied before each
test so that scans, sweeps and counts see that test's records alone."""

import io
import os
import sys
from dataclasses import dataclass

import aerospike
import pytest

from lmcache_aerospike import _native
from lmcache_aerospike.cli import main
from tests.ext.plant import Planter

NAMESPACE = "lmcache"
SET = "lmca_cli"
KiB = 1 << 10
# Small segments keep multi-segment chunks small: 64 KiB is on the grid of 8 MiB
# blocks (8 MiB / 64 - the 64 KiB margin), so the engine keeps it as given.
SMALL_SEGMENTS = {"target_segment_bytes": 64 * KiB, "min_segment_bytes": 16 * KiB}
SCRIPT = os.path.join(os.path.dirname(sys.executable), "lmcache-aerospike")


@dataclass
class Ran:
    code: int
    out: bytes
    err: str

    @property
    def text(self) -> str:
        return self.out.decode()


@pytest.fixture(autouse=True)
def no_settings_from_env(monkeypatch):
    """The caller's LMCACHE_AEROSPIKE_* must not leak into what a test asserts."""
    for name in list(os.environ):
        if name.startswith("LMCACHE_AEROSPIKE_"):
            monkeypatch.delenv(name)


@pytest.fixture
def planter(aerospike_hosts):
    p = Planter(aerospike_hosts, NAMESPACE, SET)
    _empty(p.client)
    yield p
    _empty(p.client)
    p.close()


def _empty(client):
    found = []
    client.scan(NAMESPACE, SET).foreach(lambda rec: found.append(rec[0][3]))
    for digest in found:
        try:
            client.remove((NAMESPACE, SET, None, digest))
        except aerospike.exception.RecordNotFound:
            pass


@pytest.fixture
def base_args(aerospike_hosts, planter):
    """The settings every test passes: its own (emptied) set, keys stored, small
    segments, and a TTL so that a real server drops what a failed test left."""
    args = ["--hosts", aerospike_hosts, "-n", NAMESPACE, "--set", SET,
            "-o", "send_key=true", "-o", "default_ttl_seconds=600"]
    for key, value in SMALL_SEGMENTS.items():
        args += ["-o", f"{key}={value}"]
    return args


@pytest.fixture
def cli(capsysbinary, monkeypatch, base_args):
    """cli(command, *args, stdin=bytes) runs `lmcache-aerospike command <settings>
    args...` in process; settings=False leaves the settings out."""

    def run(command, *args, stdin=None, settings=True):
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        code = main([command, *(base_args if settings else []), *args])
        out, err = capsysbinary.readouterr()
        return Ran(code, out, err.decode())

    return run


@pytest.fixture
def engine(aerospike_hosts, planter):
    """The extension on the tests' settings, to check what the CLI did."""
    c = _native.Connector(hosts=aerospike_hosts, namespace=NAMESPACE, set=SET,
                          send_key=True, default_ttl_seconds=600, **SMALL_SEGMENTS)
    yield c
    c.close()


@pytest.fixture
def three_segments(engine):
    """A payload size the tests' settings store as a meta record and 3 segments."""
    size = 2 * engine.limits()["target_segment_bytes"] + 1000
    assert engine.plan(size)[0] == 3
    return size
