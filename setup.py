"""Builds lmcache_aerospike._native: the C engine, its asynchronous layer and the
CPython extension in one shared object, linked with libaerospike, which
scripts/deps.sh finds or builds (see docs/compatibility.md, "Dependencies")."""

import glob
import os
import shlex
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def aerospike_flags():
    """AS_CFLAGS and AS_LIBS from .deps/aerospike.mk, obtaining libaerospike first."""
    subprocess.check_call([os.path.join(ROOT, "scripts", "deps.sh")])
    flags = {}
    with open(os.path.join(ROOT, ".deps", "aerospike.mk")) as mk:
        for line in mk:
            name, _, value = line.partition(":=")
            flags[name.strip()] = shlex.split(value)
    return flags


class BuildExt(build_ext):
    def build_extensions(self):
        flags = aerospike_flags()
        # libaerospike's headers are not -Wextra clean: include them as system headers.
        includes = []
        for arg in flags["AS_CFLAGS"]:
            includes += ["-isystem", arg[2:]] if arg.startswith("-I") else [arg]
        for ext in self.extensions:
            ext.extra_compile_args += includes
            ext.extra_link_args += flags["AS_LIBS"]
        super().build_extensions()


def sources():
    return sorted(
        glob.glob("src/engine/*.c") + glob.glob("src/async/*.c") + glob.glob("src/ext/*.c")
    )


# LMCA_NO_EXTENSION=1: the package without its extension, a pure wheel that
# scripts/wheels.sh adds each cross-built extension to (scripts/pack_wheel.py).
NO_EXTENSION = os.environ.get("LMCA_NO_EXTENSION") == "1"

setup(
    ext_modules=[] if NO_EXTENSION else [
        Extension(
            "lmcache_aerospike._native",
            sources=sources(),
            include_dirs=["include", "src/engine", "src/async", "src/ext"],
            # libaerospike's headers use GNU `asm`, which strict C11 spells __asm__.
            define_macros=[("_GNU_SOURCE", None), ("asm", "__asm__")],
            extra_compile_args=["-std=c11", "-fvisibility=hidden", "-Wall", "-Wextra", "-O2"],
        )
    ],
    cmdclass={"build_ext": BuildExt},
)
