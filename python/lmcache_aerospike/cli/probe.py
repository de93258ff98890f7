"""`probe`: is the cluster fit to hold the cache, and what will the engine do on it?

It reaches every seed, opens the engine as LMCache would (which discovers the
namespace's record-size limits and logs the segment sizes it derives), reads the
cluster's builds, size and the namespace's space, thresholds and TTL settings, and
says what is wrong, one sentence per problem. Exit status 1 when anything is.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import socket
from typing import Any, Iterator

from lmcache_aerospike import _native
from lmcache_aerospike.cli import output, server
from lmcache_aerospike.cli.settings import connect, load, options
from lmcache_aerospike.config import Settings

NEAR = 10  # points from a stop-writes threshold that already count as a problem
DEFAULT_PORT = 3000

EXAMPLES = """\
examples:
  lmcache-aerospike probe --hosts 10.0.0.5:3000,10.0.0.6:3000 -n lmcache
  lmcache-aerospike probe --config lmcache.yaml --instance aerospike.dr
  lmcache-aerospike probe --config l2.json --json

It reports as problems (exit status 1): seeds that do not answer; a namespace the
cluster does not have; TTL writes the namespace refuses (default_ttl_seconds > 0
with nsup-period 0 and allow-ttl-without-nsup false: the engine will not open);
stop_writes or clock_skew_stop_writes set; used or available space within 10 points
of stop-writes-used-pct / stop-writes-avail-pct; fewer nodes than seeds; nodes the
client cannot reach.
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "probe", parents=[options()], help="check the cluster, namespace and derived limits",
        description=__doc__.split("\n\n", 1)[1], epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    report: dict[str, Any] = {
        "hosts": settings.hosts, "namespace": settings.namespace, "set": settings.set,
        "seeds": [reach(seed, settings.connect_timeout_ms) for seed in seeds(settings.hosts)],
        "problems": [], "notes": []}
    conn = _open(settings, report)
    if conn is not None:
        with contextlib.closing(conn):
            _survey(conn, settings, report)
    report["problems"] += seed_problems(report)
    if args.json:
        output.emit_json(report)
    else:
        _print(report)
    return 1 if report["problems"] else 0


# ----------------------------------------------------------------------- seeds


def seeds(hosts: str) -> list[tuple[str, str, int]]:
    """(as written, host, port) for host[:port], host:tls-name:port and [v6]:port."""
    out = []
    for item in filter(None, (s.strip() for s in hosts.split(","))):
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port = rest.rpartition(":")[2]
        else:
            host, *rest = item.split(":")
            port = rest[-1] if rest else ""
        out.append((item, host, int(port) if port.isdigit() else DEFAULT_PORT))
    return out


def reach(seed: tuple[str, str, int], timeout_ms: int) -> dict[str, Any]:
    """Whether the seed accepts a TCP connection (before the engine tries it)."""
    written, host, port = seed
    try:
        socket.create_connection((host, port), timeout=timeout_ms / 1000).close()
        return {"seed": written, "reachable": True, "error": None}
    except OSError as e:
        return {"seed": written, "reachable": False, "error": e.strerror or str(e)}


def seed_problems(report: dict[str, Any]) -> list[str]:
    problems = [f"seed {s['seed']} does not answer ({s['error']})"
                for s in report["seeds"] if not s["reachable"]]
    size, nodes = report.get("cluster_size"), report.get("nodes")
    if not problems and size is not None and size < len(report["seeds"]):
        problems.append(f"{len(report['seeds'])} seeds are given but the cluster has "
                        f"{size} node{'s' * (size != 1)}: seeds name one node twice, or "
                        f"nodes of another cluster")
    if size is not None and nodes is not None and len(nodes) < size:
        problems.append(f"the client reaches {len(nodes)} of the cluster's {size} nodes: "
                        f"check each node's access-address")
    return problems


# ---------------------------------------------------------------- the engine


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def engine_lines() -> Iterator[list[str]]:
    """The engine's log lines while the block runs (its limits at open are INFO
    lines: the extension hands them to the `lmcache_aerospike` logger)."""
    handler, logger = _Lines(), logging.getLogger("lmcache_aerospike")
    saved = logger.handlers[:], logger.level
    logger.handlers[:] = [handler]  # probe prints them: not on stderr as well
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.handlers[:], _ = saved
        logger.setLevel(saved[1])


def _open(settings: Settings, report: dict[str, Any]) -> _native.Connector | None:
    """The engine as LMCache opens it. When it cannot, the reason is a problem, and
    what can still be looked at is opened: without the seeds that do not answer
    (the client refuses a seed list with a dead one), or with TTLs off when the
    namespace refuses them. None when nothing opens."""
    overrides: dict[str, Any] = {}
    live = [s["seed"] for s in report["seeds"] if s["reachable"]]
    for _ in range(3):
        with engine_lines() as lines:
            try:
                conn = connect(settings, **overrides)
                report["startup"] = lines
                return conn
            except _native.TTLConfigError as e:
                report["problems"].append(str(e))
                overrides["default_ttl_seconds"] = -1
            except (_native.ConnectionError, _native.TimeoutError) as e:
                report["problems"].append(" ".join(str(e).split()))
                if not live or len(live) == len(report["seeds"]) or "hosts" in overrides:
                    return None
                overrides["hosts"] = ",".join(live)
            except (_native.NamespaceError, _native.ServerLimitError) as e:
                report["problems"].append(" ".join(str(e).split()))
                return None
    return None


