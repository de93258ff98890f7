"""Every setting of lmcache-aerospike, its validation and its environment fallback.

One `Settings` serves all of LMCache's surfaces (the RemoteConnector plugin, the
`plugin` L2 adapter, the storage plugin) and the CLI, so a key means the same thing
everywhere. Value ranges of the engine settings are checked in one place, the C
engine (`_native.check_settings`); this module parses values, resolves aliases and
environment fallbacks, and checks only the settings the engine does not know (the glue
settings). It imports nothing heavy: the CLI imports it to print `Settings.help()`.

Precedence, per setting: the mapping, then `LMCACHE_AEROSPIKE_<NAME>`, then the
default. A value of None or "" counts as not given, as in LMCache's own Aerospike
adapter, where an empty config value falls back to the environment.
"""

import math
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from lmcache_aerospike import _native

# No `from __future__ import annotations` here: _parse and help() read each field's
# type as a class (str, int, bool, float).

ConfigError = _native.ConfigError

ENV_PREFIX = "LMCACHE_AEROSPIKE_"

# Upstream LMCache's Aerospike adapter spells these differently; users who switch to
# us change only type/module_path/class_name, so their keys must keep working.
ALIASES = {"set_name": "set", "max_record_bytes": "max_segment_bytes"}

# Keys LMCache itself puts next to ours (the plugin loaders read them).
LMCACHE_KEYS = frozenset({"module_path", "class_name", "config_class_name"})

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})
_DECIMAL = re.compile(r"[+-]?[0-9]+")


def _engine(default: Any = None, doc: str = "", **extra: Any) -> Any:
    """A setting passed to `_native.Connector`; its range is checked there."""
    meta = {"engine": True, "doc": doc}
    if default is None:  # hosts: required, so no default
        return field(metadata=meta, **extra)
    return field(default=default, metadata=meta, **extra)


def _glue(default: Any, doc: str, lo: float = -math.inf, hi: float = math.inf) -> Any:
    """A setting of the Python glue: the engine never sees it, so its range is here."""
    return field(default=default, metadata={"engine": False, "doc": doc, "range": (lo, hi)})


