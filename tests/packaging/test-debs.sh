#!/bin/sh
# `make package-test`: installs the Debian packages of BUILD (ibemu and
# ibemu-dkms, `make package`) with apt in a fresh Debian 12 chroot made by
# debootstrap, then runs the README's first tutorial there from the
# installed packages alone, as an ordinary user: `ibemu up` (two HCAs, the
# SM brings their ports ACTIVE), ibv_devinfo, ibv_rc_pingpong between
# ibemu0 and ibemu1, `ibemu down`. It also checks what the packages put on
# the system (man pages, units, the driver file, DKMS's record of the module).
#
#   tests/packaging/test-debs.sh BUILD
#
# Needs root, debootstrap and the Debian archive; exits 77 (skipped)
# without them. Takes a few minutes, so `make test` does not run it.
#   IBEMU_DEBIAN_MIRROR     the archive (default: the system's apt source
#                           for Debian, else http://deb.debian.org/debian)
#   IBEMU_DEBOOTSTRAP_CACHE downloaded packages kept between runs
#                           (default /var/cache/ibemu-debootstrap)
#   IBEMU_TEST_DKMS_BUILD=1 also install Debian's kernel headers and check
#                           that DKMS builds ibemu.ko for them (minutes more)
#
# Every mount lives in a private mount namespace and every process in a
# private PID namespace, so nothing stays mounted or running when the
# script ends, however it ends; the tutorial runs without network (its own
# loopback), so it cannot collide with fabrics or tests on the host.
set -eu
BUILD=$(cd "${1:?usage: test-debs.sh BUILD}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${IBEMU_DEBOOTSTRAP_CACHE:-/var/cache/ibemu-debootstrap}

skip() { echo "test-debs: skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, chroot)"
command -v debootstrap > /dev/null || skip "debootstrap is not installed (apt-get install debootstrap)"
command -v unshare > /dev/null || skip "unshare (util-linux) is not installed"

system_mirror() {
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
    2> /dev/null | grep -v '^[[:space:]]*#' | grep -oE 'https?://[^[:space:]]*/debian/?' \
    | grep -v security | head -n 1
}
MIRROR=${IBEMU_DEBIAN_MIRROR:-$(system_mirror)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
curl -sfI --max-time 20 "${MIRROR%/}/dists/bookworm/Release" > /dev/null \
  || skip "the Debian archive $MIRROR does not answer"

DEB=$(ls "$BUILD"/ibemu_*.deb 2> /dev/null | tail -n 1)
DKMS_DEB=$(ls "$BUILD"/ibemu-dkms_*.deb 2> /dev/null | tail -n 1)
[ -n "$DEB" ] && [ -n "$DKMS_DEB" ] || { echo "test-debs: no packages in $BUILD (make package)" >&2; exit 1; }

ROOT=$(mktemp -d /var/tmp/ibemu-debian12.XXXXXX)
chmod 755 "$ROOT" # the system's /, which the tutorial's user must enter
trap 'rm -rf "$ROOT"' EXIT
trap 'exit 130' INT TERM

echo "test-debs: debootstrap bookworm from $MIRROR"
mkdir -p "$CACHE"
debootstrap --variant=minbase --cache-dir="$CACHE" bookworm "$ROOT" "$MIRROR" \
  > "$ROOT.debootstrap.log" 2>&1 || { tail -n 20 "$ROOT.debootstrap.log" >&2; exit 1; }
rm -f "$ROOT.debootstrap.log"
# An installed Debian has these (the installer writes them), debootstrap not.
[ -f "$ROOT/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n' > "$ROOT/etc/hosts"
mkdir -p "$ROOT/tmp/ibemu-test"
cp "$DEB" "$DKMS_DEB" "$HERE/chroot-install.sh" "$HERE/chroot-tutorial.sh" "$ROOT/tmp/ibemu-test/"

# in_chroot [--no-network] SCRIPT ARGS...: runs a script of this directory in
# the chroot, in namespaces of its own.
in_chroot() {
  network=
  if [ "$1" = --no-network ]; then network=--net; shift; fi
  unshare --mount --pid --fork --propagation private $network sh -eu -c '
    root=$1; shift
    [ -z "$0" ] || ip link set lo up
    mount -t proc proc "$root/proc"
    mount -t sysfs -o ro sysfs "$root/sys"
    mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
    mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts"
    mount -t tmpfs -o mode=0755 tmpfs "$root/run"
    exec chroot "$root" /bin/sh "$@"' "$network" "$ROOT" "$@"
}

ARGS="/tmp/ibemu-test/$(basename "$DEB") /tmp/ibemu-test/$(basename "$DKMS_DEB")"
echo "test-debs: apt install $(basename "$DEB") $(basename "$DKMS_DEB") ibverbs-utils"
in_chroot /tmp/ibemu-test/chroot-install.sh "${IBEMU_TEST_DKMS_BUILD:-0}" $ARGS
echo "test-debs: the first tutorial, from the installed packages"
in_chroot --no-network /tmp/ibemu-test/chroot-tutorial.sh
echo "test-debs: passed"
