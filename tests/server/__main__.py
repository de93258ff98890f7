"""Command line: python3 -m tests.server --port 0 --port-file PATH [--namespace SPEC ...]"""

import argparse
import os
import signal
import sys

from .nsup import EVAL_STOP_WRITES_PERIOD
from .server import Fixture, Options, Server
from .store import DEFAULT_NAMESPACES, parse_namespace_spec


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python3 -m tests.server",
        description="Protocol-level Aerospike test server (single node, 127.0.0.1).",
    )
    parser.add_argument("--port", type=int, default=3000, help="TCP port; 0 picks a free one")
    parser.add_argument("--port-file", help="write the listening port to this file")
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
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
    os.replace(tmp, path)


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
