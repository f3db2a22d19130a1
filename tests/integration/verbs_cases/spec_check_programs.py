"""Small verbs programs that each make one mistake IBEMU_CHECK=1 warns
about (docs/spec-checks.md), and one that makes none. Run as
`python3 spec_check_programs.py NAME` under the emulated environment;
tests/integration/test_spec_checks.py runs them with and without
IBEMU_CHECK and reads the warnings on stderr. Each program's verbs calls
behave as they do without the checks: the checks only warn."""
import errno
import os
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

SIZE = 4096


class Side:
    def __init__(self, name, cqe=64, max_send_wr=16, sq_sig_all=0):
        self.ctx = Context(name=name)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, cqe)
        self.mr = MR(self.pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
        cap = QPCap(max_send_wr=max_send_wr, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap,
                                         sq_sig_all=sq_sig_all))
        self.lid = self.ctx.query_port(1).lid

    def to_init(self):
        attr = QPAttr(qp_state=e.IBV_QPS_INIT)
        attr.pkey_index, attr.port_num = 0, 1
        attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT |
                       e.IBV_QP_ACCESS_FLAGS)

    def to_rtr(self, peer, rq_psn=0, path_mtu=e.IBV_MTU_1024):
        attr = QPAttr(qp_state=e.IBV_QPS_RTR)
        attr.path_mtu, attr.dest_qp_num, attr.rq_psn = path_mtu, peer.qp.qp_num, rq_psn
        attr.max_dest_rd_atomic, attr.min_rnr_timer = 1, 1
        attr.ah_attr = AHAttr(dlid=peer.lid, port_num=1)
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU |
                       e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC |
                       e.IBV_QP_MIN_RNR_TIMER)

    def to_rts(self, sq_psn=0, rnr_retry=7, timeout=10, retry_cnt=7):
        attr = QPAttr(qp_state=e.IBV_QPS_RTS)
        attr.sq_psn, attr.timeout, attr.retry_cnt, attr.rnr_retry = (sq_psn, timeout, retry_cnt,
                                                                     rnr_retry)
        attr.max_rd_atomic = 1
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT |
                       e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC)

    def connect(self, peer, rq_psn=0, sq_psn=0, recvs=0, recv_length=64, **rts):
        """RESET to RTS, with `recvs` receives posted in INIT, as a correct
        program posts them before the peer may send."""
        self.to_init()
        for i in range(recvs):
            self.qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[self.sge(recv_length)]))
        self.to_rtr(peer, rq_psn)
        self.to_rts(sq_psn, **rts)

    def sge(self, length=64):
        return SGE(self.mr.buf, length, self.mr.lkey)

    def post_recv(self, wr_id=1):
        self.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[self.sge()]))

    def send(self, wr_id=1, signaled=True, length=64):
        flags = e.IBV_SEND_SIGNALED if signaled else 0
        self.qp.post_send(SendWR(wr_id=wr_id, opcode=e.IBV_WR_SEND, num_sge=1,
                                 sg=[self.sge(length)], send_flags=flags))


def poll(cq, n=1, timeout=10):
    out, deadline = [], time.time() + timeout
    while len(out) < n and time.time() < deadline:
        num, wcs = cq.poll(n - len(out))
        out += wcs[:num]
    return out


def expect_errno(fn, err):
    try:
        fn()
    except PyverbsRDMAError as ex:
        assert ex.error_code == err, ex
        return
    raise AssertionError(f"no error {err}")


def pair(**kw):
    return Side("ibemu0", **kw), Side("ibemu1", **kw)


def correct():
    """Receives first, matching PSNs, every send signaled and polled."""
    a, b = pair()
    a.connect(b, rq_psn=0x10, sq_psn=0x20)
    b.connect(a, rq_psn=0x20, sq_psn=0x10, recvs=1)
    for i in range(20):
        a.send(wr_id=i)
        assert [w.status for w in poll(a.cq)] == [e.IBV_WC_SUCCESS]
        assert [w.status for w in poll(b.cq)] == [e.IBV_WC_SUCCESS]
        b.post_recv()


def post_send_in_init():
    a, b = pair()
    a.to_init()
    expect_errno(lambda: a.send(), errno.EINVAL)
    expect_errno(lambda: a.send(), errno.EINVAL)  # warned once


def post_recv_in_reset():
    a, _ = pair()
    expect_errno(lambda: a.post_recv(), errno.EINVAL)


