#!/usr/bin/env bash
# Builds LMCache's own Aerospike L2 adapter extension (`lmcache.lmcache_aerospike`,
# which the lmcache wheel does not ship) from the pinned LMCache source distribution,
# against our libaerospike (.deps/aerospike.mk), for bench/peers/side_by_side.py.
#
#   bench/peers/peers.sh        prints the directory to add to the `lmcache` package's path
#
# Output goes to ${LMCA_PEERS_DIR:-$HOME/.cache/lmcache-aerospike/peers}/lmcache-VERSION/
# (never inside the repo), holding lmcache/lmcache_aerospike<EXT_SUFFIX>. Idempotent:
# a build whose stamp matches (LMCache version, libaerospike, Python ABI) is reused.
# When it cannot build, it prints one sentence saying why and exits non-zero.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
py=${PYTHON:-$top/.venv/bin/python}
fail() { echo "peers.sh: $*" >&2; exit 1; }

[ -x "$py" ] || fail "no Python at $py (run scripts/bootstrap.sh, or set PYTHON)."
version=$(sed -n 's/^# *LMCACHE_PIN=//p' "$top/requirements-lmcache.txt")
[ -n "$version" ] || fail "requirements-lmcache.txt has no '# LMCACHE_PIN=' line."
mk="$top/.deps/aerospike.mk"
[ -f "$mk" ] || fail "$mk is missing (run scripts/deps.sh to build libaerospike)."
as_cflags=$(sed -n 's/^AS_CFLAGS := //p' "$mk")
as_libs=$(sed -n 's/^AS_LIBS := //p' "$mk")
as_from=$(sed -n 's/^AS_FROM := //p' "$mk")

peers=$(realpath -m "${LMCA_PEERS_DIR:-$HOME/.cache/lmcache-aerospike/peers}")
case "$peers/" in
"$(realpath "$top")/"*) fail "LMCA_PEERS_DIR=$peers is inside the repo; choose one outside it." ;;
esac
out="$peers/lmcache-$version"
suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
so="$out/lmcache/lmcache_aerospike$suffix"
stamp="lmcache $version; $as_from; $suffix"
if [ -f "$so" ] && [ "$(cat "$out/built" 2>/dev/null)" = "$stamp" ]; then
    echo "$out/lmcache"
    exit 0
fi
command -v g++ >/dev/null || fail "g++ is not installed (scripts/install-debian-deps.sh build)."

# The sdist, fetched straight from PyPI's simple index and checked against the index's
# sha256: `pip download --no-binary :all: lmcache` cannot fetch it, because pip first
# runs the sdist's setup.py for metadata, and that needs CUDA (or a torch download).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" - "$version" "$work" <<'EOF' || fail "could not download lmcache==$version's sdist from PyPI (see the message above)."
import hashlib, re, sys, urllib.request
version, work = sys.argv[1], sys.argv[2]
name = f"lmcache-{version}.tar.gz"
index = urllib.request.urlopen("https://pypi.org/simple/lmcache/", timeout=60).read().decode()
m = re.search(r'href="([^"#]*/' + re.escape(name) + r')#sha256=([0-9a-f]{64})"', index)
if not m:
    sys.exit(f"PyPI's index lists no {name}")
data = urllib.request.urlopen(m.group(1), timeout=300).read()
if hashlib.sha256(data).hexdigest() != m.group(2):
    sys.exit(f"{name}: sha256 differs from PyPI's index")
open(f"{work}/{name}", "wb").write(data)
EOF
tar -xzf "$work/lmcache-$version.tar.gz" -C "$work"
src="$work/lmcache-$version/csrc/storage_backends"
[ -f "$src/aerospike/connector.cpp" ] || fail "lmcache==$version's sdist has no csrc/storage_backends/aerospike (it predates the adapter?)."

# What LMCache's setup_extensions/storage_backend_profiles/aerospike.py builds (sources,
# include dirs, -O3, --no-as-needed; the CXX11 ABI flag from its CUDA profile), with
# our static libaerospike in place of -laerospike (and no libuv: it builds without an
# event library). pybind11's headers come with torch, as in torch's CppExtension.
pyinc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
torchinc=$("$py" -c 'import torch.utils.cpp_extension as c; print(c.include_paths()[0])' 2>/dev/null) ||
    fail "torch is not importable from $py (its bundled pybind11 headers are needed)."
mkdir -p "$out/lmcache"
rm -f "$out/built"
echo "peers.sh: building lmcache.lmcache_aerospike $version into $out" >&2
# shellcheck disable=SC2086 # AS_CFLAGS and AS_LIBS are word lists
g++ -O3 -shared -fPIC -std=c++17 -D_GLIBCXX_USE_CXX11_ABI=1 \
    -I"$src" -I"$src/aerospike" $as_cflags -I"$torchinc" -I"$pyinc" \
    "$src/aerospike/pybind.cpp" "$src/aerospike/connector.cpp" \
    -o "$so.tmp" -Wl,--no-as-needed $as_libs >"$out/build.log" 2>&1 ||
    { tail -20 "$out/build.log" >&2; fail "g++ could not build the extension; $out/build.log has the full output."; }
mv "$so.tmp" "$so"
# Loading it checks that every symbol resolved (libaerospike built with an event library
# would need -luv, for instance).
"$py" -c "import importlib.util as u, sys; s = u.spec_from_file_location('lmcache_aerospike', sys.argv[1]); u.module_from_spec(s)" "$so" >/dev/null 2>"$out/load.log" ||
    { cat "$out/load.log" >&2; fail "the built extension does not load; see the message above."; }
echo "$stamp" >"$out/built"
echo "$out/lmcache"
