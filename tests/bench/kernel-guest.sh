#!/bin/sh
# `make kernel-bench`: figures of kernel consumers on ibemu.ko, run inside
# the qemu guest of the kernel test (tests/kernel/qemu-run.sh) beside the
# same on Soft-RoCE (rdma_rxe on a veth pair) and the limit measured in the
# same run: a veth pair for IP, the RAM disk itself for NVMe-oF, memcpy for
# perftest (`make bench-rxe`: perftest only, rxe_side_by_side.py). Figures
# only; nothing here passes or fails. Under qemu's TCG (no KVM) every figure
# is that of an emulated CPU: compare the columns, not the numbers with
# another machine's.
#
#   kernel-guest.sh BUILD [SECTION...]   sections: ip nvme perftest (all by
#                                        default; make bench-rxe: perftest)
set -u
BUILD=$1
shift
SECTIONS=${*:-ip nvme perftest}
wanted() { case " $SECTIONS " in *" $1 "*) return 0 ;; esac; return 1; }
SRC=$(cd "$(dirname "$0")/../.." && pwd)
unset IBEMU_RUNTIME_DIR XDG_RUNTIME_DIR
. "$SRC/tests/kernel/storage.sh"
. "$SRC/tests/kernel/writable.sh"
no_kernel_problems() { ! dmesg | grep -qE 'Oops|BUG:|WARNING:|Call Trace'; }
quiet() { "$@" > /tmp/bench-step.out 2>&1 || { cat /tmp/bench-step.out; exit 1; }; }

for dir in /usr/local /etc /usr/lib/x86_64-linux-gnu/libibverbs /var/lib /lib/modules; do
  writable "$dir"
done
quiet "$SRC/scripts/install.sh" "$BUILD"
export PATH=/usr/local/bin:$PATH
quiet "$SRC/scripts/kernel-node.sh" load "$BUILD/kernel/ibemu.ko"
quiet modprobe ib_ipoib
quiet "$SRC/scripts/kernel-node.sh" up
for _ in $(seq 1 50); do ip link show ib3 > /dev/null 2>&1 && break; sleep 0.2; done
quiet "$SRC/scripts/kernel-node.sh" ipoib
# ibemu1 port 1's interface in a namespace: IP between it and ib0 crosses
# the fabric. The veth pair's far end in another, with Soft-RoCE on both.
ip netns add ibpeer && ip link set ib2 netns ibpeer &&
  ip -n ibpeer addr add 10.73.0.3/16 dev ib2 && ip -n ibpeer link set ib2 up
ip netns add ethpeer && ip link add bench-veth0 type veth peer name bench-veth1 &&
  ip link set bench-veth1 netns ethpeer && ip addr add 10.74.0.1/24 dev bench-veth0 &&
  ip -n ethpeer addr add 10.74.0.2/24 dev bench-veth1 && ip link set bench-veth0 up &&
  ip -n ethpeer link set bench-veth1 up && ip -n ethpeer link set lo up
quiet modprobe rdma_rxe
quiet rdma link add rxe0 type rxe netdev bench-veth0
for _ in $(seq 1 100); do ping -c 1 -W 1 10.73.0.3 > /dev/null 2>&1 && break; sleep 0.3; done

