#!/bin/sh
# Brings a host up in kernel mode, with ibemu installed (`make install`):
# the RDMA core modules and ibemu.ko loaded, the system's ibemud driving the
# module's devices and ibemu-sm making their ports ACTIVE. The qemu test and
# the Vagrant lab both run the node through this script.
#
#   kernel-node.sh load [IBEMU_KO]   ib_core, ib_uverbs, ib_umad and ibemu.ko
#                                    (the given file, else DKMS's module)
#   kernel-node.sh up [--no-sm]      start ibemud (and ibemu-sm) on
#                                    /etc/ibemu/ibemu.json if present; a
#                                    second `up` starts the SM alone
#   kernel-node.sh ipoib             give each port's IPoIB interface
#                                    (ib_ipoib loaded) the port's address
#                                    from ibemu's config, and bring it up
#   kernel-node.sh down              stop them
#   kernel-node.sh unload            remove ibemu.ko
#
# Programs then need nothing: no environment, no wrapper, no preload.
set -eu
RUNTIME=/run/ibemu
CONFIG=${IBEMU_CONFIG:-/etc/ibemu/ibemu.json}
IBEMU=${IBEMU:-ibemu}

case "${1:-}" in
load)
  for m in ib_core ib_uverbs ib_umad; do modprobe "$m"; done
  if [ -n "${2:-}" ]; then insmod "$2"; else modprobe ibemu; fi
  # udev makes /dev/ibemu on a full system; a minimal one has devtmpfs only.
  for _ in 1 2 3 4 5 6 7 8 9 10; do [ -c /dev/ibemu ] && break; sleep 0.2; done
  [ -c /dev/ibemu ] || { echo "kernel-node: /dev/ibemu did not appear" >&2; exit 1; }
  ;;
up)
  shift
  if "$IBEMU" --runtime-dir "$RUNTIME" status > /dev/null 2>&1; then
    # The daemon runs and keeps its config: this starts the SM.
    exec "$IBEMU" --runtime-dir "$RUNTIME" up "$@"
  fi
  config=$CONFIG
  if [ ! -f "$config" ]; then
    # Kernel mode is "auto" by default; a node insists on it.
    mkdir -p "$RUNTIME"
    config=$RUNTIME/kernel-node.json
    echo '{"kernel": "on"}' > "$config"
  fi
  "$IBEMU" --runtime-dir "$RUNTIME" up --config "$config" "$@"
  ;;
ipoib)
  # An IPoIB interface's hardware address ends with its port's GID (RFC
  # 4391): that names the port, whose address `ibemu status` knows.
  "$IBEMU" --runtime-dir "$RUNTIME" status --json | python3 -c '
import glob, json, subprocess, sys
ports = json.load(sys.stdin).get("ip_addresses", [])
netdevs = {}
for path in glob.glob("/sys/class/net/*/address"):
    hw = open(path).read().strip().replace(":", "")
    if len(hw) == 40:
        netdevs[hw[8:]] = path.split("/")[4]
missing = 0
for p in ports:
    dev = netdevs.get(p["gid"])
    if not dev:
        print("kernel-node: no IPoIB interface for %s port %d" % (p["device"], p["port"]), file=sys.stderr)
        missing += 1
        continue
    subprocess.run(["ip", "addr", "replace", "%s/%d" % (p["ipv4"], p["ipv4_prefix"]), "dev", dev], check=True)
    subprocess.run(["ip", "link", "set", dev, "up"], check=True)
    print("%s: %s/%d (%s port %d)" % (dev, p["ipv4"], p["ipv4_prefix"], p["device"], p["port"]))
sys.exit(1 if missing else 0)
'
  ;;
down)
  "$IBEMU" --runtime-dir "$RUNTIME" down
  ;;
unload)
  rmmod ibemu
  ;;
*)
  sed -n '2,19p' "$0" >&2
  exit 2
  ;;
esac
