# IPoIB between two hosts of one subnet, in the qemu guest, for
# tests/kernel/guest-test.sh (sourced; it defines SRC, wait_port,
# ipoib_carrier and no_kernel_problems, and has ib_ipoib loaded).
#
# Host A is this namespace's kernel-mode daemon (/run/ibemu, ibemu0 and
# ibemu1, its ibemu-sm the subnet's only SM). Host B is a second kernel-mode
# daemon in network namespace hostb, linked to A over a veth pair (the
# fabric's UDP), with devices of its own names and GUIDs on the same
# ibemu.ko. Both hosts' IPoIB interfaces appear in the initial namespace, as
# the kernel is one; host B's ibemu2 port 1 interface moves into hostb, so
# that IP between it and ib0 crosses the inter-host link. IPoIB names its
# debugfs files after the interface, and names are per namespace: with
# ibemu1 port 1's ib2 in ibpeer, host B's first interface is ib2 again here,
# and the kernel says "debugfs: File 'ib2_mcg' ... already present" (not a
# warning; only IPoIB's debug files for it are missing).
# `set -- $(helper)` below splits a helper's words on purpose.
# shellcheck disable=SC2046
IPB_NS=hostb
IPB_RT=/tmp/ibemu-hostb-kernel
IPB_LOCAL=/tmp/ipoib-hosts.host
ipb() { ip netns exec "$IPB_NS" "$@"; }

# The address a daemon gives one of its ports, and the interface whose
# hardware address ends with that port's GID (RFC 4391), as kernel-node.sh
# ipoib finds it.
ipb_port() { # ipb_port RUNTIME DEVICE PORT: prints "INTERFACE ADDRESS/LEN"
  ibemu --runtime-dir "$1" status --json | /usr/bin/python3 -c '
import glob, json, sys
device, port = sys.argv[1], int(sys.argv[2])
netdevs = {}
for path in glob.glob("/sys/class/net/*/address"):
    hw = open(path).read().strip().replace(":", "")
    if len(hw) == 40:
        netdevs[hw[8:]] = path.split("/")[4]
for p in json.load(sys.stdin).get("ip_addresses", []):
    if p["device"] == device and p["port"] == port and p["gid"] in netdevs:
        print(netdevs[p["gid"]], "%s/%d" % (p["ipv4"], p["ipv4_prefix"]))' "$2" "$3"
}

ipoib_hosts_up() {
  ip netns add "$IPB_NS" && ip link add ipblink type veth peer name eth0 netns "$IPB_NS" &&
    ip addr add 10.233.0.1/24 dev ipblink && ip link set ipblink up &&
    ip -n "$IPB_NS" addr add 10.233.0.2/24 dev eth0 && ip -n "$IPB_NS" link set eth0 up &&
    ip -n "$IPB_NS" link set lo up || return 1
  echo '{"kernel": "on", "fabric": {"bind": "10.233.0.1", "peers": ["10.233.0.2"]}}' > "$IPB_LOCAL.json"
  # Names and GUIDs of its own: both daemons register on the one ibemu.ko.
  cat > "$IPB_RT.json" << 'EOF'
{"kernel": "on",
 "devices": [{"name": "ibemu2", "node_guid": "0x0200000000b00100"},
             {"name": "ibemu3", "node_guid": "0x0200000000b00200"}],
 "fabric": {"bind": "10.233.0.2", "peers": ["10.233.0.1"]}}
EOF
  # Host A brings its SM, which sweeps host B's ports to ACTIVE too.
  IBEMU_CONFIG=$IPB_LOCAL.json "$SRC/scripts/kernel-node.sh" up &&
    ipb ibemu -r "$IPB_RT" up --config "$IPB_RT.json" --no-sm &&
    wait_port ibemu2 1 ACTIVE || {
    tail -n 20 "$IPB_RT/ibemud.log"
    return 1
  }
  ibstat ibemu2 1 | grep -E "State|lid"
  ipb ibemu -r "$IPB_RT" status | grep -E "ibemu|peer"
}

# ib0's carrier (ipoib_carrier "" would wait for host B's other interfaces,
# which stay down here).
ipb_ib0_carrier() {
  for _ in $(seq 1 40); do
    ip link show ib0 | grep -q LOWER_UP && return 0
    sleep 1
  done
  ip link show ib0
  return 1
}

