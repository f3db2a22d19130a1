#!/bin/sh
# Runs in a Debian root of run.sh without network (its own loopback), as
# the user tester: builds ibemu from the copied checkout with that
# release's compiler and rdma-core, then smoke.sh.
#   chroot-run.sh RELEASE
set -eu
if [ "$(id -u)" = 0 ]; then exec runuser -u tester -- /bin/sh "$0" "$@"; fi
cd /tmp/ibemu-test
unset XDG_RUNTIME_DIR IBEMU_RUNTIME_DIR
: > results.txt
echo "release: $1 ($(cat /etc/debian_version))" >> results.txt
echo "  compiler: $(c++ --version | head -n 1)"
cmake -S src -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF > cmake.log 2>&1 \
  || { tail -n 30 cmake.log; echo "build: FAIL" >> results.txt; exit 1; }
grep 'ibemu: libibverbs' cmake.log | sed 's/^-- /  /'
if cmake --build build -j"$(nproc)" > build.log 2>&1; then
  echo "build: ok" >> results.txt
  echo "  ok    build"
else
  grep -E 'error|Error' build.log | head -n 30
  echo "build: FAIL" >> results.txt
  exit 1
fi
src/tests/portability/smoke.sh build results.txt
