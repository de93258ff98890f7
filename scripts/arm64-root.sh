#!/usr/bin/env bash
# Makes (once) an emulated arm64 Debian userland in which tests/wheels installs
# and uses an aarch64 wheel, and prints its path:
#
#   scripts/arm64-root.sh
#
# LMCA_ARM64_SUITE (default bookworm: its python3 is 3.11; trixie's is 3.13)
# picks the release, LMCA_ARM64_ROOT the directory (default
# .deps/arm64-<suite>). The root is Debian's minimal one plus python3 and
# python3-venv, from debootstrap, run by the kernel through qemu-user-static's
# binfmt handler (its F flag: the emulator is opened once, so it works inside a
# chroot as well). A chroot into it shares this machine's network, so the arm64
# python reaches a server on 127.0.0.1. Needs root (debootstrap, chroot).
# From scratch it takes about 3 minutes (DESIGN.md); after that, nothing.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
suite=${LMCA_ARM64_SUITE:-bookworm}
root=${LMCA_ARM64_ROOT:-$top/.deps/arm64-$suite}
mirror=http://deb.debian.org/debian

if [ "$(id -u)" != 0 ]; then
    echo "arm64-root: needs root (debootstrap and chroot)" >&2
    exit 1
fi
"$top/scripts/install-debian-deps.sh" emulation

# The kernel runs aarch64 programs through binfmt_misc: mounted (a bare VM may not
# have it), and qemu-aarch64 registered (qemu-user-static's install does it when
# binfmt_misc is there; not when it was missing then).
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
if ! grep -q '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null; then
    update-binfmts --enable qemu-aarch64 ||
        update-binfmts --import qemu-aarch64
fi
grep -q '^flags:.*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 ||
    { echo "arm64-root: qemu-aarch64's binfmt handler lacks the F flag: a chroot cannot use it" >&2; exit 1; }

if [ -f "$root/.lmca-ready" ]; then
    echo "$root"
    exit 0
fi

# Anything debootstrap left mounted under $1 (it mounts /proc and /sys in the
# root and unmounts them when it succeeds), innermost first: removing a root with
# /proc mounted in it would walk into this machine's /proc.
unmount_under() {
    local m
    for m in $(awk -v d="$1" 'index($2, d "/") == 1 {print $2}' /proc/mounts | sort -r); do
        umount -l "$m" || true
    done
}
tmp="$root.partial"
unmount_under "$tmp"
rm -rf --one-file-system "$tmp"
mkdir -p "$(dirname "$root")"
start=$SECONDS
echo "arm64-root: debootstrap $suite arm64 into $root (about 3 minutes)" >&2
if ! debootstrap --arch=arm64 --variant=minbase --include=python3,python3-venv \
    "$suite" "$tmp" "$mirror" >"$tmp.log" 2>&1; then
    tail -20 "$tmp.log" >&2
    unmount_under "$tmp"
    echo "arm64-root: debootstrap failed (log: $tmp.log)" >&2
    exit 1
fi
unmount_under "$tmp"
# A check that it runs: the arm64 python, emulated.
chroot "$tmp" /usr/bin/python3 -c 'import platform, venv; assert platform.machine() == "aarch64"'
rm -rf "$tmp"/var/cache/apt/archives/*.deb # what it installed: nothing needs them again
touch "$tmp/.lmca-ready"
rm -rf --one-file-system "$root"
mv "$tmp" "$root"
rm -f "$tmp.log"
echo "arm64-root: ready in $((SECONDS - start)) s" >&2
echo "$root"
