#!/usr/bin/env bash
# Builds the sdist and one manylinux_2_28 wheel per CPython and architecture into
# dist/, all on this x86_64 machine, with no container:
#
#   scripts/wheels.sh [PYTHON ...]
#
# PYTHON: the interpreters whose headers the extension is compiled against (one
# wheel per version and architecture); by default pyenv's (or PATH's) CPython
# 3.10, 3.11, 3.12 and 3.13, all of which must be found. LMCA_WHEEL_ARCHS (default
# "x86_64 aarch64") picks the architectures.
#
# How (docs/design-wheels.md says why, docs/measurements.md what it costs):
#   - scripts/cross-deps.sh builds zlib, libyaml, OpenSSL and libaerospike as
#     static libraries per architecture with `zig cc -target <arch>-linux-gnu.2.28`
#     (PyPI's ziglang): linked against glibc 2.28's symbol lists, cross-compiled;
#   - the engine and its asynchronous layer are compiled once per architecture,
#     the CPython extension (src/ext) once per Python, and all of it is linked
#     into one _native.<suffix> that exports PyInit__native and nothing else (the
#     OpenSSL inside cannot clash with another in the process) and needs only
#     libc, libm, libpthread, libdl and librt, at glibc 2.28 or older;
#   - setup.py makes the pure part once (LMCA_NO_EXTENSION=1) and
#     scripts/pack_wheel.py adds each extension to it under its tag;
#   - each wheel is tagged manylinux_2_28_<arch> and `auditwheel show` must
#     agree (it reads wheels of either architecture); its verdict stays beside the
#     wheel, dist/<wheel>.show.txt, for tests/wheels. There is no auditwheel
#     repair: it would have nothing to bundle, and it repairs this machine's
#     architecture only.
# Needs .venv with requirements-wheels.txt (scripts/bootstrap.sh installs it).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
tools=.venv/bin
[ -x "$tools/auditwheel" ] || { echo "no $tools/auditwheel: run scripts/bootstrap.sh" >&2; exit 1; }
archs=${LMCA_WHEEL_ARCHS:-x86_64 aarch64}
GLIBC=2.28 # as scripts/cross-deps.sh
zig=$("$tools/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))') ||
    { echo "no ziglang in $tools: run scripts/bootstrap.sh" >&2; exit 1; }
export ZIG_GLOBAL_CACHE_DIR="$top/.deps/zig-cache" ZIG_LOCAL_CACHE_DIR="$top/.deps/zig-cache"

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

out=build/wheels
rm -rf dist "$out"
mkdir -p dist "$out"
t=$SECONDS
"$tools/python" -m build --sdist --outdir dist . >"$out/sdist.log" 2>&1 ||
    { cat "$out/sdist.log" >&2; exit 1; }
echo "sdist: $(ls dist/*.tar.gz), $((SECONDS - t)) s"
t=$SECONDS
LMCA_NO_EXTENSION=1 "$tools/python" -m build --wheel --outdir "$out/base" . >"$out/base.log" 2>&1 ||
    { cat "$out/base.log" >&2; exit 1; }
base=$(ls "$out"/base/*-py3-none-any.whl)
echo "pure part: $(basename "$base"), $((SECONDS - t)) s"

# The flags setup.py gives (and the -DNDEBUG -fwrapv CPython's own CFLAGS add to
# them there); libaerospike's headers as system headers, as setup.py does. No -g:
# the link strips debug information (libaerospike's own -g too), which would
# triple the wheel. (clang, unlike gcc, warns of `= {NULL}`: not a missing field.)
cflags=(-std=c11 -fPIC -fvisibility=hidden -Wall -Wextra -Wno-missing-field-initializers -O2 -DNDEBUG -fwrapv
    -D_GNU_SOURCE -Dasm=__asm__ -Iinclude -Isrc/engine -Isrc/async -Isrc/ext)

# The headers of CPython $2 for arch $1. Only pyconfig.h differs between
# architectures, and between Debian's x86_64 and arm64 builds of 3.11 and 3.13 in
# only these four lines (docs/design-wheels.md): the x87 asm macros, which declare nothing
# the extension uses, wchar_t's usability (which only includes <wchar.h>) and the
# support tier. So the aarch64 headers are this Python's with pyconfig.h saying
# what an arm64 build's says.
py_include() {
    local arch=$1 py=$2 inc dst
    inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    if [ "$arch" = x86_64 ]; then
        echo "$inc"
        return
    fi
    dst="$out/$arch/include-$(basename "$inc")"
    if [ ! -d "$dst" ]; then
        cp -r "$inc" "$dst"
        sed -i -e '/#define HAVE_GCC_ASM_FOR_X64 1/d' -e '/#define HAVE_GCC_ASM_FOR_X87 1/d' \
            -e 's|/\* #undef HAVE_USABLE_WCHAR_T \*/|#define HAVE_USABLE_WCHAR_T 1|' \
            -e 's/#define PY_SUPPORT_TIER 1/#define PY_SUPPORT_TIER 2/' "$dst/pyconfig.h"
        # A pyconfig.h these edits do not fit is a new case: look at it first.
        if grep -q 'HAVE_GCC_ASM_FOR_X\(64\|87\) 1' "$dst/pyconfig.h" ||
            ! grep -q '^#define HAVE_USABLE_WCHAR_T 1' "$dst/pyconfig.h"; then
            echo "$inc/pyconfig.h: not the x86_64 pyconfig.h the aarch64 edits expect" >&2
            exit 1
        fi
    fi
    echo "$dst"
}

for arch in $archs; do
    t=$SECONDS
    scripts/cross-deps.sh "$arch"
    echo "$arch: static libraries in .deps/cross/$arch, $((SECONDS - t)) s"
    deps=.deps/cross/$arch
    cc=("$zig" cc -target "$arch-linux-gnu.$GLIBC" -mcpu=baseline)
    printf '#!/bin/sh\nexec %s "$@"\n' "${cc[*]}" >"$out/$arch-cc"
    chmod +x "$out/$arch-cc"
    t=$SECONDS
    # The engine: the same objects for every Python.
    # (each job: sh -c's $0 is the compiler, $1 the output directory, the rest flags.)
    rm -rf "$out/$arch/engine"
    mkdir -p "$out/$arch/engine"
    for s in src/engine/*.c src/async/*.c; do echo "$s"; done |
        xargs -P "$(nproc)" -I{} sh -c 'o="$1"; shift; exec "$0" "$@" -c "{}" -o "$o/$(basename "{}" .c).o"' \
            "$out/$arch-cc" "$out/$arch/engine" "${cflags[@]}" -isystem "$deps/include"
    echo "$arch: engine compiled, $((SECONDS - t)) s"
    # Exports PyInit__native only: the static libraries' symbols stay inside.
    printf '{ global: PyInit__native; local: *; };\n' >"$out/$arch/exports.map"
    for py in "${pythons[@]}"; do
        t=$SECONDS
        v=$("$py" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
        inc=$(py_include "$arch" "$py")
        objs="$out/$arch/cp$v"
        rm -rf "$objs" && mkdir -p "$objs"
        for s in src/ext/*.c; do echo "$s"; done |
            xargs -P "$(nproc)" -I{} sh -c 'o="$1"; shift; exec "$0" "$@" -c "{}" -o "$o/$(basename "{}" .c).o"' \
                "$out/$arch-cc" "$objs" "${cflags[@]}" -isystem "$deps/include" -I"$inc"
        so="$objs/_native.cpython-$v-$arch-linux-gnu.so"
        "$out/$arch-cc" -shared -o "$so" "$objs"/*.o "$out/$arch/engine"/*.o \
            "$deps/lib/libaerospike.a" "$deps/lib/libssl.a" "$deps/lib/libcrypto.a" \
            "$deps/lib/libyaml.a" "$deps/lib/libz.a" -lpthread -lm -lrt -ldl \
            -Wl,--version-script="$out/$arch/exports.map" -Wl,--strip-debug
        plat="manylinux_2_${GLIBC#2.}_$arch"
        whl=$("$tools/python" scripts/pack_wheel.py "$base" "$so" "cp$v-cp$v-$plat" dist)
        "$tools/auditwheel" show "$whl" >"$whl.show.txt"
        grep -q "consistent with the following platform tag: \"$plat\"" "$whl.show.txt" ||
            { cat "$whl.show.txt" >&2; echo "auditwheel does not agree with $plat" >&2; exit 1; }
        echo "$(basename "$whl"): $(du -k "$whl" | cut -f1) KiB, $((SECONDS - t)) s"
    done
done
