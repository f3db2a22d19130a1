"""The extended verbs API between ibemu0 and ibemu1 in one process: QPs from
ibv_create_qp_ex posting with ibv_wr_*, completions read from CQs of
ibv_create_cq_ex with start_poll/next_poll/end_poll and every read_* function.
Run under the emulated environment (`ibemu run -- python3 -m pytest
THIS_FILE`); test_extended_api.py does that."""
import ctypes
import errno
import socket
import struct
import time

import pytest
import pyverbs.enums as e
from pyverbs.addr import AHAttr
from pyverbs.cq import CQEX, CqInitAttrEx, PollCqAttr
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import DataBuffer, QPAttr, QPCap, QPEx, QPInitAttrEx
from pyverbs.wr import SGE, RecvWR

UC_OPS = (e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_SEND_WITH_IMM | e.IBV_QP_EX_WITH_RDMA_WRITE
          | e.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)
OPS = (UC_OPS | e.IBV_QP_EX_WITH_RDMA_READ | e.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
       | e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)
MAX_SEND_WR, MAX_SGE, MAX_INLINE = 16, 4, 128
RECV_BASE, RECV_SLOT, WRITE_BASE = 1024, 128, 3072  # layout of each side's 4 KiB MR
ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
          | e.IBV_ACCESS_REMOTE_ATOMIC)


def qp_init_attr(side, qp_type=e.IBV_QPT_RC, ops=OPS):
    cap = QPCap(max_send_wr=MAX_SEND_WR, max_recv_wr=16, max_send_sge=MAX_SGE, max_recv_sge=4,
                max_inline_data=MAX_INLINE)
    return QPInitAttrEx(qp_type=qp_type, scq=side.cq, rcq=side.cq, pd=side.pd, cap=cap,
                        send_ops_flags=ops,
                        comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)


class Side:
    def __init__(self, name):
        self.ctx = Context(name=name)
        self.pd = PD(self.ctx)
        self.cq = CQEX(self.ctx, CqInitAttrEx(cqe=64, wc_flags=e.IBV_WC_STANDARD_FLAGS))
        self.mr = MR(self.pd, 4096, ACCESS)
        self.qp = QPEx(self.ctx, qp_init_attr(self))
        self.lid = self.ctx.query_port(1).lid

    def connect(self, peer):
        a = QPAttr(qp_state=e.IBV_QPS_INIT)
        a.pkey_index, a.port_num, a.qp_access_flags = 0, 1, ACCESS
        self.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
                       | e.IBV_QP_ACCESS_FLAGS)
        a = QPAttr(qp_state=e.IBV_QPS_RTR)
        a.path_mtu, a.dest_qp_num, a.rq_psn = e.IBV_MTU_1024, peer.qp.qp_num, 0
        a.max_dest_rd_atomic, a.min_rnr_timer = 1, 1
        a.ah_attr = AHAttr(port_num=1, dlid=peer.lid, sl=0)
        self.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN
                       | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
        a = QPAttr(qp_state=e.IBV_QPS_RTS)
        a.timeout, a.retry_cnt, a.rnr_retry, a.sq_psn, a.max_rd_atomic = 14, 7, 7, 0, 1
        self.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT
                       | e.IBV_QP_RNR_RETRY | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)

    def post_recvs(self, n, first_id=1000):
        for i in range(n):
            sge = SGE(self.mr.buf + RECV_BASE + i * RECV_SLOT, RECV_SLOT, self.mr.lkey)
            self.qp.post_recv(RecvWR(wr_id=first_id + i, num_sge=1, sg=[sge]))

    def sge(self, offset, data):
        """Writes `data` at `offset` of the MR; returns an SGE over it."""
        self.mr.write(data, len(data), offset)
        return SGE(self.mr.buf + offset, len(data), self.mr.lkey)


@pytest.fixture
def pair():
    a, b = Side("ibemu0"), Side("ibemu1")
    a.connect(b)
    b.connect(a)
    yield a, b
    for s in (a, b):
        s.ctx.close()


