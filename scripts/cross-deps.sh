#!/usr/bin/env bash
# Builds the static libraries a wheel's extension links in, for one architecture
# and an old glibc, with zig's C compiler (PyPI's ziglang, in .venv):
#
#   scripts/cross-deps.sh x86_64|aarch64
#
# into .deps/cross/<arch>/{include,lib}: zlib, libyaml, OpenSSL (libssl and
# libcrypto) and libaerospike, each from a pinned source whose sha256 is checked.
# `zig cc -target <arch>-linux-gnu.2.28` links against stubs of glibc 2.28's own
# symbol lists, so nothing built here can ask for a newer symbol version than
# 2.28 (a newer symbol fails the link); and it cross-compiles, so both wheels
# come from this one x86_64 machine. DESIGN.md ("Wheels for old glibc and
# aarch64") and docs/design-wheels.md say why zig; docs/measurements.md what each step costs.
#
# The sources come from Debian's pool (upstream's own tarballs, which Debian
# keeps as .orig.tar.*; GitHub and openssl.org are not reachable from CI) and
# PyPI (the C client inside the official Python client's sdist, as scripts/deps.sh
# does). Downloads stay in .deps/sources, the built libraries in .deps/cross/<arch>
# with a stamp of what made them: a second run does nothing. A build is also kept
# in LMCA_BUILD_CACHE (default ~/.cache/lmcache-aerospike) under its stamp, so a
# fresh clone on a machine that built it once copies it (CI's clean clone spent
# 10 minutes here); LMCA_BUILD_CACHE= turns that off.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
arch=${1:?usage: $0 x86_64|aarch64}
case "$arch" in
x86_64) ossl_target=linux-x86_64 ;;
aarch64) ossl_target=linux-aarch64 ;;
*) echo "cross-deps: unknown architecture $arch" >&2; exit 2 ;;
esac
GLIBC=2.28 # the oldest glibc the wheels run on: manylinux_2_28 (RHEL 8, Ubuntu 20.04 has 2.31)

# Pins: version, file, sha256, and where to find it. Debian moves a file from
# debian/pool to debian-security/pool/updates (and back) as it releases, so both
# are tried; a file gone from both means the pin needs a bump (Sources.xz of the
# suite lists the current one with its sha256).
ZLIB_FILE=zlib_1.3.dfsg+really1.3.1.orig.tar.gz # zlib 1.3.1 (trixie)
ZLIB_SHA=60dd315c07f616887caa029408308a018ace66e3d142726a97db164b3b8f69fb
ZLIB_DIR=z/zlib
YAML_FILE=libyaml_0.2.5.orig.tar.gz # libyaml 0.2.5 (trixie)
YAML_SHA=fa240dbf262be053f3898006d502d514936c818e422afdcf33921c63bed9bf2e
YAML_DIR=liby/libyaml
OSSL_FILE=openssl_3.5.7.orig.tar.gz # OpenSSL 3.5.7 (trixie; 3.5 is upstream's LTS)
OSSL_SHA=a8c0d28a529ca480f9f36cf5792e2cd21984552a3c8e4aa11a24aa31aeac98e8
OSSL_DIR=o/openssl
AS_PY_PIN=19.3.0 # the Python client's sdist carries C client 7.6.1 (as scripts/deps.sh)
AS_SHA=d9f25a50f4944799b31a320fcd3a56846d3e5a9090b514ca73efd5a1eebcaf07
MIRRORS="http://deb.debian.org/debian/pool/main http://deb.debian.org/debian-security/pool/updates/main"

