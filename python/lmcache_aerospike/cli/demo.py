"""`lmcache-aerospike demo`: LMCache hits out of Aerospike after a worker restart.

It runs LMCache's own engine on CPU tensors with our RemoteConnector plugin as its
only store (local_cpu false, so no hit can come from memory): engine A stores a
prompt's KV, is destroyed once the puts have landed, engine B (the restarted
worker) retrieves the prompt into an empty KV buffer, and the demo checks every
token hit and every byte came back. Without hosts (no --hosts, -o hosts=, --config
hosts nor LMCACHE_AEROSPIKE_HOSTS) it starts the bundled protocol test server on
loopback, a stand-in for Aerospike, and stops it on the way out.

Exit status: 0 every token hit with identical bytes, 1 a token missed or the bytes
differ, 2 bad settings, 3 a server error (its text is printed), 130 Ctrl-C; the
CLI's main turns the errors this module does not catch into those statuses.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator

from lmcache_aerospike.cli import output
from lmcache_aerospike.cli.settings import connect, load, options, read_config
from lmcache_aerospike.config import ENV_PREFIX, Settings

OK, MISSED, BAD_SETTINGS, SERVER_ERROR = 0, 1, 2, 3
# vLLM's prompt: 8 chunks and a tail, which vLLM computes after loading the chunks
# (a prompt of whole chunks would have its last token computed alone, by other
# kernels than in the cold run, and the logprobs would differ in the last bits).
VLLM_TOKENS = 2080
MODEL = "lmcache-aerospike-demo"  # in every chunk key: no clash with a real model's
PUT_DEADLINE_S = 60
DEMO_TTL_S = 3600  # a demo killed before its cleanup leaves records for an hour only
CREDENTIALS = ("username", "password")

EXAMPLES = """\
examples:
  lmcache-aerospike demo                        # the bundled stand-in server on loopback
  lmcache-aerospike demo --hosts 10.0.0.5:3000 -n lmcache --tokens 8192
  lmcache-aerospike demo --config lmcache.yaml --json
  .venv-vllm/bin/lmcache-aerospike demo --engine vllm   # vLLM restarted, KV from Aerospike

