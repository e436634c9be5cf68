#!/usr/bin/env bash
# Proves the CPU half of deploy/gpu-check.sh where no GPU is: runs
# `deploy/gpu-check.sh --no-gpu` inside a bare Debian 12 (debootstrap
# --variant=minbase bookworm) that has only what the GPU host is known to
# have besides the carried .deb/ packages: a C compiler, CMake and ninja. No
# pkg-config, no make, none of shardps's libraries, no data set: if the
# script or its package list misses anything, the build or a run fails here.
# `make gpu-check-chroot`; needs root (chroot, mount) and Debian's registry
# (debootstrap, then apt inside the new root for the compiler and CMake).
#
#   deploy/gpu-check-chroot.sh [ROOTFS]     # default /var/tmp/shardps-bookworm
#
# The root is made once and reused; the checkout is bind-mounted at /src and
# the results are left in ROOTFS/tmp/shardps-gpu-check/results.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOTFS=${1:-/var/tmp/shardps-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# What the device machine has (library/device: nvcc, CMake and ninja; nvcc
# needs a host gcc). Its versions differ; these are Debian 12's.
TOOLS=(gcc libc6-dev cmake ninja-build)
# Must be absent from the root, or the check proves nothing (libuv1 is
# there: Debian's cmake links it; its -dev package is not).
ABSENT=(pkg-config pkgconf make libuv1-dev libprotobuf-c1 libopenblas0 libsodium23 libinih1
    libmicrohttpd12 libcriterion3 protobuf-c-compiler dataset-fashion-mnist)

die() {
    echo "gpu-check-chroot: $*" >&2
    exit 1
}

[ "$(id -u)" = 0 ] || die "needs root (chroot and bind mounts)"
if [ ! -e "$ROOTFS/.shardps-tools" ]; then
    command -v debootstrap >/dev/null || die "needs debootstrap (apt-get install debootstrap)"
    [ -e "$ROOTFS/etc/debian_version" ] || debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR"
    chroot "$ROOTFS" apt-get update -q
    chroot "$ROOTFS" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${TOOLS[@]}"
    touch "$ROOTFS/.shardps-tools"
fi
for p in "${ABSENT[@]}"; do
    if chroot "$ROOTFS" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
        die "$ROOTFS has $p installed: use a fresh root"
    fi
done
compgen -G ".deb/*.deb" >/dev/null || deploy/gpu-check.sh --fetch

mkdir -p "$ROOTFS/src"
cleanup() {
    for m in src dev proc; do
        mountpoint -q "$ROOTFS/$m" && umount "$ROOTFS/$m"
    done
    return 0
}
trap cleanup EXIT
mount --bind "$PWD" "$ROOTFS/src"
mount --bind /dev "$ROOTFS/dev"
mount -t proc proc "$ROOTFS/proc"
rm -rf "$ROOTFS/tmp/shardps-gpu-check"
# The root has no git to tell the commit.
chroot "$ROOTFS" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root TMPDIR=/tmp \
    SHARDPS_COMMIT="$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
    bash /src/deploy/gpu-check.sh --no-gpu
echo "gpu-check-chroot: passed; results in $ROOTFS/tmp/shardps-gpu-check/results"
