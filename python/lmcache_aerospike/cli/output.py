"""How the commands print: one JSON document, aligned `name  value` lines, sizes,
and a progress line on a terminal."""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Any, Iterable

PROG = "lmcache-aerospike"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"\s*([0-9]+)\s*([KMGT]?)(?:I?B)?\s*", re.I)


def emit_json(doc: Any) -> None:
    """One JSON document on stdout; bytes (digests, md blobs) as hex."""
    json.dump(doc, sys.stdout, indent=2, default=_plain)
    sys.stdout.write("\n")


def _plain(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    raise TypeError(f"{type(value).__name__} is not JSON")


def rows(pairs: Iterable[tuple[str, Any]], indent: str = "") -> None:
    """`name  value` lines with the values aligned."""
    pairs = list(pairs)
    width = max((len(name) for name, _ in pairs), default=0)
    for name, value in pairs:
        print(f"{indent}{name:<{width}}  {value}")


def warn(text: str) -> None:
    print(f"{PROG}: {text}", file=sys.stderr)


def size(n: int | None) -> str:
    """4194304 -> '4.0 MiB'; small numbers stay bytes."""
    if n is None:
        return "unknown"
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        scale = _UNITS[unit[0]]
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def parse_size(text: str) -> int:
    """'4M', '256K', '4MiB', '1048576' -> bytes (binary units)."""
    m = _SIZE.fullmatch(text)
    if m is None:
        raise ValueError(f"{text!r}: expected bytes or a size like 256K, 4M, 1G")
    return int(m[1]) * _UNITS[m[2].upper()]


def when(epoch: int | None) -> str:
    if not epoch:
        return "unknown"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def ttl(seconds: int | None) -> str:
    if seconds is None:
        return "unknown"
    return "never expires" if seconds < 0 else f"{seconds} s"


class Progress:
    """A `\\r` line on stderr when stderr is a terminal; nothing otherwise."""

    def __init__(self) -> None:
        self.on = sys.stderr.isatty()
        self.drawn = 0

    def show(self, text: str) -> None:
        if self.on:
            sys.stderr.write("\r" + text.ljust(self.drawn))
            sys.stderr.flush()
            self.drawn = len(text)

    def done(self) -> None:
        if self.on and self.drawn:
            sys.stderr.write("\r" + " " * self.drawn + "\r")
            sys.stderr.flush()
            self.drawn = 0
