"""Memory windows (IBA 10.6.7) between ibemu0 and ibemu1 in one process:
type 1 windows bound with ibv_bind_mw, type 2 windows bound with
IBV_WR_BIND_MW and ibv_wr_bind_mw, taken back by LOCAL_INV, SEND with
Invalidate, a zero-length bind or deallocation; every way a bind or an access
through a window can be wrong. Run under the emulated environment;
test_rc_ops.py does that."""
import errno

import pytest
import pyverbs.enums as e
from pyverbs.mr import MW, MWBind, MWBindInfo
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QPCap, QPEx, QPInitAttrEx
from pyverbs.wr import SendWR

from rc_ops_cases import ALL_ACCESS, SIZE, Side, expect_error, poll_wcs, qp_state

BINDABLE = ALL_ACCESS | e.IBV_ACCESS_MW_BIND
WINDOW_OFFSET, WINDOW_LEN = 4096, 8192


@pytest.fixture
def pair():
    a, b = Side("ibemu0"), Side("ibemu1", mr_access=BINDABLE)
    a.connect(b)
    b.connect(a)
    return a, b


def bind_info(side, access=e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ,
              offset=WINDOW_OFFSET, length=WINDOW_LEN):
    return MWBindInfo(side.mr, side.mr.buf + offset, length, access)


def bind_type2(side, mw, wr_id=50, **kw):
    """Binds a type 2 window with IBV_WR_BIND_MW; returns its new rkey."""
    wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_BIND_MW, send_flags=e.IBV_SEND_SIGNALED)
    wr.set_bind_wr(mw, bind_info(side, **kw))
    side.qp.post_send(wr)
    wc = poll_wcs(side.cq)[0]
    assert (wc.status, wc.opcode, wc.wr_id) == (e.IBV_WC_SUCCESS, e.IBV_WC_BIND_MW, wr_id)
    assert wr.rkey >> 8 == mw.rkey >> 8 and wr.rkey != mw.rkey
    return wr.rkey


