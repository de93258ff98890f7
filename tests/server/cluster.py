"""A cluster of test-server nodes in one process.

Each node is a Fixture (server.py) with its own listener on its own loopback
port, its own store, namespace state, NSUP and stop-writes threads and
counters; all nodes share one lock, so a command and its replication happen
at once, and one set of fault rules. What the cluster adds, after CE 8.1.2.0:

* Partitions (as/src/fabric/partition_balance.c fill_global_tables): each of
  the 4096 partitions orders the cluster's nodes by a hash of (partition id,
  node id), highest first; the first is the master, the next
  min(replication-factor, cluster size) - 1 the replicas. The same for every
  namespace. A node's `replicas` answer has one base64 bitmap per replica
  column (partition.c client_replica_maps_update: bit 0x80 >> (pid & 7) of
  byte pid >> 3) and regime 0: regimes belong to strong consistency, which CE
  does not have, so an AP node reports `rebalance_regime` 0.
* Commands (partition.c find_best_node, proxy): a node runs a write for a
  partition it is master of, and a read for one it holds; anything else is
  proxied to the master (in process here), or answered TIMEOUT (9) when that
  master is down, as a proxy that gets no answer would end. A write is then
  copied to the partition's replicas, synchronously (write-commit-level all);
  a replica that is paused misses it and is brought up to date when it
  resumes, one that is down is skipped.
* Membership (heartbeat, exchange.c): a node that stops answering (killed or
  paused) stays in the cluster for `heartbeat_timeout` seconds, then the
  others re-form without it; a node that answers again (resumed or restarted)
  joins after `rejoin_delay` seconds. Each re-forming is a rebalance: a new
  cluster key and generation, a higher partition-generation on every node,
  peers-generation where the peers changed.
* Migrations: when a rebalance gives a partition to a node that does not hold
  it, the fixture copies the partition at once from a node that does (the
  new master if it holds it, else the first holder in the new order); if no
  live node holds it (replication-factor 1, or every copy lost) it is gone.
  `migrate_partitions_remaining` (and the namespaces' migrate_tx/rx) then
  counts those transfers down to 0 over `migrate_seconds`, `cluster-stable`
  answers ERROR:7 meanwhile, and at the end nodes drop the partitions they no
  longer own. A node that rejoins as a partition's master with the copy it
  kept (paused past the heartbeat timeout) is master at once, over that stale
  copy, as a real one is (measured on CE 8.1: reads of a resumed node answered
  its old records until its fill ended): until the migrations end, a write
  there first takes the newer of its record and the full copy's (duplicate
  resolution, by generation, then last update), and so does a read that asks
  for every copy (INFO1_READ_MODE_AP_ALL); any other read answers the stale
  copy. At the end the full copy is merged in the same way.
* NSUP runs per node over the node's own copies (master and replica alike, as
  nsup.c reduces every partition it holds). An evict void time is published
  through SMD, i.e. to every node of the cluster, and each node evicts its own
  copies below it on its next wake-up (nsup.c nsup_smd_accept_cb, evict).
  Stop-writes is per node: a master in stop-writes refuses writes (8);
  replica writes are never refused.
* Node faults: kill (listener and connections closed at once, the node's state
  gone), pause (connections kept, nothing answered, threads frozen), resume,
  restart (a killed node listens again on its port, empty, and rejoins).

In process: `cl = cluster.start(nodes=3, replication_factor=2)`, then
`cl.ports`, `cl.kill(1)`, `cl.restart(1)`, `cl.pause(2)`, `cl.resume(2)`,
`cl.status()`, `cl.wait_for(lambda cl: len(cl.members) == 3)`, `cl.close()`.
"""

import base64
import hashlib
import math
import random
import threading
import time
from dataclasses import replace

from . import engine, proto
from .cluster_info import ClusterInfo
from .engine import Reply
from .faults import Faults
from .server import Fixture, Options, Server
from .store import DEFAULT_NAMESPACES, parse_namespace_spec

N_PARTITIONS = 4096
UNINITIALIZED = 0xFFFFFFFF  # partition-generation before a node's first balance
CLUSTER_NAME = "fixture"
HEARTBEAT_TIMEOUT = 1.5  # s: the loopback cluster's interval 150 ms x timeout 10
REJOIN_DELAY = 0.5  # s from answering again to being in the cluster
MIGRATE_SECONDS = 2.0  # s a rebalance's migrations take to count down
TICK = 0.05  # s between membership checks


