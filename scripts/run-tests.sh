#!/bin/sh
# `make test`: every test suite, in order of speed. Exits non-zero if any fails.
set -u
BUILD=${1:-build}
BUILD=$(cd "$BUILD" && pwd)
status=0
started=$(date +%s)
# section TITLE: a suite's header, with the minutes the run has taken so far
# (where CI's time goes).
section() { echo "== $1 [$(( ($(date +%s) - started) / 60 )) min]"; }
# The fuzz targets' clang build (build-fuzz, about five minutes of two
# cores) runs in the background from here on, as SCHED_IDLE: it gets only
# the CPU time the suites below leave unused (they wait on timers, programs
# and qemu much of the time), so they run as fast as without it. The fuzzing
# section waits for it. Started before the sanitizers' options are set:
# nothing in it is instrumented.
fuzz_build=
if command -v clang >/dev/null 2>&1; then
  fuzz_build_log=$BUILD/fuzz-build.log
  chrt --idle 0 scripts/fuzz.sh --build-only "${FUZZ_BUILD:-build-fuzz}" "${FUZZ_SECONDS:-10}" \
    >"$fuzz_build_log" 2>&1 &
  fuzz_build=$!
fi
# A sanitized build (make test SANITIZE=...): every process that loads ibemu
# code writes its sanitizer reports under $REPORTS, and any report fails the
# run. Programs nobody here wrote leak at exit by design, so leaks are
# checked in the unit tests only.
IBEMU_SANITIZE=
[ -f "$BUILD/sanitizers.sh" ] && . "$BUILD/sanitizers.sh"
REPORTS=$BUILD/sanitizer-reports
sanitizer_options() { # sanitizer_options DETECT_LEAKS
  export ASAN_OPTIONS="log_path=$REPORTS/asan:detect_leaks=$1:suppressions=$PWD/tests/asan.supp"
  export UBSAN_OPTIONS="log_path=$REPORTS/ubsan:print_stacktrace=1:halt_on_error=1"
  # report_signal_unsafe=0 and tests/tsan.supp: perftest's SIGALRM handler
  # (duration mode) calls fopen and changes errno, which is perftest's
  # business, not ibemu's.
  export TSAN_OPTIONS="log_path=$REPORTS/tsan:halt_on_error=1:second_deadlock_stack=1:report_signal_unsafe=0:suppressions=$PWD/tests/tsan.supp"
  export SANITIZER_PRELOAD=$IBEMU_SANITIZER_RUNTIME
}
# sanitizer_reports SUITE: prints what the sanitizers reported during SUITE.
sanitizer_reports() {
  [ -n "$IBEMU_SANITIZE" ] || return 0
  found=$(find "$REPORTS" -type f 2>/dev/null | sort)
  [ -z "$found" ] && return 0
  echo "sanitizer reports during the $1:"
  for f in $found; do echo "--- $f"; head -n 60 "$f"; done
  mkdir -p "$REPORTS.kept" && mv $found "$REPORTS.kept/"
  return 1
}
if [ -n "$IBEMU_SANITIZE" ]; then
  section "sanitized build ($IBEMU_SANITIZE); reports go to $REPORTS"
  rm -rf "$REPORTS" "$REPORTS.kept" && mkdir -p "$REPORTS"
  sanitizer_options 1
fi
section "formatting (clang-format, the repository's .clang-format)"
if command -v clang-format >/dev/null 2>&1; then
  make -s format-check || { echo "run 'make format'"; status=1; }
else
  echo "clang-format is not installed: formatting not checked"
fi
section "unit tests (GoogleTest via ctest)"
(cd "$BUILD" && ctest --output-on-failure -j"$(nproc)") || status=1
sanitizer_reports "unit tests" || status=1
[ -n "$IBEMU_SANITIZE" ] && sanitizer_options 0
# The shim test and the qemu test drive dash and bash with the sanitizer's
# runtime preloaded; ThreadSanitizer's crashes them (at their first setjmp),
# so a TSan build skips both.
case $IBEMU_SANITIZE in
  *thread*) section "preload shim and kernel module: skipped (ThreadSanitizer cannot run inside dash or bash)" ;;
  *)
    section "preload shim"
    tests/shim/test_shim.sh "$BUILD" || status=1
    sanitizer_reports "preload shim test" || status=1
    section "kernel module (qemu with Debian's kernel)"
    tests/kernel/run.sh "$BUILD"
    case $? in 0 | 77) ;; *) status=1 ;; esac
    ;;
esac
section "integration tests (pytest, real rdma-core programs)"
IBEMU_BUILD="$BUILD" /usr/bin/python3 -m pytest -v -p no:cacheprovider --durations=15 tests/integration || status=1
sanitizer_reports "integration tests" || status=1
section "test harness for users (pytest-ibemu's tests, examples/rdma-retry)"
IBEMU_BUILD="$BUILD" PYTHONPATH=harness/pytest-ibemu/src /usr/bin/python3 -m pytest -v \
  -p no:cacheprovider -p pytest_ibemu.plugin harness/pytest-ibemu/tests || status=1
examples/rdma-retry/run-tests.sh "$BUILD" || status=1
sanitizer_reports "test harness" || status=1
section "tutorials (docs/tutorials, run as written)"
tests/tutorials/run.sh "$BUILD" || status=1
sanitizer_reports "tutorials" || status=1
section "fuzzing (libFuzzer with ASan and UBSan, ${FUZZ_SECONDS:-10} s per target)"
if [ -n "$fuzz_build" ]; then
  if wait "$fuzz_build"; then
    scripts/fuzz.sh "${FUZZ_BUILD:-build-fuzz}" "${FUZZ_SECONDS:-10}" || status=1
  else
    cat "$fuzz_build_log"
    echo "the fuzz targets did not build"
    status=1
  fi
else
  echo "clang is not installed: fuzz targets not run (their corpora ran with the unit tests)"
fi
section "done"
if [ $status -ne 0 ]; then echo "ibemu: some tests FAILED"; else echo "ibemu: all tests passed"; fi
exit $status
