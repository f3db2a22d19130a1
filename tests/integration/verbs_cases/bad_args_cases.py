"""Verbs called with bad arguments fail with the errno a hardware provider
returns, and leave the device usable. Run under the emulated environment
(`ibemu run -- python3 -m pytest THIS_FILE`); test_verbs_errors.py does that."""
import errno

import pytest
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
import pyverbs.enums as e
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr


@pytest.fixture
def ctx():
    with Context(name="ibemu0") as c:
        yield c


def rc_qp(ctx, pd, cq, **cap):
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                      cap=QPCap(max_send_wr=cap.get("wr", 4), max_recv_wr=cap.get("wr", 4),
                                max_send_sge=cap.get("sge", 1), max_recv_sge=cap.get("sge", 1)))
    return QP(pd, init)


def expect_errno(code, fn, *args, **kwargs):
    with pytest.raises(PyverbsRDMAError) as err:
        fn(*args, **kwargs)
    assert err.value.error_code == code, str(err.value)


def test_remote_write_without_local_write_is_einval(ctx):
    pd = PD(ctx)
    expect_errno(errno.EINVAL, MR, pd, 64, e.IBV_ACCESS_REMOTE_WRITE)
    expect_errno(errno.EINVAL, MR, pd, 64, e.IBV_ACCESS_REMOTE_ATOMIC)
    MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE).close()


def test_on_demand_paging_is_not_offered(ctx):
    pd = PD(ctx)
    expect_errno(errno.EOPNOTSUPP, MR, pd, 64, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_ON_DEMAND)


def test_cq_size_limits(ctx):
    expect_errno(errno.EINVAL, CQ, ctx, 0)
    attr = ctx.query_device()
    expect_errno(errno.EINVAL, CQ, ctx, attr.max_cqe + 1)
    CQ(ctx, attr.max_cqe).close()


def test_qp_caps_beyond_device_limits_are_einval(ctx):
    pd, cq = PD(ctx), CQ(ctx, 8)
    attr = ctx.query_device()
    expect_errno(errno.EINVAL, rc_qp, ctx, pd, cq, wr=attr.max_qp_wr + 1)
    expect_errno(errno.EINVAL, rc_qp, ctx, pd, cq, sge=attr.max_sge + 1)


def test_query_port_out_of_range(ctx):
    with pytest.raises(PyverbsRDMAError):
        ctx.query_port(3)
    assert ctx.query_port(2).state == e.IBV_PORT_ACTIVE


def test_illegal_qp_transitions_are_einval(ctx):
    pd, cq = PD(ctx), CQ(ctx, 8)
    qp = rc_qp(ctx, pd, cq)
    # RESET -> RTR skips INIT (IBA 10.3.1).
    attr = QPAttr(qp_state=e.IBV_QPS_RTR)
    expect_errno(errno.EINVAL, qp.modify, attr, e.IBV_QP_STATE)
    # RESET -> INIT without the required P_Key index, port, access flags.
    expect_errno(errno.EINVAL, qp.modify, QPAttr(qp_state=e.IBV_QPS_INIT), e.IBV_QP_STATE)
    init = QPAttr(qp_state=e.IBV_QPS_INIT)
    init.pkey_index, init.port_num, init.qp_access_flags = 0, 1, e.IBV_ACCESS_LOCAL_WRITE
    mask = e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS
    qp.modify(init, mask)
    assert qp.query(e.IBV_QP_STATE)[0].qp_state == e.IBV_QPS_INIT
    # INIT -> RTS skips RTR.
    expect_errno(errno.EINVAL, qp.modify, QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE)
    # A port the device does not have.
    bad = QPAttr(qp_state=e.IBV_QPS_INIT)
    bad.port_num = 7
    expect_errno(errno.EINVAL, qp.modify, bad, e.IBV_QP_STATE | e.IBV_QP_PORT)
    # Any state -> ERR -> RESET is always allowed.
    qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    qp.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
    assert qp.query(e.IBV_QP_STATE)[0].qp_state == e.IBV_QPS_RESET


def test_post_send_before_rts_is_einval(ctx):
    from pyverbs.wr import SGE, SendWR
    pd, cq = PD(ctx), CQ(ctx, 8)
    qp = rc_qp(ctx, pd, cq)
    mr = MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    wr = SendWR(num_sge=1, sg=[SGE(mr.buf, 8, mr.lkey)])
    expect_errno(errno.EINVAL, qp.post_send, wr)