exit status: 0 every token hit with identical bytes, 1 a token missed or the bytes
differ, 2 bad settings, 3 a server error
"""


def register(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "demo", parents=[options()],
        help="store a prompt's KV with LMCache, restart, load it back from Aerospike",
        description="Runs LMCache's own engine on CPU tensors with the Aerospike remote "
                    "connector: stores a prompt's KV, restarts the engine, retrieves the "
                    "prompt from Aerospike and checks every token hit and the bytes match. "
                    "Without hosts it uses the bundled protocol test server on loopback, "
                    "a stand-in for Aerospike. -v also shows LMCache's own logging.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", choices=("lmcache", "vllm"), default="lmcache",
                   help="lmcache: LMCache's engine on CPU tensors (default); vllm: two vLLM "
                        "processes with a tiny Llama on the CPU (needs .venv-vllm)")
    p.add_argument("--tokens", type=_positive, default=None,
                   help=f"prompt length (2048; {VLLM_TOKENS} with --engine vllm)")
    p.add_argument("--chunk-size", type=_positive, default=256,
                   help="LMCache chunk size in tokens (256)")
    p.add_argument("--layers", type=_positive, default=8, help="model layers (8)")
    p.add_argument("--heads", type=_positive, default=4, help="KV heads (4)")
    p.add_argument("--head-size", type=_positive, default=128,
                   help="head size (128; with the defaults a chunk is 4 MiB of bf16)")
    p.add_argument("--json", action="store_true", help="one JSON summary on stdout")
    p.set_defaults(func=run)
    return p


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


class Failure(Exception):
    """Ends the demo with `code` and a one-line reason."""

    def __init__(self, code: int, text: str):
        super().__init__(text)
        self.code = code


# -- the run ---------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    if args.engine == "vllm":
        return run_vllm(args)
    args.tokens = args.tokens or 2048
    absent = _missing("torch", "lmcache")
    if absent:
        output.warn(f"demo needs {absent}, which this Python does not have: pip install "
                    "'lmcache-aerospike[lmcache]' (on a CPU-only machine scripts/bootstrap.sh "
                    "makes .venv with CPU torch)")
        return BAD_SETTINGS
    try:
        with _where(args) as summary:
            summary.update(_round_trip(args))
    except Failure as e:
        output.warn(str(e))
        return e.code
    code = OK if summary["hits"] == args.tokens and summary["bytes_identical"] else MISSED
    if args.json:
        output.emit_json({"ok": code == OK, **summary})
    else:
        _report(summary, args)
    if code != OK:
        output.warn(f"{args.tokens - summary['hits']} of {args.tokens} tokens missed, KV "
                    f"bytes {'identical' if summary['bytes_identical'] else 'DIFFER'}")
    return code


@contextlib.contextmanager
def _where(args: argparse.Namespace) -> Iterator[dict]:
    """The hosts the settings give, else the stand-in's, set as --hosts while
    the demo runs; yields the start of the summary."""
    if _hosts_given(args):
        yield {"stand_in": False}
        return
    with stand_in_server() as (port, pid):
        args.hosts = f"127.0.0.1:{port}"
        # On stderr under --json, so stdout stays one document.
        print(f"no --hosts given: using the bundled protocol test server on 127.0.0.1:"
              f"{port}, a stand-in for Aerospike (pass --hosts to use yours)",
              file=sys.stderr if args.json else sys.stdout, flush=True)
        yield {"stand_in": True, "stand_in_pid": pid}


def _hosts_given(args: argparse.Namespace) -> bool:
    if args.hosts or os.environ.get(ENV_PREFIX + "HOSTS"):
        return True
    if any(item.partition("=")[0].strip() == "hosts" for item in args.settings):
        return True
    return bool(args.config and read_config(args.config, args.instance)[0].get("hosts"))


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C waits until the block ends: a KeyboardInterrupt raised inside numpy's
    C module init (torch imports it) leaves numpy half made, and the import that
    follows fails with "CPU dispatcher tracer already initialized" instead of the
    interrupt (exit 1, not 130)."""
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def run_vllm(args: argparse.Namespace) -> int:
    """--engine vllm: two vLLM processes (cli/demo_vllm.py)."""
    from lmcache_aerospike.cli import demo_vllm

    args.tokens = args.tokens or VLLM_TOKENS
    absent = _missing("torch", "lmcache", "vllm")
    if absent:
        output.warn(f"demo --engine vllm needs {absent}, which this Python does not have: "
                    "run it from .venv-vllm (scripts/bootstrap.sh vllm makes it)")
        return BAD_SETTINGS
    why = demo_vllm.bad_tokens(args.tokens, args.chunk_size)
    if why:
        output.warn(why)
        return BAD_SETTINGS
    try:
        with _where(args) as summary:
            settings, _ = _settings(args)
            with _environ(_demo_env(settings, args.verbose)):
                summary.update(demo_vllm.store_restart_load(
                    _plugin_settings(settings), tokens=args.tokens, chunk=args.chunk_size))
    except Failure as e:
        output.warn(str(e))
        return e.code
    except demo_vllm.RunError as e:
        output.warn(str(e))
        return SERVER_ERROR
    if args.json:
        output.emit_json({"ok": demo_vllm.ok(summary), **summary})
    else:
        demo_vllm.report(summary)
    if not demo_vllm.ok(summary):
        output.warn(demo_vllm.complaint(summary))
        return MISSED
    return OK


def _missing(*modules: str) -> str | None:
    """The first of `modules` that cannot be imported here, or None."""
    return next((m for m in modules if importlib.util.find_spec(m) is None), None)


