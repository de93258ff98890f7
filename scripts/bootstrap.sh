#!/usr/bin/env bash
# Sets up a fresh Debian machine for building and testing lmcache-aerospike:
#   - Debian packages (compilers, OpenSSL, libyaml, zlib, valgrind);
#   - libaerospike, built from the pinned official sources (scripts/deps.sh);
#   - .venv: CPU-only torch and the pinned LMCache (requirements-lmcache.txt),
#     pytest, the official Aerospike Python client (the tests plant records with
#     it, as another client would), and this package installed editable (which
#     builds the extension).
# Idempotent: installs only what is missing.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
scripts/install-debian-deps.sh test
scripts/deps.sh

# torch 2.13.0's CPU wheel for these machines is built for Python 3.11.
py=$(command -v python3.11 || command -v python3)
if [ ! -x .venv/bin/python ]; then
    "$py" -m venv .venv
fi
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }
# lmcache declares dependencies we leave out on purpose (see above): no warnings.
pip_install() { pip install --no-warn-conflicts "$@"; }
# Every run: pip only checks what is already there, and a venv from before a pin
# was added gets it.
pip_install -r requirements-lmcache.txt
if ! .venv/bin/python -c 'import lmcache' 2>/dev/null; then
    echo "installing LMCache into .venv" >&2
    # lmcache's wheel declares CUDA-only dependencies; requirements-lmcache.txt
    # holds what it needs on a CPU, so it goes in without its own.
    pip_install --no-deps "lmcache==$(sed -n 's/^# *LMCACHE_PIN=//p' requirements-lmcache.txt)"
fi
.venv/bin/python -c 'import pytest, aerospike' 2>/dev/null ||
    pip_install 'pytest>=8,<10' 'aerospike==19.3.0'
pip_install -e .
make -s all
