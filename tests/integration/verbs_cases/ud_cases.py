"""Unreliable Datagram between ibemu0 and ibemu1 in one process (pyverbs):
completion fields, the 40-byte GRH area, Q_Key checks and the privileged Q_Key
bit, silent drops, local length errors on both sides, address handles made
from a completion. Run under the emulated environment; test_ud.py does that."""
import errno
import time

import pytest
import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

from rc_ops_cases import poll_wcs

QKEY = 0x11111111
GRH_AREA = 40
SIZE = 8192


class UdSide:
    def __init__(self, name, qkey=QKEY):
        self.ctx = Context(name=name)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 64)
        self.mr = MR(self.pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE)
        cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=2, max_recv_sge=2)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=self.cq, rcq=self.cq, cap=cap))
        attr = QPAttr(qp_state=e.IBV_QPS_INIT)
        attr.pkey_index, attr.port_num, attr.qkey = 0, 1, qkey
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
        self.qp.modify(QPAttr(qp_state=e.IBV_QPS_RTR), e.IBV_QP_STATE)
        attr = QPAttr(qp_state=e.IBV_QPS_RTS)
        attr.sq_psn = 0
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)
        self.lid = self.ctx.query_port(1).lid
        self.gid = self.ctx.query_gid(1, 0)

    def ah_to(self, peer, is_global=False):
        if is_global:
            attr = AHAttr(port_num=1, is_global=1, dlid=peer.lid,
                          gr=GlobalRoute(dgid=peer.gid, sgid_index=0, hop_limit=1))
        else:
            attr = AHAttr(port_num=1, dlid=peer.lid)
        return AH(self.pd, attr=attr)

    def post_recv(self, wr_id=1, length=SIZE - 1024, offset=1024):
        sge = SGE(self.mr.buf + offset, length, self.mr.lkey)
        self.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[sge]))

    def send(self, ah, peer_qpn, length, wr_id=7, qkey=QKEY, opcode=e.IBV_WR_SEND, imm=None):
        wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[SGE(self.mr.buf, length, self.mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        if imm is not None:
            wr.imm_data = imm
        wr.set_wr_ud(ah, peer_qpn, qkey)
        self.qp.post_send(wr)


def nothing_arrives(cq, wait=0.3):
    deadline = time.time() + wait
    while time.time() < deadline:
        n, _ = cq.poll(1)
        if n:
            return False
    return True


@pytest.fixture
def pair():
    return UdSide("ibemu0"), UdSide("ibemu1")


def test_send_fills_every_completion_field(pair):
    a, b = pair
    a.mr.write(b"u" * 100, 100)
    b.post_recv(wr_id=3)
    a.send(a.ah_to(b), b.qp.qp_num, 100, opcode=e.IBV_WR_SEND_WITH_IMM, imm=0x1234)
    sent = poll_wcs(a.cq)[0]
    assert (sent.status, sent.opcode, sent.wr_id) == (e.IBV_WC_SUCCESS, e.IBV_WC_SEND, 7)
    r = poll_wcs(b.cq)[0]
    assert (r.status, r.opcode, r.wr_id) == (e.IBV_WC_SUCCESS, e.IBV_WC_RECV, 3)
    assert r.byte_len == GRH_AREA + 100, "the GRH area counts in byte_len"
    assert r.src_qp == a.qp.qp_num and r.slid == a.lid and r.qp_num == b.qp.qp_num
    assert r.pkey_index == 0 and r.wc_flags & e.IBV_WC_WITH_IMM and r.imm_data == 0x1234
    assert not r.wc_flags & e.IBV_WC_GRH
    assert b.mr.read(100, 1024 + GRH_AREA) == b"u" * 100


def test_global_address_puts_the_grh_in_the_first_40_bytes(pair):
    a, b = pair
    a.mr.write(b"g" * 16, 16)
    b.post_recv()
    a.send(a.ah_to(b, is_global=True), b.qp.qp_num, 16)
    poll_wcs(a.cq)
    r = poll_wcs(b.cq)[0]
    assert r.status == e.IBV_WC_SUCCESS and r.wc_flags & e.IBV_WC_GRH
    grh = b.mr.read(GRH_AREA, 1024)
    assert grh[0] >> 4 == 6, "IPVer"
    assert grh[6] == 0x1b, "NxtHdr: the BTH follows"
    assert int.from_bytes(grh[4:6], "big") == 16 + 12 + 8 + 4, "PayLen: BTH DETH payload ICRC"
    assert grh[8:24] == bytes.fromhex(str(a.gid).replace(":", "")), "SGID"
    assert grh[24:40] == bytes.fromhex(str(b.gid).replace(":", "")), "DGID"
    assert b.mr.read(16, 1024 + GRH_AREA) == b"g" * 16


def test_wrong_qkey_is_dropped_silently_and_the_receive_stays_posted(pair):
    a, b = pair
    b.post_recv(wr_id=5)
    ah = a.ah_to(b)
    a.send(ah, b.qp.qp_num, 8, qkey=QKEY + 1)
    assert poll_wcs(a.cq)[0].status == e.IBV_WC_SUCCESS, "the sender cannot know"
    assert nothing_arrives(b.cq)
    a.send(ah, b.qp.qp_num, 8, wr_id=8)
    poll_wcs(a.cq)
    r = poll_wcs(b.cq)[0]
    assert (r.status, r.wr_id) == (e.IBV_WC_SUCCESS, 5)


def test_privileged_qkey_bit_sends_the_qps_own_qkey():
    a, b = UdSide("ibemu0", qkey=0x80010000), UdSide("ibemu1", qkey=0x80010000)
    b.post_recv()
    a.send(a.ah_to(b), b.qp.qp_num, 8, qkey=0x80000000)
    poll_wcs(a.cq)
    assert poll_wcs(b.cq)[0].status == e.IBV_WC_SUCCESS


def test_no_receive_posted_drops_the_datagram(pair):
    a, b = pair
    a.send(a.ah_to(b), b.qp.qp_num, 8)
    assert poll_wcs(a.cq)[0].status == e.IBV_WC_SUCCESS
    time.sleep(0.1)
    b.post_recv(wr_id=9)
    assert nothing_arrives(b.cq), "a datagram is not kept for a receive posted later"


def test_message_larger_than_the_mtu_is_local_length_error_and_stops_the_send_queue(pair):
    a, b = pair
    ah = a.ah_to(b)
    a.send(ah, b.qp.qp_num, 4097, wr_id=1)
    a.send(ah, b.qp.qp_num, 8, wr_id=2)
    wcs = poll_wcs(a.cq, 2)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, e.IBV_WC_LOC_LEN_ERR),
                                                  (2, e.IBV_WC_WR_FLUSH_ERR)]
    assert a.qp.query(e.IBV_QP_STATE)[0].qp_state == e.IBV_QPS_SQE
    # SQE -> RTS (IBA 10.3.1) and the send queue works again.
    a.qp.modify(QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE)
    b.post_recv()
    a.send(ah, b.qp.qp_num, 8, wr_id=3)
    assert poll_wcs(a.cq)[0].status == e.IBV_WC_SUCCESS
    assert poll_wcs(b.cq)[0].status == e.IBV_WC_SUCCESS


