"""Self-test of the protocol-level test server, with raw sockets only.

Starts `python3 -m tests.server` on a free port and speaks the wire protocol by
hand (struct, no client library, no fixture modules), so CI can check the
fixture without the aerospike package.
"""

import os
import socket
import struct
import time

import pytest

from tests.server.launch import running

CITRUSLEAF_EPOCH = 1262304000
MiB = 1 << 20


# -- hand-rolled wire encoding -------------------------------------------------


def frame(ptype, body):
    return struct.pack(">Q", (2 << 56) | (ptype << 48) | len(body)) + body


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("server closed the connection")
        buf += chunk
    return bytes(buf)


def read_frame(sock):
    (word,) = struct.unpack(">Q", recv_exact(sock, 8))
    assert word >> 56 == 2, "proto version"
    return (word >> 48) & 0xFF, recv_exact(sock, word & 0xFFFFFFFFFFFF)


def info(sock, *commands):
    body = "".join(c + "\n" for c in commands).encode()
    sock.sendall(frame(1, body))
    ptype, reply = read_frame(sock)
    assert ptype == 1
    lines = reply.decode().split("\n")
    assert lines[-1] == ""
    pairs = [line.split("\t", 1) for line in lines[:-1]]
    assert [name for name, _ in pairs] == list(commands), "exactly the requested pairs"
    return dict(pairs)


def field(ftype, data):
    return struct.pack(">IB", len(data) + 1, ftype) + data


def op(opcode, ptype, name, value=b""):
    name = name.encode()
    return struct.pack(">IBBBB", 4 + len(name) + len(value), opcode, ptype, 0, len(name)) + name + value


def command(sock, info1, info2, ttl, ns, set_name, digest, ops=()):
    fields = [field(0, ns.encode()), field(1, set_name.encode()), field(4, digest)]
    header = struct.pack(">BBBBBBIIIHH", 22, info1, info2, 0, 0, 0, 0, ttl, 1000, len(fields), len(ops))
    sock.sendall(frame(3, header + b"".join(fields) + b"".join(ops)))
    ptype, body = read_frame(sock)
    assert ptype == 3
    _, _, _, _, _, result, gen, void_time, _, n_fields, n_ops = struct.unpack_from(">BBBBBBIIIHH", body)
    pos = 22
    for _ in range(n_fields):
        pos += 4 + struct.unpack_from(">I", body, pos)[0]
    bins = {}
    for _ in range(n_ops):
        size, _, ptype_, _, name_len = struct.unpack_from(">IBBBB", body, pos)
        name = body[pos + 8 : pos + 8 + name_len].decode()
        bins[name] = (ptype_, body[pos + 8 + name_len : pos + 4 + size])
        pos += 4 + size
    assert pos == len(body)
    return result, gen, void_time, bins


def put(sock, ns, digest, value, ttl=0, set_name="kv"):
    return command(sock, 0, 0x01, ttl, ns, set_name, digest, [op(2, 4, "b", value)])


def get(sock, ns, digest, set_name="kv"):
    return command(sock, 0x03, 0, 0, ns, set_name, digest)


# -- the fixture process --------------------------------------------------------


@pytest.fixture(scope="module")
def server_port():
    with running() as port:
        yield port


@pytest.fixture
def conn(server_port):
    sock = socket.create_connection(("127.0.0.1", server_port), timeout=10)
    info(sock, "fixture-reset")
    yield sock
    sock.close()


# -- tests ----------------------------------------------------------------------


def test_seed_validation_and_tend_info(conn, server_port):
    seed = info(conn, "node", "partition-generation", "build")
    assert 0 < len(seed["node"]) <= 19
    assert int(seed["partition-generation"]) != 0xFFFFFFFF
    assert seed["build"] == "8.1.2.0"

    tend = info(conn, "node", "peers-generation", "partition-generation")
    assert tend["node"] == seed["node"]
    peers = info(conn, "peers-clear-std")["peers-clear-std"]
    gen, port, rest = peers.split(",", 2)
    assert gen == tend["peers-generation"] and int(port) == server_port and rest == "[]"

    replicas = info(conn, "partition-generation", "replicas")["replicas"]
    tables = dict(entry.split(":", 1) for entry in filter(None, replicas.split(";")))
    assert set(tables) == {"lmcache", "small", "nonsup", "legacy"}
    for value in tables.values():
        regime, n_replicas, bitmap = value.split(",")
        assert (regime, n_replicas, len(bitmap)) == ("0", "1", 684)

    assert info(conn, "user-agent-set:value=MSxjLTcuNi4xLA==")["user-agent-set:value=MSxjLTcuNi4xLA=="] == "ok"
    assert info(conn, "bogus")["bogus"] == "ERROR:4:unrecognized command"