def _rank(pid, name):
    """A partition's order of a node: a hash of both, as fill_global_tables
    hashes the hashed pid with the hashed node id (not the same hash)."""
    digest = hashlib.blake2b(b"%d:%s" % (pid, name.encode()), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _bitmap(pids):
    """partition.c's client bitmap of `pids`, base64."""
    bits = bytearray(N_PARTITIONS // 8)
    for pid in pids:
        bits[pid >> 3] |= 0x80 >> (pid & 7)
    return base64.b64encode(bytes(bits)).decode()


EMPTY_BITMAP = _bitmap(())


class ClusterNode(Fixture):
    """One incarnation of a node: a Fixture whose commands are routed by the
    cluster's partition map. A restart makes a new one in the same Slot."""

    info_class = ClusterInfo

    def __init__(self, cluster, slot):
        self.cluster = cluster
        self.slot = slot
        self.proxies = 0
        super().__init__(cluster.configs, cluster.options, lock=cluster.lock)
        # Fault rules are the cluster's: a rule for a record fires on whichever
        # node the command reaches (fixture-node makes node faults).
        self.faults = cluster.faults
        self.store.smd_set = cluster.smd_set
        self.store.smd_delete = cluster.smd_delete

    def running(self):
        return self.slot.fx is self and self.slot.state == "up"

    def execute(self, req):
        return self.cluster.execute(self, req)

    def serves_partition(self, pid):
        owners = self.cluster.owners[pid]
        slot = self.slot
        return slot.member and bool(owners) and owners[0] == slot.index and pid in slot.holds


class Slot:
    """A node's place in the cluster: its port and name, which outlive its
    incarnations, its state and its view of the cluster."""

    def __init__(self, index):
        self.index = index
        self.port = 0
        self.name = ""
        self.state = "up"  # up | paused | dead
        self.since = time.monotonic()  # when the state last changed
        self.fx = None
        self.server = None
        self.member = False
        self.part_gen = UNINITIALIZED
        self.peers_gen = 1
        self.peers = ()  # slot indices of the other members, in its view
        self.holds = set()  # partitions it holds a whole copy of
        self.missed = set()  # partitions whose writes it missed while paused
        self.maps = [EMPTY_BITMAP]  # base64 bitmap per replica column
        self.migrate_tx = 0
        self.migrate_rx = 0


class Cluster:
    def __init__(self, configs, options, nodes=3, replication_factor=2, base_port=0,
                 heartbeat_timeout=HEARTBEAT_TIMEOUT, rejoin_delay=REJOIN_DELAY,
                 migrate_seconds=MIGRATE_SECONDS):
        if nodes < 1 or replication_factor < 1:
            raise ValueError("nodes and replication factor must be >= 1")
        self.configs = configs
        self.options = options
        self.rf = replication_factor
        self.heartbeat_timeout = heartbeat_timeout
        self.rejoin_delay = rejoin_delay
        self.migrate_seconds = migrate_seconds
        self.name = CLUSTER_NAME
        self.lock = threading.RLock()  # every node's Store.lock, and the view's
        self.faults = Faults()  # every node's fault rules
        self.slots = [Slot(i) for i in range(nodes)]
        self.members = []  # slot indices, principal (highest node id) first
        self.owners = [()] * N_PARTITIONS  # per partition: master, replicas
        self.cluster_key = "0"
        self.cluster_gen = 0
        self.smd = {}  # namespace -> published evict void time
        self.migrate_until = 0.0
        self.migrating = False
        self.duplicates = {}  # pid -> slot index of the full copy, while migrating
        with self.lock:
            for slot in self.slots:
                self._boot(slot, base_port + slot.index if base_port else 0)
            self._rebalance([s.index for s in self.slots])
        self._stopping = threading.Event()
        self._monitor = threading.Thread(target=self._run, name="cluster", daemon=True)
        self._monitor.start()

    # -- public API -------------------------------------------------------------

    @property
    def ports(self):
        return [s.port for s in self.slots]

    def close(self):
        self._stopping.set()
        for slot in self.slots:
            if slot.state != "dead":
                slot.server.close()

    def node(self, action, index):
        """Apply a node fault: kill, pause, resume, restart (stop and start
        are kill and restart, as scripts/aerospike-loopback.sh names them).
        Raise ValueError when it does not apply."""
        if not 0 <= index < len(self.slots):
            raise ValueError("no node %d" % index)
        action = {"stop": "kill", "start": "restart"}.get(action, action)
        method = {"kill": self.kill, "pause": self.pause, "resume": self.resume,
                  "restart": self.restart}.get(action)
        if method is None:
            raise ValueError("action must be kill, pause, resume or restart")
        method(index)

    def kill(self, index):
        with self.lock:
            slot = self.slots[index]
            if slot.state == "dead":
                raise ValueError("node %d is not running" % index)
            slot.state, slot.since = "dead", time.monotonic()
            slot.holds, slot.missed = set(), set()
        slot.server.kill()

    def pause(self, index):
        with self.lock:
            slot = self.slots[index]
            if slot.state != "up":
                raise ValueError("node %d is not up" % index)
            slot.state, slot.since = "paused", time.monotonic()
            slot.server.answering.clear()

    def resume(self, index):
        with self.lock:
            slot = self.slots[index]
            if slot.state != "paused":
                raise ValueError("node %d is not paused" % index)
            slot.state, slot.since = "up", time.monotonic()
            if slot.member:
                # Within the heartbeat timeout: the cluster never noticed.
                # Catch up on the replica writes it missed, and on partitions
                # a rebalance gave it meanwhile.
                owned = {pid for pid in range(N_PARTITIONS) if index in self.owners[pid]}
                groups = self._groups()
                for pid in sorted(slot.missed | (owned - slot.holds)):
                    src = self.owners[pid][0]
                    if src != index and self.up(src) and pid in self.slots[src].holds:
                        self._copy_partition(groups, src, index, pid)
                        slot.holds.add(pid)
                slot.missed = set()
            else:
                # Left behind: an orphan (partition_balance.c
                # as_partition_balance_revert_to_orphan) until it rejoins.
                self._orphan(slot)
            slot.server.answering.set()

    def restart(self, index):
        with self.lock:
            slot = self.slots[index]
            if slot.state != "dead":
                raise ValueError("node %d is running" % index)
            self._boot(slot, slot.port)
            slot.state, slot.since = "up", time.monotonic()
            slot.member, slot.part_gen, slot.peers_gen, slot.peers = False, UNINITIALIZED, 1, ()
            slot.maps = [EMPTY_BITMAP]
            slot.migrate_tx = slot.migrate_rx = 0

    def status(self):
        """[(index, name, port, state, member)]."""
        with self.lock:
            return [(s.index, s.name, s.port, s.state, s.member) for s in self.slots]

    def wait_for(self, predicate, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if predicate(self):
                    return True
            time.sleep(TICK)
        return False

    # -- nodes ------------------------------------------------------------------

    def _boot(self, slot, port):
        fx = ClusterNode(self, slot)
        server = Server(fx, port=port)
        slot.fx, slot.server, slot.port, slot.name = fx, server, fx.port, fx.node_name
        threading.Thread(target=server.serve_forever, name="node-%d" % slot.index,
                         daemon=True).start()

    def _orphan(self, slot):
        slot.member = False
        slot.part_gen = 1 if slot.part_gen == UNINITIALIZED else slot.part_gen + 1
        slot.maps = [EMPTY_BITMAP]
        slot.holds, slot.missed = set(), set()
        slot.migrate_tx = slot.migrate_rx = 0

    def up(self, index):
        return self.slots[index].state == "up"

    # -- membership -----------------------------------------------------------

    def _run(self):
        while not self._stopping.wait(TICK):
            with self.lock:
                self._tick(time.monotonic())

    def _tick(self, now):
        members = list(self.members)
        for slot in self.slots:
            gone = slot.state != "up" and now - slot.since >= self.heartbeat_timeout
            back = slot.state == "up" and now - slot.since >= self.rejoin_delay
            if slot.index in members and gone:
                members.remove(slot.index)
            elif slot.index not in members and back:
                members.append(slot.index)
        if set(members) != set(self.members):
            self._rebalance(members)
        elif self.migrating and now >= self.migrate_until:
            self._finish_migrations()

    def _groups(self):
        """{slot index: {namespace: {pid: [digest]}}} of the live nodes."""
        groups = {}
        for slot in self.slots:
            if slot.state != "up":
                continue
            per_ns = groups[slot.index] = {}
            for name, ns in slot.fx.store.namespaces.items():
                by_pid = per_ns[name] = {}
                for digest in ns.records:
                    by_pid.setdefault(proto.partition_id(digest), []).append(digest)
        return groups

    def _copy_partition(self, groups, src, dst, pid):
        """Make dst's copy of partition `pid` the same as src's (src None: empty)."""
        dst_store = self.slots[dst].fx.store
        for name, dst_ns in dst_store.namespaces.items():
            for digest in groups.get(dst, {}).get(name, {}).get(pid, ()):
                dst_ns.delete(digest)
            if src is None:
                continue
            src_ns = self.slots[src].fx.store.get(name)
            for digest in groups.get(src, {}).get(name, {}).get(pid, ()):
                rec = src_ns.records.get(digest)
                if rec is not None:
                    dst_ns.store(digest, replace(rec))

    def _rebalance(self, members):
        """partition_balance.c as_partition_balance, for the new member list."""
        slots = self.slots
        members = sorted(members, key=lambda i: slots[i].name, reverse=True)
        rf = min(self.rf, len(members))
        owners = []
        for pid in range(N_PARTITIONS):
            seq = sorted(members, key=lambda i: _rank(pid, slots[i].name), reverse=True)
            owners.append(tuple(seq[:rf]))
        live = [i for i in members if slots[i].state == "up"]
        groups = self._groups()
        tx, rx = {}, {}
        for pid, new in enumerate(owners):
            need = [i for i in new if slots[i].state == "up" and pid not in slots[i].holds]
            if not need:
                continue
            holders = [i for i in new if slots[i].state == "up" and pid in slots[i].holds]
            holders = holders or [i for i in live if pid in slots[i].holds]
            src = holders[0] if holders else None
            for dst in need:
                if dst == new[0] and src is not None and groups.get(dst) and \
                        any(pid in by_pid for by_pid in groups[dst].values()):
                    # Back with the copy it kept: master over it now, the full
                    # copy merged as the migration ends.
                    self.duplicates[pid] = src
                else:
                    self._copy_partition(groups, src, dst, pid)
                slots[dst].holds.add(pid)
                if src is not None:
                    tx[src] = tx.get(src, 0) + 1
                    rx[dst] = rx.get(dst, 0) + 1
        self.owners = owners
        self.members = members
        self.cluster_key = "%X" % random.getrandbits(64)
        self.cluster_gen += 1
        for slot in slots:
            if slot.index not in members:
                if slot.member:
                    slot.member = False  # left the cluster (down), or about to
                continue
            slot.member = True
            slot.part_gen = 1 if slot.part_gen == UNINITIALIZED else slot.part_gen + 1
            peers = tuple(sorted(i for i in members if i != slot.index))
            if peers != slot.peers:
                slot.peers = peers
                slot.peers_gen += 1
            slot.maps = [_bitmap(p for p in range(N_PARTITIONS) if owners[p][col] == slot.index)
                         for col in range(rf)]
            slot.migrate_tx, slot.migrate_rx = tx.get(slot.index, 0), rx.get(slot.index, 0)
            for name, value in self.smd.items():  # SMD is synchronised on joining
                ns = slot.fx.store.get(name)
                if ns is not None:
                    ns.smd_evict_void_time = value
        if tx:
            self.migrating = True
            self.migrate_until = time.monotonic() + self.migrate_seconds
        else:
            self._finish_migrations()

    def _finish_migrations(self):
        """Migrations done: nodes drop the partitions they do not own."""
        self.migrating = False
        for pid, src in sorted(self.duplicates.items()):
            master = self.owners[pid][0] if self.owners[pid] else None
            if master is not None and self.up(master) and self.up(src):
                for name, ns in self.slots[src].fx.store.namespaces.items():
                    for digest in [d for d in ns.records if proto.partition_id(d) == pid]:
                        self._resolve(self.slots[master], src, name, digest)
        self.duplicates = {}
        for i in self.members:
            slot = self.slots[i]
            slot.migrate_tx = slot.migrate_rx = 0
            if slot.state != "up":
                continue
            for ns in slot.fx.store.namespaces.values():
                for digest in [d for d in ns.records
                               if i not in self.owners[proto.partition_id(d)]]:
                    ns.delete(digest)
            slot.holds = {pid for pid in range(N_PARTITIONS) if i in self.owners[pid]}
            slot.part_gen += 1

    def migrations_remaining(self, slot):
        """Partitions this node still sends or receives (per namespace)."""
        if not self.migrating:
            return 0
        left = max(self.migrate_until - time.monotonic(), 0.0) / self.migrate_seconds
        return math.ceil((slot.migrate_tx + slot.migrate_rx) * left)

    # -- commands --------------------------------------------------------------

    def execute(self, fx, req):
        """Run `req`, received by node `fx`, where the real cluster would (the
        store lock is held)."""
        pid = proto.partition_id(req.digest)
        owners = self.owners[pid]
        me = fx.slot.index
        local = (fx.slot.member and me in owners and pid in fx.slot.holds
                 and (req.kind == "read" or owners[0] == me))
        target = fx.slot if local else (self.slots[owners[0]] if owners else None)
        if not local:
            fx.proxies += 1
        if target is None or target.state != "up":
            return Reply(proto.ERR_TIMEOUT)  # the proxy gets no answer
        store = target.fx.store
        src = self.duplicates.get(pid)
        if src is not None and target.index == owners[0] and self.up(src) and \
                (req.kind != "read" or req.info1 & proto.INFO1_READ_MODE_AP_ALL):
            self._resolve(target, src, req.ns, req.digest)
        before = self._record_state(store, req.ns, req.digest)
        reply = engine.execute(store, req)
        if self._record_state(store, req.ns, req.digest) != before:
            self._replicate(target, req.ns, req.digest, pid)
        return reply

    def _resolve(self, master, src, ns_name, digest):
        """Duplicate resolution: the master keeps the newer of its record and
        node `src`'s (higher generation, then later update; the replicas follow)."""
        theirs = self.slots[src].fx.store.get(ns_name)
        rec = theirs.records.get(digest) if theirs is not None else None
        ns = master.fx.store.get(ns_name)
        if rec is None or ns is None:
            return
        mine = ns.records.get(digest)
        if mine is None or (rec.generation, rec.last_update_ms) > \
                (mine.generation, mine.last_update_ms):
            ns.store(digest, replace(rec))
            self._replicate(master, ns_name, digest, proto.partition_id(digest))

    @staticmethod
    def _record_state(store, ns_name, digest):
        ns = store.get(ns_name)
        rec = ns.records.get(digest) if ns is not None else None
        return None if rec is None else (id(rec), rec.void_time, rec.last_update_ms)

    def _replicate(self, target, ns_name, digest, pid):
        """Copy the master's record (or its absence) to the replicas."""
        rec = target.fx.store.get(ns_name).records.get(digest)
        for i in self.owners[pid]:
            slot = self.slots[i]
            if i == target.index or pid not in slot.holds:
                continue
            if slot.state == "paused":
                slot.missed.add(pid)
                continue
            if slot.state != "up":
                continue
            ns = slot.fx.store.get(ns_name)
            if rec is None:
                ns.delete(digest)
            else:
                ns.store(digest, replace(rec))

    # -- system metadata (SMD) ---------------------------------------------------

    def smd_set(self, name, evict_void_time):
        """nsup.c as_smd_set_blocking + nsup_smd_accept_cb on every node."""
        with self.lock:
            self.smd[name] = evict_void_time
            for i in self.members:
                if self.slots[i].state == "up":
                    ns = self.slots[i].fx.store.get(name)
                    if ns is not None:
                        ns.smd_evict_void_time = evict_void_time

    def smd_delete(self, name):
        with self.lock:
            self.smd.pop(name, None)
            for i in self.members:
                if self.slots[i].state == "up":
                    ns = self.slots[i].fx.store.get(name)
                    if ns is not None:
                        ns.evict_void_time = 0
                        ns.smd_evict_void_time = 0

    # -- fixture-wide commands ----------------------------------------------------

    def reset(self):
        """fixture-reset on a cluster: every running node's records, rules and
        counters; the membership stays."""
        with self.lock:
            self.smd = {}
            self.faults.clear()
            for slot in self.slots:
                if slot.state == "dead":
                    continue
                slot.fx.store.reset()
                slot.fx.stats.reset()
                slot.fx.proxies = 0
                slot.missed = set()

    def truncate(self, ns_name, set_name, lut_ms):
        """truncate is cluster-wide (SMD): every running node's copies."""
        with self.lock:
            for slot in self.slots:
                if slot.state == "dead":
                    continue
                ns = slot.fx.store.get(ns_name)
                if ns is None:
                    continue
                doomed = [d for d, r in ns.records.items()
                          if (set_name is None or r.set_name == set_name)
                          and (lut_ms is None or r.last_update_ms < lut_ms)]
                for d in doomed:
                    ns.delete(d)


def start(nodes=3, replication_factor=2, namespaces=DEFAULT_NAMESPACES, options=None,
          **kwargs):
    """A running Cluster of `nodes` on free loopback ports, with the namespaces
    given as --namespace specs; kwargs as Cluster takes them."""
    configs = [parse_namespace_spec(spec) for spec in namespaces]
    return Cluster(configs, options or Options(), nodes=nodes,
                   replication_factor=replication_factor, **kwargs)
