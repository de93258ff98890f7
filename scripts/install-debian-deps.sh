#!/usr/bin/env bash
# Installs the Debian packages a group of tasks needs, only when one is missing.
#   build: what libaerospike and the engine compile against
#   test:  what the test runs use besides those (clang and its runtimes for the
#          libFuzzer harnesses; faketime, for writers whose clocks are off)
#   bench: build, plus redis-server (bench/peers/side_by_side.py runs LMCache's RESP
#          adapter against it)
#   wheels: what scripts/cross-deps.sh needs to fetch and build the wheels'
#          static libraries (zig, their compiler, comes from PyPI)
#   emulation: an arm64 Debian userland run under qemu (scripts/arm64-root.sh),
#          where tests/wheels uses an aarch64 wheel
set -euo pipefail
wheels="build-essential curl ca-certificates xz-utils"
emulation="qemu-user-static binfmt-support debootstrap"
case "${1:-build}" in
build) pkgs="build-essential libssl-dev libyaml-dev zlib1g-dev pkg-config" ;;
test) pkgs="build-essential libssl-dev libyaml-dev zlib1g-dev pkg-config python3-venv clang libclang-rt-14-dev faketime $wheels $emulation" ;;
wheels) pkgs=$wheels ;;
emulation) pkgs=$emulation ;;
bench) pkgs="build-essential libssl-dev libyaml-dev zlib1g-dev pkg-config redis-server libibverbs1" ;;
*) echo "usage: $0 build|test|bench|wheels|emulation" >&2; exit 2 ;;
esac
# Elsewhere (RHEL, SUSE, ...: a source build from the sdist) nothing is installed
# here; the build then needs the same things by that distribution's names
# (docs/install.md, "Building from the sdist").
if ! command -v dpkg-query >/dev/null; then
    echo "not a Debian system: make sure the equivalents of these are installed: $pkgs" >&2
    exit 0
fi
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "missing Debian packages:$missing (run as root or install them)" >&2
    exit 1
fi
echo "installing Debian packages:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq $missing >&2
