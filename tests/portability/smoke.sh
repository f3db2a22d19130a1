#!/bin/sh
# Runs real programs on ibemu's emulated HCAs with this system's rdma-core:
# `ibemu up`, ibv_devinfo, ibv_rc_pingpong, ib_write_bw, rping (and the
# manual's RC example where the build has its test programs) and
# rdma-core's own Python test suite (from this system's python3-pyverbs),
# then `ibemu down`. `make portability-test` runs it in a fresh root of each
# Debian release; run it by hand on any other system to see where ibemu
# stands there.
#
#   tests/portability/smoke.sh BUILD [RESULTS]
#
# BUILD is a build directory of ibemu (its bin/ibemu is used); RESULTS, if
# given, receives one `key: value` line per figure (rdma-core's version, the
# provider ABI, each program's outcome, the suite's pass/skip/fail counts).
# A program that is not installed is reported as missing, which fails the
# run. Exits non-zero if a program fails or the suite has an unexpected
# failure (tests/portability/expected-failures lists the expected ones).
set -u
BUILD=$(cd "${1:?usage: smoke.sh BUILD [RESULTS]}" && pwd)
RESULTS=${2:-/dev/null}
HERE=$(cd "$(dirname "$0")" && pwd)
PATH=$BUILD/bin:$PATH
PYTHON=/usr/bin/python3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ibemu-smoke.XXXXXX")
export IBEMU_RUNTIME_DIR=$WORK/runtime
failed=0
server=

finish() {
  [ -z "$server" ] || kill "$server" 2> /dev/null || true
  ibemu down > /dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap finish EXIT
trap 'exit 130' INT TERM

record() { echo "$1: $2" >> "$RESULTS"; }
report() { # report NAME STATUS [DETAIL FILE]
  printf '  %-5s %s\n' "$2" "$1"
  record "$1" "$2"
  if [ "$2" != ok ]; then
    failed=1
    [ -z "${3:-}" ] || sed 's/^/        | /' "$3" | tail -n 25
  fi
}

# wait_for_port PORT PID: until a TCP listener on PORT exists (or PID died).
wait_for_port() {
  hex=$(printf ':%04X ' "$1")
  tries=0
  until grep -q "$hex" /proc/net/tcp /proc/net/tcp6 2> /dev/null; do
    tries=$((tries + 1))
    [ $tries -le 400 ] && kill -0 "$2" 2> /dev/null || return 1
    sleep 0.05
  done
}

# pair NAME PORT 'SERVER' 'CLIENT' CHECK: a server and its client under
# `ibemu run`; the client starts once the server listens on PORT, CHECK is a
# regular expression both outputs must match.
pair() {
  name=$1 port=$2 server_cmd=$3 client_cmd=$4 check=$5
  if ! command -v "${server_cmd%% *}" > /dev/null; then
    report "$name" missing
    return
  fi
  # shellcheck disable=SC2086 # the commands are word lists
  ibemu run -- $server_cmd > "$WORK/server.out" 2>&1 &
  server=$!
  if [ "$name" = rping ]; then
    sleep 1 # rping listens through rdma_cm, not on a TCP port
  elif ! wait_for_port "$port" "$server"; then
    report "$name" FAIL "$WORK/server.out"
    server=
    return
  fi
  # shellcheck disable=SC2086
  timeout 120 ibemu run -- $client_cmd > "$WORK/client.out" 2>&1
  client_status=$?
  wait "$server"
  server_status=$?
  server=
  if [ $client_status = 0 ] && [ $server_status = 0 ] \
    && grep -Eq "$check" "$WORK/client.out" && grep -Eq "$check" "$WORK/server.out"; then
    report "$name" ok
  else
    cat "$WORK/server.out" "$WORK/client.out" > "$WORK/both.out"
    report "$name" FAIL "$WORK/both.out"
  fi
}

rdma_core=$(dpkg-query -W -f='${Version}' libibverbs1 2> /dev/null || echo unknown)
provider=$(ls "$BUILD"/lib/libibemu-rdmav*.so 2> /dev/null | head -n 1)
echo "portability: rdma-core $rdma_core, provider $(basename "${provider:-none}")"
record rdma-core "$rdma_core"
record provider "$(basename "${provider:-none}")"

if ibemu up > "$WORK/up.out" 2>&1; then
  report "ibemu up" ok
else
  report "ibemu up" FAIL "$WORK/up.out"
  exit 1
fi

if ibemu run -- ibv_devinfo -v > "$WORK/devinfo.out" 2>&1 \
  && [ "$(grep -c 'state:.*PORT_ACTIVE' "$WORK/devinfo.out")" -ge 2 ]; then
  report ibv_devinfo ok
else
  report ibv_devinfo FAIL "$WORK/devinfo.out"
fi

pair ibv_rc_pingpong 18515 "ibv_rc_pingpong -d ibemu0 -g 0 -n 1000" \
  "ibv_rc_pingpong -d ibemu1 -g 0 -n 1000 localhost" "bytes in .* seconds"
pair ib_write_bw 18516 "ib_write_bw -d ibemu0 -p 18516 -s 65536 -n 200" \
  "ib_write_bw -d ibemu1 -p 18516 -s 65536 -n 200 localhost" "65536 +200"
# The RC example of the RDMA Aware Programming manual, where the build has
# its test programs.
if [ -x "$BUILD/bin/rc_example" ]; then
  pair rc_example 18517 "rc_example -d ibemu0 -p 18517 -g 0" \
    "rc_example -d ibemu1 -p 18517 -g 0 localhost" "test result is 0"
fi
pair rping 7174 "rping -s -a 10.73.0.1 -p 7174 -C 100 -V" \
  "rping -c -a 10.73.0.1 -p 7174 -C 100 -V -v" "."

# rdma-core's suite, as its release ships it (some files compressed).
suite=/usr/share/doc/rdma-core/tests
if [ -f "$suite/run_tests.py" ] && $PYTHON -c 'import pyverbs' 2> /dev/null; then
  cp -r "$suite" "$WORK/tests"
  find "$WORK/tests" -name '*.gz' -exec gunzip -f {} +
  timeout 1800 ibemu run -- "$PYTHON" "$HERE/suite_run.py" "$WORK/tests" \
    "$HERE/expected-failures" --dev ibemu0 -v > "$WORK/suite.out" 2>&1
  suite_status=$?
  grep '^suite-' "$WORK/suite.out" | tee -a "$RESULTS" | sed 's/^/        /'
  if [ $suite_status = 0 ]; then
    report "rdma-core tests" ok
  else
    report "rdma-core tests" FAIL "$WORK/suite.out"
  fi
else
  report "rdma-core tests" missing
fi

if ibemu down > "$WORK/down.out" 2>&1; then report "ibemu down" ok; else report "ibemu down" FAIL "$WORK/down.out"; fi
[ $failed = 0 ] && echo "portability: passed" || echo "portability: FAILED"
exit $failed
