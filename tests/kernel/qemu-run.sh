#!/bin/bash
# Boots an installed Debian kernel under qemu with this machine's root
# filesystem shared read-only over 9p, and runs one script inside it as root:
#
#   qemu-run.sh [--kver KVER] [--mem MB] [--timeout SECONDS] [--workdir DIR]
#               [--accel ACCEL] SCRIPT [ARGS...]
#
#   --kver     kernel release (/boot/vmlinuz-KVER, /lib/modules/KVER); also
#              $KVER. Default: scripts/kernel-version.sh, the kernel `make kmod`
#              builds ibemu.ko for, else the newest one with a /boot/vmlinuz.
#   --mem      guest memory in MiB (1024)
#   --timeout  seconds for the whole run, boot included (540)
#   --workdir  keeps the initramfs there, reused while nothing it is made of
#              changes (default: a temporary directory, removed)
#   --accel    qemu accelerator (tcg; kvm where /dev/kvm works)
#
# The guest (tests/kernel/guest-init.sh) loads 9p from the kernel's own
# modules, mounts the host's / at /hostroot, gives it fresh proc, sys, dev,
# dev/pts, dev/shm and a tmpfs on /run, puts a writable layer in memory over
# the host's /tmp and /var/tmp, and chroots there to run SCRIPT (directly if
# executable, else with /bin/sh) from the current directory, with a clean
# environment and stdin from /dev/null. A SCRIPT under /run or /dev is hidden
# by those mounts, so it is copied to /run/ibemu-qemu instead (its ARGS are
# passed as they are). modprobe works: /lib/modules is the host's.
#
# Output: the guest console on stdout, \r stripped. Exit status: SCRIPT's;
# 124 if the run timed out; 125 if the guest ended without reporting a status
# (a panic, say); non-zero (SCRIPT's, or 1) if the guest kernel logged an oops,
# BUG, WARNING, lockup or the like; 77 (skip) if not root or qemu, busybox or
# the kernel is missing; 2 for bad usage.
set -eu

usage() {
  sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2
  exit 2
}

die() { # die STATUS MESSAGE
  echo "qemu-run: $2" >&2
  exit "$1"
}

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
KVER=${KVER:-}
MEM=1024
TIMEOUT=540
WORKDIR=""
ACCEL=tcg
while [ $# -gt 0 ]; do
  case "$1" in
  --kver | --mem | --timeout | --workdir | --accel)
    [ $# -ge 2 ] || usage
    case "$1" in
    --kver) KVER=$2 ;;
    --mem) MEM=$2 ;;
    --timeout) TIMEOUT=$2 ;;
    --workdir) WORKDIR=$2 ;;
    --accel) ACCEL=$2 ;;
    esac
    shift 2
    ;;
  -h | --help) usage ;;
  --) shift; break ;;
  -*) echo "qemu-run: unknown option $1" >&2; usage ;;
  *) break ;;
  esac
done
[ $# -ge 1 ] || usage
case "$MEM$TIMEOUT" in *[!0-9]*) die 2 "--mem and --timeout take whole numbers" ;; esac
SCRIPT=$1
shift
[ -f "$SCRIPT" ] || die 2 "no script $SCRIPT"

# qemu reads the shared / with its own rights; the guest needs all of it.
[ "$(id -u)" -eq 0 ] || die 77 "skipped: must run as root (qemu shares / with the guest)"

command -v qemu-system-x86_64 > /dev/null ||
  die 77 "qemu-system-x86_64 is missing: run 'make deps' (package qemu-system-x86)"
BUSYBOX=$(command -v busybox || true)
[ -n "$BUSYBOX" ] || die 77 "busybox is missing: run 'make deps' (package busybox-static)"
# The initramfs has no libc, so only a static busybox can run there.
if LC_ALL=C ldd "$BUSYBOX" > /dev/null 2>&1; then
  die 77 "$BUSYBOX is dynamically linked: run 'make deps' (package busybox-static)"
fi

newest_kernel() {
  for dir in /lib/modules/*; do
    [ -e "/boot/vmlinuz-${dir##*/}" ] && echo "${dir##*/}"
  done | sort -V | tail -n 1
}
# The same kernel `make kmod` builds for, so a module under test loads.
if [ -z "$KVER" ] && [ -x "$SRC/scripts/kernel-version.sh" ]; then
  KVER=$("$SRC/scripts/kernel-version.sh" 2> /dev/null || true)
fi
[ -n "$KVER" ] || KVER=$(newest_kernel)
[ -n "$KVER" ] || die 77 "no kernel in /boot with modules in /lib/modules: run 'make deps' (package linux-image-amd64)"
KERNEL=/boot/vmlinuz-$KVER
MODDIR=/lib/modules/$KVER
installed() {
  local k list=""
  for k in /boot/vmlinuz-*; do list="$list ${k#/boot/vmlinuz-}"; done
  echo "${list# }"
}
[ -r "$KERNEL" ] || die 77 "no $KERNEL (installed: $(installed)): run 'make deps' or pass --kver"
[ -r "$MODDIR/modules.dep" ] || die 77 "no $MODDIR/modules.dep: run 'make deps' or pass --kver"