def test_namespace_info(conn):
    ns = dict(kv.split("=", 1) for kv in info(conn, "namespace/lmcache")["namespace/lmcache"].split(";"))
    assert ns["max-record-size"] == str(8 * MiB) and ns["storage-engine"] == "memory"
    assert "storage-engine.write-block-size" not in ns
    legacy = info(conn, "namespace/legacy")["namespace/legacy"]
    assert "storage-engine.write-block-size=1048576" in legacy
    assert info(conn, "namespace/none")["namespace/none"] == "type=unknown"


def kv_dict(text):
    return dict(item.split("=", 1) for item in text.split(";"))


# What the CLI's probe and stats read, under CE 8.1.2.0's names.
NAMESPACE_KEYS = (
    "objects", "data_used_bytes", "data_total_bytes", "data_used_pct", "data_avail_pct",
    "stop_writes", "clock_skew_stop_writes", "default-ttl", "nsup-period",
    "allow-ttl-without-nsup", "max-record-size", "storage-engine.data-size",
    "storage-engine.stop-writes-used-pct", "storage-engine.stop-writes-avail-pct",
    "stop-writes-sys-memory-pct",
)


def test_statistics_count_the_store(conn):
    before = kv_dict(info(conn, "statistics")["statistics"])
    assert (before["cluster_size"], before["objects"]) == ("1", "0")
    assert int(before["client_connections"]) >= 1  # this one
    put(conn, "lmcache", b"\x07" * 20, b"v")
    put(conn, "small", b"\x08" * 20, b"w")
    after = kv_dict(info(conn, "statistics")["statistics"])
    assert after["objects"] == "2"  # every namespace's records


def test_namespace_usage_follows_the_store(conn):
    empty = kv_dict(info(conn, "namespace/lmcache")["namespace/lmcache"])
    assert set(NAMESPACE_KEYS) <= set(empty)
    assert (empty["objects"], empty["data_used_bytes"], empty["data_used_pct"]) == ("0", "0", "0")
    assert empty["data_total_bytes"] == empty["storage-engine.data-size"] == str(2 << 30)
    assert (empty["stop_writes"], empty["default-ttl"], empty["nsup-period"]) == ("false", "0", "1")
    assert not any(k.endswith("write-block-size") for k in empty)  # 8.x has none
    # A namespace small enough for a few records to move the percentages.
    cmd = "set-config:context=namespace;id=small;data-size=1048576"
    assert info(conn, cmd)[cmd] == "ok"
    for i in range(3):
        put(conn, "small", bytes([9, i]) * 10, b"x" * 100_000)
    full = kv_dict(info(conn, "namespace/small")["namespace/small"])
    used = int(full["data_used_bytes"])
    assert full["objects"] == "3" and 300_000 < used < 310_000
    assert full["data_total_bytes"] == str(MiB)
    assert full["data_used_pct"] == str(100 * used // MiB) == "28"
    assert full["data_avail_pct"] == "72"


def test_put_get_round_trip(conn):
    digest = bytes(range(20))
    value = os.urandom(4096)
    result, gen, void_time, bins = put(conn, "lmcache", digest, value, ttl=100)
    assert (result, gen, bins) == (0, 1, {})
    now = int(time.time()) - CITRUSLEAF_EPOCH
    assert now + 98 <= void_time <= now + 101

    result, gen, void_time2, bins = get(conn, "lmcache", digest)
    assert (result, gen, void_time2) == (0, 1, void_time)
    assert bins == {"b": (4, value)}

    assert get(conn, "lmcache", b"\x01" * 20)[0] == 2  # not found


def test_record_too_big_and_forbidden_ttl(conn):
    assert put(conn, "small", b"\x02" * 20, b"x" * (MiB - 55), ttl=100)[0] == 0
    assert put(conn, "small", b"\x03" * 20, b"x" * (MiB - 54), ttl=100)[0] == 13
    assert put(conn, "nonsup", b"\x04" * 20, b"x", ttl=60)[0] == 22
    assert put(conn, "nonsup", b"\x04" * 20, b"x", ttl=0xFFFFFFFF)[0] == 0
    assert put(conn, "nope", b"\x05" * 20, b"x")[0] == 20


def test_fault_result_and_stats(conn):
    digest = b"\x06" * 20
    assert put(conn, "lmcache", digest, b"v")[0] == 0
    rule = "fixture-fault:kind=result;code=14;op=read;count=1;digest=" + digest.hex()
    assert info(conn, rule)[rule] == "ok"
    assert get(conn, "lmcache", digest)[0] == 14
    assert get(conn, "lmcache", digest)[0] == 0
    stats = dict(kv.split("=") for kv in info(conn, "fixture-stats")["fixture-stats"].split(";"))
    assert (stats["writes"], stats["reads"], stats["records.lmcache"]) == ("1", "2", "1")
    bad = "fixture-fault:kind=nope"
    assert info(conn, bad)[bad].startswith("ERROR:4:")