def post_write(a, b, rkey, offset, length, wr_id=61):
    wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[a.sge(0, length)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(rkey, b.mr.buf + offset)
    a.qp.post_send(wr)
    return poll_wcs(a.cq)[0].status


def test_device_offers_both_window_types():
    from pyverbs.device import Context
    attr = Context(name="ibemu0").query_device()
    assert attr.max_mw > 0
    assert attr.device_cap_flags & e.IBV_DEVICE_MEM_WINDOW
    assert attr.device_cap_flags & e.IBV_DEVICE_MEM_WINDOW_TYPE_2B


def test_type1_window_bind_write_and_zero_length_unbind(pair):
    a, b = pair
    mw = MW(b.pd, e.IBV_MW_TYPE_1)
    before = mw.rkey
    b.qp.bind_mw(mw, MWBind(bind_info(b), e.IBV_SEND_SIGNALED))
    wc = poll_wcs(b.cq)[0]
    assert (wc.status, wc.opcode) == (e.IBV_WC_SUCCESS, e.IBV_WC_BIND_MW)
    assert mw.rkey != before and mw.rkey >> 8 == before >> 8, "ibv_bind_mw moves the key on"
    a.mr.write(b"t" * 64, 64)
    assert post_write(a, b, mw.rkey, WINDOW_OFFSET + 100, 64) == e.IBV_WC_SUCCESS
    assert b.mr.read(64, WINDOW_OFFSET + 100) == b"t" * 64
    b.qp.bind_mw(mw, MWBind(MWBindInfo(b.mr, b.mr.buf, 0, 0), e.IBV_SEND_SIGNALED))
    assert poll_wcs(b.cq)[0].status == e.IBV_WC_SUCCESS
    assert post_write(a, b, mw.rkey, WINDOW_OFFSET, 8) == e.IBV_WC_REM_ACCESS_ERR
    assert qp_state(a) == e.IBV_QPS_ERR


def test_ibv_bind_mw_refuses_a_type2_window(pair):
    """ibv_bind_mw takes type 1 windows only (libibverbs refuses type 2)."""
    _, b = pair
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    with pytest.raises(PyverbsRDMAError):
        b.qp.bind_mw(mw, MWBind(bind_info(b), e.IBV_SEND_SIGNALED))


def test_type2_window_write_read_then_local_invalidate(pair):
    a, b = pair
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    rkey = bind_type2(b, mw)
    a.mr.write(b"2" * 32, 32)
    assert post_write(a, b, rkey, WINDOW_OFFSET, 32) == e.IBV_WC_SUCCESS
    assert b.mr.read(32, WINDOW_OFFSET) == b"2" * 32
    inv = SendWR(wr_id=70, opcode=e.IBV_WR_LOCAL_INV, send_flags=e.IBV_SEND_SIGNALED)
    inv.imm_data = rkey
    b.qp.post_send(inv)
    wc = poll_wcs(b.cq)[0]
    assert (wc.status, wc.opcode, wc.wr_id) == (e.IBV_WC_SUCCESS, e.IBV_WC_LOCAL_INV, 70)
    assert post_write(a, b, rkey, WINDOW_OFFSET, 32) == e.IBV_WC_REM_ACCESS_ERR


def test_send_with_invalidate_closes_the_window_and_tells_the_receiver(pair):
    a, b = pair
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    rkey = bind_type2(b, mw)
    b.post_recv(wr_id=80)
    a.post(e.IBV_WR_SEND_WITH_INV, 16, wr_id=81, imm_data=rkey)
    sent = poll_wcs(a.cq)[0]
    assert (sent.status, sent.opcode) == (e.IBV_WC_SUCCESS, e.IBV_WC_SEND)
    r = poll_wcs(b.cq)[0]
    assert (r.status, r.opcode, r.byte_len) == (e.IBV_WC_SUCCESS, e.IBV_WC_RECV, 16)
    assert r.wc_flags & e.IBV_WC_WITH_INV
    assert r.imm_data == rkey, "invalidated_rkey, in host order"
    assert post_write(a, b, rkey, WINDOW_OFFSET, 8) == e.IBV_WC_REM_ACCESS_ERR


def test_send_with_invalidate_of_a_key_that_is_no_window_is_invalid_request(pair):
    a, b = pair
    b.post_recv(wr_id=80)
    a.post(e.IBV_WR_SEND_WITH_INV, 16, wr_id=81, imm_data=b.mr.rkey)
    expect_error(a, b, e.IBV_WC_REM_INV_REQ_ERR)
    assert poll_wcs(b.cq)[0].status == e.IBV_WC_REM_INV_REQ_ERR
    assert qp_state(b) == e.IBV_QPS_ERR


@pytest.mark.parametrize("offset,length,opcode", [
    (WINDOW_OFFSET - 1, 8, e.IBV_WR_RDMA_WRITE),  # starts before the window
    (WINDOW_OFFSET + WINDOW_LEN - 4, 8, e.IBV_WR_RDMA_WRITE),  # runs past its end
    (WINDOW_OFFSET, 8, e.IBV_WR_RDMA_READ),  # the bind granted write only
])
def test_access_outside_what_the_window_grants_is_remote_access_error(pair, offset, length,
                                                                      opcode):
    a, b = pair
    rkey = bind_type2(b, MW(b.pd, e.IBV_MW_TYPE_2), access=e.IBV_ACCESS_REMOTE_WRITE)
    wr = SendWR(wr_id=90, opcode=opcode, num_sge=1, sg=[a.sge(0, length)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(rkey, b.mr.buf + offset)
    a.qp.post_send(wr)
    expect_error(a, b, e.IBV_WC_REM_ACCESS_ERR)


def test_bind_past_the_region_is_bind_error_and_flushes_the_rest(pair):
    _, b = pair
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    wr = SendWR(wr_id=51, opcode=e.IBV_WR_BIND_MW, send_flags=e.IBV_SEND_SIGNALED)
    wr.set_bind_wr(mw, bind_info(b, offset=SIZE - 16, length=32))
    b.qp.post_send(wr)
    b.post(e.IBV_WR_SEND, 8, wr_id=52)
    wcs = poll_wcs(b.cq, 2)
    assert [(w.wr_id, w.status) for w in wcs] == [(51, e.IBV_WC_MW_BIND_ERR),
                                                  (52, e.IBV_WC_WR_FLUSH_ERR)]
    assert qp_state(b) == e.IBV_QPS_ERR


def test_bind_on_a_region_without_mw_bind_access_is_bind_error():
    a, b = Side("ibemu0"), Side("ibemu1")  # b's MR lacks IBV_ACCESS_MW_BIND
    a.connect(b)
    b.connect(a)
    wr = SendWR(wr_id=53, opcode=e.IBV_WR_BIND_MW, send_flags=e.IBV_SEND_SIGNALED)
    # Held in a name: the WR keeps only the ibv_mw pointer, not the object.
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    wr.set_bind_wr(mw, bind_info(b))
    b.qp.post_send(wr)
    assert poll_wcs(b.cq)[0].status == e.IBV_WC_MW_BIND_ERR


def test_deallocated_window_no_longer_opens_memory(pair):
    a, b = pair
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    rkey = bind_type2(b, mw)
    mw.close()
    assert post_write(a, b, rkey, WINDOW_OFFSET, 8) == e.IBV_WC_REM_ACCESS_ERR


def test_region_with_a_bound_window_cannot_be_deregistered(pair):
    _, b = pair
    mw = MW(b.pd, e.IBV_MW_TYPE_1)
    b.qp.bind_mw(mw, MWBind(bind_info(b), e.IBV_SEND_SIGNALED))
    poll_wcs(b.cq)
    with pytest.raises(PyverbsRDMAError) as err:
        b.mr.close()
    assert err.value.error_code == errno.EBUSY
    mw.close()
    b.mr.close()


def test_window_of_unknown_type_is_refused():
    from pyverbs.device import Context
    with pytest.raises(PyverbsRDMAError) as err:
        MW(PD(Context(name="ibemu0")), 3)
    assert err.value.error_code == errno.EINVAL


def test_extended_api_bind_send_inv_and_local_inv():
    """ibv_wr_bind_mw, ibv_wr_send_inv and ibv_wr_local_inv on QPs from
    ibv_create_qp_ex."""
    ops = (e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_BIND_MW
           | e.IBV_QP_EX_WITH_SEND_WITH_INV | e.IBV_QP_EX_WITH_LOCAL_INV)
    a, b = Side("ibemu0"), Side("ibemu1", mr_access=BINDABLE)
    for s in (a, b):
        cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=2, max_recv_sge=2)
        s.qp = QPEx(s.ctx, QPInitAttrEx(qp_type=e.IBV_QPT_RC, scq=s.cq, rcq=s.cq, pd=s.pd,
                                        cap=cap, send_ops_flags=ops,
                                        comp_mask=e.IBV_QP_INIT_ATTR_PD
                                        | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
    a.connect(b)
    b.connect(a)
    windows = [MW(b.pd, e.IBV_MW_TYPE_2) for _ in range(2)]
    keys = [(w.rkey & ~0xff) | ((w.rkey + 1) & 0xff) for w in windows]
    q = b.qp
    q.wr_start()
    q.wr_flags = e.IBV_SEND_SIGNALED
    for i, (w, k) in enumerate(zip(windows, keys)):
        q.wr_id = 100 + i
        q.wr_bind_mw(w, k, bind_info(b))
    q.wr_complete()
    assert [(w.status, w.opcode) for w in poll_wcs(b.cq, 2)] == \
        [(e.IBV_WC_SUCCESS, e.IBV_WC_BIND_MW)] * 2
    b.post_recv(wr_id=110)
    q = a.qp
    q.wr_start()
    q.wr_flags = e.IBV_SEND_SIGNALED
    q.wr_id = 111
    q.wr_send_inv(keys[0])
    q.wr_set_sge(a.sge(0, 8))
    q.wr_complete()
    assert poll_wcs(a.cq)[0].status == e.IBV_WC_SUCCESS
    r = poll_wcs(b.cq)[0]
    assert r.wc_flags & e.IBV_WC_WITH_INV and r.imm_data == keys[0]
    q = b.qp
    q.wr_start()
    q.wr_flags = e.IBV_SEND_SIGNALED
    q.wr_id = 112
    q.wr_local_inv(keys[1])
    q.wr_complete()
    wc = poll_wcs(b.cq)[0]
    assert (wc.status, wc.opcode) == (e.IBV_WC_SUCCESS, e.IBV_WC_LOCAL_INV)
    assert post_write(a, b, keys[1], WINDOW_OFFSET, 8) == e.IBV_WC_REM_ACCESS_ERR
