#!/bin/sh
# Installs the Debian packages ibemu needs to build and test, skipping those
# already installed. Idempotent; needs root (or sudo) only when something is missing.
set -eu
PACKAGES="build-essential cmake pkg-config binutils clang-format gdb
  libboost-dev libfmt-dev nlohmann-json3-dev libcli11-dev libgtest-dev zlib1g-dev libssl-dev
  libibverbs-dev librdmacm-dev ibverbs-providers
  ibverbs-utils rdmacm-utils perftest infiniband-diags python3-pyverbs opensm
  ucx-utils libucx-dev openmpi-bin libopenmpi-dev libfabric-bin
  python3-pytest python3-venv python3-pip iproute2 iputils-ping procps tshark
  qemu-system-x86 linux-image-amd64 linux-headers-amd64 busybox-static dkms
  nfs-kernel-server nfs-common fio
  clang libclang-rt-14-dev"
missing=""
for p in $PACKAGES; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
[ -z "$missing" ] && { echo "ibemu: all build and test packages are installed"; exit 0; }
echo "ibemu: installing:$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