def read_all(cq):
    """The completion start_poll/next_poll moved to, through every read_*."""
    return dict(wr_id=cq.wr_id, status=cq.status, opcode=cq.read_opcode(),
                vendor_err=cq.read_vendor_err(), byte_len=cq.read_byte_len(),
                imm=socket.ntohl(cq.read_imm_data()), qp_num=cq.read_qp_num(),
                src_qp=cq.read_src_qp(), wc_flags=cq.read_wc_flags(), slid=cq.read_slid(),
                sl=cq.read_sl(), dlid_path_bits=cq.read_dlid_path_bits())


def poll(cq, n, timeout=10.0):
    """Polls exactly n completions: start_poll, then next_poll, then end_poll."""
    deadline = time.time() + timeout
    attr = PollCqAttr()
    while (rc := cq.start_poll(attr)) == errno.ENOENT:
        assert time.time() < deadline, "no completion arrived"
    assert rc == 0, rc
    out = []
    try:
        out.append(read_all(cq))
        while len(out) < n:
            while (rc := cq.poll_next()) == errno.ENOENT:
                assert time.time() < deadline, f"only {len(out)} of {n} completions arrived"
            assert rc == 0, rc
            out.append(read_all(cq))
    finally:
        cq.end_poll()
    return out


def assert_empty(cq, settle=0.3):
    """Nothing arrives on `cq` within `settle` seconds."""
    deadline = time.time() + settle
    while time.time() < deadline:
        rc = cq.start_poll(PollCqAttr())
        if rc == 0:
            wc = read_all(cq)
            cq.end_poll()
            pytest.fail(f"unexpected completion {wc}")
        assert rc == errno.ENOENT


def expect_errno(code, fn, *args, **kwargs):
    with pytest.raises(PyverbsRDMAError) as err:
        fn(*args, **kwargs)
    assert err.value.error_code == code, str(err.value)


def test_every_op_and_setter_in_one_region(pair):
    a, b = pair
    b.post_recvs(5)
    raddr, rkey = b.mr.buf + WRITE_BASE, b.mr.rkey
    inline = ctypes.create_string_buffer(b"inline-payload", 14)
    q = a.qp
    q.wr_start()
    q.wr_flags = e.IBV_SEND_SIGNALED
    q.wr_id = 1
    q.wr_send()
    q.wr_set_sge(a.sge(0, b"plain send"))
    q.wr_id = 2
    q.wr_send_imm(0x11223344)
    q.wr_set_sge_list(3, [a.sge(100, b"one|"), a.sge(200, b"two|"), a.sge(300, b"three")])
    q.wr_id = 3
    q.wr_send()
    q.wr_set_inline_data(ctypes.addressof(inline), 14)
    ctypes.memset(inline, ord("X"), 14)  # the setter copied it: reusable at once
    q.wr_id = 4
    q.wr_send_imm(0xCAFE)
    parts = [ctypes.create_string_buffer(s) for s in (b"in", b"line ", b"list")]
    q.wr_set_inline_data_list(3, [DataBuffer(ctypes.addressof(p), len(p.value)) for p in parts])
    q.wr_id = 5
    q.wr_rdma_write(rkey, raddr)
    q.wr_set_sge(a.sge(400, b"written by RDMA WRITE"))
    q.wr_id = 6
    q.wr_rdma_write_imm(rkey, raddr + 64, 0xFEEDBEEF)
    q.wr_set_inline_data_list(2, [DataBuffer(ctypes.addressof(p), len(p.value))
                                  for p in parts[1:]])
    q.wr_complete()

    sent = poll(a.cq, 6)
    assert [c["wr_id"] for c in sent] == [1, 2, 3, 4, 5, 6]
    assert [c["opcode"] for c in sent] == [e.IBV_WC_SEND] * 4 + [e.IBV_WC_RDMA_WRITE] * 2
    for c in sent:
        assert c["status"] == e.IBV_WC_SUCCESS and c["vendor_err"] == 0
        assert c["qp_num"] == a.qp.qp_num

    got = poll(b.cq, 5)
    assert [c["wr_id"] for c in got] == [1000, 1001, 1002, 1003, 1004]
    assert [c["opcode"] for c in got] == [e.IBV_WC_RECV] * 4 + [e.IBV_WC_RECV_RDMA_WITH_IMM]
    assert [c["byte_len"] for c in got] == [10, 13, 14, 11, 9]
    with_imm = [bool(c["wc_flags"] & e.IBV_WC_WITH_IMM) for c in got]
    assert with_imm == [False, True, False, True, True]
    assert [c["imm"] for c in got if c["wc_flags"] & e.IBV_WC_WITH_IMM] == [
        0x11223344, 0xCAFE, 0xFEEDBEEF]
    for c in got:
        assert c["status"] == e.IBV_WC_SUCCESS and c["vendor_err"] == 0
        assert c["qp_num"] == b.qp.qp_num and c["src_qp"] == a.qp.qp_num
        assert c["slid"] == a.lid and c["sl"] == 0 and c["dlid_path_bits"] == 0
        assert not c["wc_flags"] & e.IBV_WC_GRH

    slot = lambda i, n: b.mr.read(n, RECV_BASE + i * RECV_SLOT)
    assert [slot(0, 10), slot(1, 13), slot(2, 14), slot(3, 11)] == [
        b"plain send", b"one|two|three", b"inline-payload", b"inline list"]
    assert b.mr.read(21, WRITE_BASE) == b"written by RDMA WRITE"
    assert b.mr.read(9, WRITE_BASE + 64) == b"line list"


