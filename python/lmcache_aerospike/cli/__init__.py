"""`lmcache-aerospike`: the operator's command line, on the extension.

Each command lives in a module with `register(subparsers)`, which adds its parser
and sets `func(args) -> exit status`; this module builds the parser, runs the
command, and turns errors into the documented exit statuses, without tracebacks.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from typing import Iterator, Sequence

from lmcache_aerospike import _native
from lmcache_aerospike.cli import data, demo, ls, output, probe, repair, size, stats
from lmcache_aerospike.cli import settings as settings_cmd
from lmcache_aerospike.cli.settings import UsageError

COMMANDS = (probe, size, stats, data, ls, repair, settings_cmd, demo)

OK, NOT_FOUND, USAGE, SERVER, INTERRUPTED = 0, 1, 2, 3, 130

DESCRIPTION = """\
Operator commands for the Aerospike tier of LMCache: check the cluster, look at
what is stored, move single chunks in and out, and repair what crashed writers
left. Every command takes the settings LMCache's surfaces take: flags, a config
file (--config: LMCache's YAML, or an L2 adapter JSON), or LMCACHE_AEROSPIKE_<KEY>
environment variables, in that order of precedence."""

EPILOG = """\
exit status:
  0    success
  1    not found (get, rm, inspect, pin, unpin), or problems found (probe)
  2    usage or configuration error: a bad flag, setting or config file (the
       message names the key as you wrote it), or a local file that cannot be read
  3    server or connection error: unreachable seeds, a timeout, a full namespace,
       another error of the engine (its text is printed)
  130  interrupted

examples:
  lmcache-aerospike probe --hosts 10.0.0.5:3000 -n lmcache
  lmcache-aerospike size --layers 32 --kv-heads 8 --head-size 128 --tokens 10G
  lmcache-aerospike stats --config lmcache.yaml
  lmcache-aerospike ls --prefix 'Qwen/Qwen3-8B@' --limit 20
  lmcache-aerospike put mykey payload.bin && lmcache-aerospike get mykey copy.bin
  lmcache-aerospike repair --interval 120 --apply
  LMCACHE_AEROSPIKE_HOSTS=10.0.0.5:3000 lmcache-aerospike inspect mykey

`lmcache-aerospike COMMAND --help` describes each command, with examples."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=output.PROG, description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version",
                   version=f"%(prog)s {_native.__version__} (libaerospike "
                           f"{_native.aerospike_client_version})")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:  # --help, --version, or a usage error already printed
        return e.code if isinstance(e.code, int) else OK if e.code is None else USAGE
    with _engine_logs(getattr(args, "verbose", False)):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        return args.func(args)
    except (_native.ConfigError, _native.InvalidArgumentError, UsageError) as e:
        output.warn(str(e))
        return USAGE
    except _native.Error as e:  # before OSError: ConnectionError and TimeoutError are
        output.warn(f"{e.name}: {e}")
        return SERVER
    except BrokenPipeError:  # `get KEY | head`: the reader left, which is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK
    except OSError as e:
        output.warn(f"{e.filename}: {e.strerror}" if e.filename else str(e))
        return USAGE
    except KeyboardInterrupt:
        output.warn("interrupted")
        return INTERRUPTED


@contextlib.contextmanager
def _engine_logs(verbose: bool) -> Iterator[None]:
    """The engine's warnings (with -v its INFO lines too) on stderr while one
    command runs; a handler per run, so repeated main() calls (tests) do not
    stack them."""
    logger = logging.getLogger("lmcache_aerospike")
    level = logging.INFO if verbose else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{output.PROG}: %(message)s"))
    handler.setLevel(level)
    saved = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)
