#!/usr/bin/env bash
# Sets up a fresh Debian machine for building and testing lmcache-aerospike:
# Debian packages, Python test packages, and libaerospike (scripts/deps.sh).
# Idempotent: installs only what is missing.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
scripts/install-debian-deps.sh test
python3 -m pip --version >/dev/null
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install --quiet 'pytest>=8,<10'
scripts/deps.sh
make -s all
