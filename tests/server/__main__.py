"""Command line: python3 -m tests.server --port 0 --port-file PATH [--namespace SPEC ...]
[--nodes N --replication-factor R --heartbeat-timeout S]"""

import argparse
import os
import signal
import sys
import threading

from .nsup import EVAL_STOP_WRITES_PERIOD
from .server import Fixture, Options, Server
from .store import DEFAULT_NAMESPACES, parse_namespace_spec


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python3 -m tests.server",
        description="Protocol-level Aerospike test server (single node, 127.0.0.1).",
    )
    parser.add_argument("--port", type=int, default=3000,
                        help="TCP port; 0 picks a free one (with --nodes: the first node's, "
                        "the others' follow it)")
    parser.add_argument("--port-file", help="write the listening port to this file "
                        "(with --nodes: every node's, comma-separated)")
    parser.add_argument("--nodes", type=int, metavar="N",
                        help="run a cluster of N nodes, each on its own port (cluster.py)")
    parser.add_argument("--replication-factor", type=int, default=2, metavar="R",
                        help="with --nodes: the namespaces' replication factor (default 2)")
    parser.add_argument("--heartbeat-timeout", type=float, metavar="SECONDS",
                        help="with --nodes: how long the others wait for a lost node "
                        "before re-forming without it (default 1.5)")
    parser.add_argument("--migrate-seconds", type=float, metavar="SECONDS",
                        help="with --nodes: how long a rebalance's migrations last (default 2)")
    parser.add_argument(
        "--namespace",
        action="append",
        metavar="NAME[:key=value,...]",
        help="namespace to serve (repeatable); keys: max-record-size, write-block-size, "
        "nsup-period, default-ttl, data-size (or filesize), allow-ttl-without-nsup, "
        "storage-engine (memory|device), evict-used-pct, stop-writes-used-pct, "
        "stop-writes-avail-pct, evict-tenths-pct, evict-hist-buckets, "
        "default-read-touch-ttl-pct, stop-writes-sys-memory-pct, evict-sys-memory-pct, "
        "max-write-cache, post-write-cache, defrag-lwm-pct, flush-size, device-write-bps "
        "(see tests/server/README.md). Default: " + " ".join(DEFAULT_NAMESPACES),
    )
    parser.add_argument(
        "--stop-writes-period",
        type=float,
        default=EVAL_STOP_WRITES_PERIOD,
        metavar="SECONDS",
        help="seconds between stop-writes evaluations (default %(default)s; a real server: 10)",
    )
    parser.add_argument(
        "--scan-keep-binless",
        action="store_true",
        help="scans return records holding none of the selected bins (a real server skips them)",
    )
    parser.add_argument("--verbose", action="store_true", help="log protocol errors to stderr")
    return parser.parse_args(argv)


def write_port_file(path, port):
    """One port, or a list of them written comma-separated on one line."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        if isinstance(port, int):
            f.write("%d\n" % port)
        else:
            f.write(",".join(str(p) for p in port) + "\n")
    os.replace(tmp, path)


def run_cluster(args, configs, options):
    from . import cluster

    if args.nodes < 1 or args.replication_factor < 1:
        print("--nodes and --replication-factor must be >= 1", file=sys.stderr)
        return 2
    kwargs = {}
    if args.heartbeat_timeout is not None:
        kwargs["heartbeat_timeout"] = args.heartbeat_timeout
    if args.migrate_seconds is not None:
        kwargs["migrate_seconds"] = args.migrate_seconds
    cl = cluster.Cluster(configs, options, nodes=args.nodes,
                         replication_factor=args.replication_factor, base_port=args.port,
                         **kwargs)
    if args.port_file:
        write_port_file(args.port_file, cl.ports)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("aerospike test cluster listening on 127.0.0.1:%s" % ",".join(map(str, cl.ports)),
          file=sys.stderr, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        cl.close()
    return 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        configs = [parse_namespace_spec(s) for s in (args.namespace or DEFAULT_NAMESPACES)]
    except ValueError as exc:
        print("bad --namespace: %s" % exc, file=sys.stderr)
        return 2
    if len({c.name for c in configs}) != len(configs) or len(configs) > 32:
        print("namespaces must be unique and at most 32", file=sys.stderr)
        return 2
    if args.stop_writes_period <= 0:
        print("--stop-writes-period must be > 0", file=sys.stderr)
        return 2
    options = Options(scan_keep_binless=args.scan_keep_binless, verbose=args.verbose,
                      stop_writes_period=args.stop_writes_period)
    if args.nodes is not None:
        return run_cluster(args, configs, options)
    server = Server(Fixture(configs, options), port=args.port)
    if args.port_file:
        write_port_file(args.port_file, server.port)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("aerospike test server listening on 127.0.0.1:%d" % server.port, file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
