#!/bin/sh
# The kernel-mode test: builds ibemu.ko for Debian's kernel, boots that
# kernel in qemu with this machine's root filesystem and runs
# tests/kernel/guest-test.sh inside (docs/kernel-mode.md). Exit 77 = skipped
# (not root, or qemu or the kernel image is missing).
set -eu
BUILD=$(cd "${1:-build}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" -ne 0 ]; then
  echo "kernel test skipped: it shares / with the guest, which needs root"
  exit 77
fi
if ! command -v qemu-system-x86_64 > /dev/null; then
  echo "kernel test skipped: qemu-system-x86_64 is not installed (make deps)"
  exit 77
fi
KVER=$("$SRC/scripts/kernel-version.sh")
if [ ! -e "/boot/vmlinuz-$KVER" ]; then
  echo "kernel test skipped: no /boot/vmlinuz-$KVER (make deps installs Debian's kernel)"
  exit 77
fi
# The test's own kernel consumers (tests/kernel/NAME, NAME/Kbuild), next to
# ibemu.ko in the build directory; they are never installed.
TEST_MODULES="kfrwr kverbs"
build_test_modules() {
  for m in $TEST_MODULES; do
    rm -rf "${BUILD:?}/$m" && mkdir -p "$BUILD/$m" &&
      cp "$SRC/tests/kernel/$m"/*.c "$SRC/tests/kernel/$m/Kbuild" "$BUILD/$m/" &&
      make -s -C "/lib/modules/$1/build" M="$BUILD/$m" modules || return 1
  done
}
# ibemu.ko and those must build without a warning for every kernel whose
# headers are installed; the one booted below is built last, so the build
# directory holds its modules.
build_for() {
  if { make -s -C "$SRC" BUILD="$BUILD" KVER="$1" kmod && build_test_modules "$1"; } \
    > "$BUILD/kmod.log" 2>&1 && ! grep -q "warning:" "$BUILD/kmod.log"; then
    echo "ibemu.ko and the test's modules build for $1"
  else
    cat "$BUILD/kmod.log"
    echo "ibemu.ko did not build cleanly for $1"
    exit 1
  fi
}
for headers in /lib/modules/*/build; do
  other=$(basename "$(dirname "$headers")")
  [ "$other" = "$KVER" ] || [ ! -d "$headers" ] || build_for "$other"
done
build_for "$KVER"
# The programs of this system that load a verbs provider, for a sanitized
# build's run (guest-test.sh's sanitize_programs).
grep -l -e libibverbs.so.1 -e librdmacm.so.1 /usr/bin/* /usr/sbin/* > "$BUILD/verbs-programs" \
  2> /dev/null || true
exec "$SRC/tests/kernel/qemu-run.sh" --kver "$KVER" --timeout 900 \
  "$SRC/tests/kernel/guest-test.sh" "$BUILD"
