#!/usr/bin/env bash
# Installs Mooncake Store's CPU build (PyPI's mooncake-transfer-engine-non-cuda) for
# bench/peers/side_by_side.py and cache_bench.py, outside the repo, and prints the
# directory to put on PYTHONPATH (it holds `mooncake` and its master and client).
#
#   bench/peers/mooncake.sh     prints the site directory
#
# Output goes to ${LMCA_PEERS_DIR:-$HOME/.cache/lmcache-aerospike/peers}/mooncake-VERSION/
# site (never inside the repo). Idempotent. Its libraries link libibverbs.so.1
# (Debian's libibverbs1: scripts/install-debian-deps.sh bench). When it cannot
# install, it prints one sentence saying why and exits non-zero.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
py=${PYTHON:-$top/.venv/bin/python}
version=${MOONCAKE_VERSION:-0.3.13.post1}
fail() { echo "mooncake.sh: $*" >&2; exit 1; }

[ -x "$py" ] || fail "no Python at $py (run scripts/bootstrap.sh, or set PYTHON)."
peers=$(realpath -m "${LMCA_PEERS_DIR:-$HOME/.cache/lmcache-aerospike/peers}")
case "$peers/" in
"$(realpath "$top")/"*) fail "LMCA_PEERS_DIR=$peers is inside the repo; choose one outside it." ;;
esac
site="$peers/mooncake-$version/site"
if ! PYTHONPATH="$site" "$py" -c 'import mooncake.store' 2>/dev/null; then
    ldconfig -p | grep -q 'libibverbs.so.1 ' ||
        fail "libibverbs.so.1 is missing (apt-get install libibverbs1, or scripts/install-debian-deps.sh bench)."
    rm -rf "$site"
    "$py" -m pip install -q --no-deps --target "$site" \
        "mooncake-transfer-engine-non-cuda==$version" >&2 ||
        fail "pip could not install mooncake-transfer-engine-non-cuda==$version."
    PYTHONPATH="$site" "$py" -c 'import mooncake.store' ||
        fail "mooncake.store does not import from $site (see the message above)."
fi
echo "$site"
