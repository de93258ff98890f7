"""The CLI's settings: flags, then a config file, then LMCACHE_AEROSPIKE_*, then the
defaults, so an operator points the CLI at exactly what LMCache uses.

The config file is LMCache's YAML (the `extra_config` keys of our RemoteConnector
plugin, `remote_storage_plugin.aerospike[.<instance>].<key>`, or of our storage
plugin, `storage_plugin.<name>.<key>`) or an L2 adapter's JSON (`"type": "plugin"`
or `"native_plugin"` with `adapter_params`, or LMCache's own `"type": "aerospike"`).
Everything is validated once, by `Settings.from_dict`, so an error names the key as
the user wrote it: the file's key, or the flag.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from lmcache_aerospike import _native
from lmcache_aerospike.config import ALIASES, ENV_PREFIX, Settings

REMOTE = "remote_storage_plugin."
STORAGE = "storage_plugin."
OURS = "lmcache_aerospike"  # module_path prefix of every surface of ours
AEROSPIKE_URL = "aerospike://"

# The named flags; any other setting goes through -o KEY=VALUE.
NAMED = {"hosts": "--hosts", "namespace": "--namespace", "set": "--set"}


class UsageError(Exception):
    """A bad command line or config file: exit status 2."""


def options() -> argparse.ArgumentParser:
    """The settings options every command but demo takes (argparse `parents`)."""
    parser = argparse.ArgumentParser(add_help=False)
    g = parser.add_argument_group(
        "settings", "flags win over --config, which wins over LMCACHE_AEROSPIKE_<KEY>,\n"
                    "which wins over the defaults (`lmcache-aerospike settings` lists them)")
    g.add_argument("--hosts", metavar="HOST:PORT,...", help="seed nodes")
    g.add_argument("-n", "--namespace", metavar="NS", help="namespace (default lmcache)")
    g.add_argument("--set", metavar="SET", help="set (default kv_chunks)")
    g.add_argument("-o", "--setting", dest="settings", action="append", default=[],
                   metavar="KEY=VALUE", help="any other setting, e.g. -o send_key=true "
                                             "(repeatable)")
    g.add_argument("-c", "--config", metavar="FILE",
                   help="LMCache's YAML config, or an L2 adapter JSON (--l2-adapter)")
    g.add_argument("--instance", metavar="NAME",
                   help="which Aerospike instance of the config file, when it has several "
                        "(e.g. aerospike.dr, or a storage plugin's name)")
    g.add_argument("-v", "--verbose", action="store_true",
                   help="show the engine's INFO log lines on stderr")
    return parser


def load(args: argparse.Namespace) -> Settings:
    """The settings the command line and its config file give."""
    if args.instance is not None and not args.config:
        raise UsageError(f"--instance {args.instance}: names an instance of --config FILE, "
                         f"and no --config is given")
    flags = _flags(args)
    given, where = ({}, "") if not args.config else read_config(args.config, args.instance)
    named = {ALIASES.get(k, k) for k in flags}
    merged = {k: v for k, v in given.items() if ALIASES.get(k, k) not in named}
    merged.update(flags)
    try:
        return Settings.from_dict(merged, where=where)
    except _native.ConfigError as e:
        raise _native.error_from("ECONFIG: " + _name_flags(str(e), where, flags)) from None


def _flags(args: argparse.Namespace) -> dict[str, str]:
    flags = {}
    for item in args.settings:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"-o {item}: expected KEY=VALUE")
        flags[key.strip()] = value
    flags.update({k: getattr(args, k) for k in NAMED if getattr(args, k) is not None})
    return flags


def _name_flags(msg: str, where: str, flags: Mapping[str, str]) -> str:
    """from_dict names every key `where + key`; a key that came from a flag is
    named as the flag instead, so nobody edits the file for it."""
    for key in flags:
        label = NAMED.get(key, f"-o {key}")
        msg = re.sub(r"(?:(?<=config )|(?<= and ))" + re.escape(where + key) + r"(?=[=: ]|$)",
                     lambda _: label, msg)
    return msg


# ---------------------------------------------------------------- config files


def read_config(path: str, instance: str | None) -> tuple[dict[str, Any], str]:
    """(settings of the chosen instance, the prefix its keys are written under)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise UsageError(f"--config {path}: {e.strerror}") from None
    if text.lstrip().startswith("{"):
        return _from_adapter_json(path, text)
    instances = _yaml_instances(path, text)
    name = _choose(path, instances, instance)
    return instances[name]


def _from_adapter_json(path: str, text: str) -> tuple[dict[str, Any], str]:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise UsageError(f"--config {path}: not valid JSON ({e})") from None
    kind = doc.get("type")
    if kind == "aerospike":  # LMCache's own adapter: its keys sit next to "type"
        return {k: v for k, v in doc.items() if k not in ("type", "serde")}, ""
    if kind in ("plugin", "native_plugin"):
        module = str(doc.get("module_path", ""))
        if not module.startswith(OURS):
            raise UsageError(f"--config {path}: module_path {module!r} is not "
                             f"lmcache_aerospike's")
        params = doc.get("adapter_params") or {}
        if not isinstance(params, dict):
            raise UsageError(f"--config {path}: adapter_params: expected an object")
        return params, "adapter_params."
    raise UsageError(f"--config {path}: type {kind!r} is not an Aerospike L2 adapter "
                     f"(expected plugin, native_plugin or aerospike)")


