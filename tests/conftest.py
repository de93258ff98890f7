"""Shared pytest fixtures: the server the tests talk to.

AEROSPIKE_TEST_HOSTS names a real server (set up as tests/aerospike-test.conf
says); without it a protocol test server (tests/server) is started for the session
on a free loopback port.

`aerospike_cluster` is a cluster: AEROSPIKE_TEST_CLUSTER names a real one
(docs/testing.md, "Against a real server"); without it a fixture cluster of three
nodes with replication factor 2 runs for the session. `cluster_ctl` kills, pauses,
resumes and restarts one of its nodes, on either.
"""

import os
import shlex
import socket
import subprocess

import pytest

# How far above default_ttl_seconds a record's TTL may be on a namespace that evicts:
# the engine's void-time clock runs up to 3 s ahead of now + TTL and dithers a chunk
# 0 to 3 s (src/engine/cache.c), plus a second's rounding. Elsewhere it is 0.
TTL_SPREAD_S = 7

from tests.server.launch import running, running_cluster


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


@pytest.fixture(scope="session")
def aerospike_cluster():
    """A comma-separated seed list, 127.0.0.1:p1,127.0.0.1:p2,...: the real cluster
    AEROSPIKE_TEST_CLUSTER names, else a fixture cluster of 3 nodes, RF 2."""
    hosts = os.environ.get("AEROSPIKE_TEST_CLUSTER")
    if hosts:
        yield hosts
        return
    with running_cluster(nodes=3, rf=2) as ports:
        yield ",".join(f"127.0.0.1:{p}" for p in ports)


# What a test's node faults are called by AEROSPIKE_TEST_CTL (scripts/
# aerospike-loopback.sh: start, stop, kill, pause, resume).
_CTL_ACTIONS = {"kill": "kill", "pause": "pause", "resume": "resume", "restart": "start",
                "stop": "stop", "start": "start"}
# What a real cluster's control command must not inherit from a sanitized run.
_SANITIZER_ENV = ("LD_PRELOAD", "ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS", "PYTHONMALLOC")


def cluster_ctl(hosts, action, node_index):
    """Kill, pause, resume or restart node `node_index` of the cluster `hosts`
    (a seed list). With AEROSPIKE_TEST_CTL set it runs `$AEROSPIKE_TEST_CTL ACTION
    NODE`, NODE being the node_index-th of AEROSPIKE_TEST_CLUSTER_NODES (default
    0,1,2) and ACTION kill, pause, resume or start (for restart); otherwise it sends
    `fixture-node:ACTION:INDEX` to a node of the fixture cluster other than the one
    it acts on (a paused or killed node answers nothing)."""
    if action not in ("kill", "pause", "resume", "restart"):
        raise ValueError(f"unknown node action {action!r}")
    ctl = os.environ.get("AEROSPIKE_TEST_CTL")
    if ctl:
        nodes = os.environ.get("AEROSPIKE_TEST_CLUSTER_NODES", "0,1,2").split(",")
        env = {k: v for k, v in os.environ.items() if k not in _SANITIZER_ENV}
        subprocess.run(shlex.split(ctl) + [_CTL_ACTIONS[action], nodes[node_index]],
                       check=True, timeout=180, env=env)
        return
    seeds = hosts.split(",")
    last = None
    for i, seed in enumerate(seeds):
        if i == node_index and len(seeds) > 1:
            continue
        try:
            answer = info(seed, f"fixture-node:{action}:{node_index}")
        except OSError as exc:  # that node is down too: try the next
            last = exc
            continue
        if answer != "ok":
            raise RuntimeError(f"fixture-node:{action}:{node_index}: {answer}")
        return
    raise RuntimeError(f"no node of {hosts} took fixture-node:{action}:{node_index}: {last}")


@pytest.fixture
def fixture_only(aerospike_hosts):
    """Skips a test unless the server is the test server (fault injection)."""
    if info(aerospike_hosts, "fixture-reset") != "ok":
        pytest.skip("needs the test server's fault injection")
    return aerospike_hosts