# ---- IP: round trip and a TCP stream ----
rtt_us() { # rtt_us ADDRESS: the mean of 200 pings
  ping -q -c 200 -i 0.01 "$1" | sed -n 's|^rtt [^=]*= [0-9.]*/\([0-9.]*\)/.*|\1|p' |
    awk '{ printf "%.0f", $1 * 1000 }'
}
# 256 MiB to a receiver in NAMESPACE; MiB/s from the sender's first byte to
# the receiver's count coming back.
tcp_mib_s() { # tcp_mib_s NAMESPACE ADDRESS
  ip netns exec "$1" /usr/bin/python3 -c '
import socket
s = socket.create_server(("0.0.0.0", 5201)); c, _ = s.accept(); n = 0
while True:
    b = c.recv(1 << 20)
    if not b: break
    n += len(b)
c.sendall(str(n).encode()); c.close()' &
  for _ in $(seq 1 50); do ip netns exec "$1" ss -ltn | grep -q ':5201 ' && break; sleep 0.1; done
  /usr/bin/python3 -c '
import socket, sys, time
total, chunk = 256 << 20, b"x" * (1 << 20)
c = socket.create_connection((sys.argv[1], 5201)); t = time.monotonic()
for _ in range(total // len(chunk)): c.sendall(chunk)
c.shutdown(socket.SHUT_WR); got = int(c.recv(64)); t = time.monotonic() - t
print("%.0f" % (got / t / (1 << 20)) if got == total else "short")' "$2"
  wait
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

echo "ibemu kernel-mode figures (qemu guest, $(nproc) vCPUs, kernel $(uname -r))"
if wanted ip; then
  veth_rtt=$(rtt_us 10.74.0.2)
  ipoib_rtt=$(rtt_us 10.73.0.3)
  echo "ping round trip, us:   veth (limit) $veth_rtt | IPoIB on ibemu $ipoib_rtt ($(ratio "$ipoib_rtt" "$veth_rtt") x)"
  veth_tcp=$(tcp_mib_s ethpeer 10.74.0.2)
  ipoib_tcp=$(tcp_mib_s ibpeer 10.73.0.3)
  echo "TCP stream, MiB/s:     veth (limit) $veth_tcp | IPoIB on ibemu $ipoib_tcp ($(ratio "$ipoib_tcp" "$veth_tcp") of the limit)"
  echo "  (Soft-RoCE has no IPoIB: a RoCE port carries IP on its Ethernet device, the veth above)"
fi

# ---- NVMe over Fabrics: fio against the RAM disk, then through each HCA ----
fio_figure() { # fio_figure DISK RW BS DEPTH FIELD: read IOPS or MiB/s
  fio --name=bench --filename="$1" --rw="$2" --bs="$3" --iodepth="$4" --ioengine=libaio \
    --direct=1 --runtime=8 --time_based --output-format=json 2> /dev/null |
    /usr/bin/python3 -c '
import json, sys
read = json.load(sys.stdin)["jobs"][0]["read"]
print("%.0f" % (read["iops"] if sys.argv[1] == "iops" else read["bw_bytes"] / (1 << 20)))' "$5"
}
nvme_figures() { # nvme_figures ADDRESS|local: "IOPS MiB/s"
  if [ "$1" = local ]; then
    modprobe brd rd_nr=1 rd_size=131072 && disk=/dev/ram0
  else
    nvmet_up "$1" && disk=$(nvme_connect "$1") || { echo "- -"; nvmet_down; return; }
  fi
  dd if=/dev/zero of="$disk" bs=1M count=128 oflag=direct status=none
  echo "$(fio_figure "$disk" randread 4k 16 iops) $(fio_figure "$disk" read 1M 4 bw)"
  [ "$1" = local ] || { nvme_disconnect; nvmet_down; }
}
if wanted nvme; then
  set -- $(nvme_figures local)
  local_iops=$1 local_bw=$2
  set -- $(nvme_figures 10.73.0.1)
  ibemu_iops=$1 ibemu_bw=$2
  set -- $(nvme_figures 10.74.0.1)
  rxe_iops=$1 rxe_bw=$2
  echo "NVMe-oF 4 KiB random read (QD 16), IOPS: RAM disk (limit) $local_iops | ibemu $ibemu_iops ($(ratio "$ibemu_iops" "$local_iops")) | Soft-RoCE $rxe_iops ($(ratio "$rxe_iops" "$local_iops"))"
  echo "NVMe-oF 1 MiB sequential read (QD 4), MiB/s: RAM disk (limit) $local_bw | ibemu $ibemu_bw ($(ratio "$ibemu_bw" "$local_bw")) | Soft-RoCE $rxe_bw ($(ratio "$rxe_bw" "$local_bw"))"
fi

# ---- perftest on rxe0 and on ibemu, interleaved (tests/bench/rxe_side_by_side.py) ----
if wanted perftest; then
  IBEMU_BUILD=$BUILD /usr/bin/python3 "$SRC/tests/bench/rxe_side_by_side.py"
fi
no_kernel_problems || { echo "the kernel logged a problem:"; dmesg | tail -40; exit 1; }