@dataclass(frozen=True, kw_only=True)
class Settings:
    """All settings, typed. Build it with `from_dict` or `from_extra_config`, which
    validate; the constructor does not."""

    # Engine settings (spec 4.5.2, plus the engine's own), in the spec's order.
    hosts: str = _engine(doc="seeds: host[:port], host:tls-name:port or [ipv6]:port, "
                             "comma-separated")
    namespace: str = _engine("lmcache", "Aerospike namespace (1 to 31 bytes)")
    set: str = _engine("kv_chunks", "Aerospike set in the namespace (at most 63 bytes); "
                                    "alias set_name")
    target_segment_bytes: int = _engine(
        2097152, "preferred segment size; lowered onto the server's write-block grid and "
                 "clamped to its cap at open; 0 means this default (upstream's 'auto')")
    max_segment_bytes: int = _engine(
        0, "ceiling per segment; 0 = discovered from the server, an override is clamped "
           "to it; alias max_record_bytes")
    min_segment_bytes: int = _engine(65536, "payloads whose segments would be smaller "
                                            "than this take the single-record path")
    single_record_threshold_bytes: int = _engine(
        0, "largest payload stored as one record; 0 = min(target, max segment bytes)")
    batch_threshold_bytes: int = _engine(
        131072, "records up to this size go in batch calls, larger ones as single calls")
    default_ttl_seconds: int = _engine(
        86400, "TTL of new records; 0 = namespace default-ttl, -1 = never expire")
    read_timeout_ms: int = _engine(1000, "total timeout of a read")
    write_timeout_ms: int = _engine(2000, "total timeout of a write")
    connect_timeout_ms: int = _engine(1000, "timeout of the first cluster connection")
    commit_level: str = _engine("all", "all or master")
    replica: str = _engine("sequence", "sequence, master, any or prefer_rack")
    enable_crc32: bool = _engine(False, "store and verify a CRC32 of every payload")
    send_key: bool = _engine(False, "store the key with each record (debugging; costs space)")
    max_conns_per_node: int = _engine(64, "connection pool size per server node")
    fast_path: bool = _engine(True, "send and receive payloads straight from and into "
                              "LMCache's buffers (false: the client's own calls, which copy)")
    username: str = _engine("", "Enterprise Edition user (optional)")
    password: str = _engine("", "Enterprise Edition password (optional)", repr=False)
    tls_name: str = _engine("", "reserved for Enterprise Edition TLS")
    num_workers: int = _engine(8, "worker threads of the engine (1 to 256); when not "
                                  "given but executor_threads is, executor_threads")
    # A cache when the namespace is full (README, "A cache that stays full").
    touch_on_hit: bool = _engine(
        True, "a get that found a chunk not among the newest moves it to the head of the "
              "eviction order: it is touched (batched, off the get path) at the head of the "
              "clock every writer of the namespace shares")
    shared_clock: bool = _engine(
        True, "void times come from one clock record per namespace that every writer "
              "shares, so eviction follows store and hit order across processes and hosts; "
              "false = this engine's own clock, as if it wrote alone")
    read_touch_ttl_percent: int = _engine(
        -1, "gets also ask the server to restart a record's TTL (now + its TTL, behind the "
            "shared clock's head) when less than this percent of it is left (read-touch, "
            "server 7.1+): 1 to 100, 0 = the namespace's default-read-touch-ttl-pct, "
            "-1 = never (touch_on_hit moves hits instead); lookups never touch")
    backpressure_ms: int = _engine(
        5000, "how long a store retries writes the server refuses for space (stop-writes "
              "while NSUP evicts) or load (device overload; at most max_put_wait_ms from "
              "its start), with jittered backoff, before it is dropped (counted, never "
              "raised into LMCache); 0 = no retry")
    full_recheck_ms: int = _engine(
        1000, "after a store waited its whole backpressure_ms on stop-writes, stores are "
              "dropped without a round trip for this long, then one looks again")
    touch_budget_percent: int = _engine(
        100, "hits moved to the head rewrite at most this percent of what stores landed, "
             "counted over every writer of the namespace (banked up to a sixteenth of its "
             "capacity); hits past it stay where they are, and as it runs out only hits "
             "a fifth of the namespace's span (NSUP's last cut to the head) behind the head "
             "or more are moved; 0 = no budget")
    max_put_wait_ms: int = _engine(
        2000, "the longest a store waits for its place on the clock every writer shares "
              "(NSUP's pace); one due later is dropped (counted, never raised into "
              "LMCache); also the longest a store, from its start, retries writes refused "
              "for load (a device's full write queue) before it is dropped; and a store's "
              "bound: it ends within this or write_timeout_ms, the larger, of its start "
              "(writes shortened to what is left, none after), unless it waits out "
              "stop-writes or a lost node (backpressure_ms); 0 = never waits for its place, "
              "and load is retried for backpressure_ms")
    records_per_void_second: int = _engine(
        0, "most records in one second of void time (NSUP evicts whole seconds and "
           "refuses one above its per-cycle target); 0 = half of that target, derived "
           "from the namespace")
    # Glue settings.
    batch_max_in_flight: int = _glue(64, "bound on operations in flight in "
                                         "batched_get / batched_put", 1, 65536)
    executor_threads: int = _glue(16, "thread-pool size (spec 4.5.2); also the engine's "
                                      "num_workers when num_workers is not given", 1, 256)
    enable_list: bool = _glue(False, "list() scans the whole set; otherwise it returns []")
    enable_repair_scan: bool = _glue(False, "accepted and reserved (spec: a later phase's "
                                            "orphan sweep); no effect yet")
    max_capacity_gb: float = _glue(0.0, "L2 capacity for LMCache's eviction, GB; 0 = none",
                                   0, math.inf)
    touch_on_lock: bool = _glue(
        False, "the L2 adapter's lookup-and-lock restarts each hit's TTL, so a locked "
               "chunk cannot expire before it is loaded; costs a touch (a record rewrite "
               "on the server) per hit")
    metrics: bool = _glue(True, "export metrics when the metrics library is importable")

    # ------------------------------------------------------------------ building

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, where: str = "") -> "Settings":
        """Settings from a mapping of keys (typed values or strings), the environment
        and the defaults. `where` is what the keys are relative to; every ConfigError
        names `where + key` as the user wrote it, or the environment variable."""
        if not isinstance(d, Mapping):
            raise _error(f"config {where or 'settings'}: expected a mapping of settings, "
                         f"got {type(d).__name__}")
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        labels: dict[str, str] = {}  # setting -> how the user named it, for errors
        shown: dict[str, str] = {}  # setting -> "label=value", for conflicts
        for key, value in d.items():
            if key in LMCACHE_KEYS:
                continue
            name = ALIASES.get(key, key) if isinstance(key, str) else key
            if name not in known:
                raise _error(f"config {where}{key}: unknown key{_suggest(key, known)}")
            if value is None or (isinstance(value, str) and value == ""):
                continue
            label = where + key
            parsed = _parse(known[name], value, label)
            this = f"{label}={_shown(known[name], value)}"
            if name in values and values[name] != parsed:
                raise _error(f"config {shown[name]} and {this}: both name the setting "
                             f"{name}; give one of them")
            values.setdefault(name, parsed)
            labels.setdefault(name, label)
            shown.setdefault(name, this)

        for name, f in known.items():
            var = ENV_PREFIX + name.upper()
            text = os.environ.get(var, "")
            if name not in values and text != "":
                values[name] = _parse(f, text, var)
                labels[name] = var

        if "hosts" not in values:
            raise _error(f'config {where}hosts: required ("host:port,..."), '
                         f"in the settings or in {ENV_PREFIX}HOSTS")
        if values.get("target_segment_bytes") == 0:  # upstream's "auto"
            values["target_segment_bytes"] = known["target_segment_bytes"].default
        if "num_workers" not in values and "executor_threads" in values:
            # The spec sizes a thread pool; the engine's workers are that pool here.
            values["num_workers"] = values["executor_threads"]
            labels["num_workers"] = labels["executor_threads"]

        settings = cls(**values)
        try:
            _native.check_settings(**settings.engine_kwargs())
        except ConfigError as e:
            raise _relabel(str(e), labels, where) from None
        return settings

    @classmethod
    def from_extra_config(cls, extra_config: Mapping[str, Any] | None,
                          prefix: str) -> "Settings":
        """Settings from LMCache's extra_config: the keys under `prefix` (for example
        "remote_storage_plugin.aerospike.primary."), with the prefix stripped. Keys of
        other plugins are ignored, including those of another instance nested under
        the prefix ("...aerospike.dr.hosts" under "...aerospike."): no setting has a
        dot in its name."""
        if prefix and not prefix.endswith("."):
            prefix += "."
        mine = {}
        for key, value in (extra_config or {}).items():
            if isinstance(key, str) and key.startswith(prefix):
                rest = key[len(prefix):]
                if "." not in rest:
                    mine[rest] = value
        return cls.from_dict(mine, where=prefix)

    # ------------------------------------------------------------------- using

    def engine_kwargs(self) -> dict[str, Any]:
        """Keywords for `_native.Connector(**kw)`: engine settings only, str/int/bool;
        empty credentials are left out, so the engine does not try to authenticate."""
        kw = {f.name: getattr(self, f.name) for f in fields(self) if f.metadata["engine"]}
        for name in ("username", "password", "tls_name"):
            if not kw[name]:
                del kw[name]
        return kw

    def identity(self) -> tuple:
        """What makes two connectors share one engine: every engine setting, as
        (name, value) pairs. It holds the password: do not log it."""
        return tuple((f.name, getattr(self, f.name)) for f in fields(self)
                     if f.metadata["engine"])

    def redacted(self) -> dict[str, Any]:
        """All settings for logs, a non-empty password shown as "***"."""
        out = asdict(self)
        if out["password"]:
            out["password"] = "***"
        return out

    @classmethod
    def help(cls) -> str:
        """Every key, its type, default and meaning, and the environment variables."""
        lines = ["lmcache-aerospike settings (key (type, default): meaning):"]
        for f in fields(cls):
            default = "required" if f.name == "hosts" else repr(f.default)
            lines.append(f"- {f.name} ({f.type.__name__}, {default}): {f.metadata['doc']}")
        lines += [
            "",
            "Aliases of LMCache's own Aerospike adapter: "
            + ", ".join(f"{a} = {n}" for a, n in ALIASES.items())
            + "; its target_segment_bytes 0 ('auto') is the default here.",
            f"Ignored (LMCache's own): {', '.join(sorted(LMCACHE_KEYS))}.",
            "Integers and booleans may be strings (\"4194304\", \"true\"); booleans take "
            "true/false, 1/0, yes/no, on/off.",
            "",
            f"Environment: each key not given (or given empty) is read from "
            f"{ENV_PREFIX}<KEY IN UPPER CASE>, e.g. {ENV_PREFIX}HOSTS, "
            f"{ENV_PREFIX}NAMESPACE, {ENV_PREFIX}SET, {ENV_PREFIX}USERNAME, "
            f"{ENV_PREFIX}PASSWORD; the settings win over the environment, the "
            "environment over the defaults.",
        ]
        return "\n".join(lines)


