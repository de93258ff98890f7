"""A cluster through the official Python client: the session's `aerospike_cluster`
(tests/conftest.py), a fixture cluster of three nodes with replication factor 2,
or the real cluster AEROSPIKE_TEST_CLUSTER names. Node faults go through
`cluster_ctl` (fixture-node, or AEROSPIKE_TEST_CTL on a real cluster); the tests
that need the fixture's own commands (fixture-stats, fixture-fault, set-config of
data-size) skip on a real cluster. Every test leaves the cluster whole and stable.
"""

import base64
import threading
import time
import uuid

import pytest

aerospike = pytest.importorskip("aerospike")
from aerospike import exception as ex  # noqa: E402

from tests.conftest import cluster_ctl, info  # noqa: E402

NS = "lmcache"
SET = "cluster"


def kv(text):
    return dict(item.split("=", 1) for item in text.split(";") if "=" in item)


def seeds(hosts):
    return hosts.split(",")


def node_info(seed, command):
    """One node's answer, or None while it answers nothing."""
    try:
        return info(seed, command)
    except OSError:
        return None


def is_fixture(hosts):
    answer = node_info(seeds(hosts)[0], "fixture-cluster")
    return answer is not None and not answer.startswith("ERROR")  # a real server refuses it


def stable(hosts, size):
    """Every node answers, sees `size` nodes and no migrations, and
    cluster-stable agrees on one key."""
    keys = set()
    for seed in seeds(hosts):
        stats = node_info(seed, "statistics")
        if stats is None:
            return False
        stats = kv(stats)
        if stats.get("cluster_size") != str(size):
            return False
        if stats.get("migrate_partitions_remaining") != "0":
            return False
        key = node_info(seed, "cluster-stable:size=%d" % size)
        if key is None or key.startswith("ERROR"):
            return False
        keys.add(key)
    return len(keys) == 1


