#!/bin/sh
# PID 1 of the guest that tests/kernel/qemu-run.sh boots: runs from its
# busybox initramfs, mounts the host's root (read-only, 9p) at /hostroot,
# runs the job's script chrooted there and reports on the serial console:
#
#   IBEMU-QEMU-REPORT (run <nonce>)             the script is over, what
#                                                follows is this file's
#   IBEMU-QEMU-EXIT <status> (run <nonce>)      always last, unless the
#                                                kernel died first
#   IBEMU-QEMU-TIMEOUT (run <nonce>)             the guest watchdog fired
#   IBEMU-QEMU-KERNEL-PROBLEM (run <nonce>) ...  the kernel log shows an oops,
#                                                BUG, warning, lockup...
#
# The nonce keeps a script that prints these words from faking the result.
# /job/env (the per-run part of the initramfs, written by qemu-run.sh) sets
# JOB_NONCE, JOB_DEADLINE, JOB_CWD, JOB_HOSTNAME and the positional
# parameters: the command to run.
# shellcheck disable=SC1091  # /job/env exists only inside the guest
export PATH=/bin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec < /dev/console > /dev/console 2>&1
. /job/env
R=/hostroot
RUN="(run $JOB_NONCE)"
TAINT0=0

# Lines of the kernel log that mean the kernel is no longer trustworthy. WARN
# and hung-task reports count: both usually mean a driver bug. Under `quiet`
# not all of these reach the console, hence the look at the whole log.
PROBLEMS='Oops|BUG:|kernel BUG|general protection fault|KASAN|UBSAN|KFENCE'
PROBLEMS="$PROBLEMS|Call Trace|WARNING:|soft lockup|hard LOCKUP|blocked for more than"
PROBLEMS="$PROBLEMS|rcu_sched detected stall|rcu: INFO|list_add corruption|list_del corruption"
PROBLEMS="$PROBLEMS|refcount_t:|stack-protector|kernel stack overflow|Kernel panic"
# Taint flags with the same meaning: M machine check, B bad page, D died
# (oops), W warning, L soft lockup. O and E (out-of-tree, unsigned) are
# expected of a module under test and ignored.
TAINT_MASK=$(((1 << 4) | (1 << 5) | (1 << 7) | (1 << 9) | (1 << 14)))

say() { echo "qemu-run guest: $*"; }

power_off() {
  # The host reads up to the marker; a moment lets the UART drain first.
  sleep 1
  poweroff -f
  echo o > /proc/sysrq-trigger
  sleep 60
}

# The watchdog and the main path may both get here; the first one reports.
report() { # report STATUS
  if ! mkdir /reporting 2> /dev/null; then
    while :; do sleep 60; done
  fi
  rc=$1
  echo "IBEMU-QEMU-REPORT $RUN"
  dmesg > /dmesg.txt
  # Only the part since the script started is interesting to its author.
  sed -n '/ibemu-qemu-script-start/,$p' /dmesg.txt > /dmesg-run.txt
  taint=$(cat /proc/sys/kernel/tainted)
  new_taint=$(((taint & ~TAINT0) & TAINT_MASK))
  grep -E "$PROBLEMS" /dmesg.txt > /problems.txt
  if [ -s /problems.txt ] || [ "$new_taint" -ne 0 ]; then
    echo "IBEMU-QEMU-KERNEL-PROBLEM $RUN taint=$taint (new problem bits $new_taint)"
    head -n 40 /problems.txt | sed 's/^/  | /'
    echo "----- kernel log since the script started (last 300 lines) -----"
    tail -n 300 /dmesg-run.txt
    echo "----- end of kernel log -----"
  elif [ "$rc" -ne 0 ]; then
    echo "----- kernel log since the script started (last 50 lines) -----"
    tail -n 50 /dmesg-run.txt
    echo "----- end of kernel log -----"
  fi
  if [ -e /timed-out ]; then
    # After the check above: the dump of blocked tasks has call traces of its own.
    echo w > /proc/sysrq-trigger
    echo "----- tasks blocked when the watchdog fired -----"
    dmesg | sed -n '/sysrq: Show Blocked State/,$p' | tail -n 200
    echo "----- end of blocked tasks -----"
    echo "IBEMU-QEMU-TIMEOUT $RUN"
  fi
  echo "IBEMU-QEMU-EXIT $rc $RUN"
  power_off
}