def _settings(args: argparse.Namespace) -> tuple[Settings, dict]:
    """The demo's settings, with an hour's TTL unless one is given, and the
    server's limits (a server that cannot be reached fails here, exit 3)."""
    settings = load(args)
    if settings.default_ttl_seconds == Settings.default_ttl_seconds:  # the default
        settings = dataclasses.replace(settings, default_ttl_seconds=DEMO_TTL_S)
    return settings, _limits(settings)


def _round_trip(args: argparse.Namespace) -> dict:
    settings, limits = _settings(args)
    with _environ(_demo_env(settings, args.verbose)), LMCacheLogs(args.verbose) as logs:
        with _interrupts_held():
            from lmcache_aerospike.cli import demo_kv  # torch and LMCache: seconds to import

        logs.adopt()
        try:
            result = demo_kv.store_restart_load(
                _plugin_settings(settings), model=MODEL, tokens=args.tokens,
                chunk=args.chunk_size, layers=args.layers, heads=args.heads,
                head_size=args.head_size, put_deadline_s=PUT_DEADLINE_S,
                started=logs.adopt, complaint=logs.last)
        except demo_kv.RemoteTierError as e:
            raise Failure(SERVER_ERROR, str(e)) from None
    return {"hosts": settings.hosts, "namespace": settings.namespace, "set": settings.set,
            "server_cap": limits["server_cap"], "cap_source": limits["cap_source"],
            "model": {"layers": args.layers, "kv_heads": args.heads,
                      "head_size": args.head_size, "chunk_size": args.chunk_size,
                      "dtype": "bfloat16"},
            **result,
            "load_gbps": result["stored_bytes"] / max(result["load_seconds"], 1e-9) / 1e9}


def _limits(settings: Settings) -> dict:
    """The server's limits, from an engine of our own: a server that cannot be
    reached fails here with its error (exit 3), where LMCache would only log it
    and run on without a remote backend."""
    with contextlib.closing(connect(settings)) as conn:
        return conn.limits()


def _plugin_settings(settings: Settings) -> dict:
    """The resolved settings as LMCache's extra_config keys give them to our plugin,
    which then opens the very engine `_limits` did. Credentials go by environment
    instead: LMCache logs its extra_config."""
    return {k: v for k, v in dataclasses.asdict(settings).items()
            if k not in CREDENTIALS and v != ""}


def _demo_env(settings: Settings, verbose: bool) -> dict:
    env = {"LMCACHE_TRACK_USAGE": "false", "DO_NOT_TRACK": "1"}  # no usage telemetry
    if not verbose:  # the level of LMCache's loggers made after LMCacheLogs.adopt
        env["LMCACHE_LOG_LEVEL"] = "ERROR"
    env.update({ENV_PREFIX + k.upper(): getattr(settings, k) for k in CREDENTIALS
                if getattr(settings, k)})
    return env


@contextlib.contextmanager
def _environ(values: dict) -> Iterator[None]:
    """os.environ with `values`, put back afterwards (the demo may run in a
    process that goes on: the tests)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# -- the stand-in server ------------------------------------------------------------


@contextlib.contextmanager
def stand_in_server(timeout_s: float = 15) -> Iterator[tuple[int, int]]:
    """(port, pid) of the bundled test server on loopback, stopped on the way out
    whatever the way (an error, Ctrl-C). Should this process be killed outright,
    the kernel sends the server SIGTERM (PR_SET_PDEATHSIG)."""
    with tempfile.TemporaryDirectory(prefix="lmca-demo-") as tmp:
        port_file, log_path = os.path.join(tmp, "port"), os.path.join(tmp, "log")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "lmcache_aerospike.testserver", "--port", "0",
                 "--port-file", port_file], stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, preexec_fn=_die_with_parent())
        try:
            yield _port(proc, port_file, log_path, timeout_s), proc.pid
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _port(proc: subprocess.Popen, port_file: str, log_path: str, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError, ValueError):
            with open(port_file) as f:  # written by an atomic rename
                return int(f.read())
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    with open(log_path, errors="replace") as f:
        tail = " ".join(f.read().split()[-40:])
    raise Failure(SERVER_ERROR, f"the bundled test server did not start: {tail or 'no output'}")


def _die_with_parent() -> Any:
    """A preexec_fn asking the kernel to SIGTERM the child when we die; libc is
    looked up here, before the fork."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


