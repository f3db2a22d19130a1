#!/bin/sh
# Runs as root in a fresh Debian root of run.sh, with network: installs that
# release's compiler, the libraries ibemu builds against, rdma-core's
# programs and python3-pyverbs (with rdma-core's test suite), and adds the
# ordinary user the build and the programs run as.
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -q > /tmp/apt.log 2>&1 || { tail -n 20 /tmp/apt.log; exit 1; }
apt-get install -y -q --no-install-recommends \
  build-essential cmake pkg-config binutils git \
  libboost-dev libfmt-dev nlohmann-json3-dev libcli11-dev zlib1g-dev libssl-dev \
  libibverbs-dev librdmacm-dev ibverbs-providers \
  ibverbs-utils rdmacm-utils perftest python3 python3-pyverbs \
  procps iproute2 util-linux > /tmp/apt.log 2>&1 || { tail -n 30 /tmp/apt.log; exit 1; }
dpkg-query -W -f='  ${Package} ${Version}\n' libibverbs1 g++ cmake libboost-dev
id tester > /dev/null 2>&1 || useradd --create-home --shell /bin/sh tester
chown -R tester: /tmp/ibemu-test
