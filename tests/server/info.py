"""Info protocol (proto type 1): the commands the C client's tend thread and
applications send, answered as a single-node CE 8.1.2.0 server would, plus
the fixture's own `fixture-*` commands (which a real server answers with
ERROR:4:unrecognized command, so a test can tell the fixture apart).

What depends on the cluster (partition ownership, peers, generations, the
cluster key and size, migrations) goes through the hook methods in the
"cluster view" section; cluster_info.py overrides them for a node of a
cluster.

Request body: commands, each ended by '\\n'. Response body: for each command
"<command as sent>\\t<value>\\n" (thr_info.c handle_cmds).
"""

import base64

from .faults import FaultSpecError
from .store import CONFIG_KEYS, DEVICE_ONLY_KEYS, MEMORY_STRIPES, WBLOCK_SIZE, now_void_time

BUILD = "8.1.2.0"
EDITION = "Aerospike Community Edition"
FEATURES = (
    "batch-any;batch-index;blob-bits;cdt-index;cdt-list;cdt-map;cluster-stable;"
    "float;geo;sindex-exists;peers;pipelining;pquery;pscans;query-show;"
    "relaxed-sc;replicas;replicas-all;replicas-master;replicas-max;"
    "truncate-namespace;udf"
)
PARTITION_GENERATION = 1
PEERS_GENERATION = 1
CLUSTER_KEY = "9A4F3B6C2D1E"
# All 4096 partitions owned: 512 bytes of 0xFF, 684 base64 characters.
FULL_BITMAP = base64.b64encode(b"\xff" * 512).decode()

ERR_UNRECOGNIZED = "ERROR:4:unrecognized command"

# Transaction counters of `namespace/<ns>` (thr_info.c), by kind and outcome.
TRANSACTION_STATS = (
    ("client_read", ("success", "error", "not_found")),
    ("client_write", ("success", "error")),
    ("client_delete", ("success", "error", "not_found")),
    ("batch_sub_read", ("success", "error", "not_found")),
    ("batch_sub_write", ("success", "error")),
    ("batch_sub_delete", ("success", "error", "not_found")),
)
READ_TOUCH_STATS = ("read_touch_success", "read_touch_error", "read_touch_skip")
# The fixture's own per-namespace counters in `fixture-stats` (NAME.<ns>).
FIXTURE_NS_COUNTERS = (
    "nsup_wakes",  # NSUP thread wake-ups (every second)
    "expire_cycles",  # expire passes
    "evict_finds",  # eviction histograms built (hwm breached)
    "evictions",  # evict passes run (one wake-up after a find published a void time)
    "evict_refusals",  # finds whose lowest bucket alone was above the target
    "evict_all_refusals",  # finds that would have evicted every eligible record
    "evict_none_eligible",  # finds with no record that has a void time
    "stop_writes_evals",  # stop-writes evaluations
    "device_overloads",  # writes refused with 18 (device write queue too deep)
)


def split_command(cmd):
    """Split 'name:params' / 'name/arg' the way thr_info.c parse_cmd does."""
    cuts = [i for i in (cmd.find("/"), cmd.find(":"), cmd.find(";")) if i >= 0]
    if not cuts:
        return cmd, ""
    at = min(cuts)
    return cmd[:at], cmd[at + 1 :]


def parse_params(params):
    """'a=1;b=2' -> {'a': '1', 'b': '2'} (keys without '=' map to '')."""
    out = {}
    for item in filter(None, params.split(";")):
        key, _, value = item.partition("=")
        out[key.strip()] = value.strip()
    return out


def kv(pairs):
    return ";".join("%s=%s" % (k, v) for k, v in pairs)


def _bool(b):
    return "true" if b else "false"