def wait(what, timeout=30.0, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(step)
    return what()


@pytest.fixture
def cluster(aerospike_cluster):
    """The seed list, with the whole cluster stable before and after the test."""
    size = len(seeds(aerospike_cluster))
    assert wait(lambda: stable(aerospike_cluster, size), 60), "the cluster is not stable"
    yield aerospike_cluster
    assert wait(lambda: stable(aerospike_cluster, size), 60), "the test left the cluster unstable"


@pytest.fixture
def fixture_cluster(cluster):
    if not is_fixture(cluster):
        pytest.skip("needs the fixture cluster's own commands")
    assert info(seeds(cluster)[0], "fixture-reset") == "ok"
    return cluster


def can_control(hosts):
    import os

    return is_fixture(hosts) or bool(os.environ.get("AEROSPIKE_TEST_CTL"))


def connect(hosts):
    host, _, port = seeds(hosts)[0].rpartition(":")
    config = {
        "hosts": [(host, int(port))],
        "policies": {
            "read": {"replica": aerospike.POLICY_REPLICA_SEQUENCE, "total_timeout": 2000,
                     "socket_timeout": 500, "max_retries": 2},
            "write": {"total_timeout": 2000, "socket_timeout": 500},
        },
    }
    return aerospike.client(config).connect()


def masters(hosts):
    """{partition id: seed of its master}, from each node's `replicas`."""
    out = {}
    for seed in seeds(hosts):
        answer = info(seed, "replicas")
        for entry in filter(None, answer.split(";")):
            ns, _, value = entry.partition(":")
            if ns != NS:
                continue
            regime, count, *maps = value.split(",")
            assert len(maps) == int(count)
            bits = base64.b64decode(maps[0])
            for pid in range(4096):
                if bits[pid >> 3] & (0x80 >> (pid & 7)):
                    assert pid not in out, "two masters for partition %d" % pid
                    out[pid] = seed
    return out


def pid_of(key):
    digest = aerospike.calc_digest(NS, SET, key)
    return (digest[0] | (digest[1] << 8)) & 4095


def new_keys(n):
    run = uuid.uuid4().hex[:8]
    return ["%s-%d" % (run, i) for i in range(n)]


# -- discovery and routing ------------------------------------------------------


def test_client_discovers_every_node_from_one_seed(cluster):
    client = connect(cluster)
    try:
        nodes = client.get_node_names()
        assert len(nodes) == len(seeds(cluster))
        assert len({n["node_name"] for n in nodes}) == len(nodes)
        assert {"%s:%d" % (n["address"], n["port"]) for n in nodes} == set(seeds(cluster))
    finally:
        client.close()
    # Every partition has one master, and RF copies in all.
    owners = masters(cluster)
    assert len(owners) == 4096
    rf = int(kv(info(seeds(cluster)[0], "namespace/" + NS))["effective_replication_factor"])
    columns = 0
    for seed in seeds(cluster):
        entry = [e for e in info(seed, "replicas").split(";") if e.startswith(NS + ":")][0]
        _, count, *maps = entry.split(":", 1)[1].split(",")
        columns += sum(bin(b).count("1") for m in maps for b in base64.b64decode(m))
    assert columns == 4096 * rf


def test_keys_go_to_their_partition_master(fixture_cluster):
    hosts = fixture_cluster
    owners = masters(hosts)
    client = connect(hosts)
    try:
        keys = new_keys(90)
        for k in keys:
            client.put((NS, SET, k), {"v": k})
        for k in keys:
            assert client.get((NS, SET, k))[2] == {"v": k}
    finally:
        client.close()
    expected = {seed: 0 for seed in seeds(hosts)}
    for k in keys:
        expected[owners[pid_of(k)]] += 1
    for seed in seeds(hosts):
        stats = kv(info(seed, "fixture-stats"))
        assert int(stats["writes"]) == expected[seed], seed
        assert int(stats["reads"]) == expected[seed], seed  # replica SEQUENCE: the master first
        assert stats["proxies"] == "0"


def test_namespace_stats_add_up(cluster):
    client = connect(cluster)
    try:
        keys = new_keys(50)
        for k in keys:
            client.put((NS, SET, k), {"v": b"x" * 100})
    finally:
        client.close()
    per_node = [kv(info(seed, "namespace/" + NS)) for seed in seeds(cluster)]
    rf = int(per_node[0]["effective_replication_factor"])
    objects = sum(int(s["objects"]) for s in per_node)
    master = sum(int(s["master_objects"]) for s in per_node)
    prole = sum(int(s["prole_objects"]) for s in per_node)
    assert master >= len(keys) and objects == master + prole == rf * master
    used = [int(s["data_used_bytes"]) for s in per_node]
    assert all(u > 0 for u in used)


# -- node faults -----------------------------------------------------------------


def roundtrip_all(client, keys, value):
    """Write then read every key; return the keys that failed."""
    failed = []
    for k in keys:
        try:
            client.put((NS, SET, k), {"v": value, "k": k})
            if client.get((NS, SET, k))[2] != {"v": value, "k": k}:
                failed.append(k)
        except ex.AerospikeError:
            failed.append(k)
    return failed


def keys_mastered_by(hosts, seed, n):
    owners = masters(hosts)
    out = []
    while len(out) < n:
        out += [k for k in new_keys(64) if owners[pid_of(k)] == seed]
    return out[:n]


def test_killed_node_partitions_move_and_it_rejoins(cluster):
    if not can_control(cluster):
        pytest.skip("needs AEROSPIKE_TEST_CTL on a real cluster")
    victim = 1
    victim_seed = seeds(cluster)[victim]
    keys = keys_mastered_by(cluster, victim_seed, 20)
    client = connect(cluster)
    try:
        assert roundtrip_all(client, keys, 1) == []
        cluster_ctl(cluster, "kill", victim)
        killed = time.monotonic()
        # Within a few seconds (the heartbeat timeout, then the client's tend)
        # every key the dead node mastered reads and writes again: RF 2.
        assert wait(lambda: not roundtrip_all(client, keys, 2), 20), "no recovery"
        assert time.monotonic() - killed < 15
        others = [s for s in seeds(cluster) if s != victim_seed]
        assert wait(lambda: all(kv(info(s, "statistics"))["cluster_size"] == "2" for s in others))
        assert wait(lambda: len(client.get_nodes()) == 2, 10)
        cluster_ctl(cluster, "restart", victim)
        assert wait(lambda: len(client.get_nodes()) == 3, 20)
        # The migrations back count down to 0; the data is all there.
        assert wait(lambda: stable(cluster, 3), 60)
        for k in keys:
            assert client.get((NS, SET, k))[2] == {"v": 2, "k": k}
    finally:
        client.close()


def test_paused_node_is_left_behind_then_rejoins(cluster):
    if not can_control(cluster):
        pytest.skip("needs AEROSPIKE_TEST_CTL on a real cluster")
    victim = 2
    victim_seed = seeds(cluster)[victim]
    keys = keys_mastered_by(cluster, victim_seed, 10)
    client = connect(cluster)
    try:
        assert roundtrip_all(client, keys, 1) == []
        cluster_ctl(cluster, "pause", victim)
        try:
            assert node_info_quick(victim_seed) is None  # answers nothing, info included
            assert wait(lambda: not roundtrip_all(client, keys, 2), 20), "no recovery"
        finally:
            cluster_ctl(cluster, "resume", victim)
        assert wait(lambda: stable(cluster, 3), 60)
        assert wait(lambda: len(client.get_nodes()) == 3, 20)
        assert roundtrip_all(client, keys, 3) == []
    finally:
        client.close()


def node_info_quick(seed):
    """`node` with a short timeout: None when the node does not answer."""
    import socket

    from tests.server.proto import pack_proto, read_proto

    host, _, port = seed.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5) as sock:
            sock.sendall(pack_proto(1, b"node\n"))
            read_proto(sock)
            return "answered"
    except OSError:
        return None


