"""Shared pytest fixtures: the server the tests talk to.

AEROSPIKE_TEST_HOSTS names a real server (set up as tests/aerospike-test.conf
says); without it a protocol test server (tests/server) is started for the session
on a free loopback port.
"""

import os
import socket

import pytest

# How far above default_ttl_seconds a record's TTL may be on a namespace that evicts:
# the engine's void-time clock runs up to 3 s ahead of now + TTL and dithers a chunk
# 0 to 3 s (src/engine/cache.c), plus a second's rounding. Elsewhere it is 0.
TTL_SPREAD_S = 7

from tests.server.launch import running


def basic_check_module() -> str:
    """LMCache's `basic_check`: lmcache.v1.basic_check in 0.5.6, moved with the
    in-process engine to lmcache.inprocess.v1.basic_check in 0.5.7."""
    import importlib.util

    try:
        if importlib.util.find_spec("lmcache.inprocess.v1.basic_check") is not None:
            return "lmcache.inprocess.v1.basic_check"
    except ModuleNotFoundError:  # 0.5.6 has no lmcache.inprocess
        pass
    return "lmcache.v1.basic_check"


@pytest.fixture(scope="session")
def aerospike_hosts():
    hosts = os.environ.get("AEROSPIKE_TEST_HOSTS")
    if hosts:
        yield hosts
        return
    with running() as port:
        yield f"127.0.0.1:{port}"


def info(hosts, command):
    """Sends one info command over a raw socket (no client library needed) and
    returns its value."""
    from tests.server.proto import pack_proto, read_proto  # the wire framing

    host, _, port = hosts.split(",")[0].rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(pack_proto(1, (command + "\n").encode()))
        _, body = read_proto(sock)
    line = body.decode().split("\n", 1)[0]
    return line.split("\t", 1)[1] if "\t" in line else line


@pytest.fixture
def fixture_only(aerospike_hosts):
    """Skips a test unless the server is the test server (fault injection)."""
    if info(aerospike_hosts, "fixture-reset") != "ok":
        pytest.skip("needs the test server's fault injection")
    return aerospike_hosts
