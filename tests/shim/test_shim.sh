#!/usr/bin/env bash
# Tests libibemu-preload.so, the preload shim of no-kernel mode, against a
# fake sysfs tree shaped like the one ibemud writes, using the system's own
# tools (coreutils, dash, bash, findutils, infiniband-diags, ibverbs-utils).
#
# usage: tests/shim/test_shim.sh [BUILD_DIR]     (default: <repo>/build)
# Exits non-zero on any mismatch; ends with "N passed, M failed".
set -u

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${1:-$repo/build}
case $build in /*) ;; *) build=$PWD/$build ;; esac
lib=$build/lib/libibemu-preload.so
if [ ! -f "$lib" ]; then
  echo "missing $lib (build the ibemu-preload target first)" >&2
  exit 2
fi
# A sanitized shim needs its sanitizer's runtime loaded before it.
preload=${SANITIZER_PRELOAD:+$SANITIZER_PRELOAD:}$lib

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Resolved, so that paths printed by realpath compare equal.
tree=$(cd "$work" && pwd -P)/sysfs

passed=0
failed=0
pass() {
  passed=$((passed + 1))
  echo "ok: $1"
}
fail() {
  failed=$((failed + 1))
  echo "FAIL: $1"
  shift
  for line in "$@"; do printf '    %s\n' "$line"; done
}

# --- the fake tree ----------------------------------------------------------
put() { # put FILE VALUE
  mkdir -p "$(dirname "$tree/$1")"
  printf '%s\n' "$2" >"$tree/$1"
}
put class/infiniband_verbs/abi_version 6
put class/infiniband_verbs/uverbs0/ibdev fake0
put class/infiniband_verbs/uverbs0/dev 0:0
put class/infiniband_verbs/uverbs0/abi_version 6
put class/infiniband_mad/abi_version 5
put class/infiniband_mad/umad0/ibdev fake0
put class/infiniband_mad/umad0/port 1
ca=class/infiniband/fake0
put $ca/node_type "1: CA"
put $ca/node_guid 0002:c903:0000:1234
put $ca/sys_image_guid 0002:c903:0000:1237
put $ca/fw_ver 1.0.0
put $ca/hw_rev 0
put $ca/hca_type ibemu
put $ca/board_id IBEMU0001
p=$ca/ports/1
put $p/state "1: DOWN"
put $p/phys_state "2: Polling"
put $p/lid 0x0
put $p/sm_lid 0x0
put $p/sm_sl 0
put $p/lid_mask_count 0
put $p/rate "100 Gb/sec (4X EDR)"
put $p/cap_mask 0x02514868
put $p/link_layer InfiniBand
put $p/gids/0 fe80:0000:0000:0000:0002:c903:0000:1235
put $p/pkeys/0 0xffff
# The device the HCA hangs off, and its link, as ibemud lays them out.
put devices/virtual/ibemu/fake0/vendor 0x02c9
ln -s ../../../devices/virtual/ibemu/fake0 "$tree/$ca/device"
mkdir -p "$tree/dev/infiniband" "$tree/class/infiniband_x" "$tree/devices/virtual/ibemux"
: >"$tree/dev/infiniband/uverbs0"
: >"$tree/dev/infiniband/umad0"

# Every command below runs with a clean RDMA environment.
shim() { env -u SYSFS_PATH -u RDMAV_DRIVERS LD_PRELOAD="$preload" IBEMU_SYSFS="$tree" "$@"; }
noshim() { env -u SYSFS_PATH -u RDMAV_DRIVERS -u IBEMU_SYSFS LD_PRELOAD="$preload" "$@"; }

# have TOOL: whether TOOL is installed; says so when it is not, so that
# the script also runs on machines with only part of rdma-core's tools.
skipped=0
have() {
  if command -v "$1" >/dev/null 2>&1; then return 0; fi
  skipped=$((skipped + 1))
  echo "skip: $1 is not installed"
  return 1
}

# expect NAME EXPECTED CMD...: stdout of CMD (exit 0) must equal EXPECTED.
expect() {
  local name=$1 want=$2 got rc
  shift 2
  got=$("$@" 2>"$work/err")
  rc=$?
  if [ $rc -eq 0 ] && [ "$got" = "$want" ]; then
    pass "$name"
  else
    fail "$name" "exit $rc" "want: $want" "got:  $got" "stderr: $(cat "$work/err")"
  fi
}

# expect_grep NAME REGEX CMD...: CMD exits 0 and some line matches REGEX.
expect_grep() {
  local name=$1 re=$2 got rc
  shift 2
  got=$("$@" 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && printf '%s\n' "$got" | grep -Eq -- "$re"; then
    pass "$name"
  else
    fail "$name" "exit $rc, want a line matching: $re" "$got"
  fi
}

# expect_fail NAME CMD...: CMD must exit non-zero.
expect_fail() {
  local name=$1 got
  shift
  if got=$("$@" 2>&1); then
    fail "$name" "exited 0" "$got"
  else
    pass "$name"
  fi
}

# --- redirection of /sys/class/infiniband* ----------------------------------
expect "cat node_guid" 0002:c903:0000:1234 shim cat /sys/class/infiniband/fake0/node_guid
expect "ls /sys/class/infiniband" fake0 shim ls /sys/class/infiniband
expect "ls /sys/class/infiniband/ (trailing slash)" fake0 shim ls /sys/class/infiniband/
expect "ls /sys/class/infiniband_verbs" "abi_version
uverbs0" shim ls /sys/class/infiniband_verbs
expect "cat infiniband_mad/abi_version" 5 shim cat /sys/class/infiniband_mad/abi_version
expect_fail "whole components only: /sys/class/infiniband_x is not redirected" \
  shim ls /sys/class/infiniband_x
expect "dash: cd + glob" fake0 shim sh -c 'cd /sys/class/infiniband && echo *'
# shellcheck disable=SC2016  # $s is for the inner shell
expect "dash: relative read after cd" "1: DOWN" \
  shim sh -c 'cd /sys/class/infiniband/fake0/ports && read s <1/state && echo "$s"'
expect "bash: cd + cat" "1: DOWN" \
  shim bash -c 'cd /sys/class/infiniband/fake0/ports/1 && cat state'
expect "dash test -r / -d" yes \
  shim sh -c '[ -r /sys/class/infiniband/fake0/ports/1/state ] && [ -d /sys/class/infiniband ] && echo yes'
expect "coreutils test -r" yes \
  shim sh -c '/usr/bin/test -r /sys/class/infiniband/fake0/node_type && echo yes'
expect "find walks the tree" /sys/class/infiniband/fake0/ports/1/state \
  shim find /sys/class/infiniband/ -name state
# coreutils resolves component by component with readlink(); none of the
# redirected components is a link, so the name stays under /sys.
expect "coreutils realpath" /sys/class/infiniband/fake0 shim realpath /sys/class/infiniband/fake0
expect "cat through the device link" 0x02c9 shim cat /sys/class/infiniband/fake0/device/vendor
expect "the link's target is redirected too" 0x02c9 shim cat /sys/devices/virtual/ibemu/fake0/vendor
expect "coreutils realpath follows the device link" /sys/devices/virtual/ibemu/fake0 \
  shim realpath /sys/class/infiniband/fake0/device
expect_fail "whole components only: /sys/devices/virtual/ibemux is not redirected" \
  shim ls /sys/devices/virtual/ibemux
expect_grep "ls -l of a device directory" ' node_guid$' shim ls -l /sys/class/infiniband/fake0
expect "head reads node_type" "1: CA" shim head -n1 /sys/class/infiniband/fake0/node_type
expect "relative IBEMU_SYSFS is pinned for child processes" 0002:c903:0000:1234 \
  bash -c "cd '$tree/..' && env -u SYSFS_PATH LD_PRELOAD='$preload' IBEMU_SYSFS=sysfs \
    sh -c 'cd / && cat /sys/class/infiniband/fake0/node_guid'"

# --- /dev/infiniband ----------------------------------------------------------
expect "stat -c %F uverbs0" "character special file" shim stat -c %F /dev/infiniband/uverbs0
expect "stat -L -c %F uverbs0" "character special file" \
  shim stat -L -c %F /dev/infiniband/uverbs0
expect "dash test -c uverbs0" yes shim sh -c '[ -c /dev/infiniband/uverbs0 ] && echo yes'
expect_fail "uverbs1 (not in the tree) does not exist" shim stat /dev/infiniband/uverbs1
expect "ls /dev/infiniband" "umad0
uverbs0" shim ls /dev/infiniband
expect_grep "ls -l /dev/infiniband shows uverbs0 as a char device" '^c.* uverbs0$' \
  shim ls -l /dev/infiniband
expect "umad0 is the daemon's placeholder, not a device" "regular empty file" \
  shim stat -c %F /dev/infiniband/umad0

# --- infiniband-diags -------------------------------------------------------
if have ibstatus; then
  expect_grep "ibstatus fake0: header" "^Infiniband device 'fake0' port 1 status:" \
    shim ibstatus fake0
  expect_grep "ibstatus fake0: state" "state:[[:space:]]+1: DOWN" shim ibstatus fake0
  expect_grep "ibstatus fake0: gid" "default gid:[[:space:]]+fe80:0000:0000:0000:0002:c903:0000:1235" \
    shim ibstatus fake0
  expect_grep "ibstatus (all devices)" "phys state:[[:space:]]+2: Polling" shim ibstatus
fi
if have ibstat; then
  expect "ibstat -l" fake0 shim ibstat -l
  expect_grep "ibstat fake0: CA" "^CA 'fake0'" shim ibstat fake0
  expect_grep "ibstat fake0: port state" "State: Down" shim ibstat fake0
  expect_grep "ibstat fake0: node GUID" "Node GUID: 0x0002c90300001234" shim ibstat fake0
fi

# --- libibverbs: finds uverbs0 but has no provider for it; must not crash ---
if have ibv_devices; then
  for mode in redirect SYSFS_PATH; do
    if [ $mode = redirect ]; then
      out=$(shim ibv_devices 2>&1)
    else
      out=$(env SYSFS_PATH="$tree" LD_PRELOAD="$preload" IBEMU_SYSFS="$tree" ibv_devices 2>&1)
    fi
    rc=$?
    if [ $rc -lt 128 ] && printf '%s\n' "$out" | grep -q 'device'; then
      pass "ibv_devices ($mode) runs to completion (exit $rc)"
    else
      fail "ibv_devices ($mode)" "exit $rc" "$out"
    fi
  done
  out=$(IBV_SHOW_WARNINGS=1 shim ibv_devices 2>&1)
  if printf '%s\n' "$out" | grep -q 'no userspace device-specific driver found for fake0'; then
    pass "libibverbs discovered uverbs0 from the redirected sysfs"
  else
    fail "libibverbs discovered uverbs0 from the redirected sysfs" "$out"
  fi
fi

# --- iproute2's rdma tool, over the emulated NETLINK_RDMA ---------------------
if have rdma; then
  dev_line='^0: fake0: node_type ca fw 1.0.0 node_guid 0002:c903:0000:1234 sys_image_guid 0002:c903:0000:1237 *$'
  expect_grep "rdma dev" "$dev_line" shim rdma dev
  expect_grep "rdma dev show fake0" "$dev_line" shim rdma dev show fake0
  expect_grep "rdma link" \
    '^link fake0/1 subnet_prefix fe80:0000:0000:0000 lid 0 sm_lid 0 lmc 0 state DOWN physical_state POLLING *$' \
    shim rdma link
  # What rdma-core's own test suite reads (tests/base.py: get_net_name).
  expect "rdma link show -j: ifname and port, no netdev" "fake0 1 None" \
    shim sh -c "rdma link show -j | /usr/bin/python3 -c 'import json, sys
for row in json.load(sys.stdin): print(row[\"ifname\"], row[\"port\"], row.get(\"netdev\"))'"
  expect_grep "rdma sys: network namespaces shared" "netns shared" shim rdma sys
  expect_fail "rdma dev show of a missing device fails" shim rdma dev show nosuch0
  expect_fail "rdma resource (not emulated) fails" shim rdma resource
fi

# --- the C probe: commands, channels, fd tracking, netlink ---------------------
if ! have cc; then
  :
elif cc -std=c11 -O1 -Wall -o "$work/shim_probe" "$here/shim_probe.c" -lpthread 2>"$work/err"; then
  for mode in active inactive; do
    if [ $mode = active ]; then
      out=$(shim "$work/shim_probe" active 2>&1)
    else
      out=$(noshim "$work/shim_probe" inactive 2>&1)
    fi
    rc=$?
    while IFS= read -r line; do
      case $line in
        "ok: "*) pass "probe $mode: ${line#ok: }" ;;
        "not ok: "*) fail "probe $mode: ${line#not ok: }" ;;
        *) fail "probe $mode: unexpected output" "$line" ;;
      esac
    done <<<"$out"
    [ $rc -eq 0 ] || fail "probe $mode exited $rc"
  done
else
  fail "compile shim_probe.c" "$(cat "$work/err")"
fi

# --- IBEMU_SYSFS unset: the shim must change nothing --------------------------
for cmd in "cat /sys/class/infiniband/fake0/node_guid" "ls /sys/class/infiniband" \
  "stat -c %F /dev/infiniband/uverbs0" "ls /dev/infiniband"; do
  # shellcheck disable=SC2086
  want=$(env -u LD_PRELOAD $cmd 2>&1)
  want_rc=$?
  # shellcheck disable=SC2086
  got=$(noshim $cmd 2>&1)
  got_rc=$?
  if [ "$got" = "$want" ] && [ $got_rc -eq $want_rc ]; then
    pass "without IBEMU_SYSFS: '$cmd' behaves as without the shim (exit $got_rc)"
  else
    fail "without IBEMU_SYSFS: '$cmd'" "want ($want_rc): $want" "got ($got_rc): $got"
  fi
done
expect_fail "without IBEMU_SYSFS: cat /sys/class/infiniband/x fails" \
  noshim cat /sys/class/infiniband/x
expect "IBEMU_SYSFS set: ordinary files untouched" root \
  shim sh -c 'head -n1 /etc/passwd | cut -d: -f1'

[ $skipped -eq 0 ] || echo "($skipped groups skipped: tools not installed)"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