def _survey(conn: _native.Connector, settings: Settings, report: dict[str, Any]) -> None:
    views = server.namespace(conn, settings.namespace)
    report.update(nodes=server.builds(conn), cluster_size=server.cluster_size(conn),
                  namespace_nodes=[v.as_dict() for v in views], limits=conn.limits())
    report["problems"] += namespace_problems(views, settings.namespace)
    report["notes"] += notes(views, settings, report["nodes"])


def namespace_problems(views: list[server.NodeNamespace], ns: str) -> list[str]:
    out = []
    for v in views:
        where = f"node {v.node} ({v.address})"
        if not v.present:
            out.append(f"{where} does not have namespace '{ns}'")
            continue
        if v.stop_writes:
            out.append(f"{where}: namespace '{ns}' is at stop-writes: it refuses writes")
        if v.clock_skew_stop_writes:
            out.append(f"{where}: namespace '{ns}' stopped writes for clock skew between "
                       f"nodes (clock_skew_stop_writes)")
        swu, swa = v.stop_writes_used_pct, v.stop_writes_avail_pct
        if v.used_pct is not None and swu is not None and v.used_pct >= swu - NEAR:
            out.append(f"{where}: namespace '{ns}' is {v.used_pct}% used, within {NEAR} "
                       f"points of stop-writes-used-pct {swu}")
        if v.avail_pct is not None and swa is not None and v.avail_pct <= swa + NEAR:
            out.append(f"{where}: namespace '{ns}' has {v.avail_pct}% available, within "
                       f"{NEAR} points of stop-writes-avail-pct {swa}")
    return out


def notes(views: list[server.NodeNamespace], settings: Settings,
          nodes: list[dict[str, str]]) -> list[str]:
    out = []
    ttl = settings.default_ttl_seconds
    if ttl < 0 or (ttl == 0 and any(v.default_ttl == 0 for v in views)):
        out.append(f"chunks never expire (default_ttl_seconds {ttl}"
                   + (", namespace default-ttl 0)" if ttl == 0 else ")"))
    if len({n["build"] for n in nodes}) > 1:
        out.append("nodes run different builds: "
                   + ", ".join(f"{n['node']} {n['build']}" for n in nodes))
    if not settings.send_key:
        out.append("send_key is false: records do not hold their keys, so `ls` lists "
                   "digests and `--prefix` matches nothing")
    return out


# ---------------------------------------------------------------------- text


def _print(r: dict[str, Any]) -> None:
    answering = sum(s["reachable"] for s in r["seeds"])
    lines = [("seeds", f"{answering} of {len(r['seeds'])} answer: "
                       + ", ".join(s["seed"] + ("" if s["reachable"] else " (no answer)")
                                   for s in r["seeds"]))]
    if "nodes" in r:
        lines.append(("cluster", f"{r['cluster_size']} node(s); the client reaches "
                                 f"{len(r['nodes'])}"))
        lines += [("node", f"{n['node']} {n['address']} build {n['build']}")
                  for n in r["nodes"]]
        lines.append(("namespace", f"{r['namespace']}, set {r['set']}"))
        for v in r["namespace_nodes"]:
            lines += _node_rows(v)
    output.rows(lines)
    for line in r.get("startup", []):
        print(line)
    for title, items in (("notes", r["notes"]), ("problems", r["problems"])):
        if items or title == "problems":
            print(f"{title}:" if items else f"{title}: none")
            for item in items:
                print(f"  - {item}")


def _node_rows(v: dict[str, Any]) -> list[tuple[str, str]]:
    at = f"  {v['node']}"
    if not v["present"]:
        return [(at, "does not have this namespace")]
    pct = lambda x: "?" if x is None else f"{x}%"  # noqa: E731
    return [
        (f"{at} space", f"objects {v['objects']}, {output.size(v['used_bytes'])} of "
                        f"{output.size(v['total_bytes'])} used ({pct(v['used_pct'])}), "
                        f"{pct(v['avail_pct'])} available"),
        (f"{at} stop-writes", f"{_flag(v['stop_writes'])} (at used "
                              f"{pct(v['stop_writes_used_pct'])} or avail "
                              f"{pct(v['stop_writes_avail_pct'])}); clock skew "
                              f"{_flag(v['clock_skew_stop_writes'])}"),
        (f"{at} records", f"max-record-size {v['max_record_size']}, replication factor "
                          f"{v['replication_factor']}"),
        (f"{at} ttl", f"default-ttl {v['default_ttl']}, nsup-period {v['nsup_period']}, "
                      f"allow-ttl-without-nsup {_flag(v['allow_ttl_without_nsup'])}"),
    ]


def _flag(value: bool | None) -> str:
    return "unknown" if value is None else str(value).lower()
