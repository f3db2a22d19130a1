"""IBV_QP_CREATE_BLOCK_SELF_MCAST_LB (pyverbs): accepted for UD QPs only;
other creation flags are refused. (pyverbs has no ibv_attach_mcast: the
loopback itself is tested with tests/programs/mcast_ud.c.) Run under the
emulated environment; test_multicast.py does that."""
import errno

import pytest
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPCap, QPInitAttrEx

def create(ctx, pd, cq, qp_type, flags):
    cap = QPCap(max_send_wr=1, max_recv_wr=1)
    return QP(ctx, QPInitAttrEx(qp_type=qp_type, scq=cq, rcq=cq, cap=cap, pd=pd,
                                comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_CREATE_FLAGS,
                                create_flags=flags))


@pytest.fixture
def res():
    ctx = Context(name="ibemu0")
    return ctx, PD(ctx), CQ(ctx, 4)


def test_ud_qp_takes_the_flag(res):
    qp = create(*res, e.IBV_QPT_UD, e.IBV_QP_CREATE_BLOCK_SELF_MCAST_LB)
    qp.close()


@pytest.mark.parametrize("qp_type,flags,err", [
    (e.IBV_QPT_RC, e.IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, errno.EINVAL),
    (e.IBV_QPT_UD, e.IBV_QP_CREATE_SCATTER_FCS, errno.EOPNOTSUPP),
], ids=["rc", "scatter-fcs"])
def test_other_uses_are_refused(res, qp_type, flags, err):
    with pytest.raises(PyverbsRDMAError) as e_info:
        create(*res, qp_type, flags)
    assert e_info.value.error_code == err
