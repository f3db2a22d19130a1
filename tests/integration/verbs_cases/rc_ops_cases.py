"""Every RC opcode and every error status a real HCA reports, between ibemu0
and ibemu1 inside one process (pyverbs). Run under the emulated environment;
tests/integration/test_rc_ops.py does that."""
import errno
import struct
import time

import pytest
import pyverbs.enums as e
from pyverbs.addr import AHAttr
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

ALL_ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ |
              e.IBV_ACCESS_REMOTE_ATOMIC)
SIZE = 65536


class Side:
    def __init__(self, name, qp_access=ALL_ACCESS, mr_access=ALL_ACCESS):
        self.ctx = Context(name=name)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 256)
        self.mr = MR(self.pd, SIZE, mr_access)
        cap = QPCap(max_send_wr=64, max_recv_wr=64, max_send_sge=4, max_recv_sge=4)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap,
                                             sq_sig_all=0))
        self.lid = self.ctx.query_port(1).lid
        self.qp_access = qp_access

    def connect(self, peer, rnr_retry=7, timeout=10, retry_cnt=7, path_mtu=e.IBV_MTU_1024):
        attr = QPAttr(qp_state=e.IBV_QPS_INIT)
        attr.pkey_index, attr.port_num, attr.qp_access_flags = 0, 1, self.qp_access
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT |
                       e.IBV_QP_ACCESS_FLAGS)
        attr = QPAttr(qp_state=e.IBV_QPS_RTR)
        attr.path_mtu, attr.dest_qp_num, attr.rq_psn = path_mtu, peer.qp.qp_num, 0
        attr.max_dest_rd_atomic, attr.min_rnr_timer = 16, 1
        attr.ah_attr = AHAttr(dlid=peer.lid, port_num=1)
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU |
                       e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC |
                       e.IBV_QP_MIN_RNR_TIMER)
        attr = QPAttr(qp_state=e.IBV_QPS_RTS)
        attr.sq_psn, attr.timeout, attr.retry_cnt, attr.rnr_retry = 0, timeout, retry_cnt, rnr_retry
        attr.max_rd_atomic = 16
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT |
                       e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC)

    def sge(self, offset=0, length=SIZE, lkey=None):
        return SGE(self.mr.buf + offset, length, self.mr.lkey if lkey is None else lkey)

    def post_recv(self, wr_id=1, length=SIZE):
        self.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[self.sge(length=length)]))

    def post(self, opcode, length, peer=None, wr_id=7, offset=0, rkey=None, **kw):
        wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[self.sge(offset, length)],
                    send_flags=e.IBV_SEND_SIGNALED | kw.pop("flags", 0), **kw)
        if peer is not None and opcode in (e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_WRITE_WITH_IMM,
                                           e.IBV_WR_RDMA_READ):
            wr.set_wr_rdma(peer.mr.rkey if rkey is None else rkey, peer.mr.buf)
        self.qp.post_send(wr)


def poll_wcs(cq, n=1, timeout=10):
    """Polls until n completions arrived; returns them."""
    out, deadline = [], time.time() + timeout
    while len(out) < n:
        num, wcs = cq.poll(n - len(out))
        out += wcs[:num]
        if time.time() > deadline:
            raise AssertionError(f"only {len(out)} of {n} completions: "
                                 f"{[(w.status, w.opcode) for w in out]}")
    return out


def qp_state(side):
    return side.qp.query(e.IBV_QP_STATE)[0].qp_state


@pytest.fixture
def pair():
    a, b = Side("ibemu0"), Side("ibemu1")
    a.connect(b)
    b.connect(a)
    return a, b


def test_send_and_send_with_imm(pair):
    a, b = pair
    a.mr.write(b"x" * 5000, 5000)
    b.post_recv(wr_id=11)
    b.post_recv(wr_id=12)
    a.post(e.IBV_WR_SEND, 5000)
    a.post(e.IBV_WR_SEND_WITH_IMM, 100, imm_data=0x12345678)
    recv = poll_wcs(b.cq, 2)
    assert [w.status for w in recv] == [e.IBV_WC_SUCCESS] * 2
    assert recv[0].opcode == e.IBV_WC_RECV and recv[0].byte_len == 5000
    assert recv[1].wc_flags & e.IBV_WC_WITH_IMM and recv[1].imm_data == 0x12345678
    assert recv[0].qp_num == b.qp.qp_num and recv[0].src_qp == a.qp.qp_num
    assert recv[0].slid == a.lid
    sent = poll_wcs(a.cq, 2)
    assert [(w.status, w.opcode) for w in sent] == [(e.IBV_WC_SUCCESS, e.IBV_WC_SEND)] * 2
    assert b.mr.read(5000, 0) == b"x" * 5000