def test_read_and_atomics_in_one_region(pair):
    """max_rd_atomic is 1: the requester has them in flight one at a time."""
    a, b = pair
    b.mr.write(b"remote bytes for RDMA READ", 26, WRITE_BASE)
    b.mr.write(struct.pack("<QQ", 100, 7), 16, WRITE_BASE + 64)
    q = a.qp
    q.wr_start()
    q.wr_flags = e.IBV_SEND_SIGNALED
    q.wr_id = 21
    q.wr_rdma_read(b.mr.rkey, b.mr.buf + WRITE_BASE)
    q.wr_set_sge_list(2, [SGE(a.mr.buf + 512, 12, a.mr.lkey),
                          SGE(a.mr.buf + 600, 14, a.mr.lkey)])
    q.wr_id = 22
    q.wr_atomic_fetch_add(b.mr.rkey, b.mr.buf + WRITE_BASE + 64, 5)
    q.wr_set_sge(SGE(a.mr.buf + 704, 8, a.mr.lkey))
    q.wr_id = 23
    q.wr_atomic_cmp_swp(b.mr.rkey, b.mr.buf + WRITE_BASE + 72, 7, 42)
    q.wr_set_sge(SGE(a.mr.buf + 712, 8, a.mr.lkey))
    q.wr_id = 24
    q.wr_atomic_cmp_swp(b.mr.rkey, b.mr.buf + WRITE_BASE + 72, 7, 99)  # compare fails now
    q.wr_set_sge(SGE(a.mr.buf + 720, 8, a.mr.lkey))
    q.wr_complete()
    got = poll(a.cq, 4)
    assert [c["wr_id"] for c in got] == [21, 22, 23, 24]
    assert [c["opcode"] for c in got] == [e.IBV_WC_RDMA_READ, e.IBV_WC_FETCH_ADD,
                                          e.IBV_WC_COMP_SWAP, e.IBV_WC_COMP_SWAP]
    assert [c["byte_len"] for c in got] == [26, 8, 8, 8]
    assert all(c["status"] == e.IBV_WC_SUCCESS and c["qp_num"] == a.qp.qp_num for c in got)
    assert a.mr.read(12, 512) + a.mr.read(14, 600) == b"remote bytes for RDMA READ"
    assert struct.unpack("<QQQ", a.mr.read(24, 704)) == (100, 7, 42)
    assert struct.unpack("<QQ", b.mr.read(16, WRITE_BASE + 64)) == (105, 42)
    assert_empty(b.cq, settle=0.05)  # READ and atomics consume no receive
    # Inline data makes no sense where data comes back.
    for build in (lambda: q.wr_rdma_read(b.mr.rkey, b.mr.buf),
                  lambda: q.wr_atomic_fetch_add(b.mr.rkey, b.mr.buf, 1)):
        q.wr_start()
        build()
        q.wr_set_inline_data(a.mr.buf, 8)
        expect_errno(errno.EINVAL, q.wr_complete)


