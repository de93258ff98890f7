"""One run of LMCache's `lmcache bench l2`, shared by bench_l2.py and side_by_side.py.

`bench_l2()` runs the benchmark in a child process with `--no-skip-verify` and returns
its per-operation results (`{"Store": {...}, "Lookup": {...}, "Load": {...}}`, the
fields of LMCache's JSON report: `throughput_avg_mbps` is MiB/s, `total_keys`,
`total_success`, ...). It raises `BenchFailed` with the tail of the output when the
run fails, verification included. `truncate()` empties an Aerospike set.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time

# The child is `lmcache` itself, started through this stub so that a directory can be
# added to the `lmcache` package's search path first: LMCache's own Aerospike adapter
# imports `lmcache.lmcache_aerospike`, a compiled module its wheel does not ship, and
# `lmcache` is a regular package, so PYTHONPATH alone cannot add a submodule to it.
# bench/peers/peers.sh builds that module into a directory outside the repo.
_LAUNCH = """\
import sys
import lmcache
extra = sys.argv.pop(1)
if extra:
    lmcache.__path__.append(extra)
from lmcache.cli.main import main
sys.argv[0] = "lmcache"
sys.exit(main())
"""

_ENV = {"LMCACHE_TRACK_USAGE": "false", "LMCACHE_DISABLE_BANNER": "1"}


class BenchFailed(Exception):
    """`lmcache bench l2` exited non-zero, timed out, or lost keys."""


def bench_l2(spec, *, num_keys, in_flight, data_size_kb, rounds, lmcache_extra_path="",
             timeout=300):
    """Runs `lmcache bench l2 --no-skip-verify` on adapter `spec` (a dict)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        cmd = [sys.executable, "-c", _LAUNCH, lmcache_extra_path,
               "bench", "l2", "--l2-adapter", json.dumps(spec), "--no-skip-verify",
               "--format", "json", "--output", report.name,
               "--rounds", str(rounds), "--num-keys", str(num_keys),
               "--in-flight", str(in_flight), "--data-size-kb", str(data_size_kb)]
        try:
            # Not --quiet: LMCache prints verification mismatches only to the log.
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                 env={**os.environ, **_ENV})
        except subprocess.TimeoutExpired:
            raise BenchFailed(f"lmcache bench l2 did not finish in {timeout} s") from None
        if out.returncode != 0:
            text = out.stdout + out.stderr
            raise BenchFailed(f"lmcache bench l2 exited {out.returncode}: {_gist(text)}\n"
                              f"{text[-2000:]}")
        with open(report.name) as f:
            return operations(json.load(f))


# Lines that say what went wrong, in LMCache's log and in Python tracebacks.
_TELLING = re.compile(r"error|fail|mismatch|timeout|timed out|exception", re.IGNORECASE)


def _gist(text):
    """The last line of a failed run's output that says what went wrong."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    telling = [ln for ln in lines if _TELLING.search(ln) and not ln.startswith('"')]
    return (telling or lines or ["no output"])[-1][:300]


def operations(doc):
    """The report's operation sections, by operation name."""
    ops = {}
    for value in doc.values():
        if isinstance(value, dict):
            for op in value.values():
                if isinstance(op, dict) and "operation" in op:
                    ops[op["operation"]] = op
    return ops


def check_complete(ops, names=("Store", "Load")):
    """Raises BenchFailed when a store or load missed keys: LMCache verifies only the
    last round, and a throughput with missing keys would flatter the adapter."""
    for name in names:
        op = ops.get(name)
        if op is None:
            raise BenchFailed(f"the report has no {name} result")
        if op["total_success"] != op["total_keys"] or op.get("rounds_timed_out"):
            raise BenchFailed(f"{name}: {op['total_success']} of {op['total_keys']} keys "
                              f"succeeded, {op.get('rounds_timed_out', 0)} rounds timed out")


def _client(hosts):
    import aerospike  # the official client, a test dependency

    host, port = hosts.split(",")[0].rsplit(":", 1)
    return aerospike.client({"hosts": [(host, int(port))]}).connect()


def truncate(hosts, namespace, setname, wait_s=30.0):
    """Drops a run's records (runs would soon fill a small namespace) and waits until
    the server reports the set empty, so the next run does not share the CPU with the
    truncation."""
    c = _client(hosts)
    try:
        c.truncate(namespace, setname, 0)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _objects(c, namespace, setname) > 0:
            time.sleep(0.2)
    finally:
        c.close()


def _objects(c, namespace, setname):
    """The set's object count summed over the nodes (0 when the set is unknown)."""
    total = 0
    for _err, reply in c.info_all(f"sets/{namespace}/{setname}").values():
        for field in (reply or "").strip().split("\t")[-1].split(":"):
            if field.startswith("objects="):
                total += int(field.split("=", 1)[1].rstrip(";"))
    return total
