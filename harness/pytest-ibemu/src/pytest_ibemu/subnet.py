"""Several emulated hosts forming one InfiniBand subnet: one ibemud per
host, linked over UDP (docs/howto-multihost.md), one subnet manager.

As root, where `ip netns` works, each host is a network namespace joined
to the others by a veth pair to a bridge in a namespace of its own, so that
nothing outside changes ("namespaces"). Elsewhere the daemons share this
machine's network stack and bind to 127.0.0.2, 127.0.0.3, ... ("local"):
the subnet is the same, only the hosts' TCP ports are not separate."""
import itertools
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from .fabric import Fabric

NAMESPACE_NET = "10.231.0"  # private addresses, inside the subnet's namespaces only
_made = itertools.count(1)


def ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def add_cabled_namespace(ns, veth, hub, address):
    """Network namespace `ns` whose eth0 (`address`/24) is cabled by veth
    pair `veth` to the bridge br0 of namespace `hub`."""
    ip("netns", "add", ns)
    ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
    ip("link", "set", veth, "netns", hub)
    ip("-n", hub, "link", "set", veth, "master", "br0", "up")
    ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
    ip("-n", ns, "link", "set", "eth0", "up")
    ip("-n", ns, "link", "set", "lo", "up")


def namespaces_unusable():
    """Why hosts cannot be namespaces here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not shutil.which("ip"):
        return "network namespaces need ip (iproute2)"
    probe = f"ibemu-probe-{os.getpid()}"
    r = ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


def free_udp_port(addresses):
    """A UDP port free on every one of `addresses`, for the daemons' links."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((addresses[0], 0))
            port = s.getsockname()[1]
            if all(_udp_free(a, port) for a in addresses[1:]):
                return port
    raise RuntimeError("no UDP port free on " + ", ".join(addresses))


def _udp_free(address, port):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind((address, port))
            return True
        except OSError:
            return False


class Subnet:
    """`hosts` Fabrics (each `devices` x `ports`) in one subnet, all ports
    ACTIVE with distinct LIDs once started; the SM runs on the first. Use
    it as a context manager, or start() and close()."""

    def __init__(self, ibemu_bin, root, hosts=2, devices=2, ports=2, config=None, mode=None,
                 timeout=30):
        if mode is None:
            mode = "local" if namespaces_unusable() else "namespaces"
        if mode not in ("namespaces", "local"):
            raise ValueError("mode is 'namespaces' or 'local'")
        self.mode = mode
        self.root = Path(root)
        self.hosts = []
        self.timeout = timeout
        self._plan = (ibemu_bin, hosts, devices, ports, config or {})
        self._hub = None
        self._namespaces = []
        self._prefix = f"ibp{os.getpid() % 100000}n{next(_made)}"

    def start(self):
        """Makes the hosts and brings them up; returns once every port of the
        subnet is ACTIVE. On failure the hosts stay for close() to collect
        (their logs say what went wrong)."""
        self._make_hosts(*self._plan)
        for host in self.hosts:
            host.up(timeout=self.timeout)
        self.wait_all_active(self.timeout)
        return self

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc):
        self.close()

    def __iter__(self):
        return iter(self.hosts)

    def __len__(self):
        return len(self.hosts)

    def __getitem__(self, i):
        return self.hosts[i]

    def _make_hosts(self, ibemu_bin, count, devices, ports, config):
        if self.mode == "namespaces":
            self._hub = f"{self._prefix}hub"
            ip("netns", "add", self._hub)
            self._namespaces.append(self._hub)
            ip("-n", self._hub, "link", "add", "br0", "type", "bridge")
            ip("-n", self._hub, "link", "set", "br0", "up")
            addresses = [f"{NAMESPACE_NET}.{i}" for i in range(1, count + 1)]
            udp_port = None
        else:
            addresses = [f"127.0.0.{i}" for i in range(2, count + 2)]
            udp_port = free_udp_port(addresses)
        for i, address in enumerate(addresses, start=1):
            wrap = self._add_namespace(i, address) if self.mode == "namespaces" else ()
            peers = [self._endpoint(a, udp_port) for a in addresses if a != address]
            fabric = {"bind": address, "peers": peers, **({"port": udp_port} if udp_port else {})}
            host_config = {**config, "fabric": fabric}
            if self.mode == "local":  # one hostname, one namespace: GUIDs would collide
                host_config.setdefault("host_id", 0x100000 + (os.getpid() % 0x10000) * 16 + i)
            self.hosts.append(Fabric(ibemu_bin, self.root / f"h{i}", devices=devices,
                                     ports=ports, config=host_config, sm=(i == 1), wrap=wrap,
                                     address=address, name=f"h{i}"))

    @staticmethod
    def _endpoint(address, port):
        return f"{address}:{port}" if port else address

    def _add_namespace(self, i, address):
        """Namespace i, cabled to the hub's bridge; returns the command
        prefix that runs a program inside it."""
        ns = f"{self._prefix}h{i}"
        self._namespaces.append(ns)
        add_cabled_namespace(ns, f"{self._prefix}v{i}", self._hub, address)
        return ("ip", "netns", "exec", ns)

    def wait_all_active(self, timeout=30):
        """Every port of every host ACTIVE, with LIDs distinct subnet-wide."""
        deadline = time.monotonic() + timeout
        while True:
            ports = [(h.name, p) for h in self.hosts for p in h.ports()]
            lids = [p.lid for _, p in ports]
            if all(p.state == "ACTIVE" for _, p in ports) and len(set(lids)) == len(lids):
                return
            if time.monotonic() > deadline:
                raise TimeoutError("ports not all ACTIVE with distinct LIDs: "
                                   + str([(h, p.name, p.state, p.lid) for h, p in ports]))
            time.sleep(0.1)

    def report_sections(self):
        return [s for h in self.hosts for s in h.report_sections()]

    def close(self, keep=False):
        """Every host down, the namespaces deleted, the directory removed
        unless `keep`."""
        for host in self.hosts:
            host.close(keep=True)
        for ns in self._namespaces:
            ip("netns", "del", ns, check=False)
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)