# ---------------------------------------------------------------------- helpers


def _error(msg: str) -> Exception:
    """A ConfigError shaped like the ones the extension raises."""
    exc = ConfigError(msg)
    exc.status, exc.name, exc.as_code = _native.STATUS_ECONFIG, "ECONFIG", 0
    return exc


def _shown(f: Any, value: Any) -> str:
    """A value as error messages show it (as the engine does); never a password."""
    if f.name == "password":
        return "***"
    text = f'"{value}"' if isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _suggest(key: Any, known: Mapping[str, Any]) -> str:
    import difflib  # only on this error path: the CLI imports this module to start

    close = difflib.get_close_matches(str(key), [*known, *ALIASES], n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _parse(f: Any, value: Any, label: str) -> Any:
    """One value as its setting's type, from a typed value or a string."""
    kind = f.type

    def bad(why: str) -> Exception:
        return _error(f"config {label}={_shown(f, value)}: {why}")

    if kind is str:
        # No conversion: YAML reads `password: 0123` as 83, which must not pass.
        if not isinstance(value, str):
            raise _error(f"config {label}={_shown(f, value)}: expected a string, "
                         f"got {type(value).__name__} (quote it)")
        return value
    if kind is bool:
        if isinstance(value, bool):
            parsed = value
        elif isinstance(value, int) and value in (0, 1):
            parsed = bool(value)
        elif isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            parsed = value.strip().lower() in _TRUE
        else:
            raise bad("expected true or false")
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            parsed = value
        elif isinstance(value, float) and value.is_integer():
            parsed = int(value)
        elif isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
            parsed = int(value.strip())
        else:
            raise bad("expected an integer")
    else:  # float
        try:
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise ValueError
            parsed = float(value)
        except ValueError:
            raise bad("expected a number") from None
        if not math.isfinite(parsed):
            raise bad("expected a finite number")
    lo, hi = f.metadata.get("range", (-math.inf, math.inf))
    if not lo <= parsed <= hi:  # bools pass: they have no range
        raise bad(f"must be {lo} to {hi}" if hi != math.inf else f"must be at least {lo}")
    return parsed


def _relabel(msg: str, labels: Mapping[str, str], where: str) -> Exception:
    """The engine's "config KEY...: why", naming the key as the user wrote it."""
    m = re.match(r"config ([A-Za-z0-9_]+)(.*)", msg, re.S)
    if m is None:
        return _error(f"config {where}: {msg}")
    return _error(f"config {labels.get(m[1], where + m[1])}{m[2]}")
