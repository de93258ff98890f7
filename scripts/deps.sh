#!/usr/bin/env bash
# Finds or builds libaerospike (the official Aerospike C client) and writes
# .deps/aerospike.mk with AS_CFLAGS and AS_LIBS for the Makefile.
#
# Order of preference:
#   1. LMCA_AEROSPIKE_PREFIX=/usr/local (a prefix holding include/aerospike/ and lib/)
#   2. pkg-config aerospike
#   3. build the C client shipped inside the official Python client's sdist on PyPI
#      (aerospike==$AS_PY_PIN), cached in .deps/ and rebuilt only when the pin changes.
set -euo pipefail

AS_PY_PIN=19.3.0          # the Python client release; it embeds C client 7.6.1
top=$(cd "$(dirname "$0")/.." && pwd)
deps="$top/.deps"
mk="$deps/aerospike.mk"
mkdir -p "$deps"

write_mk() { # cflags libs description
    printf 'AS_CFLAGS := %s\nAS_LIBS := %s\nAS_FROM := %s\n' "$1" "$2" "$3" > "$mk.tmp"
    mv "$mk.tmp" "$mk"
}
syslibs="-lssl -lcrypto -lyaml -lz -lpthread -lm -lrt"

if [ -n "${LMCA_AEROSPIKE_PREFIX:-}" ]; then
    p=$LMCA_AEROSPIKE_PREFIX
    if [ ! -f "$p/include/aerospike/aerospike.h" ]; then
        echo "deps: LMCA_AEROSPIKE_PREFIX=$p has no include/aerospike/aerospike.h" >&2
        exit 1
    fi
    write_mk "-I$p/include" "-L$p/lib -Wl,-rpath,$p/lib -laerospike $syslibs" "prefix $p"
    exit 0
fi
if command -v pkg-config >/dev/null && pkg-config --exists aerospike 2>/dev/null; then
    write_mk "$(pkg-config --cflags aerospike)" "$(pkg-config --libs aerospike) $syslibs" \
        "pkg-config $(pkg-config --modversion aerospike)"
    exit 0
fi

stamp="$deps/aerospike-$AS_PY_PIN.built"
out="$deps/aerospike-$AS_PY_PIN"
if [ ! -f "$stamp" ]; then
    "$top/scripts/install-debian-deps.sh" build
    work="$deps/src"
    rm -rf "$work" "$out"
    mkdir -p "$work"
    echo "deps: downloading aerospike==$AS_PY_PIN sdist (it carries the C client)" >&2
    python3 -m pip download --quiet --no-binary :all: --no-deps --no-build-isolation \
        "aerospike==$AS_PY_PIN" -d "$work" >&2 ||
        python3 -m pip download --quiet --no-binary :all: --no-deps \
            "aerospike==$AS_PY_PIN" -d "$work" >&2
    tar -xzf "$work/aerospike-$AS_PY_PIN.tar.gz" -C "$work"
    csrc="$work/aerospike-$AS_PY_PIN/aerospike-client-c"
    echo "deps: building libaerospike in $csrc" >&2
    make -C "$csrc" -j"$(nproc)" >"$deps/build.log" 2>&1 ||
        { tail -30 "$deps/build.log" >&2; echo "deps: libaerospike build failed" >&2; exit 1; }
    target=$(ls -d "$csrc"/target/*/ | head -1)
    mkdir -p "$out/lib"
    cp -r "$target/include" "$out/include"
    cp "$target/lib/libaerospike.a" "$out/lib/"
    rm -rf "$work"
    touch "$stamp"
fi
# Static, so the engine and the extension carry the client with them.
write_mk "-I$out/include" "$out/lib/libaerospike.a $syslibs" "aerospike==$AS_PY_PIN sdist"
