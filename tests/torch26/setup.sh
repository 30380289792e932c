#!/bin/sh
# Builds, once, a Debian trixie root with python3-torch (PyTorch 2.6) for the torch 2.6
# tests: debootstrap --variant=minbase from this machine's configured Debian mirror,
# then apt-get install --no-install-recommends python3-torch and libopenblas0-pthread (the
# BLAS of libddp's C example, which runs there under torchrun 2.6), and what the install
# suite installs ddp-launch's packages and wheel beside (tests/install/clean-root.sh):
# libuv1t64, libopenblas0, man-db, pkgconf, gcc, libc6-dev, python3-venv. About 2 minutes,
# 1.7 GB.
# The mark of a finished root names what it holds: a root of an older list is rebuilt.
# usage: setup.sh ROOT
# Exits 0 when the root is ready, 77 (skip) with the reason when it cannot be built.
set -eu
root=$1
ready="$root/.ddp-ready-4" # 4: the packages below
[ -f "$ready" ] && exit 0
skip() {
    echo "skipped: $*"
    exit 77
}
[ "$(id -u)" = 0 ] || skip "building the trixie root needs root (debootstrap, chroot)"
command -v debootstrap >/dev/null || skip "debootstrap is not installed (apt-get install debootstrap)"
command -v unshare >/dev/null || skip "unshare is not installed (util-linux)"
# The machine's mirror: the first Debian URI of its apt sources (a deb822 "URIs:" line
# or a one-line "deb" entry, never a comment) that is not the security archive's.
mirror=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
    grep -E '^[[:space:]]*(URIs:|deb[[:space:]])' | grep -oE 'https?://[^ ]*/debian/?' |
    grep -v security | head -n 1 || true)
mirror=${mirror:-http://deb.debian.org/debian}
mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock 9 # one builder at a time; the others find it ready
[ -f "$ready" ] && exit 0
rm -rf "$root"
echo "building the trixie root in $root from $mirror (log: $root.log)"
# Both steps in a mount namespace of their own: what they mount in the root (debootstrap's
# /proc, a package's scripts) goes with it, never left mounted on this machine.
unshare --mount --propagation private debootstrap --variant=minbase trixie "$root" "$mirror" \
    >"$root.log" 2>&1 ||
    skip "debootstrap of trixie from $mirror failed (see $root.log)"
unshare --mount --propagation private chroot "$root" sh -c 'apt-get update -q &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-torch libopenblas0-pthread \
    libuv1t64 libopenblas0 man-db pkgconf gcc libc6-dev python3-venv' \
    >>"$root.log" 2>&1 || skip "installing python3-torch in the trixie root failed (see $root.log)"
touch "$ready"
