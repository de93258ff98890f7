"""Info answers of a node of a fixture cluster (cluster.py): what the C client's
tend thread reads (as_node.c as_node_refresh: node, peers-generation,
partition-generation; as_peers.c: peers-clear-std; as_partition.c:
replicas; as_lookup.c: node, partition-generation, build, cluster-name),
answered from this node's view, plus `fixture-node` and `fixture-cluster`.
"""

import threading

from .info import InfoHandler, parse_params
from .proto import partition_id

UNSTABLE = "ERROR:7:unstable cluster"  # thr_info.c cmd_cluster_stable, AS_ERR_CLUSTER_KEY_MISMATCH


class ClusterInfo(InfoHandler):
    @property
    def cluster(self):
        return self.fx.cluster

    @property
    def slot(self):
        return self.fx.slot

    # -- the cluster view -----------------------------------------------------

    def partition_generation(self):
        return self.slot.part_gen

    def peers_generation(self):
        return self.slot.peers_gen

    def _peer_slots(self):
        slots = self.cluster.slots
        return [slots[i] for i in self.slot.peers] if self.slot.member else []

    def peers_value(self):
        # as_peers.c as_peers_parse_peers: generation,default port,[[name,tls
        # name,[host:port,...]],...]; every host here carries its port.
        peers = ",".join("[%s,,[127.0.0.1:%d]]" % (s.name, s.port) for s in self._peer_slots())
        return "%d,%d,[%s]" % (self.slot.peers_gen, self.fx.port, peers)

    def services_value(self):
        return ";".join("127.0.0.1:%d" % s.port for s in self._peer_slots())

    def cluster_key(self):
        return self.cluster.cluster_key if self.slot.member else "0"

    def cluster_name(self):
        return self.cluster.name

    def cmd_cluster_stable(self, params):
        """thr_info.c cmd_cluster_stable: unstable while this node is not in a
        cluster or migrates (unless ignore-migrations=true); `size` must be the
        cluster's size."""
        p = parse_params(params)
        if not self.slot.member:
            return UNSTABLE  # migrations not allowed: no balance yet
        size = p.get("size")
        if size is not None:
            if not size.isdigit():
                return "ERROR:4:bad size"
            if int(size) != len(self.cluster.members):
                return "ERROR:7:cluster not specified size"
        ignore = p.get("ignore-migrations")
        if ignore not in (None, "true", "false"):
            return "ERROR:4:bad ignore migrations"
        if ignore != "true":
            ns = p.get("namespace")
            if ns and self.fx.store.get(ns) is None:
                return "ERROR:20:namespace not found on node"
            if self.cluster.migrations_remaining(self.slot):
                return UNSTABLE
        return self.cluster.cluster_key

    def replica_rows(self):
        return [(ns, 0, list(self.slot.maps)) for ns in self.fx.store.names()]

    def cluster_stats(self):
        cl, slot = self.cluster, self.slot
        members = cl.members if slot.member else [slot.index]
        principal = cl.slots[members[0]].name if members else self.fx.node_name
        return [
            ("cluster_size", len(members)),
            ("cluster_key", self.cluster_key()),
            ("cluster_generation", cl.cluster_gen if slot.member else 0),
            ("cluster_principal", principal),
            ("cluster_integrity", "true"),
            ("cluster_is_member", "true" if slot.member else "false"),
        ]

    def migrations_remaining(self):
        return self.cluster.migrations_remaining(self.slot) * len(self.fx.store.names())

    def ns_replication(self, ns, objects):
        cl, slot = self.cluster, self.slot
        me = slot.index
        master = prole = 0
        for digest in ns.records:
            owners = cl.owners[partition_id(digest)]
            if owners and owners[0] == me:
                master += 1
            elif me in owners:
                prole += 1
        remaining = cl.migrations_remaining(slot)
        size = len(cl.members) if slot.member else 0
        left = slot.migrate_tx + slot.migrate_rx
        tx = remaining * slot.migrate_tx // left if left else 0
        return [
            ("ns_cluster_size", size),
            ("effective_replication_factor", min(cl.rf, size)),
            ("objects", objects),
            ("tombstones", 0),
            ("master_objects", master),
            ("prole_objects", prole),
            ("unavailable_partitions", 0 if slot.member else 4096),
            ("dead_partitions", 0),
            ("migrate_tx_partitions_remaining", tx),
            ("migrate_rx_partitions_remaining", remaining - tx),
        ]

    def replication_factor(self):
        return self.cluster.rf

    # -- cluster-wide commands ------------------------------------------------

    def _truncate(self, params):
        p = parse_params(params)
        if self.fx.store.get(p.get("namespace", "")) is None:
            return "ERROR:20:namespace not found on node"
        lut_ms = int(p["lut"]) // 1_000_000 if p.get("lut") else None
        self.cluster.truncate(p["namespace"], p.get("set"), lut_ms)
        return "ok"

    cmd_truncate = cmd_truncate_namespace = _truncate

    def cmd_fixture_reset(self, _):
        self.cluster.reset()
        return "ok"

    def cmd_fixture_stats(self, params):
        return super().cmd_fixture_stats(params) + ";proxies=%d" % self.fx.proxies

    def cmd_fixture_node(self, params):
        """fixture-node:<action>:<node index>: kill, pause, resume, restart (or
        stop, start, as scripts/aerospike-loopback.sh names them)."""
        action, _, index = params.partition(":")
        try:
            index = int(index)
        except ValueError:
            return "ERROR:4:expected fixture-node:<action>:<node index>"
        if index == self.slot.index:
            # Aimed at the node answering: it happens just after the answer.
            if action not in ("kill", "stop", "pause"):
                return "ERROR:4:node %d is running" % index
            threading.Timer(0.05, self._later, (action, index)).start()
            return "ok"
        try:
            self.cluster.node(action, index)
        except ValueError as exc:
            return "ERROR:4:%s" % exc
        return "ok"

    def _later(self, action, index):
        try:
            self.cluster.node(action, index)
        except ValueError:
            pass

    def cmd_fixture_cluster(self, _):
        """index:name:port:state:member for every node, `;`-separated."""
        return ";".join("%d:%s:%d:%s:%s" % (i, name, port, state, "true" if member else "false")
                        for i, name, port, state, member in self.cluster.status())
