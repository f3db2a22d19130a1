#!/bin/sh
# `make install`: puts a built ibemu where the system finds it, so that in
# kernel mode (ibemu.ko loaded) every verbs program uses the emulated HCAs
# with no environment: the provider in libibverbs' provider directory with
# its /etc/libibverbs.d/ibemu.driver, the programs under $PREFIX, systemd
# units, man pages and docs (packaging/CMakeLists.txt says what goes where).
# `--dkms` also hands ibemu.ko's sources to DKMS, which builds and installs
# the module for the running kernel and every kernel installed later.
# DESTDIR stages the whole tree elsewhere (and then leaves DKMS alone).
set -eu
BUILD=$(cd "${1:?usage: install.sh BUILD [--dkms]}" && pwd)
DKMS=${2:-}
SRC=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${PREFIX:-/usr/local}
export DESTDIR=${DESTDIR:-}

# The prefix is compiled into the units and into the GoogleTest fixture
# (where it looks for ibemu): a build configured for another one is
# configured again and rebuilt. Otherwise nothing in BUILD is written, so
# a read-only build installs too.
configured=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$BUILD/CMakeCache.txt")
if [ "$configured" != "$PREFIX" ] || [ -n "${PROVIDER_DIR:-}" ]; then
  cmake -DCMAKE_INSTALL_PREFIX="$PREFIX" \
    ${PROVIDER_DIR:+-DIBEMU_VERBS_PROVIDER_DIR="$PROVIDER_DIR"} "$BUILD" > /dev/null
  cmake --build "$BUILD" -j"$(nproc)"
fi
install_component() {
  cmake -DCMAKE_INSTALL_COMPONENT="$1" -DCMAKE_INSTALL_PREFIX="$PREFIX" \
    -P "$BUILD/packaging/cmake_install.cmake"
}
install_component runtime
echo "ibemu: installed under $DESTDIR$PREFIX"

[ "$DKMS" = "--dkms" ] || exit 0
install_component dkms
[ -z "$DESTDIR" ] || exit 0
VERSION=$(sed -n 's/^PACKAGE_VERSION="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$SRC/kernel/dkms.conf")
dkms status -m ibemu -v "$VERSION" | grep -q . && dkms remove -m ibemu -v "$VERSION" --all
dkms add -m ibemu -v "$VERSION"
dkms install -m ibemu -v "$VERSION"
