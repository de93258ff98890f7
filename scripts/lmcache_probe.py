#!/usr/bin/env python3
"""Probe which LMCache modules import on this (CPU-only) host.

Not a pytest test: run it directly, in the venv built from
requirements-lmcache.txt:

    python scripts/lmcache_probe.py              # table of every probed module
    python scripts/lmcache_probe.py --isolated   # one subprocess per module

It prints one line per module, "module: ok" or "module: <Error>: reason".
REQUIRED modules are the ones lmcache-aerospike relies on. Its exit code is 1
if a required module fails, else 0. Uses only the standard library and
lmcache (torch comes in through lmcache).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import pkgutil
import subprocess
import sys

# No usage telemetry, quiet logs (must be set before lmcache is imported).
os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("LMCACHE_LOG_LEVEL", "ERROR")

# What lmcache-aerospike needs: the MP native_plugin path and the non-MP
# RemoteConnector path, plus CPU MemoryObj allocation for tests.
REQUIRED = [
    "lmcache",
    "lmcache.lmcache_native",  # compiled Bitmap
    "lmcache.utils",
    "lmcache.v1.config",
    "lmcache.v1.metadata",
    "lmcache.v1.platform",
    "lmcache.v1.platform.event_notifier",  # create_event_notifier
    "lmcache.v1.platform.devices.cpu.device_ops",  # lmcache.device_ops on CPU (numba)
    "lmcache.v1.memory_management",
    "lmcache.v1.memory_allocators.tensor_memory_allocator",
    "lmcache.v1.memory_allocators.host_memory_allocator",
    "lmcache.v1.memory_allocators.pin_memory_allocator",
    "lmcache.v1.memory_allocators.mixed_memory_allocator",
    "lmcache.v1.distributed.api",
    "lmcache.v1.distributed.internal_api",
    "lmcache.v1.distributed.l2_adapters",
    "lmcache.v1.distributed.l2_adapters.base",
    "lmcache.v1.distributed.l2_adapters.config",
    "lmcache.v1.distributed.l2_adapters.factory",
    "lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter",
    "lmcache.v1.distributed.l2_adapters.native_plugin_l2_adapter",
    "lmcache.v1.distributed.l2_adapters.plugin_l2_adapter",
    "lmcache.v1.storage_backend.local_cpu_backend",
    "lmcache.v1.storage_backend.connector",
    "lmcache.v1.storage_backend.connector.base_connector",
    "lmcache.v1.storage_backend.connector.instrumented_connector",
]

# Probed for information only: their failure on CPU is expected or harmless.
OPTIONAL = [
    "lmcache.native_storage_ops",  # Bitmap's module in older releases
    "lmcache.c_ops",  # older name of the GPU kernels (now lmcache.cuda_ops)
    "lmcache.cuda_ops",  # needs libc10_cuda / libcudart
    "lmcache.python_ops_fallback",  # older numba fallback (now devices.cpu)
    "lmcache.lmcache_redis",
    "lmcache.lmcache_fs",
    "lmcache.lmcache_aerospike",  # only with BUILD_WITH_AEROSPIKE=1
    "lmcache.v1.storage_backend.native_clients.connector_client_base",
    "lmcache.v1.storage_backend.native_clients.aerospike_client",
]

# Packages whose direct submodules are all probed (informational unless in REQUIRED).
SUBPACKAGES = [
    "lmcache.v1.distributed.l2_adapters",
    "lmcache.v1.storage_backend.connector",
    "lmcache.v1.memory_allocators",
]


def submodules(pkg: str) -> list[str]:
    try:
        spec = importlib.util.find_spec(pkg)
    except Exception:  # parent package failed to import
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return sorted(
        f"{pkg}.{m.name}" for m in pkgutil.iter_modules(spec.submodule_search_locations)
    )


def try_import(name: str) -> str:
    try:
        importlib.import_module(name)
    except BaseException as e:  # noqa: BLE001 - SystemExit from a module counts too
        msg = str(e).splitlines()[0] if str(e) else ""
        return f"{type(e).__name__}: {msg}"[:160]
    return "ok"


def try_import_isolated(name: str) -> str:
    code = (
        "import sys\n"
        f"sys.argv = ['probe']\n"
        f"from importlib import import_module as i\n"
        "try:\n"
        f"    i({name!r}); print('ok')\n"
        "except BaseException as e:\n"
        "    m = str(e).splitlines()[0] if str(e) else ''\n"
        "    print(f'{type(e).__name__}: {m}'[:160])\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    out = p.stdout.strip().splitlines()
    if p.returncode != 0 or not out:
        return f"crashed (rc={p.returncode}): {p.stderr.strip()[-120:]}"
    return out[-1]


def bitmap_check() -> str:
    try:
        from lmcache.lmcache_native import Bitmap

        b = Bitmap(8)
        b.set(3)
        ok = b.test(3) and not b.test(2) and len(b) == 8
        return "ok" if ok else "wrong results"
    except BaseException as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"[:160]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isolated", action="store_true", help="one subprocess per module")
    args = ap.parse_args()
    probe = try_import_isolated if args.isolated else try_import

    names: list[str] = []
    for n in REQUIRED + OPTIONAL:
        if n not in names:
            names.append(n)
    # lmcache must be importable before its subpackages can be listed
    first = probe("lmcache")
    for pkg in SUBPACKAGES:
        for n in submodules(pkg):
            if n not in names:
                names.append(n)

    results = {"lmcache": first}
    for n in names:
        if n not in results:
            results[n] = probe(n)

    try:
        import lmcache

        version = getattr(lmcache, "__version__", "unknown")
    except BaseException:  # noqa: BLE001
        version = "not importable"
    try:
        import torch

        tv = f"{torch.__version__} (cuda available: {torch.cuda.is_available()})"
    except BaseException as e:  # noqa: BLE001
        tv = f"not importable: {e}"
    print(f"python {sys.version.split()[0]}, lmcache {version}, torch {tv}")

    width = max(len(n) for n in names) + 1
    failed_required = []
    for section, members in (
        ("REQUIRED", [n for n in names if n in REQUIRED]),
        ("OTHER", [n for n in names if n not in REQUIRED]),
    ):
        print(f"\n== {section}")
        for n in members:
            r = results[n]
            print(f"{n + ':':<{width}} {r}")
            if section == "REQUIRED" and r != "ok":
                failed_required.append(n)

    bm = bitmap_check()
    print(f"\nBitmap(8).set(3)/test(): {bm}")
    if bm != "ok":
        failed_required.append("Bitmap")

    ok_n = sum(1 for r in results.values() if r == "ok")
    print(f"\n{ok_n} of {len(results)} modules import; "
          f"{len(failed_required)} required failures"
          + (f": {', '.join(failed_required)}" if failed_required else ""))
    return 1 if failed_required else 0


if __name__ == "__main__":
    sys.exit(main())
