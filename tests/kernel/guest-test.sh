#!/bin/sh
# Runs inside the qemu guest of tests/kernel/run.sh, as root, on the host's
# root filesystem (read-only) with Debian's kernel: installs ibemu the way
# `make install` does, loads ibemu.ko, brings the node up with
# scripts/kernel-node.sh and runs real programs on the kernel's devices with
# no ibemu environment at all. Prints one line per check and a summary.
set -u
BUILD=$1
SRC=$(cd "$(dirname "$0")/../.." && pwd)
. "$SRC/tests/kernel/writable.sh"
KVER=$(uname -r)
PASSED=0
FAILED=0
OUT=/tmp/check.out
unset IBEMU_RUNTIME_DIR XDG_RUNTIME_DIR
IBEMU_SANITIZER_RUNTIME=
[ -f "$BUILD/sanitizers.sh" ] && . "$BUILD/sanitizers.sh"
REPORTS=/tmp/sanitizer-reports
# A sanitized build: once ibemu is installed, its runtime goes first into
# every program that loads the instrumented provider, and its reports are
# checked at the end. Those programs are the system's that link libibverbs
# or librdmacm, listed by tests/kernel/run.sh in $BUILD/verbs-programs:
# each gets a wrapper early in PATH that preloads the runtime, and python3
# gets it where it runs pyverbs ($SANITIZED). ibemu's own programs are
# instrumented. Every other program runs without the runtime: what it would
# find in them is theirs, it breaks some (pkill waits for ever on a futex of
# its own; in opensm it once aborted on opensm's own libraries), and under
# qemu's TCG its start-up costs each process about a second. Not before
# ibemu is installed: DKMS's compiler does not fit the guest's memory with it.
SANITIZED=
sanitize_programs() {
  [ -n "$IBEMU_SANITIZER_RUNTIME" ] || return 0
  mkdir -p "$REPORTS" /run/sanitized-programs
  export ASAN_OPTIONS="log_path=$REPORTS/asan:detect_leaks=0"
  export UBSAN_OPTIONS="log_path=$REPORTS/ubsan:print_stacktrace=1:halt_on_error=1"
  SANITIZED="env LD_PRELOAD=$IBEMU_SANITIZER_RUNTIME"
  while read -r program; do
    # First, before what the caller preloads (stdbuf's libstdbuf).
    printf '#!/bin/sh\nLD_PRELOAD=%s${LD_PRELOAD:+:$LD_PRELOAD} exec %s "$@"\n' \
      "$IBEMU_SANITIZER_RUNTIME" "$program" > "/run/sanitized-programs/${program##*/}"
    chmod +x "/run/sanitized-programs/${program##*/}"
  done < "$BUILD/verbs-programs"
  export PATH=/run/sanitized-programs:$PATH
}
# Without the runtime whatever the caller's environment (opensm, pkill).
UNSANITIZED="env -u LD_PRELOAD"

# check NAME COMMAND...: runs it, prints ok/FAIL, and its output on failure;
# returns the command's success.
# A check that took 5 s or more says how long (where the run's time goes).
check() {
  name=$1
  shift
  started=$(date +%s)
  if "$@" > "$OUT" 2>&1; then
    PASSED=$((PASSED + 1))
    took=$(($(date +%s) - started))
    echo "ok     $name$([ "$took" -lt 5 ] || echo " ($took s)")"
  else
    FAILED=$((FAILED + 1))
    echo "FAIL   $name ($(($(date +%s) - started)) s)"
    sed 's/^/       | /' "$OUT" | tail -n 40
    return 1
  fi
}


contains() { # contains PATTERN COMMAND...
  pattern=$1
  shift
  "$@" > /tmp/contains.out 2>&1
  cat /tmp/contains.out
  grep -Eq "$pattern" /tmp/contains.out
}

# Until a server listens on TCP port 18515 (the pingpongs' and perftest's
# default), which it does once its device is open; under TCG that takes a while.
wait_listening() {
  for _ in $(seq 1 100); do
    ss -ltn | grep -q ':18515 ' && return 0
    sleep 0.2
  done
}

# A server in the background, then its client; both must succeed.
# perftest's bandwidth tools take the CPU's clock rate from a sample whose
# fit they require to be good (r^2 >= 0.9) or they exit 1 with "Can't
# produce a report"; under TCG a descheduled vCPU spoils the sample. Their
# -F accepts any sample: the checks are of exit codes, never of figures.
pair() { # pair SECONDS SERVER_CMD -- CLIENT_CMD
  seconds=$1
  shift
  server=""
  while [ "$1" != "--" ]; do server="$server $1"; shift; done
  shift
  timeout "$seconds" $server > /tmp/server.out 2>&1 &
  spid=$!
  wait_listening
  timeout "$seconds" "$@"
  crc=$?
  wait $spid
  src=$?
  echo "--- server (exit $src):"
  cat /tmp/server.out
  [ $crc -eq 0 ] && [ $src -eq 0 ]
}

port_state() { # port_state DEVICE PORT: the kernel's word for it
  cat "/sys/class/infiniband/$1/ports/$2/state"
}

wait_port() { # wait_port DEVICE PORT STATE
  for _ in $(seq 1 100); do
    port_state "$1" "$2" | grep -q "$3" && return 0
    sleep 0.2
  done
  port_state "$1" "$2"
  return 1
}

# Another RDMA device beside ibemu's, as on a host with a real HCA: Soft-RoCE
# on a dummy Ethernet device. Its driver id is set (netlink reports it), the
# case in which libibverbs walks every provider's match table.
RXE_NETDEV=ibemu-rxe
rxe_up() {
  modprobe rdma_rxe && modprobe dummy &&
    ip link add "$RXE_NETDEV" type dummy &&
    ip link set "$RXE_NETDEV" up &&
    ip addr add 192.0.2.1/24 dev "$RXE_NETDEV" &&
    rdma link add rxe0 type rxe netdev "$RXE_NETDEV" &&
    wait_port rxe0 1 ACTIVE
}
# What a program sees of rxe0; compared before and after ibemu is installed.
rxe_view() {
  ibv_devinfo -v -d rxe0
}
HAVE_RXE=""
if modinfo rdma_rxe > /dev/null 2>&1 && modinfo dummy > /dev/null 2>&1; then
  check "Soft-RoCE's rxe0 comes up (before ibemu is installed)" rxe_up &&
    rxe_view > /tmp/rxe-view.before 2>&1 && HAVE_RXE=yes
fi
# Nothing of ibemu must change what a program sees of rxe0 (diff), and
# perftest must run on it.
rxe_unchanged() {
  rxe_view > /tmp/rxe-view.now 2>&1
  diff /tmp/rxe-view.before /tmp/rxe-view.now
}
rxe_checks() { # rxe_checks WHEN
  [ -n "$HAVE_RXE" ] || return 0
  check "ibv_devices lists rxe0 $1" contains "rxe0" ibv_devices
  check "what ibv_devinfo shows of rxe0 is unchanged $1" rxe_unchanged
  check "ib_write_bw on rxe0 $1" \
    pair 120 ib_write_bw -F -d rxe0 -s 65536 -n 100 -- ib_write_bw -F -d rxe0 -s 65536 -n 100 127.0.0.1
}