fail() {
  say "$*"
  report 125
}

# Dependencies first, as qemu-run.sh ordered them from modules.dep.
while read -r mod; do
  insmod "/modules/$mod" || say "insmod $mod failed"
done < /modules/order

# The virtio device can show up a little after its driver loads.
tries=0
until mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=loose,ro \
  hostroot "$R" 2> /mount.err; do
  tries=$((tries + 1))
  [ "$tries" -lt 50 ] || fail "cannot mount the host's / over 9p: $(cat /mount.err)"
  sleep 0.1
done

# The share is read-only: everything programs expect to write goes to memory.
mount -t proc proc "$R/proc" || fail "mount proc"
mount -t sysfs sysfs "$R/sys" || fail "mount sysfs"
mount -t debugfs debugfs "$R/sys/kernel/debug" 2> /dev/null
mount -t devtmpfs devtmpfs "$R/dev" || fail "mount devtmpfs"
mkdir -p "$R/dev/pts" "$R/dev/shm"
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts "$R/dev/pts"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$R/dev/shm"
# udev is not there to make these; bash's <(...) needs /dev/fd.
ln -sf /proc/self/fd "$R/dev/fd"
ln -sf /proc/self/fd/0 "$R/dev/stdin"
ln -sf /proc/self/fd/1 "$R/dev/stdout"
ln -sf /proc/self/fd/2 "$R/dev/stderr"
# The kernel runs its modprobe (mount -t overlay, rdma netlink...) in our
# root, not the script's: send it to the host's modprobe and modules.
printf '#!/bin/sh\nexec chroot %s /sbin/modprobe "$@"\n' "$R" > /bin/hostroot-modprobe
chmod 755 /bin/hostroot-modprobe
echo /bin/hostroot-modprobe > /proc/sys/kernel/modprobe
mount -t tmpfs -o mode=755,nosuid,nodev tmpfs "$R/run" || fail "mount /run"
mkdir -p "$R/run/lock" "$R/run/ibemu-qemu" "$R/run/ibemu-qemu-upper"
chmod 1777 "$R/run/lock"
# /tmp and /var/tmp keep the host's files (a checkout may live there) under
# a layer in memory that takes the guest's writes.
for dir in tmp var/tmp; do
  layer=$R/run/ibemu-qemu-upper/$(echo "$dir" | tr / _)
  mkdir -p "$layer/upper" "$layer/work"
  chmod 1777 "$layer/upper"
  mount -t overlay overlay -o "lowerdir=$R/$dir,upperdir=$layer/upper,workdir=$layer/work" \
    "$R/$dir" 2> /dev/null ||
    mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$R/$dir" || fail "mount /$dir"
done
# A script that lives where the guest mounts its own tmpfs travels in the job.
if [ -d /job/files ]; then
  cp -a /job/files/. "$R/run/ibemu-qemu/"
fi
ip link set lo up
[ -z "$JOB_HOSTNAME" ] || hostname "$JOB_HOSTNAME"

TAINT0=$(cat /proc/sys/kernel/tainted)
echo "ibemu-qemu-script-start $RUN" > /dev/kmsg

# shellcheck disable=SC2016  # expanded by the chroot's shell
env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LANG=C.UTF-8 TERM=dumb USER=root LOGNAME=root SHELL=/bin/sh \
  chroot "$R" /bin/sh -c 'cd "$1" 2> /dev/null || cd /; shift; exec "$@"' \
  qemu-run "$JOB_CWD" "$@" < /dev/null &
script_pid=$!

if [ "$JOB_DEADLINE" -gt 0 ]; then
  left=$((JOB_DEADLINE - $(cut -d. -f1 /proc/uptime)))
  [ "$left" -gt 0 ] || left=1
  (
    sleep "$left"
    : > /timed-out
    say "the script ran past the time limit: killing it"
    kill -KILL "$script_pid"
    # A script stuck in the kernel does not die; report without it.
    sleep 5
    report 124
  ) &
fi

wait "$script_pid"
rc=$?
[ ! -e /timed-out ] || rc=124
report "$rc"