REMOVE_WORKDIR=""
if [ -n "$WORKDIR" ]; then
  mkdir -p "$WORKDIR"
  WORKDIR=$(cd "$WORKDIR" && pwd)
else
  WORKDIR=$(mktemp -d -t qemu-run.XXXXXX)
  REMOVE_WORKDIR=yes
fi
PIDFILE=$WORKDIR/qemu.pid
rm -f "$PIDFILE"
# Interrupted, we must not leave a guest running until its timeout.
# shellcheck disable=SC2317  # called from the trap
cleanup() {
  if [ -s "$PIDFILE" ]; then kill "$(cat "$PIDFILE")" 2> /dev/null || true; fi
  if [ -n "$REMOVE_WORKDIR" ]; then rm -rf "$WORKDIR"; fi
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# modules.dep names a module's dependencies, theirs included, in the reverse
# of the order they load in. Built-in modules have no line and need nothing.
module_path() { # module_path NAME: its path under MODDIR, empty if built in
  awk -F: -v want="$1" '{
      name = $1; sub(/.*\//, "", name); sub(/\.ko(\.[a-z]+)?$/, "", name)
      gsub(/-/, "_", name)
      if (name == want) { print $1; exit }
    }' "$MODDIR/modules.dep"
}
load_order() { # load_order NAME...: the files to insmod, in order
  for want in "$@"; do
    path=$(module_path "$want")
    [ -n "$path" ] || continue
    sed -n "s|^$path:||p" "$MODDIR/modules.dep" | tr ' ' '\n' | sed '/^$/d' | tac
    echo "$path"
  done | awk '!seen[$0]++'
}
GUEST_MODULES=(virtio_pci 9pnet_virtio 9p)
for want in "${GUEST_MODULES[@]}"; do
  [ -n "$(module_path "$want")" ] || grep -q "/$want\.ko\$" "$MODDIR/modules.builtin" ||
    die 77 "kernel $KVER has no $want module, which the guest needs to mount / over 9p"
done

build_base() { # build_base OUT: busybox, guest-init.sh and the 9p modules
  local stage=$WORKDIR/stage n=0 path name
  rm -rf "$stage"
  mkdir -p "$stage"/{bin,dev,proc,sys,hostroot,modules}
  cp "$BUSYBOX" "$stage/bin/busybox"
  ln -s busybox "$stage/bin/sh"
  cp "$HERE/guest-init.sh" "$stage/init"
  chmod 755 "$stage/init"
  # The kernel opens the console before /init can mount devtmpfs.
  mknod -m 600 "$stage/dev/console" c 5 1
  : > "$stage/modules/order"
  # busybox insmod takes plain .ko files only.
  for path in $(load_order "${GUEST_MODULES[@]}"); do
    n=$((n + 1))
    name=$(printf '%02d-%s' "$n" "$(basename "${path%.ko*}").ko")
    case "$path" in
    *.ko.xz) xz -dc "$MODDIR/$path" ;;
    *.ko.zst) zstd -qdc "$MODDIR/$path" ;;
    *.ko.gz) gzip -dc "$MODDIR/$path" ;;
    *) cat "$MODDIR/$path" ;;
    esac > "$stage/modules/$name" || die 77 "cannot decompress $MODDIR/$path (make deps installs xz-utils, zstd)"
    echo "$name" >> "$stage/modules/order"
  done
  (cd "$stage" && find . | LC_ALL=C sort | "$BUSYBOX" cpio -o -H newc 2> /dev/null) > "$1.tmp"
  mv "$1.tmp" "$1"
  rm -rf "$stage"
}

# What the cached initramfs was made of; any change rebuilds it.
base=$WORKDIR/initramfs-$KVER.cpio
key=$(
  {
    echo "$KVER ${GUEST_MODULES[*]}"
    ls -lL --time-style=+%s "$MODDIR/modules.dep" "$BUSYBOX"
    cat "$HERE/guest-init.sh" "$0"
  } | sha256sum
)
if [ ! -s "$base" ] || [ "$(cat "$base.key" 2> /dev/null)" != "$key" ]; then
  build_base "$base"
  echo "$key" > "$base.key"
fi

shell_quote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