def rnr():
    """The receiver posts no receive; the sender gives up at the first RNR
    NAK (rnr_retry 0) and polls its error."""
    a, b = pair()
    a.connect(b, rnr_retry=0)
    b.connect(a)
    a.send()
    assert [w.status for w in poll(a.cq)] == [e.IBV_WC_RNR_RETRY_EXC_ERR]


def cq_overrun():
    """Four signaled SENDs complete on a CQ of two entries nobody polls.
    They are all posted before the receiver is ready (it drops them until
    it reaches RTR; they go again after a local ACK timeout, 67 ms), so no
    post comes after the overrun."""
    a, b = Side("ibemu0", cqe=2), Side("ibemu1")
    a.connect(b, timeout=14)
    b.to_init()
    for i in range(4):
        b.post_recv(i)
        a.send(wr_id=i)
    b.to_rtr(a)
    b.to_rts()
    events = set()
    while e.IBV_EVENT_CQ_ERR not in events:
        event = a.ctx.get_async_event()
        events.add(event.event_type)
        event.ack()


def dereg_in_flight():
    """A region goes while a SEND from it waits for its acknowledgement
    (the peer stays in RESET and drops it; a local ACK timeout of 4.3 s
    before the first resend)."""
    a, b = pair()
    a.connect(b, timeout=20)
    a.send()
    a.mr.close()


def error_completion_ignored():
    """A SEND to a peer whose receive buffer is too small fails; the
    program never polls and destroys the QP."""
    a, b = pair()
    a.connect(b)
    b.connect(a, recvs=1, recv_length=8)
    a.send(length=64)
    assert [w.status for w in poll(b.cq)] == [e.IBV_WC_LOC_LEN_ERR]  # the receiver looks
    deadline = time.time() + 10
    while a.qp.query(e.IBV_QP_STATE)[0].qp_state != e.IBV_QPS_ERR:
        assert time.time() < deadline
    a.qp.close()


def post_to_error_qp():
    """The same failure: the program polls it, ignores it and keeps
    posting."""
    a, b = pair()
    a.connect(b)
    b.connect(a, recvs=1, recv_length=8)
    a.send(length=64)
    assert [w.status for w in poll(b.cq)] == [e.IBV_WC_LOC_LEN_ERR]
    assert [w.status for w in poll(a.cq)] == [e.IBV_WC_REM_INV_REQ_ERR]
    a.send(wr_id=2)
    a.send(wr_id=3)  # warned once


def drain_after_moving_to_error():
    """Moving the QP to ERR itself and posting a WR to learn when the
    flush is over is a known drain idiom: no warning."""
    a, b = pair()
    a.connect(b)
    b.connect(a)
    a.qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    a.send(wr_id=2)
    assert [w.status for w in poll(a.cq)] == [e.IBV_WC_WR_FLUSH_ERR]


def path_mtu_above_active():
    """path_mtu 4096 on a port whose MTU is 2048 (the test's config)."""
    a, b = pair()
    a.to_init()
    expect_errno(lambda: a.to_rtr(b, path_mtu=e.IBV_MTU_4096), errno.EINVAL)


def psn_mismatch():
    """The receiver expects PSN 0x100, the sender starts at 0x9000: nothing
    arrives, and the sender's SEND fails after its retries (IBA's timing:
    8 timeouts of 16.8 ms)."""
    a, b = pair()
    a.connect(b, sq_psn=0x9000, timeout=12, retry_cnt=7)
    b.connect(a, rq_psn=0x100, recvs=1)
    a.send()
    assert [w.status for w in poll(a.cq)] == [e.IBV_WC_RETRY_EXC_ERR]


def unsignaled_run():
    """Every SEND unsignaled: the send queue (16) wraps on ibemu, not on
    hardware."""
    a, b = pair()
    a.connect(b)
    b.connect(a, recvs=16)
    for i in range(16):
        a.send(wr_id=i, signaled=False)
    assert len(poll(b.cq, 16)) == 16
    # Whether the sends are acknowledged yet, nothing tells: the QP goes
    # before the region, so the region's end finds none in flight.
    a.qp.close()


if __name__ == "__main__":
    # A sender whose peer stays silent fails after its retries, as IBA
    # times them, not after ibemu's stall tolerance (docs/configuration.md).
    os.environ["IBEMU_STALL_TOLERANCE_MS"] = "0"
    globals()[sys.argv[1]]()
    print("done")