# -- LMCache's logging ----------------------------------------------------------------


class LMCacheLogs(logging.Handler):
    """Keeps LMCache's warnings and errors (ours included: remote.py logs through
    LMCache's init_logger) for the failure line, printing them only with -v.
    LMCache gives each logger a stream handler of its own when it makes it
    (lmcache/logging.py:67-93), so `adopt` takes over the ones made so far."""

    def __init__(self, verbose: bool):
        super().__init__(logging.WARNING)
        self.verbose, self.messages = verbose, []
        self._saved: dict[str, tuple] = {}

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append((record.levelno, record.getMessage()))

    def last(self) -> str:
        """The last error LMCache logged, else its last warning: the likely why."""
        for level in (logging.ERROR, logging.WARNING):
            found = [m for lv, m in self.messages if lv >= level]
            if found:
                return found[-1]
        return "LMCache logged no error"

    def adopt(self) -> None:
        for name, lg in list(logging.root.manager.loggerDict.items()):
            if (isinstance(lg, logging.Logger) and name.split(".")[0] in
                    ("lmcache", "lmcache_aerospike") and lg.handlers and self not in lg.handlers):
                self._saved.setdefault(name, (lg.handlers[:], lg.level))
                lg.handlers = [self, *lg.handlers] if self.verbose else [self]
                if lg.level == logging.NOTSET or lg.level > logging.WARNING:
                    lg.setLevel(logging.WARNING)

    def __enter__(self) -> "LMCacheLogs":
        self.adopt()
        return self

    def __exit__(self, *exc: Any) -> None:
        for name, (handlers, level) in self._saved.items():
            lg = logging.getLogger(name)
            lg.handlers[:] = handlers
            lg.setLevel(level)


# -- the report -----------------------------------------------------------------------


def _report(r: dict, args: argparse.Namespace) -> None:
    size, sizes, chunk = output.size, r["chunk_bytes"], args.chunk_size
    partial = r["tokens"] % chunk
    last = f"; the last {partial} tokens, {size(sizes[-1])}" if partial else ""
    print(f"Aerospike {r['hosts']}, namespace {r['namespace']}, set {r['set']}: records "
          f"up to {size(r['server_cap'])} ({r['cap_source']})")
    print(f"stored {r['tokens']} tokens ({args.layers} layers, {args.heads} KV heads of "
          f"{args.head_size}, bf16) as {len(sizes)} chunks of {chunk} tokens "
          f"({size(sizes[0])} each{last}), {size(r['stored_bytes'])} in all, in "
          f"{r['store_seconds']:.2f} s")
    print("segment layout (Connector.plan): " + "; ".join(
        f"a {size(p['chunk_bytes'])} chunk is {p['nseg']} segment{'s' * (p['nseg'] > 1)} "
        f"of {size(p['seg_bytes'])}" + (f" (the last {size(p['last_bytes'])})"
                                        if p["last_bytes"] != p["seg_bytes"] else "")
        for p in r["segments"]))
    print("restarted the worker: LMCache engine destroyed, a fresh one built")
    print(f"retrieved {r['hits']} of {r['tokens']} tokens from Aerospike after a restart; "
          f"KV bytes {'identical' if r['bytes_identical'] else 'DIFFER'}")
    print(f"load: {size(r['stored_bytes'])} in {r['load_seconds']:.3f} s, "
          f"{r['load_gbps']:.2f} GB/s")
    for phase in ("store", "load"):
        print(f"engine counters ({phase}): " + _counters(r["counters"][phase]))


def _counters(c: dict) -> str:
    """fast_ops and client_ops always (which path the payloads took), the rest
    when not zero."""
    return " ".join(f"{k}={v}" for k, v in c.items() if v or k in ("fast_ops", "client_ops"))