def test_receive_buffer_without_room_for_grh_and_data_is_local_length_error(pair):
    a, b = pair
    b.post_recv(length=GRH_AREA + 10)
    a.send(a.ah_to(b), b.qp.qp_num, 100)
    poll_wcs(a.cq)
    assert poll_wcs(b.cq)[0].status == e.IBV_WC_LOC_LEN_ERR


@pytest.mark.parametrize("is_global", [False, True], ids=["lid", "grh"])
def test_ah_from_a_completion_answers_the_sender(pair, is_global):
    a, b = pair
    a.post_recv(wr_id=20)
    b.post_recv(wr_id=21)
    a.send(a.ah_to(b, is_global), b.qp.qp_num, 32)
    poll_wcs(a.cq)
    wc = poll_wcs(b.cq)[0]
    # ibv_create_ah_from_wc reads the GRH area of the receive buffer when the
    # completion says a GRH came (and ignores it otherwise).
    reply = AH(b.pd, wc=wc, port_num=1, grh=b.mr.buf + 1024)
    b.send(reply, wc.src_qp, 8, wr_id=22)
    poll_wcs(b.cq)
    r = poll_wcs(a.cq)[0]
    assert (r.status, r.wr_id, r.src_qp) == (e.IBV_WC_SUCCESS, 20, b.qp.qp_num)


def test_only_sends_on_ud(pair):
    a, b = pair
    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
    wr.set_wr_ud(a.ah_to(b), b.qp.qp_num, QKEY)
    with pytest.raises(PyverbsRDMAError) as err:
        a.qp.post_send(wr)
    assert err.value.error_code == errno.EINVAL