def _yaml_instances(path: str, text: str) -> dict[str, tuple[dict[str, Any], str]]:
    """Every Aerospike instance of an LMCache YAML config, by the prefix of its keys
    without the final dot ("remote_storage_plugin.aerospike.dr")."""
    try:
        import yaml  # LMCache's own dependency; only a YAML config needs it
    except ImportError:
        raise UsageError(f"--config {path}: reading YAML needs PyYAML "
                         f"(pip install 'lmcache-aerospike[yaml]')") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise UsageError(f"--config {path}: not valid YAML ({e})") from None
    if not isinstance(doc, dict):
        raise UsageError(f"--config {path}: expected LMCache's YAML config (a mapping)")
    extra = doc.get("extra_config") or {}
    if not isinstance(extra, dict):
        raise UsageError(f"--config {path}: extra_config: expected a mapping")
    prefixes = set()
    for key in extra:
        if not isinstance(key, str) or "." not in key:
            continue
        prefix = key.rpartition(".")[0]
        if prefix == REMOTE + "aerospike" or prefix.startswith(REMOTE + "aerospike."):
            prefixes.add(prefix)
        elif key.startswith(STORAGE) and key.endswith(".module_path") \
                and str(extra[key]).startswith(OURS):
            prefixes.add(prefix)
    instances = {p: (_keys_under(extra, p + "."), p + ".") for p in prefixes}
    url = doc.get("remote_url")
    if isinstance(url, str) and url.startswith(AEROSPIKE_URL):
        instances["remote_url"] = _from_url(path, url, extra)
        if "aerospike" not in (doc.get("remote_storage_plugins") or []):
            # Its keys are the URL's base settings then, not a plugin of their own.
            instances.pop(REMOTE + "aerospike", None)
    return instances


def _keys_under(extra: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    # As Settings.from_extra_config: no setting has a dot, so "aerospike.dr.hosts"
    # belongs to instance aerospike.dr, not to aerospike.
    return {k[len(prefix):]: v for k, v in extra.items()
            if isinstance(k, str) and k.startswith(prefix) and "." not in k[len(prefix):]}


def _from_url(path: str, url: str, extra: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """LMCache's deprecated `remote_url: aerospike://hosts/namespace/set`, over the
    keys remote_storage_plugin.aerospike.*, as remote.py reads it."""
    hosts, _, rest = url[len(AEROSPIKE_URL):].partition("/")
    parts = [p for p in rest.split("/") if p]
    if not hosts or len(parts) > 2:
        raise UsageError(f"--config {path}: remote_url {url!r}: expected "
                         f"{AEROSPIKE_URL}host:port[,host:port...][/namespace[/set]]")
    given = _keys_under(extra, REMOTE + "aerospike.")
    given.update(zip(("hosts", "namespace", "set"), [hosts, *parts]))
    return given, REMOTE + "aerospike."


def _choose(path: str, instances: Mapping[str, Any], wanted: str | None) -> str:
    names = sorted(instances)
    if not names:
        raise UsageError(f"--config {path}: no Aerospike instance (no extra_config key "
                         f"{REMOTE}aerospike.* nor a {STORAGE}<name>.module_path of "
                         f"{OURS}, nor an {AEROSPIKE_URL} remote_url)")
    if wanted is None:
        if len(names) > 1:
            raise UsageError(f"--config {path} has {len(names)} Aerospike instances "
                             f"({', '.join(names)}): pick one with --instance")
        return names[0]
    # "aerospike.dr" or "dr" name remote_storage_plugin.aerospike.dr; a storage
    # plugin goes by its name in storage_plugins.
    found = [n for n in names if wanted in (n, n.removeprefix(REMOTE),
                                            n.removeprefix(REMOTE + "aerospike."),
                                            n.removeprefix(STORAGE))]
    if len(found) != 1:
        why = "matches several" if found else "is not one"
        raise UsageError(f"--instance {wanted} {why} of the instances in {path}: "
                         f"{', '.join(found or names)}")
    return found[0]


def connect(settings: Settings, **overrides: Any) -> _native.Connector:
    """An engine on these settings (it probes the namespace's limits at open)."""
    return _native.Connector(**{**settings.engine_kwargs(), **overrides})


# ------------------------------------------------------------- the command


SETTINGS_EXAMPLES = """\
examples:
  lmcache-aerospike settings                      # every key, its default and meaning
  lmcache-aerospike settings --config lmcache.yaml --instance aerospike.dr
  lmcache-aerospike settings --hosts h:3000 -o target_segment_bytes=4194304 --json
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "settings", parents=[options()], help="list the settings, or show the resolved ones",
        description="Without flags, --config or LMCACHE_AEROSPIKE_HOSTS: every setting, "
                    "its type, default and meaning. Otherwise the values the other commands "
                    "would use (the password shown as ***); nothing is contacted.",
        epilog=SETTINGS_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=_show)


def _show(args: argparse.Namespace) -> int:
    from lmcache_aerospike.cli import output

    given = args.config or args.settings or any(getattr(args, k) for k in NAMED)
    if not given and not os.environ.get(ENV_PREFIX + "HOSTS"):
        print(Settings.help())
        return 0
    resolved = load(args).redacted()
    if args.json:
        output.emit_json(resolved)
    else:
        output.rows(resolved.items())
    return 0
