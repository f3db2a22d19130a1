"""faults(), link_cut() and force_nak(): what they do to real programs."""

UD_LOSS = '''
def link_faults(fabric):
    return sum(c.drops["link_faults"] for c in fabric.counters().values())


def test_ud_pingpong_loses_packets(ibemu_fabric):
    with ibemu_fabric.faults(drop=0.5, seed=7):
        assert ibemu_fabric.port("ibemu0:1").faults["drop_ppm"] == 500000
        server, client = ibemu_fabric.pingpong("ibv_ud_pingpong", ["-n", "20", "-s", "64"],
                                               timeout=5)
    # UD does not recover: a lost datagram leaves the pingpong waiting.
    assert client.timed_out or server.timed_out
    assert link_faults(ibemu_fabric) > 0
    assert ibemu_fabric.port("ibemu0:1").faults is None
    server, client = ibemu_fabric.pingpong("ibv_ud_pingpong", ["-n", "5", "-s", "64"],
                                           timeout=30)
    assert client.returncode == 0, client.stdout


def test_rc_retransmits(ibemu_fabric):
    # Every packet crosses two faulty links, and so does its ACK: at 10 %
    # a try fails with p = 1 - 0.9**4 = 0.34, all 8 tries of ibv_rc_pingpong
    # (retry_cnt 7) with 0.34**8 = 2e-4, and one of its 80 SENDs did so in
    # about 1 run in 60 -- a correct HCA's retry-exceeded. At 5 %: 0.185**8
    # = 1.4e-6 a SEND, while some 15 packets or ACKs are still lost.
    with ibemu_fabric.capture() as cap, ibemu_fabric.faults(drop=0.05, seed=3):
        server, client = ibemu_fabric.pingpong("ibv_rc_pingpong", ["-n", "40", "-s", "64"],
                                               timeout=120)
    assert client.returncode == 0 and server.returncode == 0, client.stdout
    sends = [(p.slid, p.psn) for p in cap.packets("RC_SEND_ONLY")]
    assert len(sends) > len(set(sends)), "no SEND was sent twice"
    assert link_faults(ibemu_fabric) > 0
    ibemu_fabric.assert_no_port_errors(ignore=("link_faults",))


def test_fraction_is_checked(ibemu_fabric):
    import pytest
    with pytest.raises(ValueError):
        with ibemu_fabric.faults(drop=5):
            pass
'''


def test_faults(run_inner):
    run_inner(UD_LOSS).assert_outcomes(passed=3)


LINK_CUT = '''
from pytest_ibemu.net import free_tcp_port, wait_listening


def test_rc_pingpong_fails_on_cut_link(ibemu_fabric):
    port = free_tcp_port()
    # IBA's exact retry timing instead of ibemu's stall tolerance: fails fast.
    fast = {"IBEMU_STALL_TOLERANCE_MS": "0"}
    with ibemu_fabric.link_cut("ibemu1:1"):
        assert ibemu_fabric.port("ibemu1:1").state == "DOWN"
        server = ibemu_fabric.spawn(["ibv_rc_pingpong", "-d", "ibemu0", "-p", str(port)],
                                    env=fast)
        wait_listening(server, port)
        client = ibemu_fabric.run(["ibv_rc_pingpong", "-d", "ibemu1", "-p", str(port),
                                   "localhost"], env=fast, timeout=60)
        server.kill()
    assert client.returncode != 0
    assert "retry counter exceeded" in client.stdout + client.stderr
    assert ibemu_fabric.port("ibemu1:1").state == "ACTIVE"
'''


def test_link_cut(run_inner):
    run_inner(LINK_CUT).assert_outcomes(passed=1)


NAK = '''
from pytest_ibemu.net import free_tcp_port, wait_listening

# A fresh daemon hands out QP numbers from 0x10: the server's QP is the first.
SERVER_QPN = 0x10


def test_forced_rnr_nak(ibemu_fabric):
    port = free_tcp_port()
    with ibemu_fabric.capture() as cap:
        server = ibemu_fabric.spawn(["ibv_rc_pingpong", "-d", "ibemu0", "-p", str(port),
                                     "-n", "3"])
        wait_listening(server, port)
        ibemu_fabric.force_nak("ibemu0", SERVER_QPN, "rnr", count=1)
        client = ibemu_fabric.run(["ibv_rc_pingpong", "-d", "ibemu1", "-p", str(port),
                                   "-n", "3", "localhost"], timeout=60)
        assert client.returncode == 0, client.stdout + client.stderr
        assert server.wait(60) == 0
    naks = cap.packets("RC_ACKNOWLEDGE", nak="rnr")
    assert len(naks) == 1, cap.summary()
'''


def test_force_nak(run_inner):
    run_inner(NAK).assert_outcomes(passed=1)
