#!/bin/sh
# `make install`: puts a built ibemu where the system finds it, so that in
# kernel mode (ibemu.ko loaded) every verbs program uses the emulated HCAs
# with no environment: the provider in libibverbs' provider directory with
# its /etc/libibverbs.d/ibemu.driver, the programs under $PREFIX.
# `--dkms` also hands ibemu.ko's sources to DKMS, which builds and installs
# the module for the running kernel and every kernel installed later.
# DESTDIR stages the whole tree elsewhere (packaging).
set -eu
BUILD=${1:?usage: install.sh BUILD [--dkms]}
DKMS=${2:-}
SRC=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
VERSION=0.1
# libibverbs looks for providers in its own directory, named in its build.
MULTIARCH=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
PROVIDER_DIR=${PROVIDER_DIR:-/usr/lib/$MULTIARCH/libibverbs}

# The tools find the provider, shim and compat libraries next to themselves
# (bin/../lib), so the build's layout is kept under $PREFIX/lib/ibemu.
home="$DESTDIR$PREFIX/lib/ibemu"
install -d "$home/bin" "$home/lib/compat" "$DESTDIR$PREFIX/bin"
for prog in ibemud ibemu-sm ibemu; do
  install -m 0755 "$BUILD/bin/$prog" "$home/bin/$prog"
  ln -sf "../lib/ibemu/bin/$prog" "$DESTDIR$PREFIX/bin/$prog"
done
for lib in "$BUILD"/lib/*.so; do install -m 0644 "$lib" "$home/lib/"; done
cp -a "$BUILD/lib/compat/." "$home/lib/compat/"

# The GoogleTest fixture (docs/gtest-fixture.md), for projects that test on
# ibemu: -I$PREFIX/include -L$PREFIX/lib -libemu_gtest, or find_package(ibemu).
if [ -f "$BUILD/lib/libibemu_gtest.a" ]; then
  install -d "$DESTDIR$PREFIX/include/ibemu" "$DESTDIR$PREFIX/lib/cmake/ibemu"
  install -m 0644 "$SRC/harness/gtest/include/ibemu/gtest_fabric.h" "$DESTDIR$PREFIX/include/ibemu/"
  install -m 0644 "$BUILD/lib/libibemu_gtest.a" "$BUILD/lib/libibemu_gtest_main.a" \
    "$DESTDIR$PREFIX/lib/"
  install -m 0644 "$SRC/harness/gtest/cmake/ibemuConfig.cmake" "$DESTDIR$PREFIX/lib/cmake/ibemu/"
fi

install -d "$DESTDIR$PROVIDER_DIR" "$DESTDIR/etc/libibverbs.d"
install -m 0644 "$BUILD/lib/libibemu-rdmav34.so" "$DESTDIR$PROVIDER_DIR/libibemu-rdmav34.so"
echo "driver ibemu" > "$DESTDIR/etc/libibverbs.d/ibemu.driver"
echo "ibemu: installed under $DESTDIR$PREFIX, provider in $DESTDIR$PROVIDER_DIR"

[ "$DKMS" = "--dkms" ] || exit 0
dkms_src="$DESTDIR/usr/src/ibemu-$VERSION"
install -d "$dkms_src"
cp "$SRC"/kernel/*.c "$SRC"/kernel/*.h "$SRC"/kernel/Kbuild "$SRC"/kernel/dkms.conf "$dkms_src/"
[ -z "$DESTDIR" ] || exit 0
dkms status -m ibemu -v "$VERSION" | grep -q . && dkms remove -m ibemu -v "$VERSION" --all
dkms add -m ibemu -v "$VERSION"
dkms install -m ibemu -v "$VERSION"
