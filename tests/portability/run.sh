#!/bin/sh
# `make portability-test`: for each Debian release, a fresh root made by
# debootstrap, that release's compiler, libraries and rdma-core packages
# from apt, ibemu built there from this checkout by an ordinary user, and
# real programs run there as that user on ibemu's HCAs (smoke.sh: ibemu up,
# ibv_devinfo, ibv_rc_pingpong, ib_write_bw, rping and rdma-core's own Python
# test suite of that release).
#
#   tests/portability/run.sh [RELEASE...]     (default: bookworm trixie sid)
#
# Each release's figures go to portability-RELEASE.txt in OUT (default
# build-portability/); docs/STATUS.md quotes them. Needs root, debootstrap
# and the Debian archive (tests/lib/debian_root.sh; exits 77 without them)
# and a few minutes per release, so `make test` does not run it.
#   IBEMU_PORTABILITY_OUT    where the figures go
#   IBEMU_PORTABILITY_KEEP=1 keep the roots (in /var/tmp) to look around
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
SOURCE=$(cd "$HERE/../.." && pwd)
RELEASES=${*:-bookworm trixie sid}
OUT=${IBEMU_PORTABILITY_OUT:-$SOURCE/build-portability}

DEBIAN_ROOT_USER=portability
. "$SOURCE/tests/lib/debian_root.sh"
debian_root_check
command -v git > /dev/null || debian_root_skip "git is not installed (the checkout is copied with it)"
mkdir -p "$OUT"

ROOTS=
cleanup() {
  [ "${IBEMU_PORTABILITY_KEEP:-0}" = 1 ] && { echo "portability: kept$ROOTS"; return; }
  for root in $ROOTS; do rm -rf "$root"; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

failed=
for release in $RELEASES; do
  root=$(mktemp -d "/var/tmp/ibemu-$release.XXXXXX")
  ROOTS="$ROOTS $root"
  echo "portability: $release: debootstrap from $DEBIAN_MIRROR"
  debian_root_make "$release" "$root"
  # The checkout as git sees it: tracked files and new ones not ignored.
  mkdir -p "$root/tmp/ibemu-test/src"
  (cd "$SOURCE" && git ls-files -z --cached --others --exclude-standard \
    | xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh \
    | tar --null -T - -cf -) | tar -xf - -C "$root/tmp/ibemu-test/src"
  cp "$HERE/chroot-prepare.sh" "$root/tmp/ibemu-test/"
  echo "portability: $release: apt install the build's and the programs' packages"
  debian_root_run "$root" /tmp/ibemu-test/chroot-prepare.sh
  echo "portability: $release: build and run as an ordinary user"
  results=$OUT/portability-$release.txt
  if debian_root_run --no-network "$root" /tmp/ibemu-test/src/tests/portability/chroot-run.sh \
    "$release"; then
    echo "portability: $release: passed"
  else
    echo "portability: $release: FAILED"
    failed="$failed $release"
  fi
  cp "$root/tmp/ibemu-test/results.txt" "$results" 2> /dev/null || true
  [ "${IBEMU_PORTABILITY_KEEP:-0}" = 1 ] || { rm -rf "$root"; ROOTS=$(echo "$ROOTS" | sed "s|$root||"); }
done
echo "portability: figures in $OUT"
[ -z "$failed" ] || { echo "portability: FAILED on$failed"; exit 1; }
echo "portability: passed on $RELEASES"