def test_replication_factor_one_loses_a_killed_nodes_records():
    """With RF 1 a lost node's records are gone once the others re-form."""
    from tests.server.launch import running_cluster

    with running_cluster(nodes=3, rf=1, args=["--heartbeat-timeout", "0.5"]) as ports:
        hosts = ",".join("127.0.0.1:%d" % p for p in ports)
        assert wait(lambda: stable(hosts, 3), 20)
        victim_seed, other_seed = seeds(hosts)[0], seeds(hosts)[1]
        keys = keys_mastered_by(hosts, victim_seed, 10)
        others = keys_mastered_by(hosts, other_seed, 10)
        client = connect(hosts)
        try:
            for k in keys + others:
                client.put((NS, SET, k), {"v": 1})
            assert info(other_seed, "fixture-node:kill:0") == "ok"
            assert wait(lambda: len(client.get_nodes()) == 2, 20)
            assert wait(lambda: stable(",".join(seeds(hosts)[1:]), 2), 20)
            for k in keys:
                with pytest.raises(ex.RecordNotFound):
                    client.get((NS, SET, k))
            for k in others:
                assert client.get((NS, SET, k))[2] == {"v": 1}
        finally:
            client.close()


# -- NSUP and key busy, per node ----------------------------------------------------


def set_config_all(hosts, ns, key, value):
    for seed in seeds(hosts):
        cmd = "set-config:context=namespace;id=%s;%s=%s" % (ns, key, value)
        assert info(seed, cmd) == "ok", (seed, cmd)


def test_nsup_evicts_on_every_node(fixture_cluster):
    hosts = fixture_cluster
    # Namespace "small" as a full cache on each node: 1 MiB per node, evict at 50 %.
    set_config_all(hosts, "small", "data-size", "1M")
    set_config_all(hosts, "small", "evict-used-pct", "50")
    set_config_all(hosts, "small", "evict-tenths-pct", "300")
    client = connect(hosts)
    try:
        keys = new_keys(60)
        for i, k in enumerate(keys):
            # 60 records x 20 KB x RF 2 over 3 nodes: ~0.8 MiB a node; the
            # earliest void times go first. A node past stop-writes-used-pct (70)
            # before its NSUP woke refuses (both run on timers, as on a real
            # server: a slow machine sees it); a key refused counts as gone below.
            try:
                client.put(("small", SET, k), {"v": b"x" * 20_000}, policy={"ttl": 1000 + i * 10})
            except ex.ServerFull:
                pass

        def evicted():
            per_node = [kv(info(s, "namespace/small")) for s in seeds(hosts)]
            return all(int(s["evicted_objects"]) > 0 for s in per_node) and per_node

        per_node = wait(evicted, 20)
        assert per_node, "not every node evicted"
        # One evict void time, published to every node (SMD).
        assert all(s["smd_evict_void_time"] == per_node[0]["smd_evict_void_time"] for s in per_node)

        def consistent():
            # Master and replica copies go together: once the evictions stop
            # (every node below 50 %), each record left has its two copies.
            gone = 0
            for k in keys:
                try:
                    client.get(("small", SET, k))
                except ex.RecordNotFound:
                    gone += 1
            objects = sum(int(kv(info(s, "namespace/small"))["objects"]) for s in seeds(hosts))
            return 0 < gone < len(keys) and objects == 2 * (len(keys) - gone)

        assert wait(consistent, 20, 0.5)
    finally:
        client.close()
        for key, value in (("evict-used-pct", "0"), ("data-size", "2G")):
            set_config_all(hosts, "small", key, value)
        assert info(seeds(hosts)[0], "fixture-reset") == "ok"


def test_transaction_pending_limit_answers_key_busy(fixture_cluster):
    hosts = fixture_cluster
    key = new_keys(1)[0]
    digest = aerospike.calc_digest(NS, SET, key).hex()
    master = masters(hosts)[pid_of(key)]
    cmd = "set-config:context=namespace;id=%s;transaction-pending-limit=2" % NS
    assert info(master, cmd) == "ok"
    config = kv(info(master, "get-config:context=namespace;id=" + NS))
    assert config["transaction-pending-limit"] == "2"
    rule = "fixture-fault:kind=delay;op=write;ms=1500;digest=" + digest
    assert info(master, rule) == "ok"
    client = connect(hosts)
    results = []
    start = threading.Barrier(8)

    def write(i):
        start.wait()
        try:
            client.put((NS, SET, key), {"v": i}, policy={"total_timeout": 10000,
                                                        "socket_timeout": 10000})
            results.append(0)
        except ex.AerospikeError as e:
            results.append(e.code)

    try:
        threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        # One in flight and limit + 1 = 3 queued behind it are taken; the
        # other 4 are refused with KEY_BUSY (rw_request_hash.c handle_hot_key).
        assert sorted(results) == [0] * 4 + [14] * 4, results
        assert kv(info(master, "namespace/" + NS))["fail_key_busy"] == "4"
    finally:
        client.close()
        assert info(master, cmd.replace("=2", "=20")) == "ok"
