"""Several emulated hosts on one machine: network namespaces joined by veth
pairs to a bridge (in a namespace of its own, so nothing outside changes),
one ibemud per namespace, linked over UDP into one subnet."""
import contextlib
import json
import os
import re
import time
from pathlib import Path

import pytest

from conftest import Fabric, run_pair, tcp_listening
from pytest_ibemu.subnet import add_cabled_namespace, ip, namespaces_unusable

SUBNET = "10.231.0"  # private addresses, inside the test's namespaces only


# Tests that need several namespaces: skipped, with the reason, where they
# cannot be made.
needs_namespaces = pytest.mark.skipif(namespaces_unusable() is not None,
                                      reason=str(namespaces_unusable()))


class Host(Fabric):
    """One emulated host: a namespace with its own ibemud."""

    def __init__(self, ns: str, address: str, runtime_dir: Path):
        super().__init__(runtime_dir, wrap=["ip", "netns", "exec", ns])
        self.ns = ns
        self.address = address

    def write_config(self, fabric):
        path = self.runtime_dir.parent / f"{self.ns}.json"
        path.write_text(json.dumps({"fabric": fabric}))
        return path

    def up_with(self, fabric, sm=True, extra=()):
        cfg = self.write_config(fabric)
        args = ["up", "--config", str(cfg), *extra] + ([] if sm else ["--no-sm"])
        return self.ibemu(*args)

    def listening(self, proc, port):
        return tcp_listening(port, f"/proc/{proc.pid}")

    def logs(self):
        """The logs, and what the links to the other hosts counted."""
        text = super().logs()
        try:
            text += f"--- {self.ns} fabric: {json.dumps(self.status()['fabric'])}\n"
        except Exception as e:  # the daemon is gone: its logs say why
            text += f"--- {self.ns} fabric: no status ({e})\n"
        return text


def run_across(server_host, server_cmd, client_host, client_cmd, port, timeout=120):
    """A server program on one host, then its client on another; both must
    exit 0. Returns (server_output, client_output)."""
    (src, server_out), (crc, client_out) = run_pair(server_host, server_cmd, client_cmd, port,
                                                    timeout, client_fabric=client_host)
    for name, rc in (("server", src), ("client", crc)):
        assert rc == 0, (f"{server_cmd[0]} {name} failed ({rc}):\n"
                         f"server: {server_out}\nclient: {client_out}\n"
                         f"{server_host.logs()}{client_host.logs()}")
    return server_out, client_out


def cm_address(host, ordinal=1):
    """The default rdma_cm address of a host's port: 10.73.<last octet of
    its fabric address>.<port ordinal>."""
    return f"10.73.{host.address.split('.')[-1]}.{ordinal}"


@contextlib.contextmanager
def meshed_lab(root, count):
    """A Lab of `count` hosts that all name each other as peers, the SM on
    the first, every port ACTIVE; closed on exit."""
    lab = Lab(root, count)
    try:
        for i, h in enumerate(lab.hosts):
            h.up_with({"bind": h.address, "peers": lab.peers_of(h)}, sm=(i == 0))
        lab.wait_all_active()
        yield lab
    finally:
        lab.close()


class Lab:
    """N hosts in namespaces <prefix>h1.. with addresses SUBNET.1.., bridged."""

    made = 0

    def __init__(self, root: Path, count: int):
        Lab.made += 1
        self.prefix = f"ibt{os.getpid() % 100000}{chr(ord('a') + Lab.made % 26)}"
        self.hub = f"{self.prefix}hub"
        self.hosts = []
        self.root = root
        ip("netns", "add", self.hub)
        ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        ip("-n", self.hub, "link", "set", "br0", "up")
        for i in range(1, count + 1):
            self.add_host(i)

    def add_host(self, i):
        ns = f"{self.prefix}h{i}"
        add_cabled_namespace(ns, f"{self.prefix}v{i}", self.hub, f"{SUBNET}.{i}")
        runtime = self.root / f"h{i}" / "rt"
        runtime.parent.mkdir(parents=True, exist_ok=True)
        host = Host(ns, f"{SUBNET}.{i}", runtime)
        self.hosts.append(host)
        return host

    def peers_of(self, host):
        return [h.address for h in self.hosts if h is not host]

    def wait_all_active(self, hosts=None, timeout=30):
        """Every port of every host Active, with LIDs distinct subnet-wide."""
        hosts = hosts or self.hosts
        deadline = time.time() + timeout
        while True:
            ports = [(h, p) for h in hosts for p in h.ports()]
            lids = [p.lid for _, p in ports]
            if all(p.state == "ACTIVE" for _, p in ports) and len(set(lids)) == len(lids):
                return ports
            if time.time() > deadline:
                pytest.fail("ports not all ACTIVE with distinct LIDs: "
                            + str([(h.ns, p.state, p.lid) for h, p in ports])
                            + "".join(h.logs() for h in hosts))
            time.sleep(0.1)

    def close(self):
        for h in self.hosts:
            h.down(stop_programs=True)
        for h in self.hosts:
            ip("netns", "del", h.ns, check=False)
        ip("netns", "del", self.hub, check=False)


def lid_of(host, device="ibemu0", port=1):
    return host.port(f"{device}:{port}").lid


def ibv_devinfo_guids(host):
    r = host.run(["ibv_devinfo"], timeout=30, check=True)
    return re.findall(r"node_guid:\s+(\S+)", r.stdout)
