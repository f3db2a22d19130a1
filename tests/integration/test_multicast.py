"""UD multicast (IBA 10.5) between processes of one host: members attach UD
QPs to a group with ibv_attach_mcast, a sender sends to the group's MLID with
a GRH naming the MGID; every attached QP of every process gets each datagram
once, a detached QP gets nothing, and a member that sends gets its own
datagrams back unless it blocks them (tests/programs/mcast_ud.c)."""
import time

import pytest

from conftest import BUILD, run_verbs_cases

MCAST_UD = str(BUILD / "bin" / "mcast_ud")


def start_member(fabric, device, qps, expect):
    proc = fabric.spawn([MCAST_UD, device, "member", str(qps), str(expect)])
    line = proc.stdout.readline()
    assert line.strip() == "ready", line + proc.communicate()[0] + fabric.logs()
    return proc


def test_every_member_of_every_process_gets_each_datagram_once(fabric):
    members = [start_member(fabric, "ibemu1", 2, 20), start_member(fabric, "ibemu0", 1, 20),
               start_member(fabric, "ibemu1", 3, 20)]
    sent = fabric.run([MCAST_UD, "ibemu0", "send", "20"], timeout=60)
    assert sent.returncode == 0 and "sent 20" in sent.stdout, sent.stdout + sent.stderr
    outs = [m.communicate(timeout=30)[0] for m in members]
    assert [o.split("got", 1)[-1].split() for o in outs] == [["20", "20"], ["20"],
                                                            ["20", "20", "20"]], outs
    assert all(m.returncode == 0 for m in members), outs


def test_detached_members_get_nothing(fabric):
    member = start_member(fabric, "ibemu1", 1, 5)
    fabric.run([MCAST_UD, "ibemu0", "send", "5"], timeout=60)
    assert member.communicate(timeout=30)[0].split() == ["got", "5"]
    # The member detached and exited: the group is empty, datagrams to it are
    # undeliverable.
    before = fabric.status()["devices"][0]["port_info"][0]["counters"]["drops"]["undeliverable"]
    r = fabric.run([MCAST_UD, "ibemu0", "send", "3"], timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    time.sleep(0.1)
    after = fabric.status()["devices"][0]["port_info"][0]["counters"]["drops"]["undeliverable"]
    assert after - before == 3


@pytest.mark.parametrize("block,own", [([], "5"), (["block"], "0")], ids=["loopback", "blocked"])
def test_a_member_gets_its_own_datagrams_unless_it_blocks_them(fabric, block, own):
    # As ConnectX: the HCA loops a group's packets back to its members on
    # the port, the sending QP included unless it was created with
    # IBV_QP_CREATE_BLOCK_SELF_MCAST_LB.
    r = fabric.run([MCAST_UD, "ibemu0", "loopback", "5", *block], timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split() == ["own", own, "other", "5"], r.stdout


def test_block_self_loopback_flag_is_for_ud_qps(fabric):
    run_verbs_cases(fabric, "multicast_cases.py", "3")
