# Sourced by the scripts that run inside the qemu guest (guest-test.sh,
# tests/bench/kernel-guest.sh). The guest's root is the host's, read-only.

# writable DIR: DIR made writable, its contents kept: an overlay whose
# changes live in the guest's memory (make install, DKMS, nfsd's state).
writable() {
  modprobe overlay
  mkdir -p "/run/test-layers$1/upper" "/run/test-layers$1/work"
  mount -t overlay overlay \
    -o "lowerdir=$1,upperdir=/run/test-layers$1/upper,workdir=/run/test-layers$1/work" "$1"
}
