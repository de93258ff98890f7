"""An exact LRU cache of a byte budget, run on bench/cache/cache_trace.py's requests: the
yardstick bench/cache/cache_bench.py puts next to the real tiers.

A request is served the way the benchmark serves it on a real tier: look up every
chunk; the leading run of present chunks is the prefix LMCache can use, and it is
loaded (a hit moves each of those chunks to the most recent end); every chunk that is
not present is stored (inserted at the most recent end), and chunks are evicted from
the least recent end until the bytes fit the budget again. A present chunk after a
gap is counted as a chunk hit but not loaded, so it is not refreshed (LMCache cannot
use it, and a lookup such as Redis's EXISTS does not touch it either).
"""

from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class Outcome:
    """What serving one request did; the same fields for the simulation and the tiers."""
    chunks: int = 0  # chunks requested
    chunk_hits: int = 0  # of them present at lookup, wherever they are
    tokens: int = 0  # tokens requested
    prefix_tokens: int = 0  # tokens in the leading run of chunks loaded intact
    stored_ok: int = 0
    store_failed: int = 0
    lost: int = 0  # present at lookup, missing at load (evicted in between)
    wrong_chunks: int = 0  # loaded, but not this key's bytes
    wrong_bytes: int = 0
    errors: int = 0  # operations that reported an error (misses are not errors)
    hung: int = 0  # operations that never completed within the benchmark's timeout


class ExactLRU:
    """Byte-accounted LRU: an OrderedDict from key to size, least recent first."""

    def __init__(self, budget_bytes):
        self.budget = budget_bytes
        self.items = OrderedDict()
        self.used = 0
        self.evicted = 0
        self.store_log = []  # every insertion, in order (for the newest/oldest fifths)

    def __contains__(self, key):
        return key in self.items

    def touch(self, key):
        self.items.move_to_end(key)

    def insert(self, key, nbytes):
        if key in self.items:
            self.touch(key)
            return
        self.items[key] = nbytes
        self.used += nbytes
        self.store_log.append((key, nbytes))
        self._fit()

    def resize(self, budget_bytes):
        """A new budget (a cluster that lost a node holds less), least recent out first."""
        self.budget = budget_bytes
        self._fit()

    def _fit(self):
        while self.used > self.budget:
            _, size = self.items.popitem(last=False)
            self.used -= size
            self.evicted += 1

    def serve(self, keys, chunk_bytes, tokens_per_chunk):
        """Serves one request (keys in prefix order); returns its Outcome."""
        present = [k in self.items for k in keys]
        prefix = leading_run(present)
        for k in keys[:prefix]:
            self.touch(k)
        missing = [k for k, p in zip(keys, present) if not p]
        for k in missing:
            self.insert(k, chunk_bytes)
        return Outcome(chunks=len(keys), chunk_hits=sum(present),
                       tokens=len(keys) * tokens_per_chunk,
                       prefix_tokens=prefix * tokens_per_chunk, stored_ok=len(missing))


def leading_run(flags):
    """How many leading entries are true: the usable prefix, as LMCache counts it."""
    n = 0
    while n < len(flags) and flags[n]:
        n += 1
    return n


def fifths(store_log, budget_bytes):
    """(newest, oldest): the distinct keys stored last and first, each worth a fifth of
    the budget. store_log is [(key, nbytes)] in store order; a key stored again counts
    at its last store for the newest fifth and at its first for the oldest."""
    return (_worth(reversed(store_log), budget_bytes // 5),
            _worth(iter(store_log), budget_bytes // 5))


def _worth(log, limit):
    keys, seen, total = [], set(), 0
    for key, nbytes in log:
        if total >= limit:
            break
        if key not in seen:
            seen.add(key)
            keys.append(key)
            total += nbytes
    return keys