# /etc whole: make install adds /etc/ibemu, which the host may not have.
for dir in /usr/local /etc /usr/lib/x86_64-linux-gnu/libibverbs \
  /usr/src /var/lib /lib/modules; do
  writable "$dir"
done
# A sanitized build's run loads the ibemu.ko built on the host instead: its
# programs run slower, and DKMS's compile in the guest would push the run
# past its time limit (the plain build's run, `make test SANITIZE=` or
# `make kernel-test`, covers DKMS).
if command -v dkms > /dev/null && [ -z "$IBEMU_SANITIZER_RUNTIME" ]; then
  # make install-dkms: DKMS builds ibemu.ko for this kernel and installs it.
  check "make install-dkms's steps (scripts/install.sh --dkms)" \
    "$SRC/scripts/install.sh" "$BUILD" --dkms
  IBEMU_KO=""
else
  check "make install's steps (scripts/install.sh)" "$SRC/scripts/install.sh" "$BUILD"
  IBEMU_KO=$BUILD/kernel/ibemu.ko
fi
export PATH=/usr/local/bin:$PATH
# From here on every verbs program loads ibemu's provider.
sanitize_programs
rxe_checks "(ibemu installed, ibemu.ko not loaded)"
check "modules load (ib_core, ib_uverbs, ib_umad, ${IBEMU_KO:-DKMS's }ibemu.ko)" \
  $UNSANITIZED "$SRC/scripts/kernel-node.sh" load $IBEMU_KO
check "no daemon, no device" sh -c '! ls /sys/class/infiniband/ 2>/dev/null | grep -q ibemu'

check "ibemud registers its devices (kernel mode)" "$SRC/scripts/kernel-node.sh" up --no-sm
check "ports INIT before an SM runs (ibstat)" contains "State: Initializing" ibstat ibemu0 1
stdbuf -oL ibv_asyncwatch -d ibemu0 > /tmp/asyncwatch.out 2>&1 &
watch_pid=$!
sleep 1
check "ibemu-sm makes the ports ACTIVE" "$SRC/scripts/kernel-node.sh" up
check "ports ACTIVE (ibstat)" contains "State: Active" ibstat ibemu0 1
check "ibv_asyncwatch sees PORT_ACTIVE" sh -c 'sleep 1; cat /tmp/asyncwatch.out; grep -q "IBV_EVENT_PORT_ACTIVE" /tmp/asyncwatch.out'

check "ibv_devices" contains "ibemu0.*ibemu1|ibemu1.*ibemu0" sh -c 'ibv_devices | tr "\n" " "'
if [ -n "$HAVE_RXE" ]; then
  check "ibv_devices lists rxe0, ibemu0 and ibemu1" sh -c \
    'ibv_devices | tee /tmp/devices.out; for d in rxe0 ibemu0 ibemu1; do grep -qw $d /tmp/devices.out || exit 1; done'
fi
check "ibv_devinfo -v" contains "state:[[:space:]]+PORT_ACTIVE" ibv_devinfo -v -d ibemu0
check "rdma link show" contains "link ibemu0/1 .*state ACTIVE" rdma link show
check "/dev/infiniband holds uverbs and umad" sh -c 'ls /dev/infiniband; ls /dev/infiniband | grep -q uverbs0 && ls /dev/infiniband | grep -q umad0'
check "ibstat" contains "CA type|Port GUID" ibstat ibemu1
check "smpquery through process_mad (local SMA)" contains "NodeType:[.]*Channel Adapter" smpquery -C ibemu0 -P 1 -D nodeinfo 0

lid0=$(cat /sys/class/infiniband/ibemu0/ports/1/lid)
check "smpquery, LID-routed through QP0" contains "LinkState:[.]*Active" \
  smpquery -C ibemu1 -P 1 portinfo "$lid0"
check "perfquery through QP1 (the daemon's PMA)" contains "PortXmitData" \
  perfquery -C ibemu1 -P 1 "$lid0" 1
ibping -S -C ibemu0 -P 1 > /tmp/ibping-server.out 2>&1 &
ibping_pid=$!
sleep 1
check "ibping between two HCAs (a umad agent on each side)" contains "5 received" \
  ibping -C ibemu1 -P 1 -c 5 "$lid0"
kill $ibping_pid 2> /dev/null
wait $ibping_pid 2> /dev/null

check "ibv_rc_pingpong -e (completion channel through the kernel)" \
  pair 60 ibv_rc_pingpong -d ibemu0 -e -n 200 -- ibv_rc_pingpong -d ibemu1 -e -n 200 127.0.0.1
check "ibv_ud_pingpong" \
  pair 60 ibv_ud_pingpong -d ibemu0 -n 200 -- ibv_ud_pingpong -d ibemu1 -n 200 127.0.0.1
check "ib_write_bw" \
  pair 120 ib_write_bw -F -d ibemu0 -s 65536 -n 200 -- ib_write_bw -F -d ibemu1 -s 65536 -n 200 127.0.0.1
check "ib_send_lat" \
  pair 120 ib_send_lat -d ibemu0 -n 200 -- ib_send_lat -d ibemu1 -n 200 127.0.0.1
rxe_checks "(ibemu.ko loaded, its ports ACTIVE)"

# Every RDMA consumer module of the kernel loads beside ibemu.ko with no
# warning (the guest's report fails the run on any WARN, BUG or oops), and
# one that cannot work on ibemu yet says so instead of failing silently.
ULP_MODULES="ib_cm iw_cm rdma_cm rdma_ucm ib_ipoib ib_srp ib_srpt ib_iser ib_isert
  rpcrdma nvme_rdma nvmet_rdma rds_rdma smc 9pnet_rdma"
