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

DEBIAN_ROOT_USER=test-debs
. "$HERE/../lib/debian_root.sh"
debian_root_check

DEB=$(ls "$BUILD"/ibemu_*.deb 2> /dev/null | tail -n 1)
DKMS_DEB=$(ls "$BUILD"/ibemu-dkms_*.deb 2> /dev/null | tail -n 1)
[ -n "$DEB" ] && [ -n "$DKMS_DEB" ] || { echo "test-debs: no packages in $BUILD (make package)" >&2; exit 1; }

ROOT=$(mktemp -d /var/tmp/ibemu-debian12.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
trap 'exit 130' INT TERM

echo "test-debs: debootstrap bookworm from $DEBIAN_MIRROR"
debian_root_make bookworm "$ROOT"
mkdir -p "$ROOT/tmp/ibemu-test"
cp "$DEB" "$DKMS_DEB" "$HERE/chroot-install.sh" "$HERE/chroot-tutorial.sh" "$ROOT/tmp/ibemu-test/"

in_chroot() { # in_chroot [--no-network] SCRIPT ARGS...
  if [ "$1" = --no-network ]; then
    shift
    debian_root_run --no-network "$ROOT" "$@"
  else
    debian_root_run "$ROOT" "$@"
  fi
}

ARGS="/tmp/ibemu-test/$(basename "$DEB") /tmp/ibemu-test/$(basename "$DKMS_DEB")"
echo "test-debs: apt install $(basename "$DEB") $(basename "$DKMS_DEB") ibverbs-utils"
in_chroot /tmp/ibemu-test/chroot-install.sh "${IBEMU_TEST_DKMS_BUILD:-0}" $ARGS
echo "test-debs: the first tutorial, from the installed packages"
in_chroot --no-network /tmp/ibemu-test/chroot-tutorial.sh
echo "test-debs: passed"
