#!/bin/sh
# make fuzz: builds the fuzz targets (tests/fuzz) with clang, libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer in BUILD, and runs each for
# SECONDS over its committed corpus and regression inputs. New inputs the
# fuzzer finds go to BUILD/fuzz-corpus/TARGET (the committed corpus is not
# touched); an input that crashes a target is saved in BUILD/fuzz-crashes.
# Usage: scripts/fuzz.sh [--build-only] BUILD SECONDS [TARGET...]
# --build-only: configures and builds the targets, runs none (scripts/run-tests.sh
# builds them in the background while other suites run).
set -eu
cd "$(dirname "$0")/.."
build_only=
if [ "${1:-}" = --build-only ]; then
  build_only=1
  shift
fi
build=${1:-build-fuzz}
seconds=${2:-60}
if [ $# -ge 2 ]; then shift 2; else shift $#; fi
targets=${*:-packet mad control config kernel_ctl partitions}

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIBEMU_FUZZ=ON -DIBEMU_SANITIZE=address,undefined >/dev/null
fi
# One build of every target, so that every core stays busy to its last object.
# shellcheck disable=SC2046
cmake --build "$build" -j"$(nproc)" --target $(printf 'fuzz_%s ' $targets) >/dev/null
[ -z "$build_only" ] || exit 0

rm -rf "$build/fuzz-crashes"
mkdir -p "$build/fuzz-crashes"
# Undefined behaviour is a finding: stop with a stack.
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
summary="$build/fuzz-summary.txt"
: >"$summary"
# fuzz_one TARGET: runs one target for SECONDS; its exit status goes to
# BUILD/fuzz-TARGET.rc.
fuzz_one() {
  rc=0
  mkdir -p "$build/fuzz-corpus/$1"
  "$build/bin/fuzz_$1" -max_total_time="$seconds" \
    -print_final_stats=1 -rss_limit_mb=4096 -artifact_prefix="$build/fuzz-crashes/$1-" \
    "$build/fuzz-corpus/$1" "tests/fuzz/corpus/$1" "tests/fuzz/regressions/$1" \
    >"$build/fuzz-$1.log" 2>&1 || rc=$?
  echo "$rc" >"$build/fuzz-$1.rc"
}
# As many targets at a time as there are cores (each fuzzes on one core), in
# the order given; each still runs its SECONDS.
failed=""
cores=$(nproc)
set -- $targets
while [ $# -gt 0 ]; do
  batch=""
  while [ $# -gt 0 ] && [ "$(echo $batch | wc -w)" -lt "$cores" ]; do
    batch="$batch $1"
    shift
  done
  for t in $batch; do
    echo "== fuzz_$t: $seconds s"
    fuzz_one "$t" &
  done
  wait
  for t in $batch; do
    log="$build/fuzz-$t.log"
    rc=$(cat "$build/fuzz-$t.rc")
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    if [ "$rc" -ne 0 ]; then
      failed="$failed $t"
      grep -E "ERROR|runtime error|Test unit written|SUMMARY" "$log" | head -20 || true
      echo "fuzz_$t FAILED after ${execs:-?} executions (log: $log)" | tee -a "$summary"
    else
      echo "fuzz_$t: ${execs:-?} executions in $seconds s, no failure" | tee -a "$summary"
    fi
  done
done
if [ -n "$failed" ]; then
  echo "fuzz: failing targets:$failed. Each input in $build/fuzz-crashes reproduces with"
  echo "  $build/bin/fuzz_TARGET FILE; once fixed, commit it to tests/fuzz/regressions/TARGET."
  exit 1
fi