def test_rdma_write_and_write_with_imm(pair):
    a, b = pair
    data = bytes(range(256)) * 64
    a.mr.write(data, len(data))
    a.post(e.IBV_WR_RDMA_WRITE, len(data), peer=b)
    w = poll_wcs(a.cq)[0]
    assert w.status == e.IBV_WC_SUCCESS and w.opcode == e.IBV_WC_RDMA_WRITE
    assert b.mr.read(len(data), 0) == data
    b.post_recv(wr_id=5)
    a.post(e.IBV_WR_RDMA_WRITE_WITH_IMM, 10, peer=b, imm_data=0xcafe)
    r = poll_wcs(b.cq)[0]
    assert r.status == e.IBV_WC_SUCCESS and r.opcode == e.IBV_WC_RECV_RDMA_WITH_IMM
    assert r.imm_data == 0xcafe and r.byte_len == 10 and r.wr_id == 5
    poll_wcs(a.cq)


def test_rdma_read(pair):
    a, b = pair
    data = bytes((i * 7) & 255 for i in range(SIZE))
    b.mr.write(data, SIZE)
    a.post(e.IBV_WR_RDMA_READ, SIZE, peer=b)
    w = poll_wcs(a.cq)[0]
    assert w.status == e.IBV_WC_SUCCESS and w.opcode == e.IBV_WC_RDMA_READ
    assert w.byte_len == SIZE
    assert a.mr.read(SIZE, 0) == data


