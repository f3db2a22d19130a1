"""Authenticated datagrams between hosts (fabric.secret_file): two hosts that
share a secret form one subnet and run verbs programs across it; a third
that names them as peers but holds another secret cannot join, and what it
sends is dropped and counted as unauthenticated."""
import re
import time

import pytest

from conftest import free_tcp_port
from hosts import Lab, lid_of, needs_namespaces, run_across

pytestmark = needs_namespaces


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("authlab")
    lab = Lab(root, 3)
    try:
        secrets = {0: "the fabric's shared secret, 1", 1: "the fabric's shared secret, 1",
                   2: "an intruder's guess at it"}
        for i, h in enumerate(lab.hosts):
            secret = root / f"secret{i}"
            secret.write_text(secrets[i] + "\n")
            secret.chmod(0o600)
            h.up_with({"bind": h.address, "peers": lab.peers_of(h),
                       "secret_file": str(secret)}, sm=(i == 0))
        lab.wait_all_active(lab.hosts[:2])
        yield lab
    finally:
        lab.close()


def test_hosts_that_share_the_secret_form_one_subnet(lab):
    a, b, intruder = lab.hosts
    fabric = a.status()["fabric"]
    assert fabric["authenticated"] is True
    peers = {p["address"].split(":")[0]: p["up"] for p in fabric["peers"]}
    assert peers == {b.address: True, intruder.address: False}, fabric
    port = free_tcp_port()
    base = ["ibv_rc_pingpong", "-p", str(port), "-n", "100", "-g", "0"]
    server, client = run_across(a, base + ["-d", "ibemu0"], b, base + ["-d", "ibemu1", a.address],
                                port)
    assert re.search(r"\d+ iters in", client), client


def test_a_host_with_another_secret_is_dropped_and_counted(lab):
    a, b, intruder = lab.hosts
    deadline = time.time() + 10
    while a.status()["fabric"]["unauthenticated_drops"] == 0:  # its hellos, every 100 ms
        assert time.time() < deadline, a.status()["fabric"]
        time.sleep(0.1)
    # It sees nobody: its own checks refuse the others' datagrams, and no SM
    # of the subnet reaches its ports.
    assert not any(p["up"] for p in intruder.status()["fabric"]["peers"])
    assert intruder.status()["fabric"]["unauthenticated_drops"] > 0
    assert all(p.state != "ACTIVE" for p in intruder.ports())
    assert lid_of(a) and lid_of(b)