class InfoHandler:
    def __init__(self, fx):
        self.fx = fx

    def respond(self, body):
        """Answer an info request body; return the response body bytes."""
        text = body.decode("utf-8", "replace")
        if not text.strip("\n"):
            text = "node\nbuild\nedition\nversion\n"  # summary (deprecated in 8.1)
        commands = text.split("\n")
        if commands and commands[-1] == "":
            commands.pop()
        lines = ["%s\t%s\n" % (cmd, self.answer(cmd)) for cmd in commands]
        return "".join(lines).encode()

    def answer(self, cmd):
        name, params = split_command(cmd)
        method = getattr(self, "cmd_" + name.replace("-", "_"), None)
        if method is None:
            return ERR_UNRECOGNIZED
        return method(params)

    # -- cluster and node ---------------------------------------------------

    def cmd_node(self, _):
        return self.fx.node_name

    def cmd_build(self, _):
        return BUILD

    def cmd_edition(self, _):
        return EDITION

    def cmd_version(self, _):
        return "%s build %s" % (EDITION, BUILD)

    def cmd_features(self, _):
        return FEATURES

    # -- cluster view (hooks: a single node that owns every partition) -------

    def partition_generation(self):
        return PARTITION_GENERATION

    def peers_generation(self):
        return PEERS_GENERATION

    def peers_value(self):
        """peers-clear-std: generation, default port, [[name,tls,[hosts]],...]."""
        return "%d,%d,[]" % (PEERS_GENERATION, self.fx.port)

    def services_value(self):
        return ""

    def cluster_key(self):
        return CLUSTER_KEY

    def cluster_name(self):
        return "null"

    def replica_rows(self):
        """[(namespace, regime, [base64 bitmap per replica column])]."""
        return [(ns, 0, [FULL_BITMAP]) for ns in self.fx.store.names()]

    def cluster_stats(self):
        """The cluster part of `statistics`."""
        return [
            ("cluster_size", 1),
            ("cluster_key", CLUSTER_KEY),
            ("cluster_generation", 1),
            ("cluster_principal", self.fx.node_name),
            ("cluster_integrity", "true"),
            ("cluster_is_member", "true"),
        ]

    def migrations_remaining(self):
        return 0

    def ns_replication(self, ns, objects):
        """The replication part of `namespace/<ns>`, in thr_info.c's order."""
        return [
            ("ns_cluster_size", 1),
            ("effective_replication_factor", 1),
            ("objects", objects),
            ("tombstones", 0),
            ("master_objects", objects),
            ("prole_objects", 0),
            ("unavailable_partitions", 0),
            ("dead_partitions", 0),
        ]

    def replication_factor(self):
        return 1

    # -- node ------------------------------------------------------------------

    def cmd_partition_generation(self, _):
        return str(self.partition_generation())

    def cmd_partitions(self, _):
        return "4096"

    def cmd_cluster_name(self, _):
        return self.cluster_name()

    def cmd_cluster_stable(self, params):
        ns = parse_params(params).get("namespace")
        if ns and self.fx.store.get(ns) is None:
            return "ERROR:20:namespace not found on node"
        return self.cluster_key()

    def cmd_user_agent_set(self, _):
        return "ok"

    def cmd_peers_generation(self, _):
        return str(self.peers_generation())

    def _peers(self, _):
        return self.peers_value()

    cmd_peers_clear_std = cmd_peers_clear_alt = _peers
    cmd_peers_tls_std = cmd_peers_tls_alt = _peers

    def _service(self, _):
        return "127.0.0.1:%d" % self.fx.port

    cmd_service_clear_std = cmd_service_clear_alt = cmd_service = _service

    def cmd_services(self, _):
        return self.services_value()

    def cmd_services_alternate(self, _):
        return self.services_value()

    def cmd_rebalance_generation(self, _):
        return str(self.partition_generation())

    def cmd_rack_ids(self, _):
        return ";".join("%s:0" % ns for ns in self.fx.store.names())

    def cmd_replicas(self, _):
        # partition.c as_partition_get_replicas_all_str: ns:regime,count,maps...
        rows = self.replica_rows()[:32]
        return "".join("%s:%d,%d,%s;" % (ns, regime, len(maps), ",".join(maps))
                       for ns, regime, maps in rows)

    def cmd_replicas_master(self, _):
        return ";".join("%s:%s" % (ns, maps[0]) for ns, _, maps in self.replica_rows())

    def cmd_replicas_all(self, _):
        return ";".join("%s:%d,%s" % (ns, len(maps), ",".join(maps))
                        for ns, _, maps in self.replica_rows())

    def cmd_namespaces(self, _):
        return ";".join(self.fx.store.names())

    def cmd_statistics(self, _):
        """Node statistics: the cluster and the totals an operator reads first,
        under the real server's names (a subset of them)."""
        with self.fx.store.lock:
            objects = 0
            for ns in self.fx.store.namespaces.values():
                ns.purge_expired()
                objects += len(ns.records)
        return kv(self.cluster_stats() + [
            ("cluster_duplicate_nodes", "null"),
            ("cluster_clock_skew_stop_writes_sec", 0),
            ("cluster_clock_skew_ms", 0),
            ("cluster_clock_skew_outliers", "null"),
            ("uptime", int(self.fx.uptime())),
            ("objects", objects),
            ("tombstones", 0),
            ("info_queue", 0),
            ("rw_in_progress", 0),
            ("client_connections", self.fx.open_connections()),
            ("client_connections_opened", self.fx.stats.snapshot()["connections"]),
            # Batch requests the node took, under the real server's statistic.
            ("batch_index_initiate", self.fx.stats.snapshot()["batches"]),
            ("migrate_allowed", "true"),
            ("migrate_partitions_remaining", self.migrations_remaining()),
        ])

    # -- namespace statistics and config -----------------------------------

    def _ns_stats(self, ns):
        """Statistics of `namespace/<ns>`, in the order and under the names of
        thr_info.c info_get_namespace_info (a subset)."""
        with self.fx.store.lock:
            ns.purge_expired()
            objects = len(ns.records)
            used = ns.bytes_used
            used_pct, avail_pct = ns.used_pct(), ns.avail_pct()
            write_q = ns.wblocks_to_flush()
            counts = dict(ns.counts)
            pairs = self.ns_replication(ns, objects) + [
                ("clock_skew_stop_writes", "false"),
                ("stop_writes", _bool(ns.stop_writes)),
                ("hwm_breached", _bool(ns.hwm_breached)),
                ("current_time", now_void_time()),
                ("non_expirable_objects", ns.non_expirable_objects),
                ("expired_objects", ns.expired_objects),
                ("evicted_objects", ns.evicted_objects),
                ("evict_ttl", ns.evict_ttl),
                ("evict_void_time", ns.evict_void_time),
                ("smd_evict_void_time", ns.smd_evict_void_time),
                ("nsup_cycle_duration", ns.nsup_cycle_duration),
                ("nsup_cycle_deleted_pct", "%.2f" % ns.nsup_cycle_deleted_pct),
                ("index_used_bytes", objects * 64),
            ]
        cfg = ns.config
        if cfg.legacy:
            pairs.append(("device_used_bytes", used))
        else:
            pairs += [
                ("data_total_bytes", cfg.data_size),
                ("data_used_bytes", used),
                ("data_used_pct", used_pct),
                ("data_avail_pct", avail_pct),
                ("data_compression_ratio", "1.000"),
            ]
        if cfg.is_device:
            # thr_info.c add_data_device_stats, for the one stand-in file.
            free = max(cfg.data_size - used, 0) // WBLOCK_SIZE
            pairs += [
                ("cache_read_pct", 0),
                ("storage-engine.file[0].used_bytes", used),
                ("storage-engine.file[0].free_wblocks", free),
                ("storage-engine.file[0].write_q", write_q),
            ]
        elif not cfg.legacy:
            # A 7.1+ memory namespace is MEMORY_STRIPES stripes (drv_mem.c): the
            # fixture spreads its bytes evenly over them.
            free = max(cfg.data_size - used, 0) // WBLOCK_SIZE // MEMORY_STRIPES
            for i in range(MEMORY_STRIPES):
                pairs += [("storage-engine.stripe[%d].used_bytes" % i, used // MEMORY_STRIPES),
                          ("storage-engine.stripe[%d].free_wblocks" % i, free),
                          ("storage-engine.stripe[%d].defrag_q" % i, 0)]
        for kind, outcomes in TRANSACTION_STATS:
            pairs += [("%s_%s" % (kind, o), counts.get("%s_%s" % (kind, o), 0)) for o in outcomes]
        pairs += [(name, counts.get(name, 0)) for name in READ_TOUCH_STATS]
        pairs.append(("fail_key_busy", counts.get("fail_key_busy", 0)))
        return kv(pairs)

    def _ns_config(self, ns):
        """Configuration of `namespace/<ns>` and `get-config`, in the order and
        under the names of cfg_info.c cfg_get_namespace (a subset)."""
        cfg = ns.config
        pairs = [
            ("allow-ttl-without-nsup", _bool(cfg.allow_ttl_without_nsup)),
            ("apply-ttl-reductions", "true"),
            ("conflict-resolution-policy", "generation"),
            ("default-read-touch-ttl-pct", cfg.default_read_touch_ttl_pct),
            ("default-ttl", cfg.default_ttl),
            ("disallow-null-setname", "false"),
            ("evict-hist-buckets", cfg.evict_hist_buckets),
            ("evict-indexes-memory-pct", 0),
        ]
        if cfg.evict_sys_memory_pct:
            # A 7.0 setting (obsolete in 8.1, cfg.c), shown only when configured.
            pairs.append(("evict-sys-memory-pct", cfg.evict_sys_memory_pct))
        pairs += [
            ("evict-tenths-pct", cfg.evict_tenths_pct),
            ("max-record-size", cfg.max_record_size),
            ("nsup-hist-period", 3600),
            ("nsup-period", cfg.nsup_period),
            ("nsup-threads", 1),
            ("replication-factor", self.replication_factor()),
            ("stop-writes-sys-memory-pct", cfg.stop_writes_sys_memory_pct),
            ("strong-consistency", "false"),
            ("transaction-pending-limit", cfg.transaction_pending_limit),
        ]
        if cfg.legacy:
            pairs += [
                ("storage-engine", "device"),
                ("storage-engine.flush-max-ms", 1000),
                ("storage-engine.write-block-size", cfg.write_block_size),
            ]
        elif cfg.is_device:
            pairs += [
                ("storage-engine", "device"),
                ("storage-engine.file[0]", "/opt/aerospike/data/%s.dat" % cfg.name),
                ("storage-engine.cache-replica-writes", "false"),
                ("storage-engine.cold-start-empty", "false"),
                ("storage-engine.commit-to-device", "false"),
                ("storage-engine.compression", "none"),
                ("storage-engine.defrag-lwm-pct", cfg.defrag_lwm_pct),
                ("storage-engine.evict-used-pct", cfg.evict_used_pct),
                ("storage-engine.filesize", cfg.data_size),
                ("storage-engine.flush-max-ms", 1000),
                ("storage-engine.flush-size", cfg.flush_size),
                ("storage-engine.max-write-cache", cfg.max_write_cache),
                ("storage-engine.post-write-cache", cfg.post_write_cache),
                ("storage-engine.read-page-cache", "false"),
                ("storage-engine.stop-writes-avail-pct", cfg.stop_writes_avail_pct),
                ("storage-engine.stop-writes-used-pct", cfg.stop_writes_used_pct),
            ]
        else:
            # 7.1+ has no write-block-size: the key is absent, not 0.
            pairs += [
                ("storage-engine", "memory"),
                ("storage-engine.commit-to-device", "false"),
                ("storage-engine.compression", "none"),
                ("storage-engine.data-size", cfg.data_size),
                ("storage-engine.defrag-lwm-pct", cfg.defrag_lwm_pct),
                ("storage-engine.evict-used-pct", cfg.evict_used_pct),
                ("storage-engine.filesize", 0),
                ("storage-engine.flush-max-ms", 1000),
                ("storage-engine.max-write-cache", cfg.max_write_cache),
                ("storage-engine.stop-writes-avail-pct", cfg.stop_writes_avail_pct),
                ("storage-engine.stop-writes-used-pct", cfg.stop_writes_used_pct),
            ]
        return kv(pairs)

    def cmd_namespace(self, params):
        ns = self.fx.store.get(params)
        if ns is None:
            return "type=unknown"
        return self._ns_stats(ns) + ";" + self._ns_config(ns)

    def cmd_get_config(self, params):
        p = parse_params(params)
        if p.get("context") != "namespace":
            return "ERROR:4:invalid context"
        ns = self.fx.store.get(p.get("id", p.get("namespace", "")))
        if ns is None:
            return "ERROR:20:namespace not found on node"
        return self._ns_config(ns)

    def cmd_set_config(self, params):
        p = parse_params(params)
        if p.pop("context", None) != "namespace":
            return "ERROR:4:invalid context"
        ns = self.fx.store.get(p.pop("id", p.pop("namespace", "")))
        if ns is None:
            return "ERROR:20:namespace not found on node"
        if len(p) != 1 or next(iter(p)) not in CONFIG_KEYS:
            return "ERROR:4:invalid set-config parameter"
        key, value = next(iter(p.items()))
        # cfg_info.c: post-write-cache and flush-size only for storage-engine
        # device; device-write-bps is the fixture's device knob.
        if key in DEVICE_ONLY_KEYS + ("device-write-bps",) and not ns.config.is_device:
            return "ERROR:4:invalid set-config parameter"
        with self.fx.store.lock:
            trial = type(ns.config)(**ns.config.__dict__)
            try:
                trial.set(key, value)
            except ValueError:
                return "ERROR:4:invalid set-config parameter"
            # cfg_info.c refuses a non-zero default-ttl while nsup-period is 0.
            if trial.default_ttl and not trial.nsup_period and not trial.allow_ttl_without_nsup:
                return "ERROR:4:invalid set-config parameter"
            ns.config = trial
        return "ok"

    def _truncate(self, params):
        p = parse_params(params)
        ns = self.fx.store.get(p.get("namespace", ""))
        if ns is None:
            return "ERROR:20:namespace not found on node"
        set_name = p.get("set")
        lut_ms = int(p["lut"]) // 1_000_000 if p.get("lut") else None
        with self.fx.store.lock:
            doomed = [
                d
                for d, r in ns.records.items()
                if (set_name is None or r.set_name == set_name)
                and (lut_ms is None or r.last_update_ms < lut_ms)
            ]
            for d in doomed:
                ns.delete(d)
        return "ok"

    cmd_truncate = cmd_truncate_namespace = _truncate

    # -- fixture commands ---------------------------------------------------

    def cmd_fixture_reset(self, _):
        self.fx.store.reset()
        self.fx.faults.clear()
        self.fx.stats.reset()
        return "ok"

    def cmd_fixture_clear_faults(self, _):
        # Serve normally again but keep the records: what a crashed writer left.
        self.fx.faults.clear()
        return "ok"

    def cmd_fixture_fault(self, params):
        try:
            self.fx.faults.add(params)
        except FaultSpecError as exc:
            return "ERROR:4:%s" % exc
        return "ok"

    def cmd_fixture_stop_writes(self, params):
        # A namespace at stop-writes, as its thread sets it (info says stop_writes=true
        # and every write is refused with 8) until released: without filling it.
        p = parse_params(params)
        ns = self.fx.store.get(p.get("namespace", ""))
        if ns is None:
            return "ERROR:20:namespace not found on node"
        if p.get("on") not in ("true", "false"):
            return "ERROR:4:fixture-stop-writes on=%s: needs true or false" % p.get("on")
        with self.fx.store.lock:
            ns.forced_stop_writes = ns.stop_writes = p["on"] == "true"
        return "ok"

    def cmd_fixture_stats(self, _):
        pairs = list(self.fx.stats.snapshot().items())
        pairs.append(("faults_fired", self.fx.faults.fired))
        with self.fx.store.lock:
            for name, ns in self.fx.store.namespaces.items():
                ns.purge_expired()
                pairs.append(("records.%s" % name, len(ns.records)))
                pairs.append(("bytes.%s" % name, ns.bytes_used))
                pairs += [("%s.%s" % (c, name), ns.counts.get(c, 0)) for c in FIXTURE_NS_COUNTERS]
                if ns.config.is_device:
                    pairs.append(("write_q_bytes.%s" % name, ns.flush_q_bytes()))
        return kv(pairs)