def test_unsignaled_wrs_complete_silently(pair):
    a, b = pair
    b.post_recvs(3)
    q = a.qp
    q.wr_start()
    for i, flags in enumerate([0, 0, e.IBV_SEND_SIGNALED]):
        q.wr_id, q.wr_flags = 10 + i, flags
        q.wr_send()
        q.wr_set_sge(a.sge(64 * i, b"msg%d" % i))
    q.wr_complete()
    assert [c["wr_id"] for c in poll(a.cq, 1)] == [12]
    assert [c["byte_len"] for c in poll(b.cq, 3)] == [4, 4, 4]
    assert_empty(a.cq)


def test_abort_posts_nothing(pair):
    a, b = pair
    b.post_recvs(2)
    q = a.qp
    q.wr_start()
    q.wr_id, q.wr_flags = 7, e.IBV_SEND_SIGNALED
    q.wr_send()
    q.wr_set_sge(a.sge(0, b"aborted"))
    q.wr_rdma_write(b.mr.rkey, b.mr.buf + WRITE_BASE)
    q.wr_set_inline_data_list(1, [DataBuffer(a.mr.buf, 7)])
    q.wr_abort()
    assert_empty(a.cq)
    assert_empty(b.cq, settle=0.05)
    assert b.mr.read(7, WRITE_BASE) == bytes(7)
    # The QP is usable afterwards and only the new WR arrives.
    q.wr_start()
    q.wr_id = 8
    q.wr_send()
    q.wr_set_sge(a.sge(0, b"after abort"))
    q.wr_complete()
    assert [c["wr_id"] for c in poll(a.cq, 1)] == [8]
    got = poll(b.cq, 1)
    assert got[0]["wr_id"] == 1000 and b.mr.read(11, RECV_BASE) == b"after abort"
    assert_empty(b.cq, settle=0.05)


def bad_region(a, build):
    """Builds a region that starts with a valid SEND, then `build`s a bad WR
    after it; returns the errno of wr_complete."""
    q = a.qp
    q.wr_start()
    q.wr_id, q.wr_flags = 1, e.IBV_SEND_SIGNALED
    q.wr_send()
    q.wr_set_sge(a.sge(0, b"valid"))
    build(q)
    with pytest.raises(PyverbsRDMAError) as err:
        q.wr_complete()
    return err.value.error_code


def test_errors_inside_a_region_roll_it_back(pair):
    a, b = pair
    b.post_recvs(2)
    granted = a.qp.query(e.IBV_QP_CAP)[1].cap
    assert granted.max_inline_data >= MAX_INLINE and granted.max_send_sge >= MAX_SGE
    sges = [SGE(a.mr.buf, 1, a.mr.lkey)] * (granted.max_send_sge + 1)
    too_long = DataBuffer(a.mr.buf, granted.max_inline_data + 1)

    def too_many_sges(q):
        q.wr_send()
        q.wr_set_sge_list(len(sges), sges)

    def inline_too_long(q):
        q.wr_send()
        q.wr_set_inline_data_list(1, [too_long])

    def inline_on_split_list(q):
        q.wr_rdma_write(b.mr.rkey, b.mr.buf)
        q.wr_set_inline_data_list(2, [DataBuffer(a.mr.buf, granted.max_inline_data),
                                      DataBuffer(a.mr.buf, 1)])

    def more_wrs_than_the_queue(q):
        for _ in range(granted.max_send_wr):
            q.wr_send()

    assert bad_region(a, too_many_sges) == errno.ENOMEM
    assert bad_region(a, inline_too_long) == errno.ENOMEM
    assert bad_region(a, inline_on_split_list) == errno.ENOMEM
    assert bad_region(a, more_wrs_than_the_queue) == errno.ENOMEM
    # Nothing of the failed regions went out, not even their valid first WR.
    assert_empty(a.cq)
    assert_empty(b.cq, settle=0.05)
    # A setter with no WR to apply to.
    q = a.qp
    q.wr_start()
    q.wr_set_sge(a.sge(0, b"x"))
    expect_errno(errno.EINVAL, q.wr_complete)
    # The QP still works.
    q.wr_start()
    q.wr_id = 99
    q.wr_send()
    q.wr_set_sge(a.sge(0, b"still fine"))
    q.wr_complete()
    assert [c["wr_id"] for c in poll(a.cq, 1)] == [99]
    assert poll(b.cq, 1)[0]["byte_len"] == 10


