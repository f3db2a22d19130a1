"""Subnet managers on several hosts: the one started first with the higher
priority is master, the other hosts' SMs stand by; when the master dies a
standby takes over, keeps every LID, and hosts that join later are still
brought up."""
import os
import signal
import time

import pytest

from hosts import Lab, lid_of, needs_namespaces

pytestmark = needs_namespaces

FABRIC = {"hello_ms": 50, "dead_ms": 500}
POLL_S = 2  # ibemu-sm's sweep interval: a standby polls its master this often


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = Lab(tmp_path_factory.mktemp("smlab"), 3)
    seed = lab.hosts[0].address
    try:
        lab.hosts[0].up_with(dict(FABRIC, bind=seed, seed=seed), extra=["--sm-priority", "5"])
        lab.hosts[1].up_with(dict(FABRIC, bind=lab.hosts[1].address, seed=seed))
        lab.wait_all_active(lab.hosts[:2])
        yield lab
    finally:
        lab.close()


def sm_state(host):
    sm = host.status()["sm"]
    return sm["state"] if sm else None


def wait_for(what, predicate, lab, timeout=30):
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            pytest.fail(f"waited for {what}\n" + "".join(h.logs() for h in lab.hosts))
        time.sleep(0.1)


def test_one_master_the_other_host_stands_by(lab):
    first, second, _ = lab.hosts
    wait_for("the second host's SM to stand by", lambda: sm_state(second) == "standby", lab)
    assert sm_state(first) == "master"
    master_lid = lid_of(first)
    for h in lab.hosts[:2]:
        assert all(p.sm_lid == master_lid for p in h.ports())


def test_the_standby_takes_over_and_new_hosts_still_join(lab):
    first, second, late = lab.hosts
    before = {(h.ns, i): p.lid for h in lab.hosts[:2] for i, p in enumerate(h.ports())}
    os.kill(first.sm_pid(), signal.SIGKILL)
    wait_for("the standby to become master", lambda: sm_state(second) == "master", lab,
             timeout=3 * POLL_S + 15)
    new_lid = lid_of(second)
    wait_for("every port to name the new master",
             lambda: all(p.sm_lid == new_lid for h in lab.hosts[:2] for p in h.ports()), lab)
    after = {(h.ns, i): p.lid for h in lab.hosts[:2] for i, p in enumerate(h.ports())}
    assert after == before, "the new master keeps every LID"
    # A host that joins now is found by the new master; its own SM stands by.
    late.up_with(dict(FABRIC, bind=late.address, seed=first.address))
    lab.wait_all_active()
    assert all(p.sm_lid == new_lid for p in late.ports())
    wait_for("the late host's SM to stand by", lambda: sm_state(late) == "standby", lab)
