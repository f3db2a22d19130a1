#!/bin/sh
# Builds the rdma_retry example against ibemu as an outside project would,
# then runs its two test suites: pytest (pytest-ibemu) and GoogleTest
# (ibemu_gtest).
#
#   examples/rdma-retry/run-tests.sh BUILD     # BUILD: an ibemu build directory
#
# ibemu is installed from BUILD into a staging directory (DESTDIR, nothing
# outside it is touched) and the example is built with find_package(ibemu)
# against that staged /usr/local, so the install is what gets tested. The
# pytest plugin comes from this source tree and uses ibemu from BUILD.
set -u
BUILD=$(cd "${1:?usage: run-tests.sh IBEMU_BUILD_DIR}" && pwd)
EXAMPLE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$EXAMPLE/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/rdma-retry-XXXXXX")
trap 'rm -rf "$WORK"' EXIT INT TERM
STAGE=$WORK/stage
PREFIX=$STAGE/usr/local

echo "== staging ibemu from $BUILD in $STAGE"
DESTDIR=$STAGE "$SRC/scripts/install.sh" "$BUILD" || exit 1
if [ ! -f "$PREFIX/lib/cmake/ibemu/ibemuConfig.cmake" ]; then
  echo "run-tests.sh: $BUILD has no ibemu_gtest (was GoogleTest found when it was built?)" >&2
  exit 1
fi

# A sanitized ibemu build's fixture library is instrumented: the example is
# built with the same sanitizers, as a project testing under them would be.
IBEMU_SANITIZE=
[ -f "$BUILD/sanitizers.sh" ] && . "$BUILD/sanitizers.sh"
FLAGS=${IBEMU_SANITIZE:+-fsanitize=$IBEMU_SANITIZE -fno-omit-frame-pointer}

echo "== building the example"
cmake -S "$EXAMPLE" -B "$WORK/build" -DCMAKE_PREFIX_PATH="$PREFIX" \
  -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS="$FLAGS" >"$WORK/cmake.log" 2>&1 &&
  cmake --build "$WORK/build" >>"$WORK/cmake.log" 2>&1 || {
  cat "$WORK/cmake.log"
  exit 1
}

status=0
echo "== pytest suite"
(cd "$EXAMPLE" &&
  RDMA_RETRY_BIN=$WORK/build/rdma_retry PYTHONPATH=$SRC/harness/pytest-ibemu/src \
    PYTHONDONTWRITEBYTECODE=1 timeout 300 \
    /usr/bin/python3 -m pytest -p pytest_ibemu.plugin -p no:cacheprovider \
    --ibemu-build "$BUILD" tests) || status=1

echo "== GoogleTest suite"
# IBEMU_BIN: the fixture starts the staged ibemu, not the one of BUILD that
# the library remembers from its own build.
IBEMU_BIN=$PREFIX/bin/ibemu timeout 300 "$WORK/build/rdma_retry_gtest" || status=1

[ $status -eq 0 ] && echo "== rdma-retry: all tests passed" || echo "== rdma-retry: FAILED"
exit $status
