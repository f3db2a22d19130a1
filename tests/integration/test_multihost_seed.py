"""Hosts that join one subnet through a seed: a host that comes later is
found by every member and by the subnet manager, a host that leaves takes
its link down, and one that comes back gets its LIDs again."""
import time

import pytest

from conftest import free_tcp_port
from hosts import Lab, needs_namespaces, run_across

pytestmark = needs_namespaces

# Short hellos so a departure is noticed within the test's patience.
FABRIC = {"hello_ms": 50, "dead_ms": 500}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = Lab(tmp_path_factory.mktemp("seedlab"), 3)
    seed = lab.hosts[0].address
    try:
        # Every host names the seed, the seed itself too.
        lab.hosts[0].up_with(dict(FABRIC, bind=seed, seed=seed))
        lab.hosts[1].up_with(dict(FABRIC, bind=lab.hosts[1].address, seed=seed), sm=False)
        lab.wait_all_active(lab.hosts[:2])
        yield lab
    finally:
        lab.close()


def peers_up(host):
    return sorted(p["address"].split(":")[0] for p in host.status()["fabric"]["peers"] if p["up"])


def wait_for(predicate, what, timeout=20):
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            pytest.fail(what)
        time.sleep(0.05)


def test_a_later_host_joins_and_every_member_finds_it(lab):
    first, second, late = lab.hosts
    late.up_with(dict(FABRIC, bind=late.address, seed=first.address), sm=False)
    lab.wait_all_active()
    # The second host learnt of the late one from the seed's hellos.
    wait_for(lambda: late.address in peers_up(second), "second host never saw the late one")
    port = free_tcp_port()
    base = ["ibv_rc_pingpong", "-p", str(port), "-n", "20"]
    run_across(second, base + ["-d", "ibemu0"], late, base + ["-d", "ibemu1", second.address],
               port)


def test_a_host_that_leaves_goes_down_and_comes_back_with_its_lids(lab):
    first, second, late = lab.hosts
    lab.wait_all_active()
    lids = [p.lid for p in late.ports()]
    late.down()
    wait_for(lambda: late.address not in peers_up(first), "the seed still sees the host")
    wait_for(lambda: late.address not in peers_up(second), "a member still sees the host")
    # The others' ports stay Active through the re-sweep.
    time.sleep(1)
    lab.wait_all_active(lab.hosts[:2], timeout=5)
    late.up_with(dict(FABRIC, bind=late.address, seed=first.address), sm=False)
    lab.wait_all_active()
    assert [p.lid for p in late.ports()] == lids