# Paths the guest covers with its own mounts (its /tmp and /var/tmp keep
# the host's files).
hidden() {
  case "$1/" in /run/* | /dev/* | /proc/* | /sys/*) return 0 ;; esac
  return 1
}

# The per-run part, appended to the cached one: the kernel unpacks
# concatenated cpio archives into one root.
job=$WORKDIR/job
rm -rf "$job"
mkdir -p "$job/job"
script_path=$(realpath "$SCRIPT")
if hidden "$script_path"; then
  mkdir -p "$job/job/files"
  cp -p "$script_path" "$job/job/files/"
  script_path=/run/ibemu-qemu/$(basename "$script_path")
fi
for arg in "$@"; do
  if [ "${arg#/}" != "$arg" ] && [ -e "$arg" ] && hidden "$(realpath "$arg")"; then
    echo "qemu-run: note: $arg is hidden in the guest (it mounts its own tmpfs there)" >&2
  fi
done
cwd=$(pwd)
hidden "$cwd" && cwd=/
NONCE=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
# The guest's watchdog fires a little before ours so it can still report.
deadline=0
[ "$TIMEOUT" -le 30 ] || deadline=$((TIMEOUT - 15))
{
  echo "JOB_NONCE=$NONCE"
  echo "JOB_DEADLINE=$deadline"
  echo "JOB_CWD=$(shell_quote "$cwd")"
  echo "JOB_HOSTNAME=$(shell_quote "$(uname -n)")"
  printf 'set --'
  [ -x "$script_path" ] || [ -x "$SCRIPT" ] || printf ' /bin/sh'
  printf ' %s' "$(shell_quote "$script_path")"
  for arg in "$@"; do printf ' %s' "$(shell_quote "$arg")"; done
  echo
} > "$job/job/env"
initrd=$WORKDIR/initrd.cpio
{
  cat "$base"
  (cd "$job" && find . | LC_ALL=C sort | "$BUSYBOX" cpio -o -H newc 2> /dev/null)
} > "$initrd"

cpus=$(nproc)
[ "$cpus" -le 2 ] || cpus=2
console=$WORKDIR/console.log
start=$(date +%s)
# In the background because bash runs a trap only once a foreground job ends,
# and a signal to us must stop the guest now. --foreground: a Ctrl-C reaches
# qemu as well.
{
  status=0
  timeout --foreground -k 10 "$TIMEOUT" qemu-system-x86_64 -pidfile "$PIDFILE" \
    -accel "$ACCEL" -cpu max -smp "$cpus" -m "$MEM" \
    -nodefaults -no-user-config -display none -serial stdio -monitor none -no-reboot \
    -kernel "$KERNEL" -initrd "$initrd" \
    -append "console=ttyS0 quiet panic=-1 log_buf_len=4M rdinit=/init" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    < /dev/null 2>&1 || status=$?
  # Silent: after a signal the work directory may be gone already.
  echo "$status" 2> /dev/null > "$WORKDIR/qemu.rc"
} | sed -u 's/\r//g' | tee "$console" &
wait $! || true
qemu_rc=$(cat "$WORKDIR/qemu.rc" 2> /dev/null || echo 125)
rm -f "$PIDFILE" "$WORKDIR/qemu.rc"
elapsed=$(($(date +%s) - start))

rc=$(sed -n "s/.*IBEMU-QEMU-EXIT \([0-9]*\) (run $NONCE).*/\1/p" "$console" | tail -n 1)
# A second look, for when the guest could not report: kernel lines on the
# console carry a timestamp, script output does not. What the guest prints in
# its report (a timeout's dump of blocked tasks, say) is not looked at.
kernel_problem=$(sed "/IBEMU-QEMU-REPORT (run $NONCE)/,\$d" "$console" |
  grep -E '^\[ *[0-9]+\.[0-9]+\] .*(Oops|BUG:|general protection fault|KASAN|Call Trace|Kernel panic)' |
  head -n 1 || true)

if [ -z "$rc" ]; then
  if [ "$qemu_rc" -eq 124 ] || [ "$qemu_rc" -eq 137 ]; then
    die 124 "timed out after ${TIMEOUT}s: qemu killed before the guest reported${kernel_problem:+ (kernel: $kernel_problem)}"
  fi
  panic=$(grep -m1 'Kernel panic' "$console" || true)
  [ -z "$panic" ] || die 125 "the guest kernel panicked after ${elapsed}s: $panic"
  die 125 "the guest stopped after ${elapsed}s without reporting a status (qemu exit $qemu_rc)${kernel_problem:+; kernel: $kernel_problem}"
fi
if grep -q "IBEMU-QEMU-KERNEL-PROBLEM (run $NONCE)" "$console" || [ -n "$kernel_problem" ]; then
  die "$([ "$rc" -ne 0 ] && echo "$rc" || echo 1)" \
    "the guest kernel logged a problem (IBEMU-QEMU-KERNEL-PROBLEM above); the script exited with $rc"
fi
if grep -q "IBEMU-QEMU-TIMEOUT (run $NONCE)" "$console"; then
  die 124 "timed out: the guest's watchdog killed the script ${deadline}s after boot, 15s before --timeout ${TIMEOUT}s"
fi
echo "qemu-run: script exited with $rc (${elapsed}s, kernel $KVER)" >&2
exit "$rc"
