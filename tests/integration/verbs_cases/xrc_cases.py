"""XRC (IBA annex A14) between ibemu0 and ibemu1 in one process (pyverbs):
domains shared through a file, XRC SRQs with their numbers, XRC send and
receive QPs, and the requests an XRC receive QP must refuse. Run under the
emulated environment; test_xrc.py does that (and runs rdma-core's
ibv_xsrq_pingpong, whose two processes share a domain through a file)."""
import errno
import os
import tempfile

import pytest
import pyverbs.enums as e
from pyverbs.addr import AHAttr
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttrEx
from pyverbs.srq import SRQ, SrqInitAttrEx
from pyverbs.wr import SGE, RecvWR, SendWR
from pyverbs.xrcd import XRCD, XRCDInitAttr

from rc_ops_cases import poll_wcs

ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def open_xrcd(ctx, path, oflags=os.O_CREAT):
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
    try:
        return XRCD(ctx, XRCDInitAttr(e.IBV_XRCD_INIT_ATTR_FD | e.IBV_XRCD_INIT_ATTR_OFLAGS,
                                      oflags, fd))
    finally:
        os.close(fd)


class Target:
    """ibemu1: an XRC receive QP in the domain of `qp_file`, XRC SRQs in the
    domains of `srq_files`."""

    def __init__(self, qp_file, srq_files):
        self.ctx = Context(name="ibemu1")
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 64)
        self.mr = MR(self.pd, 4096, ACCESS)
        self.xrcd = open_xrcd(self.ctx, qp_file)
        self.srqs, self.domains = [], []  # pyverbs objects must outlive their users
        for f in srq_files:
            self.domains.append(open_xrcd(self.ctx, f))
            attr = SrqInitAttrEx(max_wr=16)
            attr.srq_type = e.IBV_SRQT_XRC
            attr.pd, attr.cq, attr.xrcd = self.pd, self.cq, self.domains[-1]
            attr.comp_mask = (e.IBV_SRQ_INIT_ATTR_TYPE | e.IBV_SRQ_INIT_ATTR_PD
                              | e.IBV_SRQ_INIT_ATTR_CQ | e.IBV_SRQ_INIT_ATTR_XRCD)
            srq = SRQ(self.ctx, attr)
            srq.post_recv(RecvWR(wr_id=len(self.srqs), num_sge=1,
                                 sg=[SGE(self.mr.buf + 1024 * len(self.srqs), 1024,
                                         self.mr.lkey)]))
            self.srqs.append(srq)
        self.qp = QP(self.ctx, QPInitAttrEx(qp_type=e.IBV_QPT_XRC_RECV,
                                           comp_mask=e.IBV_QP_INIT_ATTR_XRCD, xrcd=self.xrcd))
        self.lid = self.ctx.query_port(1).lid


class Initiator:
    def __init__(self):
        self.ctx = Context(name="ibemu0")
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 64)
        self.mr = MR(self.pd, 4096, ACCESS)
        self.qp = QP(self.ctx, QPInitAttrEx(qp_type=e.IBV_QPT_XRC_SEND, sq_sig_all=1,
                                           comp_mask=e.IBV_QP_INIT_ATTR_PD, pd=self.pd,
                                           scq=self.cq,
                                           cap=QPCap(max_send_wr=16, max_recv_wr=0,
                                                     max_recv_sge=0)))
        self.lid = self.ctx.query_port(1).lid

    def send(self, srqn, length=32, wr_id=1):
        wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_SEND, num_sge=1,
                    sg=[SGE(self.mr.buf, length, self.mr.lkey)])
        wr.set_qp_type_xrc(srqn)
        self.qp.post_send(wr)
        return poll_wcs(self.cq)[0]


def connect(i, t):
    """Initiator's send QP to RTS, the target's receive QP to RTR (and RTS with
    only what xsrq_pingpong gives it)."""
    for qp, access in ((i.qp, 0), (t.qp, ACCESS)):
        a = QPAttr(qp_state=e.IBV_QPS_INIT)
        a.pkey_index, a.port_num, a.qp_access_flags = 0, 1, access
        qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    a = QPAttr(qp_state=e.IBV_QPS_RTR)
    a.path_mtu, a.dest_qp_num, a.rq_psn, a.max_dest_rd_atomic, a.min_rnr_timer = \
        e.IBV_MTU_1024, i.qp.qp_num, 0, 1, 12
    a.ah_attr = AHAttr(port_num=1, dlid=i.lid)
    t.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN
                | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    a = QPAttr(qp_state=e.IBV_QPS_RTS)
    a.timeout, a.sq_psn = 14, 0
    t.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_SQ_PSN)
    a = QPAttr(qp_state=e.IBV_QPS_RTR)
    a.path_mtu, a.dest_qp_num, a.rq_psn = e.IBV_MTU_1024, t.qp.qp_num, 0
    a.ah_attr = AHAttr(port_num=1, dlid=t.lid)
    i.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN
                | e.IBV_QP_RQ_PSN)
    a = QPAttr(qp_state=e.IBV_QPS_RTS)
    a.timeout, a.retry_cnt, a.rnr_retry, a.sq_psn, a.max_rd_atomic = 14, 7, 7, 0, 1
    i.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY
                | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)


@pytest.fixture
def files():
    with tempfile.TemporaryDirectory() as d:
        yield os.path.join(d, "domain-a"), os.path.join(d, "domain-b")


def test_domains_opened_through_one_file_are_one_domain(files):
    a, _ = files
    i, t = Initiator(), Target(a, [a, a])
    connect(i, t)
    numbers = [s.get_srq_num() for s in t.srqs]
    assert len(set(numbers)) == 2 and 0 not in numbers
    i.mr.write(b"x" * 32, 32)
    for n, srq in enumerate(t.srqs):
        assert i.send(srq.get_srq_num(), wr_id=10 + n).status == e.IBV_WC_SUCCESS
        wc = poll_wcs(t.cq)[0]
        assert (wc.status, wc.wr_id, wc.byte_len, wc.qp_num) == \
            (e.IBV_WC_SUCCESS, n, 32, t.qp.qp_num), "the SRQ's WQE, on the SRQ's CQ"
    assert t.mr.read(32, 1024) == b"x" * 32


def test_srq_of_another_domain_is_an_invalid_request(files):
    a, b = files
    i, t = Initiator(), Target(a, [b])
    connect(i, t)
    assert i.send(t.srqs[0].get_srq_num()).status == e.IBV_WC_REM_INV_REQ_ERR


def test_xrcd_open_flags():
    ctx = Context(name="ibemu0")
    with tempfile.NamedTemporaryFile() as f:
        with pytest.raises(PyverbsRDMAError):
            open_xrcd(ctx, f.name, oflags=0)  # no domain for it yet, and no O_CREAT
        first = open_xrcd(ctx, f.name)
        with pytest.raises(PyverbsRDMAError) as err:
            open_xrcd(ctx, f.name, oflags=os.O_CREAT | os.O_EXCL)
        assert err.value.error_code == errno.EEXIST
        open_xrcd(ctx, f.name, oflags=0).close()  # it exists now
        first.close()