deps="$top/.deps"
src="$deps/sources"
out="$deps/cross/$arch"
work="$deps/cross/build-$arch"
zig=$("$top/.venv/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))' 2>/dev/null) ||
    { echo "cross-deps: no ziglang in .venv (pip install -r requirements-wheels.txt)" >&2; exit 1; }
zigver=$("$zig" version)
# The stamp names every input: a changed pin, toolchain or build step (this
# script) rebuilds.
stamp="$out/.built-$( (echo "glibc$GLIBC zig$zigver"; cat "$0") | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && exit 0
cache=${LMCA_BUILD_CACHE-${XDG_CACHE_HOME:-$HOME/.cache}/lmcache-aerospike}
kept=${cache:+$cache/cross-$arch-$(basename "$stamp")}
if [ -n "$kept" ] && [ -f "$kept/$(basename "$stamp")" ]; then
    rm -rf "$out" && mkdir -p "$(dirname "$out")" && cp -r "$kept" "$out"
    echo "cross-deps: $arch: copied from $kept" >&2
    exit 0
fi

"$top/scripts/install-debian-deps.sh" wheels

fetch() { # fetch FILE SHA256 POOLDIR: into $src, checked
    local file=$1 sha=$2 dir=$3 m
    mkdir -p "$src"
    if [ ! -f "$src/$file" ] || ! echo "$sha  $src/$file" | sha256sum -c --quiet 2>/dev/null; then
        rm -f "$src/$file"
        for m in $MIRRORS; do
            curl -sSf -m 300 -o "$src/$file.part" "$m/$dir/$file" 2>/dev/null && break
            rm -f "$src/$file.part"
        done
        [ -f "$src/$file.part" ] || { echo "cross-deps: $file is in neither $MIRRORS (bump the pin)" >&2; exit 1; }
        echo "$sha  $src/$file.part" | sha256sum -c --quiet ||
            { echo "cross-deps: $file: sha256 mismatch" >&2; rm -f "$src/$file.part"; exit 1; }
        mv "$src/$file.part" "$src/$file"
    fi
}
fetch "$ZLIB_FILE" "$ZLIB_SHA" "$ZLIB_DIR"
fetch "$YAML_FILE" "$YAML_SHA" "$YAML_DIR"
fetch "$OSSL_FILE" "$OSSL_SHA" "$OSSL_DIR"
as_sdist="$src/aerospike-$AS_PY_PIN.tar.gz"
if [ ! -f "$as_sdist" ] || ! echo "$AS_SHA  $as_sdist" | sha256sum -c --quiet 2>/dev/null; then
    "$top/.venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-binary :all: \
        --no-deps "aerospike==$AS_PY_PIN" -d "$src" >&2
    echo "$AS_SHA  $as_sdist" | sha256sum -c --quiet ||
        { echo "cross-deps: aerospike-$AS_PY_PIN.tar.gz: sha256 mismatch" >&2; exit 1; }
fi

# The toolchain as plain commands, for build systems that want CC to be one word.
# -mcpu=baseline: the architecture's baseline (x86-64, armv8-a), not this machine's.
# zig cc runs in Debug mode, with UBSan traps, unless -O is given: every build
# below gives -O2 or -O3.
rm -rf "$work" "$out"
mkdir -p "$work/bin" "$out/include" "$out/lib"
export ZIG_GLOBAL_CACHE_DIR="$deps/zig-cache" ZIG_LOCAL_CACHE_DIR="$deps/zig-cache"
# libaerospike's Makefiles pass -rdynamic when compiling, which zig hands to its
# linker even with -c (and lld refuses it): dropped, nothing here is an executable.
cat >"$work/bin/cc" <<EOF
#!/bin/sh
for a; do shift; [ "\$a" = -rdynamic ] || set -- "\$@" "\$a"; done
exec "$zig" cc -target $arch-linux-gnu.$GLIBC -mcpu=baseline "\$@"
EOF
printf '#!/bin/sh\nexec "%s" ar "$@"\n' "$zig" >"$work/bin/ar"
printf '#!/bin/sh\nexec "%s" ranlib "$@"\n' "$zig" >"$work/bin/ranlib"
chmod +x "$work/bin/"*
cc=$work/bin/cc ar=$work/bin/ar ranlib=$work/bin/ranlib
log="$deps/cross/$arch.log"
: >"$log"
step() { # step NAME COMMAND...: runs it quietly into the log, timed
    local name=$1 t=$SECONDS
    shift
    if ! "$@" >>"$log" 2>&1; then
        tail -40 "$log" >&2
        echo "cross-deps: $arch: $name failed (full log: $log)" >&2
        exit 1
    fi
    echo "cross-deps: $arch: $name $((SECONDS - t)) s" >&2
}
jobs=$(nproc)

build_zlib() {
    tar -xzf "$src/$ZLIB_FILE" -C "$work"
    cd "$work"/zlib-*/
    CC=$cc AR=$ar RANLIB=$ranlib CFLAGS="-O2 -fPIC" ./configure --static --prefix="$out"
    make -j"$jobs" libz.a
    cp libz.a "$out/lib/" && cp zlib.h zconf.h "$out/include/"
}
step zlib build_zlib

# Debian's libyaml orig is upstream's git tree, without the generated configure:
# its eight sources compile directly (the version macros are what config.h holds).
build_yaml() {
    tar -xzf "$src/$YAML_FILE" -C "$work"
    cd "$work"/libyaml-*/
    local f objs=()
    for f in src/*.c; do
        "$cc" -O2 -fPIC -Iinclude -DYAML_VERSION_MAJOR=0 -DYAML_VERSION_MINOR=2 \
            -DYAML_VERSION_PATCH=5 '-DYAML_VERSION_STRING="0.2.5"' -c "$f" -o "${f%.c}.o"
        objs+=("${f%.c}.o")
    done
    "$ar" rcs libyaml.a "${objs[@]}"
    cp libyaml.a "$out/lib/" && cp include/yaml.h "$out/include/"
}
step libyaml build_yaml

# OpenSSL, the libraries only (build_libs: no apps, tests or docs), with no
# loadable modules or engines (a static library loads nothing). What is left out
# is what a TLS client to an Aerospike server never uses: the legacy provider,
# QUIC, SSLv3 and the weak ciphers. OPENSSLDIR /etc/ssl is where Debian, Ubuntu
# and SUSE keep openssl.cnf and certs (RHEL links /etc/ssl/certs to its own).
# (libaerospike refers to OpenSSL for its TLS, which this package does not turn
# on yet: config.py's tls_name is reserved.)
build_openssl() {
    tar -xzf "$src/$OSSL_FILE" -C "$work"
    cd "$work"/openssl-*/
    ./Configure "$ossl_target" no-shared no-module no-dso no-legacy no-tests no-docs \
        no-apps no-quic no-ssl3 no-weak-ssl-ciphers no-comp \
        --prefix="$out" --libdir=lib --openssldir=/etc/ssl \
        CC="$cc" AR="$ar" RANLIB="$ranlib" CFLAGS="-O2 -fPIC"
    make -j"$jobs" build_libs
    cp libssl.a libcrypto.a "$out/lib/"
    cp -r include/openssl "$out/include/"
}
step openssl build_openssl

# libaerospike with its own Makefile, told the architecture (it reads uname -m)
# and the compiler; REAL_ARCH= keeps its Lua from being tuned to one CPU
# (-mcpu=neoverse-n1, -march=nocona). Only the static library is made.
build_aerospike() {
    tar -xzf "$as_sdist" -C "$work"
    local c="$work/aerospike-$AS_PY_PIN/aerospike-client-c"
    # Its Lua's makefile says AR="ar rc": zig's ar comes first on PATH instead
    # of overriding AR.
    PATH="$work/bin:$PATH" make -C "$c" -j"$jobs" ARCH="$arch" REAL_ARCH= CC="$cc" LD="$cc" \
        EXT_CFLAGS="-I$out/include" modules prepare libaerospike.a
    cp -r "$c/target/Linux-$arch/include/." "$out/include/"
    cp "$c/target/Linux-$arch/lib/libaerospike.a" "$out/lib/"
}
step libaerospike build_aerospike

cd "$top"
rm -rf "$work"
touch "$stamp"
if [ -n "$kept" ] && mkdir -p "$cache" 2>/dev/null; then
    # Copied whole, then renamed: a half-written copy is never taken for one.
    rm -rf "$kept.part" && cp -r "$out" "$kept.part" && rm -rf "$kept" && mv "$kept.part" "$kept" ||
        echo "cross-deps: could not keep a copy in $cache" >&2
fi
