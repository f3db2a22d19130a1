#!/bin/sh
# Provisioning of the Vagrant lab's VMs (Vagrantfile), runnable by hand too:
#   provision.sh node ADDRESS PEER sm|no-sm   install ibemu with DKMS, join the
#                                             subnet with PEER, start the node
#   provision.sh pingpong-server              serve one ibv_rc_pingpong
#   provision.sh pingpong-client SERVER       run it against SERVER
# The node is brought up by the same scripts the qemu test runs.
set -eu
SRC=${IBEMU_SRC:-/ibemu}

case "$1" in
node)
  address=$2 peer=$3 role=$4
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends dkms "linux-headers-$(uname -r)" make
  make -C "$SRC" deps build
  make -C "$SRC" install-dkms
  mkdir -p /etc/ibemu
  cat > /etc/ibemu/ibemu.json <<JSON
{"kernel": "on", "fabric": {"bind": "$address", "peers": ["$peer"]}}
JSON
  "$SRC/scripts/kernel-node.sh" load
  if [ "$role" = sm ]; then
    "$SRC/scripts/kernel-node.sh" up
  else
    "$SRC/scripts/kernel-node.sh" up --no-sm
  fi
  ibstat
  ;;
pingpong-server)
  nohup timeout 600 ibv_rc_pingpong -d ibemu0 -n 1000 > /var/log/ibemu-pingpong.log 2>&1 &
  ;;
pingpong-client)
  ibv_rc_pingpong -d ibemu0 -n 1000 "$2"
  ;;
*)
  sed -n '2,7p' "$0" >&2
  exit 2
  ;;
esac
