"""What the cache benchmarks (bench/cache/cache_fill.py, bench/cache/cache_bench.py) know of a
cluster: its capacity, its nodes and the names a control command knows them by, which
node masters the shared clock's record, and whether the cluster is whole.

Capacity. Each node answers `namespace/<ns>` for its own share; a cache holds what
NSUP lets it hold before it evicts, data size x evict-used-pct / 100 (or x
stop-writes-used-pct / 100 when it does not evict), summed over the nodes, over the
replication factor (every record is held that many times).

The clock's node. The engine's shared clock is one record (namespace NS, set
lmca_clock, string key void-clock; src/engine/clock.c). Its partition is the low 12
bits of the first two bytes of its digest, little-endian (the C client's
as_partition_getid), and the node that masters that partition answers `replicas`
with the partition's bit set in its first bitmap (as_partition.c,
as_partition_tables_update_all: "ns:regime,count,bitmap,...;", one base64 bitmap a
replica, the master's first, partition i at byte i / 8, mask 0x80 >> i % 8).

Node names. A node is known to the client by its id and address; the control command
(scripts/aerospike-loopback.sh) by a name (cache0, ssd1, ...), fixed by its port. The
protocol test server's multi-node mode takes a node's index instead, which its
`fixture-cluster` answer gives by port. --ctl-node HOST:PORT=NAME names any other.

Info goes to one node at a time over a socket of its own (info_at), not through the
Connector: a Connector's info asks every node and fails when one is paused.
"""

import base64
import hashlib
import socket
import struct
import time

NAMESPACE_INFO = "namespace/{}"
CLOCK_SET, CLOCK_KEY = "lmca_clock", "void-clock"  # src/engine/internal.h, clock.c
PARTITIONS = 4096
# scripts/aerospike-loopback.sh's nodes by service port.
LOOPBACK_NAMES = {3000: "single", 3100: "0", 3110: "1", 3120: "2", 3200: "bench", 3300: "pack",
                  3400: "cache", 3500: "ssd", 3600: "cache0", 3610: "cache1", 3620: "cache2",
                  3700: "ssd0", 3710: "ssd1", 3720: "ssd2"}


# ------------------------------------------------------------------ info answers

def parse_info(answer):
    """'a=1;b=x' -> {'a': '1', 'b': 'x'}."""
    return dict(item.split("=", 1) for item in answer.split(";") if "=" in item)


def replication_factor(kv):
    return int(kv.get("effective_replication_factor") or kv.get("replication-factor") or 1)


def capacity(nodes):
    """What the namespace holds as a cache, over the cluster: per node data size x
    evict-used-pct / 100 (where NSUP starts evicting), or x stop-writes-used-pct / 100
    when it does not evict, summed, over the replication factor. nodes: Connector.info
    (namespace/NS)'s [(node, address, answer)]."""
    total, rf = 0, 1
    for _node, _addr, answer in nodes:
        kv = parse_info(answer)
        size = int(kv.get("data_total_bytes") or kv.get("storage-engine.data-size") or 0)
        pct = int(kv.get("storage-engine.evict-used-pct", 0) or 0) or \
            int(kv.get("storage-engine.stop-writes-used-pct", 100) or 100)
        total += size * pct // 100
        rf = max(rf, replication_factor(kv))
    return total // rf


def data_size(nodes):
    """The namespace's data size over the cluster, over the replication factor: the
    DRAM a memory namespace costs (a device namespace's is its index, not this)."""
    total, rf = 0, 1
    for _node, _addr, answer in nodes:
        kv = parse_info(answer)
        total += int(kv.get("data_total_bytes") or kv.get("storage-engine.data-size") or 0)
        rf = max(rf, replication_factor(kv))
    return total // rf