# ib0 with host A's address for it, host B's port in the namespace with
# host B's, each as its daemon says; both addresses distinct.
IPB_ADDR_A=""
IPB_ADDR_B=""
ipoib_hosts_addresses() {
  set -- $(ipb_port /run/ibemu ibemu0 1)
  [ "${1:-}" = ib0 ] || { echo "ibemu0 port 1 is not ib0: ${1:-none}"; return 1; }
  IPB_ADDR_A=${2%/*}
  ip addr replace "$2" dev ib0 && ip link set ib0 up || return 1
  set -- $(ipb_port "$IPB_RT" ibemu2 1)
  [ -n "${1:-}" ] || { echo "no IPoIB interface for ibemu2 port 1"; return 1; }
  IPB_ADDR_B=${2%/*}
  echo "host A: ib0 $IPB_ADDR_A; host B: $1 $IPB_ADDR_B"
  [ "$IPB_ADDR_A" != "$IPB_ADDR_B" ] &&
    ip link set "$1" netns "$IPB_NS" && ip -n "$IPB_NS" addr add "$2" dev "$1" &&
    ip -n "$IPB_NS" link set "$1" up && ipoib_carrier "-n $IPB_NS" && ipb_ib0_carrier &&
    ip -n "$IPB_NS" -br addr
}

# Packets host B's daemon sent to and received from host A, over UDP.
ipb_link_packets() {
  ipb ibemu -r "$IPB_RT" status --json | /usr/bin/python3 -c '
import json, sys
p = json.load(sys.stdin)["fabric"]["peers"][0]
print(p["tx_packets"], p["rx_packets"])'
}

# 4 MiB from ib0 to host B's interface over TCP, its digest compared: the
# stream's packets came in over host B's link to host A, its ACKs went out.
ipoib_hosts_tcp() {
  set -- $(ipb_link_packets)
  tx0=$1 rx0=$2
  ipb /usr/bin/python3 -c '
import hashlib, socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7998)); s.listen(1); s.settimeout(120)
c, _ = s.accept(); h = hashlib.sha256()
while True:
    b = c.recv(65536)
    if not b: break
    h.update(b)
c.sendall(h.hexdigest().encode()); c.close()' "$IPB_ADDR_B" &
  server=$!
  # Python starts slowly under TCG: until the server listens (20 s at most).
  for _ in $(seq 1 100); do
    ipb ss -ltn | grep -q ':7998 ' && break
    sleep 0.2
  done
  # Bound to ib0: host A's other interfaces share 10.73.0.0/16.
  /usr/bin/python3 -c '
import hashlib, os, socket, sys
data = os.urandom(4 << 20)
c = socket.socket()
c.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"ib0")
c.settimeout(120); c.connect((sys.argv[1], 7998))
c.sendall(data); c.shutdown(socket.SHUT_WR)
got = c.recv(64).decode()
print("4 MiB over TCP, digest", "matches" if got == hashlib.sha256(data).hexdigest() else "differs")
sys.exit(got != hashlib.sha256(data).hexdigest())' "$IPB_ADDR_B"
  rc=$?
  wait $server
  set -- $(ipb_link_packets)
  echo "host B's link to host A: $(($1 - tx0)) packets out, $(($2 - rx0)) in"
  # 4 MiB in IPoIB's 2044-byte MTU is over 2000 packets.
  [ $rc -eq 0 ] && [ $(($2 - rx0)) -gt 2000 ] && [ $(($1 - tx0)) -gt 0 ] && no_kernel_problems
}

# Host B's interface goes back where IPoIB made it before its namespace
# goes, so that IPoIB, not the namespace's end, removes it (with ibemu.ko).
ipoib_hosts_down() {
  for n in $(ip -n "$IPB_NS" -br link show | awk '/^ib/ {print $1}'); do
    ip -n "$IPB_NS" link set "$n" netns 1
  done
  ipb ibemu -r "$IPB_RT" down
  "$SRC/scripts/kernel-node.sh" down
  ip netns del "$IPB_NS"
}
