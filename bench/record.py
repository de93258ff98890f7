"""What a benchmark's record says of itself: when, by which command, on which commit
and machine, against which server. The benchmarks that write records the docs link
(bench/peers/side_by_side.py, bench/engines/vllm_ttft.py and sglang_hicache.py with
--out) put this beside their results, so a table can be read and rerun without the
session that made it."""

import datetime
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def provenance(hosts=None, packages=("lmcache",), script=None, argv=None, namespace="lmcache"):
    """The header of a record: date, command, commit, machine and, with hosts, the
    Aerospike server's build; the versions of the Python packages named. The command
    is this process's, or script run with argv (a main(argv) called in-process)."""
    words = sys.argv if argv is None else [os.path.relpath(script, TOP)] + list(argv)
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "command": " ".join([os.path.basename(sys.executable)] + words),
           "commit": commit(), "machine": machine()}
    if hosts:
        out["aerospike_server"] = server_build(hosts, namespace)
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def header_line(p):
    """The provenance as one Markdown paragraph."""
    parts = [p["date"]]
    if p.get("aerospike_server"):
        parts.append(f"Aerospike {p['aerospike_server']}")
    # Package versions as "name version"; a value that names itself ("redis-server
    # 7.0.15") as it is.
    parts += [p[k] if str(p[k]).startswith(k.replace("_", "-")) else f"{k} {p[k]}"
              for k in p if k not in
              ("date", "command", "commit", "machine", "aerospike_server") and p[k]]
    parts += [p["machine"], f"commit {p['commit']}"]
    return "; ".join(parts) + f".\n\n    {p['command']}\n"


def write(out_dir, stem, doc, markdown):
    """Writes stem.json (doc) and stem.md (markdown) into out_dir; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, stem + ".json"), os.path.join(out_dir, stem + ".md")]
    with open(paths[0], "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    with open(paths[1], "w") as f:
        f.write(markdown)
    return paths


def commit():
    """The checkout's commit, marked when it has uncommitted changes."""
    try:
        head = subprocess.run(["git", "-C", TOP, "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", TOP, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def machine():
    """CPU model, cores and memory: the numbers are this machine's."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f
                          if ln.startswith("model name")), model)
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
        return f"{model}, {os.cpu_count()} CPUs, {kib / 2**20:.0f} GiB"
    except OSError:
        return f"{model}, {os.cpu_count()} CPUs"


def server_build(hosts, namespace="lmcache"):
    """The servers' `build`, asked through our own engine (every benchmark's venv has
    it): "8.1.2.0", or each distinct value when the nodes differ."""
    try:
        from lmcache_aerospike import _native

        c = _native.Connector(hosts=hosts, namespace=namespace)
        try:
            return ", ".join(sorted({value for _, _, value in c.info("build")}))
        finally:
            c.close()
    except Exception as e:  # only a label: never fail the run over it
        return f"unknown ({e})"


def redis_version():
    exe = shutil.which("redis-server")
    if exe is None:
        return None
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    # "Redis server v=7.0.15 sha=... malloc=..." -> "redis-server 7.0.15"
    version = next((w[2:] for w in out.split() if w.startswith("v=")), out.strip())
    return f"redis-server {version}"
