#!/bin/sh
# `make test`: every test suite, in order of speed. Exits non-zero if any fails.
set -u
BUILD=${1:-build}
BUILD=$(cd "$BUILD" && pwd)
status=0
echo "== formatting (clang-format, the repository's .clang-format)"
if command -v clang-format >/dev/null 2>&1; then
  make -s format-check || { echo "run 'make format'"; status=1; }
else
  echo "clang-format is not installed: formatting not checked"
fi
echo "== unit tests (GoogleTest via ctest)"
(cd "$BUILD" && ctest --output-on-failure -j"$(nproc)") || status=1
echo "== preload shim"
tests/shim/test_shim.sh "$BUILD" || status=1
echo "== kernel module (qemu with Debian's kernel)"
tests/kernel/run.sh "$BUILD"
case $? in 0 | 77) ;; *) status=1 ;; esac
echo "== integration tests (pytest, real rdma-core programs)"
IBEMU_BUILD="$BUILD" /usr/bin/python3 -m pytest -v -p no:cacheprovider tests/integration || status=1
echo "== fuzzing (libFuzzer with ASan and UBSan, ${FUZZ_SECONDS:-10} s per target)"
if command -v clang >/dev/null 2>&1; then
  scripts/fuzz.sh "${FUZZ_BUILD:-build-fuzz}" "${FUZZ_SECONDS:-10}" || status=1
else
  echo "clang is not installed: fuzz targets not run (their corpora ran with the unit tests)"
fi
if [ $status -ne 0 ]; then echo "ibemu: some tests FAILED"; else echo "ibemu: all tests passed"; fi
exit $status