def test_post_before_rts_fails_at_complete(pair):
    a, _ = pair
    side = Side("ibemu0")  # a fresh QP in RESET
    q = side.qp
    q.wr_start()
    q.wr_send()
    q.wr_set_sge(side.sge(0, b"too early"))
    expect_errno(errno.EINVAL, q.wr_complete)
    side.ctx.close()


def test_send_ops_the_device_does_not_offer_are_eopnotsupp(pair):
    a, _ = pair
    for ops in (e.IBV_QP_EX_WITH_TSO, OPS | e.IBV_QP_EX_WITH_TSO):
        expect_errno(errno.EOPNOTSUPP, QPEx, a.ctx, qp_init_attr(a, ops=ops))
    # RDMA READ, atomics and SEND with Invalidate are RC-only operations
    # (IBA table 84).
    for ops in (e.IBV_QP_EX_WITH_RDMA_READ, e.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
                e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, e.IBV_QP_EX_WITH_SEND_WITH_INV):
        expect_errno(errno.EOPNOTSUPP, QPEx, a.ctx, qp_init_attr(a, e.IBV_QPT_UC, ops))
    # UC takes the operations it has, binds and local invalidates included.
    QPEx(a.ctx, qp_init_attr(a, e.IBV_QPT_UC, UC_OPS | e.IBV_QP_EX_WITH_BIND_MW
                             | e.IBV_QP_EX_WITH_LOCAL_INV)).close()


def test_cq_ex_attributes(pair):
    a, _ = pair
    unsupported = (e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
                   e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK, e.IBV_WC_EX_WITH_CVLAN,
                   e.IBV_WC_EX_WITH_FLOW_TAG, e.IBV_WC_EX_WITH_TM_INFO)
    for flag in unsupported:
        with pytest.raises(PyverbsRDMAError) as err:
            CQEX(a.ctx, CqInitAttrEx(cqe=8, wc_flags=e.IBV_WC_EX_WITH_BYTE_LEN | flag))
        assert err.value.error_code == errno.EOPNOTSUPP, flag
    flags_mask = e.IBV_CQ_INIT_ATTR_MASK_FLAGS
    CQEX(a.ctx, CqInitAttrEx(cqe=8, comp_mask=flags_mask,
                             flags=e.IBV_CREATE_CQ_ATTR_SINGLE_THREADED)).close()
    cases = [(errno.EOPNOTSUPP, dict(comp_mask=flags_mask,
                                     flags=e.IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)),
             (errno.EINVAL, dict(comp_mask=flags_mask, flags=1 << 7)),
             (errno.EINVAL, dict(comp_mask=1 << 7)),
             (errno.EINVAL, dict(comp_vector=1)),
             (errno.EINVAL, dict(cqe=0))]
    for code, kw in cases:
        with pytest.raises(PyverbsRDMAError) as err:
            CQEX(a.ctx, CqInitAttrEx(**{"cqe": 8, **kw}))
        assert err.value.error_code == code, kw
    # A CQ without optional wc_flags still polls (opcode, status, wr_id).
    CQEX(a.ctx, CqInitAttrEx(cqe=8, wc_flags=0)).close()