def test_atomics(pair):
    a, b = pair
    b.mr.write(struct.pack("<Q", 100), 8)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1, sg=[a.sge(0, 8)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_atomic(b.mr.rkey, b.mr.buf, 5, 0)  # compare_add = the addend
    a.qp.post_send(wr)
    w = poll_wcs(a.cq)[0]
    assert w.status == e.IBV_WC_SUCCESS and w.opcode == e.IBV_WC_FETCH_ADD
    assert struct.unpack("<Q", a.mr.read(8, 0))[0] == 100
    assert struct.unpack("<Q", b.mr.read(8, 0))[0] == 105
    for compare, expect_mem in ((105, 7), (105, 7)):  # second compare fails
        wr = SendWR(wr_id=2, opcode=e.IBV_WR_ATOMIC_CMP_AND_SWP, num_sge=1, sg=[a.sge(8, 8)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_atomic(b.mr.rkey, b.mr.buf, compare, 7)
        a.qp.post_send(wr)
        w = poll_wcs(a.cq)[0]
        assert w.status == e.IBV_WC_SUCCESS and w.opcode == e.IBV_WC_COMP_SWAP
        assert struct.unpack("<Q", b.mr.read(8, 0))[0] == expect_mem
    assert struct.unpack("<Q", a.mr.read(8, 8))[0] == 7  # the failed compare saw 7


def test_inline_send_and_unsignaled(pair):
    a, b = pair
    a.mr.write(b"inline!", 7)
    b.post_recv()
    b.post_recv()
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[a.sge(0, 7)],
                send_flags=e.IBV_SEND_INLINE)  # unsignaled
    a.qp.post_send(wr)
    a.post(e.IBV_WR_SEND, 7, wr_id=2)
    assert [w.wr_id for w in poll_wcs(a.cq)] == [2]  # only the signaled one
    assert [w.byte_len for w in poll_wcs(b.cq, 2)] == [7, 7]


def test_zero_length_messages(pair):
    a, b = pair
    b.post_recv()
    a.post(e.IBV_WR_SEND, 0)
    assert poll_wcs(b.cq)[0].byte_len == 0
    a.post(e.IBV_WR_RDMA_WRITE, 0, peer=b)
    a.post(e.IBV_WR_RDMA_READ, 0, peer=b)
    assert [w.status for w in poll_wcs(a.cq, 3)] == [e.IBV_WC_SUCCESS] * 3


def expect_error(a, b, status, *, sender_status=None):
    """The sender's WR fails with `status`, both QPs end in ERR, and a WR
    posted behind it is flushed."""
    a.post(e.IBV_WR_SEND, 8, wr_id=99)
    wcs = poll_wcs(a.cq, 2)
    assert wcs[0].status == status, (wcs[0].status, status)
    assert wcs[1].status == e.IBV_WC_WR_FLUSH_ERR and wcs[1].wr_id == 99
    assert qp_state(a) == e.IBV_QPS_ERR


def test_bad_rkey_is_remote_access_error(pair):
    a, b = pair
    a.post(e.IBV_WR_RDMA_WRITE, 64, peer=b, rkey=b.mr.rkey ^ 0x5a5a)
    expect_error(a, b, e.IBV_WC_REM_ACCESS_ERR)
    assert qp_state(b) == e.IBV_QPS_ERR


def test_out_of_bounds_read_is_remote_access_error(pair):
    a, b = pair
    wr = SendWR(wr_id=3, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[a.sge(0, 64)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf + SIZE - 32)
    a.qp.post_send(wr)
    expect_error(a, b, e.IBV_WC_REM_ACCESS_ERR)


def test_missing_access_flag_is_remote_access_error():
    a = Side("ibemu0")
    b = Side("ibemu1", qp_access=e.IBV_ACCESS_LOCAL_WRITE)  # no remote write
    a.connect(b)
    b.connect(a)
    a.post(e.IBV_WR_RDMA_WRITE, 64, peer=b)
    expect_error(a, b, e.IBV_WC_REM_ACCESS_ERR)


def test_receive_buffer_too_small(pair):
    a, b = pair
    b.post_recv(length=16)
    a.post(e.IBV_WR_SEND, 100)
    expect_error(a, b, e.IBV_WC_REM_INV_REQ_ERR)
    r = poll_wcs(b.cq)[0]
    assert r.status == e.IBV_WC_LOC_LEN_ERR


def test_bad_lkey_is_local_protection_error(pair):
    a, b = pair
    b.post_recv()
    wr = SendWR(wr_id=4, opcode=e.IBV_WR_SEND, num_sge=1, sg=[a.sge(0, 64, lkey=a.mr.lkey ^ 1)],
                send_flags=e.IBV_SEND_SIGNALED)
    a.qp.post_send(wr)
    expect_error(a, b, e.IBV_WC_LOC_PROT_ERR)


def test_no_receive_and_rnr_retry_zero():
    a, b = Side("ibemu0"), Side("ibemu1")
    a.connect(b, rnr_retry=0)
    b.connect(a)
    a.post(e.IBV_WR_SEND, 8)
    expect_error(a, b, e.IBV_WC_RNR_RETRY_EXC_ERR)


def test_rnr_retry_infinite_waits_for_the_receive():
    a, b = Side("ibemu0"), Side("ibemu1")
    a.connect(b, rnr_retry=7)
    b.connect(a)
    a.post(e.IBV_WR_SEND, 8)
    time.sleep(0.3)
    assert a.cq.poll(1)[0] == 0  # still retrying
    b.post_recv()
    assert poll_wcs(a.cq)[0].status == e.IBV_WC_SUCCESS


def test_unreachable_peer_is_retry_exceeded_within_the_timeout(monkeypatch):
    monkeypatch.setenv("IBEMU_STALL_TOLERANCE_MS", "0")  # IBA's exact retry timing
    a, b = Side("ibemu0"), Side("ibemu1")
    a.connect(b, timeout=10, retry_cnt=3)  # 4.2 ms x (3 + 1)
    b.connect(a)
    b.qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)  # drops everything
    start = time.time()
    a.post(e.IBV_WR_SEND, 8, wr_id=1)
    expect_error(a, b, e.IBV_WC_RETRY_EXC_ERR)
    assert time.time() - start < 5


def test_every_outstanding_wr_is_flushed_once_when_the_qp_errs(pair):
    a, b = pair
    for i in range(10):
        b.post_recv(wr_id=100 + i)
    b.qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    wcs = poll_wcs(b.cq, 10)
    assert sorted(w.wr_id for w in wcs) == list(range(100, 110))
    assert {w.status for w in wcs} == {e.IBV_WC_WR_FLUSH_ERR}
    b.post_recv(wr_id=200)  # posted in ERR: flushed at once
    assert poll_wcs(b.cq)[0].wr_id == 200
    time.sleep(0.1)
    assert b.cq.poll(1)[0] == 0


@pytest.mark.parametrize("mtu", [e.IBV_MTU_256, e.IBV_MTU_512, e.IBV_MTU_1024, e.IBV_MTU_2048,
                                 e.IBV_MTU_4096])
def test_multi_packet_messages_at_every_mtu(mtu):
    a, b = Side("ibemu0"), Side("ibemu1")
    a.connect(b, path_mtu=mtu)
    b.connect(a, path_mtu=mtu)
    data = bytes((i * 13) & 255 for i in range(SIZE))
    a.mr.write(data, SIZE)
    b.post_recv()
    a.post(e.IBV_WR_SEND, SIZE)
    assert poll_wcs(b.cq)[0].byte_len == SIZE
    a.post(e.IBV_WR_RDMA_WRITE, SIZE, peer=b)
    a.post(e.IBV_WR_RDMA_READ, SIZE, peer=b)
    assert [w.status for w in poll_wcs(a.cq, 3)] == [e.IBV_WC_SUCCESS] * 3
    assert b.mr.read(SIZE, 0) == data


def test_every_qp_transition():
    """Walks RESET→INIT→RTR→RTS→SQD→RTS→ERR→RESET and checks each with query_qp."""
    a, b = Side("ibemu0"), Side("ibemu1")
    assert qp_state(a) == e.IBV_QPS_RESET
    a.connect(b)
    assert qp_state(a) == e.IBV_QPS_RTS
    a.qp.modify(QPAttr(qp_state=e.IBV_QPS_SQD), e.IBV_QP_STATE)
    assert qp_state(a) == e.IBV_QPS_SQD
    a.qp.modify(QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE)
    assert qp_state(a) == e.IBV_QPS_RTS
    for bad in (e.IBV_QPS_INIT, e.IBV_QPS_RTR):
        with pytest.raises(PyverbsRDMAError) as err:
            a.qp.modify(QPAttr(qp_state=bad), e.IBV_QP_STATE)
        assert err.value.error_code == errno.EINVAL
    a.qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    assert qp_state(a) == e.IBV_QPS_ERR
    a.qp.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
    assert qp_state(a) == e.IBV_QPS_RESET
    a.connect(b)  # a QP reset from ERR is usable again
    assert qp_state(a) == e.IBV_QPS_RTS


def test_rereg_mr_changes_access_and_keeps_the_key(pair):
    a, b = pair
    rkey = b.mr.rkey
    b.mr.rereg(e.IBV_REREG_MR_CHANGE_ACCESS, None, 0, 0,
               e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)
    assert b.mr.rkey == rkey
    a.post(e.IBV_WR_RDMA_READ, 64, peer=b)
    assert poll_wcs(a.cq)[0].status == e.IBV_WC_SUCCESS
    a.post(e.IBV_WR_RDMA_WRITE, 64, peer=b)  # remote write was taken away
    expect_error(a, b, e.IBV_WC_REM_ACCESS_ERR)


def test_responder_raises_access_error_event(pair):
    """IBA 11.6.3.1: the target of a bad RDMA WRITE reports a Local Access
    Violation Work Queue Error (IBV_EVENT_QP_ACCESS_ERR) on its own QP."""
    a, b = pair
    a.post(e.IBV_WR_RDMA_WRITE, 64, peer=b, rkey=b.mr.rkey ^ 0x77)
    expect_error(a, b, e.IBV_WC_REM_ACCESS_ERR)
    event = b.ctx.get_async_event()
    assert event.event_type == e.IBV_EVENT_QP_ACCESS_ERR
    event.ack()


def test_cq_overrun_raises_cq_error_and_qp_fatal():
    """IBA 11.4.2.1 / 11.6.3.1: a completion its CQ cannot hold puts the CQ in
    error (IBV_EVENT_CQ_ERR) and the QP in the error state (IBV_EVENT_QP_FATAL)."""
    a, b = Side("ibemu0"), Side("ibemu1")
    b.cq = CQ(b.ctx, 2)  # a receive CQ with room for two completions
    cap = QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=1, max_recv_sge=1)
    b.qp = QP(b.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=b.cq, rcq=b.cq, cap=cap, sq_sig_all=0))
    a.connect(b, timeout=8, retry_cnt=1)
    b.connect(a)
    for i in range(4):
        b.post_recv(wr_id=i, length=64)
    for i in range(3):
        a.post(e.IBV_WR_SEND, 8, wr_id=i)
    events = set()
    for _ in range(2):
        ev = b.ctx.get_async_event()
        events.add(ev.event_type)
        ev.ack()
    assert events == {e.IBV_EVENT_CQ_ERR, e.IBV_EVENT_QP_FATAL}
    assert qp_state(b) == e.IBV_QPS_ERR


def test_sqd_with_async_notify_raises_sq_drained(pair):
    """IBA 10.3.1.4 / 11.6.3.2: RTS -> SQD with en_sqd_async_notify; once the
    messages in flight are done the QP reports IBV_EVENT_SQ_DRAINED."""
    a, b = pair
    b.post_recv()
    a.post(e.IBV_WR_SEND, 8192)
    attr = QPAttr(qp_state=e.IBV_QPS_SQD)
    attr.en_sqd_async_notify = 1
    a.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_EN_SQD_ASYNC_NOTIFY)
    event = a.ctx.get_async_event()
    assert event.event_type == e.IBV_EVENT_SQ_DRAINED
    event.ack()
    assert poll_wcs(a.cq)[0].status == e.IBV_WC_SUCCESS
    assert qp_state(a) == e.IBV_QPS_SQD
    assert a.qp.query(e.IBV_QP_STATE)[0].sq_draining == 0
