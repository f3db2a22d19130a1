# Storage over RDMA in the qemu guest, for tests/kernel/guest-test.sh and
# tests/bench/kernel-guest.sh (sourced; both define no_kernel_problems).
# The checks run in subshells without LD_PRELOAD: none of their programs
# loads ibemu code, and a sanitized run's runtime would go into them (pkill
# with ASan's runtime waits for ever on a futex of its own).
#
# NVMe over Fabrics: nvmet-rdma serves a RAM disk (brd) on an IP address;
# nvme-rdma connects to it by writing its options to /dev/nvme-fabrics (no
# nvme-cli needed). The host always works in the initial network namespace,
# so the connection loops back through the port that has the address, as it
# would on an HCA; its I/O uses fast registration.
NVMET=/sys/kernel/config/nvmet
NVME_NQN=ibemu-nvme-test
nvmet_up() { # nvmet_up ADDRESS: the subsystem on ADDRESS:4420
  modprobe brd rd_nr=1 rd_size=131072 && modprobe nvmet_rdma && modprobe nvme_rdma || return 1
  mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
  sub=$NVMET/subsystems/$NVME_NQN
  mkdir "$sub" && echo 1 > "$sub/attr_allow_any_host" && mkdir "$sub/namespaces/1" &&
    echo /dev/ram0 > "$sub/namespaces/1/device_path" && echo 1 > "$sub/namespaces/1/enable" &&
    mkdir "$NVMET/ports/1" && echo rdma > "$NVMET/ports/1/addr_trtype" &&
    echo ipv4 > "$NVMET/ports/1/addr_adrfam" && echo "$1" > "$NVMET/ports/1/addr_traddr" &&
    echo 4420 > "$NVMET/ports/1/addr_trsvcid" &&
    ln -s "$sub" "$NVMET/ports/1/subsystems/$NVME_NQN"
}
nvmet_down() {
  rm -f "$NVMET/ports/1/subsystems/$NVME_NQN"
  rmdir "$NVMET/ports/1"
  echo 0 > "$NVMET/subsystems/$NVME_NQN/namespaces/1/enable"
  rmdir "$NVMET/subsystems/$NVME_NQN/namespaces/1" "$NVMET/subsystems/$NVME_NQN"
}
nvme_disk() { # the block device of the namespace NVME_NQN serves
  for b in /sys/block/nvme*; do
    [ "$(cat "$b/device/subsysnqn" 2> /dev/null)" = "$NVME_NQN" ] &&
      [ -b "/dev/${b##*/}" ] && echo "/dev/${b##*/}" && return 0
  done
  return 1
}
nvme_connect() { # nvme_connect ADDRESS: prints the disk once it is there
  echo "transport=rdma,traddr=$1,trsvcid=4420,nqn=$NVME_NQN" > /dev/nvme-fabrics || return 1
  for _ in $(seq 1 100); do
    nvme_disk && return 0
    sleep 0.2
  done
  return 1
}
nvme_disconnect() {
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2> /dev/null)" = "$NVME_NQN" ] && echo 1 > "$c/delete_controller"
  done
}
# The check: 4 MiB written, read back and compared, then the controller and
# the target go.
nvme_rdma() ( # nvme_rdma ADDRESS
  unset LD_PRELOAD
  rc=1
  if nvmet_up "$1" && disk=$(nvme_connect "$1"); then
    echo "connected: $disk"
    head -c 4194304 /dev/urandom > /tmp/nvme.in
    dd if=/tmp/nvme.in of="$disk" bs=1M oflag=direct status=none &&
      dd if="$disk" of=/tmp/nvme.out bs=1M count=4 iflag=direct status=none &&
      cmp /tmp/nvme.in /tmp/nvme.out && echo "4 MiB written and read back"
    rc=$?
  fi
  nvme_disconnect
  nvmet_down
  [ $rc -eq 0 ] && no_kernel_problems
)

# NFS over RDMA: the kernel's NFS server (nfsd with svcrdma) exports a tmpfs
# directory as NFSv4's root (fsid=0) and listens on "rdma 20049"; the
# kernel's NFS client mounts it with -o rdma (xprtrdma, FRWR) from a network
# namespace, so the RPCs and their payload cross the fabric. The shortest
# grace period (10 s) keeps the first OPEN's wait short.
NFS_EXPORT=/run/ibemu-nfs-export
NFS_MNT=/run/ibemu-nfs-mnt
nfs_server_up() {
  modprobe nfsd && modprobe rpcrdma || return 1
  mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd || return 1
  mkdir -p "$NFS_EXPORT" /run/rpcbind && mount -t tmpfs -o size=64m tmpfs "$NFS_EXPORT" &&
    rpcbind -w && rpc.mountd -N 2 -N 3 &&
    exportfs -o rw,no_root_squash,insecure,fsid=0 "*:$NFS_EXPORT" &&
    echo 10 > /proc/fs/nfsd/nfsv4leasetime && echo 10 > /proc/fs/nfsd/nfsv4gracetime &&
    rpc.nfsd -N 3 8 && echo "rdma 20049" > /proc/fs/nfsd/portlist &&
    grep -q "rdma 20049" /proc/fs/nfsd/portlist
}
nfs_server_down() {
  rpc.nfsd 0
  exportfs -ua
  pkill rpc.mountd
  pkill rpcbind
  umount "$NFS_EXPORT"
}
# The check: a 4 MiB file written through the mount, read back after the
# client's caches are dropped. nsenter --net (unlike `ip netns exec`) keeps
# this mount namespace, so the mount stays visible here.
nfs_rdma() ( # nfs_rdma NAMESPACE SERVER_ADDRESS
  unset LD_PRELOAD
  nfs_server_up || {
    cat /proc/fs/nfsd/portlist
    nfs_server_down
    return 1
  }
  mkdir -p "$NFS_MNT"
  head -c 4194304 /dev/urandom > /tmp/nfs.in
  rc=1
  if nsenter --net="/run/netns/$1" mount -t nfs4 -o rdma,port=20049,vers=4.2 "$2:/" "$NFS_MNT"; then
    grep " $NFS_MNT " /proc/mounts
    cp /tmp/nfs.in "$NFS_MNT/file" && sync && cmp /tmp/nfs.in "$NFS_EXPORT/file" &&
      echo 3 > /proc/sys/vm/drop_caches && cmp /tmp/nfs.in "$NFS_MNT/file" &&
      echo "4 MiB written and read back"
    rc=$?
    umount "$NFS_MNT" || rc=1
  fi
  nfs_server_down
  [ $rc -eq 0 ] && no_kernel_problems
)
