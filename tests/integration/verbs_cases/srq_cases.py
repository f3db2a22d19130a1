"""Shared receive queues between ibemu0 and ibemu1 in one process (pyverbs):
several RC QPs and a UD QP drawing from one SRQ, the limit event, the last
WQE event, and the errors of the SRQ verbs. Run under the emulated
environment; test_srq.py does that."""
import errno

import pytest
import pyverbs.enums as e
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, RecvWR

from rc_ops_cases import Side, poll_wcs

SLOT = 1024


class SrqSide(Side):
    """A Side whose QP, and `extra` more, take their receives from one SRQ."""

    def __init__(self, name, max_wr=64, extra=0):
        super().__init__(name)
        self.srq = SRQ(self.pd, SrqInitAttr(SrqAttr(max_wr=max_wr, max_sge=1)))
        cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
        self.qps = [self.qp] + [
            QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, srq=self.srq,
                                   cap=cap)) for _ in range(extra + 1)]
        self.qp = self.qps.pop()  # the first QP on the SRQ; self.qps: the others after it
        self.qps.pop(0).close()   # Side's own QP (no SRQ) is not needed
        self.qps.insert(0, self.qp)

    def post_srq(self, n, first_id=100):
        for i in range(n):
            sge = SGE(self.mr.buf + (i % 32) * SLOT, SLOT, self.mr.lkey)
            self.srq.post_recv(RecvWR(wr_id=first_id + i, num_sge=1, sg=[sge]))


def connect(a_qp_side, b_side, a_qp, b_qp):
    """Connects a_qp (of Side a) with b_qp (of Side b) through Side.connect."""
    a_saved, b_saved = a_qp_side.qp, b_side.qp
    a_qp_side.qp, b_side.qp = a_qp, b_qp
    a_qp_side.connect(b_side)
    b_side.connect(a_qp_side)
    a_qp_side.qp, b_side.qp = a_saved, b_saved


def test_three_qps_share_one_srq():
    b = SrqSide("ibemu1", extra=2)
    senders = [Side("ibemu0") for _ in b.qps]
    for s, q in zip(senders, b.qps):
        connect(s, b, s.qp, q)
    b.post_srq(6)
    for i, s in enumerate(senders):
        for _ in range(2):
            s.mr.write(bytes([65 + i]) * 8, 8)
            s.post(e.IBV_WR_SEND, 8)
            assert poll_wcs(s.cq)[0].status == e.IBV_WC_SUCCESS
    wcs = poll_wcs(b.cq, 6)
    assert all(w.status == e.IBV_WC_SUCCESS and w.opcode == e.IBV_WC_RECV for w in wcs)
    assert sorted(w.wr_id for w in wcs) == list(range(100, 106)), "each WQE used once"
    by_qp = {}
    for w in wcs:
        by_qp[w.qp_num] = by_qp.get(w.qp_num, 0) + 1
    assert by_qp == {q.qp_num: 2 for q in b.qps}


def test_limit_event_fires_once_when_the_srq_runs_low():
    a, b = Side("ibemu0"), SrqSide("ibemu1", max_wr=16)
    connect(a, b, a.qp, b.qp)
    b.post_srq(10)
    b.srq.modify(SrqAttr(srq_limit=8), e.IBV_SRQ_LIMIT)
    assert b.srq.query().srq_limit == 8
    for _ in range(2):  # 10 -> 8 WQEs: not below the limit yet
        a.post(e.IBV_WR_SEND, 8)
        poll_wcs(a.cq)
    poll_wcs(b.cq, 2)
    a.post(e.IBV_WR_SEND, 8)  # 7 < 8
    poll_wcs(a.cq)
    poll_wcs(b.cq)
    event = b.ctx.get_async_event()
    assert event.event_type == e.IBV_EVENT_SRQ_LIMIT_REACHED
    event.ack()
    assert b.srq.query().srq_limit == 0, "the event disarms the limit"


def test_qp_on_srq_entering_error_reports_last_wqe_reached():
    a, b = Side("ibemu0"), SrqSide("ibemu1")
    connect(a, b, a.qp, b.qp)
    b.post_srq(4)
    b.qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    event = b.ctx.get_async_event()
    assert event.event_type == e.IBV_EVENT_QP_LAST_WQE_REACHED
    event.ack()
    # The SRQ's WQEs are not the QP's: nothing was flushed.
    assert b.cq.poll(1)[0] == 0


def test_ud_qp_receives_from_an_srq():
    from ud_cases import QKEY, UdSide
    a = UdSide("ibemu0")
    b = SrqSide("ibemu1")
    cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
    ud = QP(b.pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=b.cq, rcq=b.cq, srq=b.srq, cap=cap))
    attr = QPAttr(qp_state=e.IBV_QPS_INIT)
    attr.pkey_index, attr.port_num, attr.qkey = 0, 1, QKEY
    ud.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
    ud.modify(QPAttr(qp_state=e.IBV_QPS_RTR), e.IBV_QP_STATE)
    b.post_srq(1)
    b.gid = b.ctx.query_gid(1, 0)
    a.send(a.ah_to(b), ud.qp_num, 16)
    poll_wcs(a.cq)
    r = poll_wcs(b.cq)[0]
    assert (r.status, r.qp_num, r.byte_len) == (e.IBV_WC_SUCCESS, ud.qp_num, 40 + 16)


def test_srq_verbs_refuse_what_they_must():
    b = SrqSide("ibemu1", max_wr=16)
    with pytest.raises(PyverbsRDMAError) as err:
        b.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(b.mr.buf, 8, b.mr.lkey)]))
    assert err.value.error_code == errno.EINVAL, "a QP on an SRQ has no receive queue of its own"
    with pytest.raises(PyverbsRDMAError) as err:
        b.srq.modify(SrqAttr(srq_limit=17), e.IBV_SRQ_LIMIT)
    assert err.value.error_code == errno.EINVAL
    with pytest.raises(PyverbsRDMAError) as err:
        b.post_srq(17)
    assert err.value.error_code == errno.ENOMEM