def namespace_counters(nodes):
    """The namespace's eviction figures from every node: record counts summed (every
    copy: a node evicts and counts its replicas too), master_objects (each record
    once; objects over the replication factor where a node does not say), the
    fullest node's data_used_pct, stop_writes on any node."""
    out = {"evicted_objects": 0, "expired_objects": 0, "objects": 0, "master_objects": 0,
           "data_used_pct": 0, "stop_writes": False}
    for _node, _addr, answer in nodes:
        kv = parse_info(answer)
        for name in ("evicted_objects", "expired_objects", "objects"):
            out[name] += int(kv.get(name, 0))
        out["master_objects"] += int(kv.get("master_objects")
                                     or int(kv.get("objects", 0)) // replication_factor(kv))
        out["data_used_pct"] = max(out["data_used_pct"], int(kv.get("data_used_pct", 0)))
        out["stop_writes"] |= kv.get("stop_writes") == "true"
    return out


def evicted_since(before, after):
    """Records the nodes evicted between two namespace/NS answers (every copy); a node
    started again in between counts from its start."""
    start = {address: int(parse_info(a).get("evicted_objects", 0)) for _, address, a in before}
    total = 0
    for _node, address, answer in after:
        now = int(parse_info(answer).get("evicted_objects", 0))
        total += now - start.get(address, 0) if now >= start.get(address, 0) else now
    return total


# ------------------------------------------------------------------ the clock's node

def clock_digest(set_name=CLOCK_SET, key=CLOCK_KEY):
    """The clock record's digest: RIPEMD-160 of the set, the key's type (3, a string)
    and the key (the namespace takes no part). The official client computes it where
    it is installed; hashlib does where OpenSSL still offers RIPEMD-160."""
    try:
        import aerospike

        return bytes(aerospike.calc_digest("ns", set_name, key))
    except ImportError:
        return hashlib.new("ripemd160", set_name.encode() + b"\x03" + key.encode()).digest()


def partition_id(digest):
    return int.from_bytes(digest[:2], "little") & (PARTITIONS - 1)


def replica_maps(answer):
    """A node's `replicas` answer -> {namespace: (regime, [bitmap of replica 0 (the
    masters), replica 1, ...])}."""
    out = {}
    for part in filter(None, answer.strip().split(";")):
        ns, _, rest = part.partition(":")
        fields = rest.split(",")
        regime, count = int(fields[0]), int(fields[1])
        out[ns] = (regime, [base64.b64decode(b) for b in fields[2:2 + count]])
    return out


def owns(bitmap, pid):
    return bool(bitmap[pid >> 3] & (0x80 >> (pid & 7)))


def master_of(answers, namespace, pid):
    """The address whose node claims to master partition `pid` of `namespace`, from
    each node's `replicas` answer ({address: answer}); None when none does. Two
    claims (a node that has not heard of a new regime yet): the higher regime wins."""
    best = None
    for address, answer in answers.items():
        regime, bitmaps = replica_maps(answer).get(namespace, (0, []))
        if bitmaps and owns(bitmaps[0], pid) and (best is None or regime > best[0]):
            best = (regime, address)
    return best and best[1]


# ------------------------------------------------------------------ names and nodes

def port_of(address):
    return int(address.rpartition(":")[2])


def parse_ctl_node(text):
    """'HOST:PORT=NAME' -> ('HOST:PORT', 'NAME')."""
    address, sep, name = text.partition("=")
    if not sep or not name or not address.rpartition(":")[2].isdigit():
        raise ValueError(f"--ctl-node {text!r}: expected HOST:PORT=NAME")
    return address, name


def node_names(addresses, overrides=(), table=None):
    """{address: the control command's name for it}: by port from `table` (default
    the loopback script's names), overrides ([(address, name)], from --ctl-node)
    winning. A node with no name is left out (events cannot reach it; its log is not
    read)."""
    table = LOOPBACK_NAMES if table is None else table
    names = {a: table[port_of(a)] for a in addresses if port_of(a) in table}
    names.update(overrides)
    return names


def fixture_names(answer, addresses):
    """{port: index} of the test server's nodes, from its `fixture-cluster` answer
    (index:name:port:state:member;...), or by the order of their ports where it has
    none (a single node)."""
    table = {}
    for item in filter(None, answer.split(";")):
        fields = item.split(":")
        if len(fields) >= 3 and fields[0].isdigit() and fields[2].isdigit():
            table[int(fields[2])] = fields[0]
    return table or {port_of(a): str(i) for i, a in enumerate(sorted(addresses, key=port_of))}


# ------------------------------------------------------------------ raw info

def info_at(address, command, timeout=2.0):
    """One info command to one node (its own connection); returns the answer's value.
    Raises OSError when the node does not answer within `timeout` (a paused node
    accepts the connection and says nothing)."""
    host, _, port = address.rpartition(":")
    body = (command + "\n").encode()
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as s:
        s.sendall(struct.pack(">Q", (2 << 56) | (1 << 48) | len(body)) + body)
        size = int.from_bytes(_recv(s, 8)[2:], "big")
        line = _recv(s, size).decode(errors="replace").split("\n", 1)[0]
    return line.split("\t", 1)[1] if "\t" in line else line


def _recv(sock, n):
    data = b""
    while len(data) < n:
        part = sock.recv(n - len(data))
        if not part:
            raise ConnectionError("the node closed the connection")
        data += part
    return data


def answers(addresses, command, timeout=2.0):
    """{address: answer} of the nodes that answered."""
    out = {}
    for address in addresses:
        try:
            out[address] = info_at(address, command, timeout)
        except OSError:
            pass
    return out


def is_fixture(address):
    """The test server answers its own fixture-stats; Aerospike refuses it."""
    try:
        return not info_at(address, "fixture-stats").startswith("ERROR")
    except OSError:
        return False


def clock_master(addresses, namespace):
    """The address of the node that masters the shared clock's record now, or None."""
    pid = partition_id(clock_digest())
    return master_of(answers(addresses, "replicas"), namespace, pid)


def cluster_state(addresses):
    """{address: (cluster_size, migrate_partitions_remaining)} or None where the node
    does not answer."""
    out = {}
    for address in addresses:
        try:
            kv = parse_info(info_at(address, "statistics"))
            out[address] = (int(kv.get("cluster_size", 0)),
                            int(kv.get("migrate_partitions_remaining", 0)))
        except (OSError, ValueError):
            out[address] = None
    return out


def whole(state, size):
    """Every node answers, sees `size` nodes and has no partition left to migrate."""
    return all(s is not None and s[0] == size and s[1] == 0 for s in state.values())


def wait_whole(addresses, size, timeout_s=600.0, every_s=1.0):
    """Waits until the cluster is whole; returns (whole, seconds waited, last state)."""
    t0 = time.monotonic()
    while True:
        state = cluster_state(addresses)
        if whole(state, size) or time.monotonic() - t0 >= timeout_s:
            return whole(state, size), time.monotonic() - t0, state
        time.sleep(every_s)


class Nodes:
    """The cluster's nodes as the client found them at the start: their addresses, the
    control command's name for each, whether they are the test server's."""

    def __init__(self, addresses, names, namespace, fixture=False, ids=None):
        self.addresses, self.names, self.namespace = list(addresses), dict(names), namespace
        self.fixture, self.ids = fixture, dict(ids or {})

    @classmethod
    def discover(cls, conn, namespace, overrides=()):
        """From a Connector: every node's id and address (info `node`)."""
        found = conn.info("node")
        addresses = [address for _id, address, _ in found]
        fixture, table = is_fixture(addresses[0]), None
        if fixture:  # the test server: its nodes by index
            try:
                answer = info_at(addresses[0], "fixture-cluster")
            except OSError:
                answer = ""
            table = fixture_names("" if answer.startswith("ERROR") else answer, addresses)
        return cls(addresses, node_names(addresses, overrides, table), namespace, fixture,
                   {address: node_id for node_id, address, _ in found})

    def address_of(self, name):
        return next((a for a, n in self.names.items() if n == name), None)

    def describe(self):
        """[{id, address, name}] for the reports."""
        return [{"id": self.ids.get(a), "address": a, "name": self.names.get(a)}
                for a in self.addresses]