load_ulps() {
  loaded=""
  for m in $ULP_MODULES; do
    modinfo "$m" > /dev/null 2>&1 || continue
    $UNSANITIZED modprobe "$m" || { echo "modprobe $m failed"; return 1; }
    loaded="$loaded $m"
  done
  echo "loaded:$loaded"
  sleep 2
  dmesg | sed -n '/ibemu-qemu-script-start/,$p' | grep -E "$KERNEL_PROBLEMS" && return 1
  return 0
}
KERNEL_PROBLEMS='Oops|BUG:|WARNING:|Call Trace|general protection fault'
# Nothing the kernel would call a problem since the test started.
no_kernel_problems() {
  ! dmesg | sed -n '/ibemu-qemu-script-start/,$p' | grep -E "$KERNEL_PROBLEMS"
}
# IPoIB's netdevs (type 32, ARPHRD_INFINIBAND): ibemu's are the only HCAs.
ipoib_names() {
  for n in /sys/class/net/*; do
    [ "$(cat "$n/type")" = 32 ] && basename "$n"
  done
}
ipoib_netdevs() {
  ip -br link show | grep '^ib'
  [ "$(ipoib_names | wc -l)" -eq 4 ] && no_kernel_problems
}
# The records the daemon has read from the data channel so far.
data_records() {
  ibemu --runtime-dir /run/ibemu status --json |
    python3 -c 'import json,sys; c=json.load(sys.stdin)["kernel"]["data_channel"]; print(c["records"] if not c["malformed"] else -1)'
}
ipoib_up() {
  for n in $(ipoib_names); do ip link set "$n" up || return 1; done
  sleep 3
  ip -br link show | grep '^ib'
  for n in $(ipoib_names); do ip link show "$n" | grep -q ',UP' || return 1; done
  no_kernel_problems
}
# Its receives (posted when the interface came up) and, once the SM has
# answered the broadcast group's join, its attachment: records the daemon
# read, none malformed.
ipoib_records() {
  after=$(data_records)
  echo "data channel records: $1 before the interfaces came up, $after after"
  [ "$1" -ge 0 ] && [ "$after" -gt "$1" ]
}
# Down flushes the receives (through the engine, or the module when no
# daemon is attached); up posts them again.
ipoib_down_up() {
  ip link set ib0 down && ip link set ib0 up && sleep 2 &&
    ip link show ib0 | grep -q ',UP' && no_kernel_problems
}
check "the kernel's RDMA consumer modules load beside ibemu.ko" load_ulps
# ib_srpt sets IsDeviceManagementSupported on every port it attaches to,
# rxe0's included: what rxe0 shows from here on is compared with this.
[ -z "$HAVE_RXE" ] || rxe_view > /tmp/rxe-view.before 2>&1
# IPoIB's datagram mode on ibemu's UD QPs and kernel CQs: the module checks
# the verbs and hands the daemon its objects and WQEs over the data channel.
# (Pings need the daemon's engine to carry them out.)
if lsmod | grep -q '^ib_ipoib '; then
  check "IPoIB creates ib0..ib3 on ibemu's ports" ipoib_netdevs
  before=$(data_records)
  check "IPoIB's interfaces come up (administratively: the carrier waits for the broadcast join)" ipoib_up
  check "the daemon reads IPoIB's objects and receives (data channel records)" \
    ipoib_records "$before"
  check "IPoIB's interfaces down and up again" ipoib_down_up
fi
# IP over ibemu's engine. The SM defines the broadcast group IPoIB joins;
# each interface gets its port's address (kernel-node.sh ipoib); ibemu1
# port 1's moves into a network namespace, so that traffic between it and
# ib0 crosses the fabric instead of the host's loopback.
ipoib_carrier() {
  ns=$1
  for _ in $(seq 1 40); do
    missing=0
    for n in $(ip $ns -br link show | awk '/^ib/ {print $1}'); do
      ip $ns link show "$n" | grep -q LOWER_UP || missing=1
    done
    [ $missing = 0 ] && return 0
    sleep 1
  done
  ip $ns -br link show | grep '^ib'
  dmesg | grep -E '\] ib[0-9]+: ' | tail -5
  return 1
}
ipoib_addresses() {
  ipoib_carrier "" && "$SRC/scripts/kernel-node.sh" ipoib > /tmp/ipoib-addresses &&
    cat /tmp/ipoib-addresses
}
ipoib_namespace() {
  peer=$(awk '/[(]ibemu1 port 1[)]/ {sub(":", "", $1); print $1 " " $2}' /tmp/ipoib-addresses)
  set -- $peer
  [ -n "${1:-}" ] && ip netns add ibpeer && ip link set "$1" netns ibpeer &&
    ip -n ibpeer addr add "$2" dev "$1" && ip -n ibpeer link set lo up &&
    ip -n ibpeer link set "$1" up && ipoib_carrier "-n ibpeer" && ip -n ibpeer -br addr
}
PEER_IP=10.73.0.3
# A TCP stream of 4 MiB into the namespace, its digest compared. The client
# tries again while the server (started in the background) is not yet
# listening, which takes more than a second on a loaded machine.
ipoib_tcp() {
  ip netns exec ibpeer /usr/bin/python3 -c '
import hashlib, socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("'$PEER_IP'", 7999)); s.listen(1); s.settimeout(120)
c, _ = s.accept(); h = hashlib.sha256(); n = 0
while True:
    b = c.recv(65536)
    if not b: break
    h.update(b); n += len(b)
c.sendall(h.hexdigest().encode()); c.close()' &
  server=$!
  sleep 1
  /usr/bin/python3 -c '
import hashlib, os, socket, sys, time
data = os.urandom(4 << 20)
for attempt in range(60):
    try:
        c = socket.create_connection(("'$PEER_IP'", 7999), timeout=120)
        break
    except ConnectionRefusedError:
        time.sleep(0.5)
else:
    sys.exit("the server never listened")
c.sendall(data); c.shutdown(socket.SHUT_WR)
got = c.recv(64).decode()
print("4 MiB over TCP, digest", "matches" if got == hashlib.sha256(data).hexdigest() else "differs")
sys.exit(got != hashlib.sha256(data).hexdigest())'
  rc=$?
  wait $server
  [ $rc -eq 0 ] && no_kernel_problems
}
# What the plane carried: kernel QPs, and payload through the module's copies.
plane_counts() {
  ibemu --runtime-dir /run/ibemu status --json | /usr/bin/python3 -c '
import json, sys
k = json.load(sys.stdin)["kernel"]
p, c = k.get("plane", {}), k["data_channel"]
print("plane:", json.dumps(p)); print("data channel:", json.dumps(c))
qps = sum(d["qps"] for d in p.get("devices", []))
sys.exit(0 if p.get("serving") and qps >= 4 and c["copies"] > 0 and not c["copy_errors"] else 1)'
}
if lsmod | grep -q '^ib_ipoib '; then
  check "IPoIB joins the broadcast group and gets its ports' addresses" ipoib_addresses
  check "ibemu1 port 1's interface in a network namespace" ipoib_namespace
  check "ping over IPoIB into the namespace" ping -c 5 -W 5 "$PEER_IP"
  check "ping over IPoIB out of the namespace" ip netns exec ibpeer ping -c 5 -W 5 10.73.0.1
  check "ping -s 3000 over IPoIB (IP fragments)" ping -c 3 -W 5 -s 3000 "$PEER_IP"
  check "ARP over IPoIB resolved the peer" sh -c "ip neigh show $PEER_IP | grep -q lladdr"
  check "a TCP stream over IPoIB" ipoib_tcp
  check "the daemon's kernel plane carried it" plane_counts
fi
# IPoIB's connected mode: each interface's SRQ (256 WQEs of 16 pages) and
# an RC QP each way per peer, connected through ib_cm; MTU 65520 (what 16
# SGEs of an SRQ WQE hold), 60000-byte pings in one message each, TCP; then
# datagram mode again, where the MTU falls back to the broadcast group's.
plane_srqs() {
  ibemu --runtime-dir /run/ibemu status --json | /usr/bin/python3 -c '
import json, sys
p = json.load(sys.stdin)["kernel"].get("plane", {})
print(" ".join("%s: %d SRQs, %d QPs" % (d["device"], d["srqs"], d["qps"]) for d in p.get("devices", [])))
sys.exit(0 if all(d["srqs"] >= 1 for d in p.get("devices", [])) else 1)'
}
ipoib_mode() {
  echo "$1" > /sys/class/net/ib0/mode &&
    ip netns exec ibpeer sh -c "echo $1 > /sys/class/net/ib2/mode" &&
    grep -q "$1" /sys/class/net/ib0/mode && ip netns exec ibpeer grep -q "$1" /sys/class/net/ib2/mode
}
ipoib_connected() {
  ipoib_mode connected && ip link set ib0 mtu 65520 && ip -n ibpeer link set ib2 mtu 65520 &&
    ping -c 3 -W 20 -s 60000 "$PEER_IP" && plane_srqs && no_kernel_problems
}
ipoib_datagram() {
  ipoib_mode datagram && ip link show ib0 | grep -q 'mtu 2044' && ping -c 3 -W 5 "$PEER_IP" &&
    no_kernel_problems
}
if lsmod | grep -q '^ib_ipoib ' && ip netns list | grep -q ibpeer; then
  check "IPoIB connected mode on both ends (SRQ, RC QPs): MTU 65520, ping -s 60000" ipoib_connected
  check "a TCP stream over IPoIB's connected mode" ipoib_tcp
  check "IPoIB back to datagram mode: MTU 2044, ping" ipoib_datagram
fi
# The kernel's rdma_cm over IPoIB's addresses, with Debian's librdmacm and
# no ibemu environment: ib_cm's MADs set up the connection, the QPs are the
# provider's. Servers run in the namespace, clients outside, so that the CM's
# messages cross the fabric. READY says when the server is ready: "listen"
# for an rdma_cm listener of the namespace, else a pattern of its output.
# SERVER_NS runs the server (a namespace's, or empty for this one's).
SERVER_NS="ip netns exec ibpeer"
ns_ready() { # ns_ready READY
  for _ in $(seq 1 150); do
    if [ "$1" = listen ]; then
      # rdma_cm shows LISTEN before ib_cm listens: a moment more.
      $SERVER_NS rdma res show cm_id | grep -q 'state LISTEN' && sleep 1 && return 0
    else
      grep -q "$1" /tmp/server.out && return 0
    fi
    sleep 0.2
  done
  echo "the server did not get ready ($1)"
}
ns_pair() { # ns_pair SECONDS READY SERVER_CMD -- CLIENT_CMD
  seconds=$1
  ready=$2
  shift 2
  server=""
  while [ "$1" != "--" ]; do server="$server $1"; shift; done
  shift
  : > /tmp/server.out
  # Line-buffered: READY may be a line the server prints into a file.
  timeout "$seconds" $SERVER_NS stdbuf -oL $server > /tmp/server.out 2>&1 &
  spid=$!
  ns_ready "$ready"
  timeout "$seconds" "$@"
  crc=$?
  wait $spid
  src=$?
  echo "--- server (exit $src):"
  cat /tmp/server.out
  [ $crc -eq 0 ] && [ $src -eq 0 ]
}
# Where rdma-core's tests look for a device's IP address.
device_net() {
  ls /sys/class/infiniband/ibemu0/device/net/ /sys/class/infiniband/ibemu1/device/net/ &&
    [ -e /sys/class/infiniband/ibemu0/device/net/ib0 ] &&
    [ -e /sys/class/infiniband/ibemu1/device/net/ib3 ]
}
if ip netns list | grep -q ibpeer; then
  check "each device's IPoIB interfaces under its sysfs device (device/net)" device_net
  check "rping through the kernel's rdma_cm" \
    ns_pair 60 listen rping -s -a "$PEER_IP" -C 10 -- rping -c -a "$PEER_IP" -C 10 -v
  check "ucmatose (RC, 4 connections)" \
    ns_pair 60 listen ucmatose -c 4 -C 10 -- ucmatose -s "$PEER_IP" -c 4 -C 10
  check "udaddy (UD, SIDR)" ns_pair 60 listen udaddy -C 10 -- udaddy -s "$PEER_IP" -C 10
  check "mckey (a multicast group joined through rdma_cm and the SA)" \
    ns_pair 60 "receiving data" mckey -m 239.1.2.3 -b "$PEER_IP" -C 10 -- \
    mckey -m 239.1.2.3 -b 10.73.0.1 -s -C 10
  check "ib_send_bw -R (perftest over rdma_cm)" \
    ns_pair 120 listen ib_send_bw -R -F -n 100 -- ib_send_bw -R -F -n 100 "$PEER_IP"
fi
# rdma-core's own rdma_cm tests, from its release's python3-pyverbs: they
# take ibemu0's address from device/net (ib0's) and connect to it, through
# the kernel's rdma_cm; none may be skipped for want of an address.
RDMA_CORE_TESTS=/usr/share/doc/rdma-core/tests
pyverbs_rdmacm() {
  rm -rf /tmp/rdma-core-tests && cp -r "$RDMA_CORE_TESTS" /tmp/rdma-core-tests &&
    find /tmp/rdma-core-tests -name '*.gz' -exec gunzip -f {} + || return 1
  timeout 300 $SANITIZED /usr/bin/python3 "$SRC/tests/portability/suite_run.py" /tmp/rdma-core-tests \
    "$SRC/tests/portability/expected-failures" --dev ibemu0 -v test_rdmacm > /tmp/suite.out 2>&1
  rc=$?
  grep -E ' \.\.\. |^suite-' /tmp/suite.out
  [ $rc -eq 0 ] && grep -q '^suite-skipped: 0$' /tmp/suite.out &&
    ! grep -q '^suite-passed: 0$' /tmp/suite.out
}
if ip netns list | grep -q ibpeer && [ -f "$RDMA_CORE_TESTS/test_rdmacm.py" ] &&
  $SANITIZED /usr/bin/python3 -c 'import pyverbs' 2> /dev/null; then
  check "rdma-core's rdma_cm tests (pyverbs) on ib0's address, none skipped" pyverbs_rdmacm
fi
# Storage over RDMA (tests/kernel/storage.sh): NVMe over Fabrics on ib0's
# address, looped back through ibemu0 port 1; NFS mounted from the
# namespace, across the fabric.
. "$SRC/tests/kernel/storage.sh"
if ip -br addr show ib0 2> /dev/null | grep -q 10.73.0.1 && modinfo nvmet_rdma > /dev/null 2>&1 &&
  modinfo brd > /dev/null 2>&1; then
  check "NVMe over RDMA: nvmet-rdma serves a RAM disk on ib0, nvme-rdma connects, 4 MiB written and read back" \
    nvme_rdma 10.73.0.1
fi
if ip netns list | grep -q ibpeer && modinfo nfsd > /dev/null 2>&1 &&
  modinfo rpcrdma > /dev/null 2>&1; then
  if command -v rpc.nfsd > /dev/null && command -v mount.nfs4 > /dev/null; then
    check "NFS over RDMA: nfsd on rdma 20049, a mount -o rdma from the namespace, 4 MiB written and read back" \
      nfs_rdma ibpeer 10.73.0.1
  else
    echo "skip   NFS over RDMA: nfs-kernel-server and nfs-common are not installed (make deps)"
  fi
fi

# A kernel consumer's RC QP (tests/kernel/kverbs): ibemu_kverbs_test.ko
# creates it on ibemu0 with a CQ and a kernel buffer; kverbs_peer, a verbs
# program on ibemu1, connects to it through the module's debugfs file and
# runs SENDs, RDMA WRITE and READ, atomics, a bad rkey, ib_drain_qp and fast
# registration (the kernel's REG_MR, WRITE and READ through its rkey, then
# LOCAL_INV or the program's SEND with Invalidate and a remote access error);
# the same with a UC QP in its place, and with an RC QP receiving through an
# SRQ.
KVERBS_KO=$BUILD/kverbs/ibemu_kverbs_test.ko
KVERBS_CTL=/sys/kernel/debug/ibemu_kverbs/ctl
kverbs_load() {
  insmod "$KVERBS_KO" && cat "$KVERBS_CTL" && grep -q "^state RESET" "$KVERBS_CTL"
}
kverbs_peer() {
  "$BUILD/bin/kverbs_peer" -d ibemu1 "$@" && no_kernel_problems
}
# The daemon gone, the connected QP goes to ERR with QP_FATAL and its
# posted receive flushes in the module (design 6.8).
kverbs_lost() {
  echo "poll 1 10000" > "$KVERBS_CTL" && cat "$KVERBS_CTL" > /tmp/kverbs.out
  cat /tmp/kverbs.out
  grep -q "^state ERR" /tmp/kverbs.out && grep -q "^events .*QP fatal error" /tmp/kverbs.out &&
    grep -q "^wc RECV status 5 " /tmp/kverbs.out
}
# The daemon restarted under a kernel QP on an SRQ (kverbs_peer -s -k
# first): reconnected, a SEND lands in the SRQ's replayed WQE.
kverbs_srq_replayed() {
  "$SRC/scripts/kernel-node.sh" down && "$SRC/scripts/kernel-node.sh" up || return 1
  for _ in $(seq 60); do
    ibstat ibemu1 1 | grep -q 'State: Active' && break
    sleep 1
  done
  kverbs_peer -s -r
}
kverbs_unload() {
  rmmod ibemu_kverbs_test && ! lsmod | grep -q '^ibemu_kverbs_test ' && no_kernel_problems
}
HAVE_KVERBS=""
if [ -f "$KVERBS_KO" ] && [ -x "$BUILD/bin/kverbs_peer" ]; then
  check "a kernel consumer's RC QP, CQ and buffer on ibemu0 (ibemu_kverbs_test.ko)" kverbs_load &&
    HAVE_KVERBS=yes
fi
if [ -n "$HAVE_KVERBS" ]; then
  check "kernel RC QP <-> verbs program: SENDs, RDMA WRITE/READ, atomics, bad rkey, drain, FRWR" \
    kverbs_peer -n 3
  check "kernel UC QP <-> verbs program: SENDs, RDMA WRITEs (FRWR too), READ and atomics refused, drain" \
    kverbs_peer -u -n 2
  check "kernel RC QP on an SRQ: SENDs in post order, the limit event once, LAST_WQE_REACHED" \
    kverbs_peer -s
  check "the kernel RC QP connected again, a receive posted (for the daemon's loss)" \
    kverbs_peer -n 1 -k
fi
# What the daemon's kernel plane holds of consumers' FRWR MRs (ibemu status).
plane_frwr_mrs() { # the FRWR MRs the kernel plane holds for ibemu0
  ibemu --runtime-dir /run/ibemu status --json | /usr/bin/python3 -c '
import json, sys
devices = json.load(sys.stdin)["kernel"].get("plane", {}).get("devices", [])
print(sum(d["fast_reg_mrs"] for d in devices if d["device"] == "ibemu0"))'
}
wait_plane_frwr_mrs() { # until the plane holds $1 FRWR MRs of ibemu0 (10 s at most)
  for _ in $(seq 1 20); do
    [ "$(plane_frwr_mrs)" = "$1" ] && return 0
    sleep 0.5
  done
  echo "the kernel plane holds $(plane_frwr_mrs) FRWR MRs of ibemu0, not $1"
  return 1
}
# SRP: an LIO target of ib_srpt on ibemu1 port 1 (configfs, a fileio
# backstore on tmpfs, the initiator's port GUID in its ACL), and ib_srp on
# ibemu0 port 1 logging in with add_target: the SCSI
# disk written and read back, the remote port deleted, the target removed.
# ib_srpt listens on a service ID made of srpt_service_guid, by default the
# node GUID of the first HCA, and ibemu's GUIDs begin with 0x02, the CM's
# range of assigned service IDs (ib_cm_listen refuses them): it is reloaded
# with a service GUID outside it. Once with fast registration (ib_srp's
# default on an HCA with MEM_MGT_EXTENSIONS), once with never_register=1
# (the unsafe global rkey).
SRP_GUID=0011223344556677
SRP_CFG=/sys/kernel/config/target
SRP_TPG=""
srp_target() {
  gid=$(cat /sys/class/infiniband/ibemu1/ports/1/gids/0)
  wwn=$(echo "$gid" | cut -d: -f5-8)
  initiator=$(cut -d: -f5-8 /sys/class/infiniband/ibemu0/ports/1/gids/0)
  SRP_TPG=$SRP_CFG/srpt/$wwn/tpg_1
  $UNSANITIZED modprobe -r ib_srpt && $UNSANITIZED modprobe target_core_file &&
    $UNSANITIZED modprobe sd_mod &&
    $UNSANITIZED modprobe ib_srpt srpt_service_guid=$SRP_GUID || return 1
  grep -q configfs /proc/mounts || mount -t configfs none /sys/kernel/config
  backstore=$SRP_CFG/core/fileio_0/srp0
  mkdir -p "$SRP_CFG/srpt" "$backstore" &&
    echo "fd_dev_name=/run/srp0.img,fd_dev_size=4194304" > "$backstore/control" &&
    echo 1 > "$backstore/enable" &&
    mkdir "$SRP_CFG/srpt/$wwn" "$SRP_TPG" "$SRP_TPG/lun/lun_0" &&
    ln -s "$backstore" "$SRP_TPG/lun/lun_0/srp0" &&
    mkdir "$SRP_TPG/acls/$initiator" "$SRP_TPG/acls/$initiator/lun_0" &&
    ln -s "$SRP_TPG/lun/lun_0" "$SRP_TPG/acls/$initiator/lun_0/lun" || return 1
  # Not use_srq: Debian 6.1's ib_srpt then warns in srpt_cache_put() when a
  # channel is released (it puts a receive buffer cache it never got).
  echo 1 > "$SRP_TPG/enable" && no_kernel_problems
}
srp_disk() {
  dgid=$(tr -d : < /sys/class/infiniband/ibemu1/ports/1/gids/0)
  others=$(plane_frwr_mrs) # other consumers' (ibemu_kverbs_test's)
  $UNSANITIZED modprobe -r ib_srp && $UNSANITIZED modprobe ib_srp "$@" || return 1
  echo "id_ext=$SRP_GUID,ioc_guid=$SRP_GUID,dgid=$dgid,pkey=ffff,service_id=$SRP_GUID" \
    > /sys/class/infiniband_srp/srp-ibemu0-1/add_target || return 1
  disk=""
  for _ in $(seq 60); do
    disk=$(ls /sys/block | grep '^sd' | head -1)
    [ -n "$disk" ] && break
    sleep 1
  done
  [ -n "$disk" ] || { echo "no SCSI disk"; return 1; }
  echo "SRP disk $disk: $(cat /sys/block/$disk/size) sectors"
  # A fast registration per I/O unless never_register: the plane holds
  # ib_srp's FRWR MRs while the session lasts.
  plane_frwr=$(($(plane_frwr_mrs) - others))
  echo "ib_srp's FRWR MRs of ibemu0 in the plane: $plane_frwr"
  head -c 4194304 /dev/urandom > /tmp/srp.out &&
    dd if=/tmp/srp.out of="/dev/$disk" bs=64k oflag=direct 2> /dev/null &&
    dd if="/dev/$disk" of=/tmp/srp.in bs=64k count=64 iflag=direct 2> /dev/null &&
    cmp /tmp/srp.out /tmp/srp.in || return 1
  for port in /sys/class/srp_remote_ports/*; do echo 1 > "$port/delete"; done
  for _ in $(seq 30); do
    ls /sys/block | grep -q '^sd' || break
    sleep 1
  done
  ! ls /sys/block | grep -q '^sd' && no_kernel_problems || return 1
  case "$*" in
    *never_register=1*) [ "$plane_frwr" -eq 0 ] ;;
    *) [ "$plane_frwr" -gt 0 ] ;;
  esac
}
srp_target_removed() {
  initiator=$(cut -d: -f5-8 /sys/class/infiniband/ibemu0/ports/1/gids/0)
  echo 0 > "$SRP_TPG/enable" && rm "$SRP_TPG/acls/$initiator/lun_0/lun" &&
    rmdir "$SRP_TPG/acls/$initiator/lun_0" "$SRP_TPG/acls/$initiator" &&
    rm "$SRP_TPG/lun/lun_0/srp0" && rmdir "$SRP_TPG/lun/lun_0" "$SRP_TPG" &&
    rmdir "$(dirname "$SRP_TPG")" "$SRP_CFG/core/fileio_0/srp0" &&
    $UNSANITIZED modprobe -r ib_srp && $UNSANITIZED modprobe ib_srp && no_kernel_problems
}
if lsmod | grep -q '^ib_srpt ' && lsmod | grep -q '^ib_srp ' &&
  modinfo target_core_file > /dev/null 2>&1; then
  if check "an SRP target (ib_srpt, LIO through configfs) on ibemu1 port 1" srp_target; then
    check "SRP over ibemu (fast registration): a 4 MiB disk written and read back" srp_disk
    check "SRP with never_register=1 (the unsafe global rkey): written and read back" \
      srp_disk never_register=1
    check "the SRP target removed" srp_target_removed
  fi
fi

# Fast registration (design 6.6) as far as it goes without a connection: a
# consumer of the test's own (tests/kernel/kfrwr) finds MEM_MGT_EXTENSIONS
# advertised, allocates, maps and deregisters FRWR MRs on ibemu0 and keeps
# one, which the daemon's kernel plane holds (ALLOC_MR) until the consumer
# goes (DEREG_MR), and gets again after a restart (the replay).
FRWR_RESULT=/sys/kernel/debug/ibemu_frwr_test/result
# FRWR_BASE: the FRWR MRs other consumers hold (ibemu_kverbs_test's).
frwr_verbs() {
  insmod "$BUILD/kfrwr/ibemu_frwr_test.ko" || return 1
  cat "$FRWR_RESULT"
  grep -q '^ok ' "$FRWR_RESULT" && ! grep -q '^FAIL' "$FRWR_RESULT" &&
    wait_plane_frwr_mrs $((FRWR_BASE + 1)) && no_kernel_problems
}
if [ -e "$BUILD/kfrwr/ibemu_frwr_test.ko" ]; then
  FRWR_BASE=$(plane_frwr_mrs)
  check "a kernel consumer's FRWR MRs (alloc, map, dereg; one held by the daemon)" frwr_verbs
fi

check "port counters in sysfs (PMA through process_mad)" \
  sh -c 'cat /sys/class/infiniband/ibemu0/ports/1/counters/port_xmit_packets; \
         [ "$(cat /sys/class/infiniband/ibemu0/ports/1/counters/port_xmit_packets)" -gt 0 ]'

# Any user's programs, as on an HCA (ib_uverbs makes uverbsN 0666); only
# root changes the fabric.
nobody="setpriv --reuid=65534 --regid=65534 --clear-groups"
check "a user's program sees the devices" contains "PORT_ACTIVE" $nobody ibv_devinfo -d ibemu0
check "a user's pingpong" pair 60 $nobody ibv_rc_pingpong -d ibemu0 -n 50 -- \
  $nobody ibv_rc_pingpong -d ibemu1 -n 50 127.0.0.1
check "a user cannot change the fabric" contains "daemon's owner or root" \
  sh -c "! $nobody ibemu --runtime-dir /run/ibemu fault set --drop 50"

timeout 60 ibv_rc_pingpong -d ibemu0 > /dev/null 2>&1 &
holder=$!
wait_listening
check "rmmod refused while a program holds a device" sh -c '! rmmod ibemu'
kill $holder 2>/dev/null
wait $holder 2>/dev/null

check "bad control messages get EINVAL (fuzzed)" "$BUILD/bin/ibemu-ctl-fuzz" 20000
# The data channel on a control file of the fuzzer's own (ibemud holds its
# own control file): OPEN_DATA, EBUSY for a second, EOF and ENODEV once
# either file closes; bad completions and copies; closes racing its use.
check "the data channel: its life, bad completions and copies, closes under use (fuzzed)" \
  "$BUILD/bin/ibemu-ctl-fuzz" --data 20000
# And on ibemud's control file itself, borrowed with pidfd_getfd: a channel
# opens (the daemon holds none yet), or EBUSY once the daemon holds one.
daemon_data_channel() {
  pid=$($UNSANITIZED pgrep -o -x ibemud) || { echo "no ibemud"; return 1; }
  "$BUILD/bin/ibemu-ctl-fuzz" --daemon "$pid"
}
check "ibemud's control file takes IBEMU_IOC_OPEN_DATA" daemon_data_channel

check "the daemon stopping turns the ports DOWN" sh -c \
  "$SRC/scripts/kernel-node.sh down && sleep 1 && cat /sys/class/infiniband/ibemu0/ports/1/state | grep -q DOWN"
check "ibv_asyncwatch sees PORT_ERR" sh -c 'sleep 1; cat /tmp/asyncwatch.out; grep -q "IBV_EVENT_PORT_ERR" /tmp/asyncwatch.out'
if [ -n "$HAVE_KVERBS" ]; then
  check "the daemon gone, the kernel RC QP goes to ERR (QP_FATAL) and its receive flushes" kverbs_lost
fi
kill $watch_pid 2>/dev/null
wait $watch_pid 2>/dev/null

# With the daemon gone, a stand-in adopts ibemu0, gets IPoIB's receives
# replayed and completes 8 with an error: the module matches each token to
# its WQE, fills the work completion and fires the armed CQ, and IPoIB's
# NAPI poll logs each failed receive. The same CQEs again are stale: dropped.
FAILED_RECV='failed recv event \(status=1, .*vend_err 0xbe17\)'
stand_in() {
  before=$(dmesg | grep -cE "$FAILED_RECV")
  "$BUILD/bin/ibemu-ctl-fuzz" --stand-in ibemu0 8
  rc=$?
  sleep 1
  after=$(dmesg | grep -cE "$FAILED_RECV")
  echo "stand-in exit $rc; IPoIB logged $((after - before)) failed receives"
  [ "$rc" -eq 0 ] && [ $((after - before)) -eq 8 ] && no_kernel_problems
}
if lsmod | grep -q '^ib_ipoib '; then
  check "completions reach IPoIB (a stand-in daemon completes 8 replayed receives)" stand_in
fi

check "a restarted daemon adopts the devices" sh -c \
  "$SRC/scripts/kernel-node.sh up && ibstat ibemu0 1 | grep -q 'State: Active'"
# The restarted daemon's engine is empty: the module replays the kernel's
# CQs, MRs, QPs (driven to their states), groups and receives.
ipoib_replayed() {
  sleep 2
  ip -br link show | grep '^ib'
  records=$(data_records)
  echo "data channel records after the restart: $records"
  ip link show ib0 > /dev/null && [ "$records" -gt 0 ] && no_kernel_problems
}
# The consumer's FRWR MR among them (free: a registration dies with its
# engine); it goes with the consumer.
frwr_replayed() {
  wait_plane_frwr_mrs $((FRWR_BASE + 1)) && rmmod ibemu_frwr_test &&
    wait_plane_frwr_mrs "$FRWR_BASE" && no_kernel_problems
}
if lsmod | grep -q '^ibemu_frwr_test '; then
  check "the FRWR MR is replayed to the new daemon, and deregistered" frwr_replayed
fi
if lsmod | grep -q '^ib_ipoib '; then
  check "IPoIB keeps ib0 across the restart (replayed to the new daemon)" ipoib_replayed
  if ip netns list | grep -q ibpeer; then
    # The ports went DOWN with the daemon; IPoIB joins again once they are
    # ACTIVE, and its replayed QPs carry the ping.
    check "ping over IPoIB after the daemon's restart" sh -c \
      "ip netns exec ibpeer true && sleep 5 && ping -c 3 -w 60 $PEER_IP"
  fi
fi
if [ -n "$HAVE_KVERBS" ]; then
  # Replayed in ERR; the connection starts again from RESET.
  check "the kernel RC QP after the daemon's restart: reconnected, the whole exchange again" \
    kverbs_peer -n 1
  # An SRQ with a WQE posted across another restart: the QP on it goes to
  # ERR (QP_FATAL, LAST_WQE_REACHED), the SRQ and its WQE are replayed, and
  # once reconnected a SEND lands in that WQE.
  check "the kernel QP on an SRQ connected, one WQE left on the SRQ" kverbs_peer -s -k
  check "the SRQ and its WQE replayed to a restarted daemon" kverbs_srq_replayed
fi
check "ibv_rc_pingpong after the restart" \
  pair 60 ibv_rc_pingpong -d ibemu0 -n 50 -- ibv_rc_pingpong -d ibemu1 -n 50 127.0.0.1
check "kill -9 of ibemud turns the ports DOWN" sh -c \
  "$UNSANITIZED pkill -9 -x ibemud && sleep 1 && grep -q DOWN /sys/class/infiniband/ibemu0/ports/1/state"
"$SRC/scripts/kernel-node.sh" down > /dev/null 2>&1 # the SM that outlived it

# Debian's opensm as the subnet manager, through umad and the kernel's QP0.
run_opensm() {
  "$SRC/scripts/kernel-node.sh" up --no-sm > /dev/null || return 1
  guid=0x$(cut -d: -f5- /sys/class/infiniband/ibemu0/ports/1/gids/0 | tr -d :)
  mkdir -p /tmp/opensm
  # Partition 1: ibemu0 port 1 a full member, the other ports limited.
  printf 'Default=0x7fff : ALL=full ;\np1=0x0001 : ALL=limited, %s=full ;\n' "$guid" \
    > /tmp/opensm/partitions.conf
  # -o: one sweep, then exit; the cache and logs go where the guest can write.
  OSM_CACHE_DIR=/tmp/opensm timeout 120 $UNSANITIZED opensm -g "$guid" -o -f /tmp/opensm/opensm.log \
    -P /tmp/opensm/partitions.conf --dump_files_dir /tmp/opensm > /dev/null
  grep -E "SUBNET UP|ERR" /tmp/opensm/opensm.log
  ibstat ibemu1 1 | grep -E "State|lid"
  ibstat ibemu1 1 | grep -q "State: Active" &&
    ! grep -q "ERR" /tmp/opensm/opensm.log # issm (modify_port) and P_Key tables included
}
# The kernel's P_Key cache (sysfs pkeys/N) holds what opensm set.
opensm_partitions() {
  cat /sys/class/infiniband/ibemu0/ports/1/pkeys/1 /sys/class/infiniband/ibemu1/ports/1/pkeys/1
  grep -qx 0x8001 /sys/class/infiniband/ibemu0/ports/1/pkeys/1 &&
    grep -qx 0x0001 /sys/class/infiniband/ibemu1/ports/1/pkeys/1
}
if command -v opensm > /dev/null; then
  check "opensm brings the ports ACTIVE through umad" run_opensm
  check "opensm's partitions reach the kernel's P_Key tables" opensm_partitions
  check "ibv_rc_pingpong on opensm's subnet" \
    pair 60 ibv_rc_pingpong -d ibemu0 -n 50 -- ibv_rc_pingpong -d ibemu1 -n 50 127.0.0.1
  "$SRC/scripts/kernel-node.sh" down > /dev/null 2>&1
fi
# Across hosts: a second ibemud, in no-kernel mode, in a network namespace
# linked to the kernel-mode daemon over a veth pair (the layout of
# tests/integration/hosts.py); kverbs_peer runs there under `ibemu run`
# against the kernel RC QP. `ip netns exec` mounts a sysfs of its own, so
# the module's file is reached through a second debugfs mount.
HOSTB_RT=/tmp/ibemu-hostb
hostb() { ip netns exec hostb "$@"; }
cross_host_up() {
  ip netns add hostb && ip link add kvlink type veth peer name eth0 netns hostb &&
    ip addr add 10.232.0.1/24 dev kvlink && ip link set kvlink up &&
    ip -n hostb addr add 10.232.0.2/24 dev eth0 && ip -n hostb link set eth0 up &&
    ip -n hostb link set lo up || return 1
  echo '{"kernel": "on", "fabric": {"bind": "10.232.0.1", "peers": ["10.232.0.2"]}}' > /tmp/kernel-host.json
  echo '{"kernel": "off", "fabric": {"bind": "10.232.0.2", "peers": ["10.232.0.1"]}}' > /tmp/hostb.json
  mkdir -p /tmp/kdebug && mount -t debugfs debugfs /tmp/kdebug &&
    IBEMU_CONFIG=/tmp/kernel-host.json "$SRC/scripts/kernel-node.sh" up &&
    hostb ibemu -r "$HOSTB_RT" up --config /tmp/hostb.json || {
    tail -n 20 "$HOSTB_RT/ibemud.log"
    return 1
  }
  hostb ibemu -r "$HOSTB_RT" status | grep -E "ACTIVE|peer"
}
cross_host_down() {
  hostb ibemu -r "$HOSTB_RT" down
  "$SRC/scripts/kernel-node.sh" down
  umount /tmp/kdebug
  ip netns del hostb
}
if [ -n "$HAVE_KVERBS" ]; then
  if check "a second host: ibemud in no-kernel mode in a namespace, linked to this one" cross_host_up; then
    check "kernel RC QP <-> verbs program on the other host (ibemu run): the whole exchange" \
      hostb ibemu -r "$HOSTB_RT" run -- "$BUILD/bin/kverbs_peer" -d ibemu0 \
      -c /tmp/kdebug/ibemu_kverbs/ctl -n 2
  fi
  cross_host_down > /dev/null 2>&1
  check "rmmod ibemu_kverbs_test (ib_drain_qp, destroy, no warning)" kverbs_unload
fi
# IPoIB between two hosts (tests/kernel/ipoib-hosts.sh): a second daemon in
# kernel mode, in namespace hostb, drives ibemu2 and ibemu3 on the same
# ibemu.ko; this host's SM makes their ports ACTIVE across the UDP link, and
# IP between ib0 and ibemu2 port 1's interface (moved into hostb) crosses it.
. "$SRC/tests/kernel/ipoib-hosts.sh"
if lsmod | grep -q '^ib_ipoib '; then
  if check "IPoIB across hosts: a second kernel-mode ibemud (ibemu2, ibemu3) in a namespace, one SM" \
    ipoib_hosts_up &&
    check "IPoIB across hosts: ib0 and host B's ibemu2 port 1 interface, distinct addresses" \
      ipoib_hosts_addresses; then
    check "IPoIB across hosts: ping host B from ib0" ping -I ib0 -c 5 -W 5 "$IPB_ADDR_B"
    check "IPoIB across hosts: ping ib0 from host B" ipb ping -c 5 -W 5 "$IPB_ADDR_A"
    check "IPoIB across hosts: 4 MiB over TCP, across the inter-host link" ipoib_hosts_tcp
  fi
  ipoib_hosts_down > /dev/null 2>&1
fi
check "rmmod ibemu" "$SRC/scripts/kernel-node.sh" unload
if lsmod | grep -q '^ib_ipoib '; then
  # IPoIB's netdevs went with the devices, and their QPs and CQs with them.
  check "rmmod ibemu with IPoIB loaded: its netdevs go, no warning" \
    sh -c "! ip -br link show | grep -q '^ib[0-9]' && ! dmesg | sed -n '/ibemu-qemu-script-start/,\$p' | grep -E '$KERNEL_PROBLEMS'"
  # The order at boot: IPoIB and ib_cm are loaded before the daemon adds
  # the devices. IPoIB finds each port's GID as ib_register_device() adds
  # it; ib_cm sets its capability bit then, which the module keeps for the
  # daemon, so ib_cm takes every port (its counters appear there) and
  # rdma_cm connects (here on one port, to its own address).
  cm_ports() {
    for p in /sys/class/infiniband/ibemu*/ports/*; do
      [ -e "$p/cm_rx_msgs" ] || { echo "ib_cm did not take $p"; return 1; }
    done
  }
  ipoib_first() {
    $UNSANITIZED "$SRC/scripts/kernel-node.sh" load $IBEMU_KO &&
      "$SRC/scripts/kernel-node.sh" up > /dev/null && ipoib_netdevs && cm_ports &&
      "$SRC/scripts/kernel-node.sh" ipoib > /dev/null &&
      SERVER_NS="" && ns_pair 60 listen ucmatose -b 10.73.0.1 -C 2 -- ucmatose -s 10.73.0.1 -C 2
    rc=$?
    SERVER_NS="ip netns exec ibpeer"
    "$SRC/scripts/kernel-node.sh" down > /dev/null
    "$SRC/scripts/kernel-node.sh" unload
    [ $rc -eq 0 ]
  }
  check "IPoIB and ib_cm loaded before the daemon adds the devices: ib0..ib3, ib_cm on every port, rdma_cm" \
    ipoib_first
  # The kernel-mode tutorial, run as written: it loads the module and takes
  # it down again. Not in a sanitized run, whose runtime would go into
  # tshark and the rest of the tutorial's programs.
  if [ -z "$IBEMU_SANITIZER_RUNTIME" ]; then
    check "the kernel-mode tutorial, as written (docs/tutorials/10-kernel-mode.md)" \
      env TUTORIAL_KERNEL_GUEST=1 MODULE_FILE="$IBEMU_KO" /usr/bin/python3 \
      "$SRC/tests/tutorials/run_tutorial.py" --build "$BUILD" "$SRC/docs/tutorials/10-kernel-mode.md"
  fi
  # The node taken down under a connected NVMe-oF controller and a target
  # listening: the daemon's loss fails their QPs (QP fatal), ib_core's
  # removal of the devices detaches nvme-rdma and nvmet-rdma, and ibemu.ko
  # goes, with no warning. The controller, reconnecting, is deleted after.
  storage_unload() {
    $UNSANITIZED "$SRC/scripts/kernel-node.sh" load $IBEMU_KO &&
      "$SRC/scripts/kernel-node.sh" up > /dev/null && ipoib_netdevs > /dev/null &&
      "$SRC/scripts/kernel-node.sh" ipoib > /dev/null &&
      (unset LD_PRELOAD && nvmet_up 10.73.0.1 && nvme_connect 10.73.0.1) || return 1
    "$SRC/scripts/kernel-node.sh" down > /dev/null && "$SRC/scripts/kernel-node.sh" unload
    rc=$?
    (unset LD_PRELOAD; nvme_disconnect; nvmet_down)
    [ $rc -eq 0 ] && ! lsmod | grep -q '^ibemu ' && no_kernel_problems
  }
  if modinfo nvmet_rdma > /dev/null 2>&1 && modinfo brd > /dev/null 2>&1; then
    check "the node down and ibemu.ko unloaded under a connected NVMe-oF controller and target" \
      storage_unload
  fi
fi

# No-kernel mode on a host whose kernel has RDMA devices (netlink answers
# with rxe0): `ibemu run` shows a program the emulated fabric, programs
# outside it see the host's devices as before.
NOKERNEL_RT=/tmp/ibemu-nokernel
# `ibemu run -- PROGRAM` as one command (pair splits its arguments at --).
NOKERNEL_RUN=/tmp/ibemu-nokernel-run
printf '#!/bin/sh\nexec ibemu -r %s run -- "$@"\n' "$NOKERNEL_RT" > "$NOKERNEL_RUN"
chmod 755 "$NOKERNEL_RUN"
nokernel_devices() {
  "$NOKERNEL_RUN" ibv_devices | tee /tmp/nokernel-devices.out
  grep -qw ibemu0 /tmp/nokernel-devices.out && grep -qw ibemu1 /tmp/nokernel-devices.out
}
if [ -n "$HAVE_RXE" ]; then
  check "no-kernel mode beside rxe0: ibemu up" ibemu -r "$NOKERNEL_RT" up
  check "no-kernel mode beside rxe0: ibemu run -- ibv_devices" nokernel_devices
  check "no-kernel mode beside rxe0: ibv_rc_pingpong under ibemu run" \
    pair 60 "$NOKERNEL_RUN" ibv_rc_pingpong -d ibemu0 -n 50 -- \
    "$NOKERNEL_RUN" ibv_rc_pingpong -d ibemu1 -n 50 127.0.0.1
  rxe_checks "(a no-kernel fabric up)"
  ibemu -r "$NOKERNEL_RT" down > /dev/null 2>&1
fi

if [ -n "$IBEMU_SANITIZER_RUNTIME" ]; then
  check "no sanitizer reports" sh -c "cat $REPORTS/* 2>/dev/null; [ -z \"\$(ls $REPORTS)\" ]"
fi
echo "ibemu kernel test ($KVER): $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
