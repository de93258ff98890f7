"""Fault injection rules and fixture counters.

Rules are added with the `fixture-fault:<spec>` info command, where spec is
`;`-separated key=value pairs:

  kind=delay|drop|result|stop-writes   (required)
  digest=<40 hex>   match only commands / batch rows touching this digest
  op=read|write|remove|touch|batch|scan|any   (default any)
  ms=<int>          delay: sleep this long before answering
  code=<int>        result: answer this result code instead of running
  after=<int>       stop-writes: successful writes allowed before it trips
  count=<int>       how many times the rule fires (default unlimited)

See README.md for the exact behaviour of each kind.
"""

import threading
from collections import Counter
from dataclasses import dataclass

KINDS = ("delay", "drop", "result", "stop-writes")
OPS = ("read", "write", "remove", "touch", "batch", "scan", "any")


class FaultSpecError(ValueError):
    pass


@dataclass
class Rule:
    kind: str
    op: str = "any"
    digest: bytes = None
    ms: int = 0
    code: int = 0
    after: int = 0
    count: int = None  # None = unlimited
    writes_seen: int = 0

    def matches(self, ops, digests):
        """Match a command answering to the op names `ops` and touching `digests`.

        A batch answers to "batch" and to the kind of each of its rows; a rule
        with a digest never matches a command that names no digest (a scan).
        """
        if self.op != "any" and self.op not in ops:
            return False
        if self.digest is not None and self.digest not in digests:
            return False
        return True


def _int(key, value, minimum=0):
    try:
        n = int(value)
    except ValueError:
        raise FaultSpecError("%s must be an integer" % key) from None
    if n < minimum:
        raise FaultSpecError("%s must be >= %d" % (key, minimum))
    return n


def parse_rule(spec):
    """Parse a fault spec string into a Rule; raise FaultSpecError."""
    items = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        key, sep, value = part.partition("=")
        if not sep:
            raise FaultSpecError("expected key=value, got '%s'" % part)
        items[key.strip()] = value.strip()
    kind = items.pop("kind", None)
    if kind not in KINDS:
        raise FaultSpecError("kind must be one of " + "|".join(KINDS))
    rule = Rule(kind)
    for key, value in items.items():
        if key == "op":
            if value not in OPS:
                raise FaultSpecError("op must be one of " + "|".join(OPS))
            rule.op = value
        elif key == "digest":
            try:
                rule.digest = bytes.fromhex(value)
            except ValueError:
                raise FaultSpecError("digest must be 40 hex digits") from None
            if len(rule.digest) != 20:
                raise FaultSpecError("digest must be 40 hex digits")
        elif key == "ms":
            rule.ms = _int(key, value)
        elif key == "code":
            rule.code = _int(key, value)
            if rule.code > 255:
                raise FaultSpecError("code must be 0..255")
        elif key == "after":
            rule.after = _int(key, value)
        elif key == "count":
            rule.count = _int(key, value, 1)
        else:
            raise FaultSpecError("unknown key '%s'" % key)
    if kind == "result" and rule.code == 0:
        raise FaultSpecError("result needs code=<non-zero>")
    return rule


class Faults:
    """The active rules. Each check consumes one firing of the rule it returns."""

    def __init__(self):
        self._lock = threading.Lock()
        self._rules = []
        self.fired = 0

    def clear(self):
        with self._lock:
            self._rules = []
            self.fired = 0

    def add(self, spec):
        rule = parse_rule(spec)
        with self._lock:
            self._rules.append(rule)

    def _fire(self, rule):
        self.fired += 1
        if rule.count is not None:
            rule.count -= 1
            if rule.count == 0:
                self._rules.remove(rule)

    def take(self, kind, ops, digests=()):
        """Return the first `kind` rule matching (ops, digests) and fire it."""
        with self._lock:
            for rule in self._rules:
                if rule.kind == kind and rule.matches(ops, digests):
                    self._fire(rule)
                    return rule
        return None

    def writes_stopped(self):
        """True (and fires the rule) if a tripped stop-writes rule is active."""
        with self._lock:
            for rule in self._rules:
                if rule.kind == "stop-writes" and rule.writes_seen >= rule.after:
                    self._fire(rule)
                    return True
        return False

    def note_writes(self, n):
        """Count n successful writes towards every stop-writes rule."""
        if n <= 0:
            return
        with self._lock:
            for rule in self._rules:
                if rule.kind == "stop-writes":
                    rule.writes_seen += n


class Stats:
    """Fixture counters, reported by `fixture-stats`."""

    NAMES = (
        "reads",
        "writes",
        "removes",
        "touches",
        "batches",
        "batch_rows",
        "scans",
        "info",
        "connections",
    )
    _PLURAL = {"read": "reads", "write": "writes", "remove": "removes", "touch": "touches"}

    def __init__(self):
        self._lock = threading.Lock()
        self._counts = Counter()

    def reset(self):
        with self._lock:
            self._counts = Counter()

    def add(self, name, n=1):
        with self._lock:
            self._counts[self._PLURAL.get(name, name)] += n

    def snapshot(self):
        with self._lock:
            return {name: self._counts[name] for name in self.NAMES}
