"""What logs may say about a chunk (spec 4.8): its record's digest, never its key,
never its bytes. The digest is Aerospike's own (RIPEMD-160 of set, key type and
key), the one asadm and aql show, so an operator can find the record from a log
line; the engine's own log lines name records the same way."""

from __future__ import annotations

import hashlib
import re
from typing import Iterable

_STRING_KEY = b"\x03"  # Aerospike's particle type of a string key


def digest(setname: str, reckey: str) -> str:
    """The hex digest of record `reckey` ("<chunk key>|m" for a meta record)."""
    try:
        h = hashlib.new("ripemd160")
    except ValueError:  # an OpenSSL without legacy digests: still no key in logs
        return "b2:" + hashlib.blake2b(reckey.encode(), digest_size=10).hexdigest()
    h.update(setname.encode() + _STRING_KEY + reckey.encode())
    return h.hexdigest()


def chunk(setname: str, key: str) -> str:
    """How a log line names a chunk: its meta record's digest."""
    return "chunk " + digest(setname, key + "|m")


def redact(text: str, setname: str, keys: Iterable[str]) -> str:
    """`text` (an engine error: it names the key it failed on) with every chunk key,
    and each of its record keys, replaced by the record's digest."""
    for key in sorted(set(keys), key=len, reverse=True):
        if key and key in text:
            text = re.sub(re.escape(key) + r"(\|m|\|s\|\d+)?",
                          lambda m: digest(setname, key + (m.group(1) or "|m")), text)
    return text
