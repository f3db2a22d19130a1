"""Per-context limits (the daemon's config: limits.qps_per_context 8,
limits.registered_bytes_per_context 1 MiB): past them a verb fails with
ENOMEM, as a real provider does at its resource limits, and the context
stays usable. Run by test_limits.py under the emulated environment."""
import errno

import pytest
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
import pyverbs.enums as e
from pyverbs.qp import QP, QPCap, QPInitAttr

QPS = 8
BYTES = 1 << 20


def rc_qp(pd, cq):
    return QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                             cap=QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1,
                                       max_recv_sge=1)))


def enomem(fn, *args):
    with pytest.raises(PyverbsRDMAError) as err:
        fn(*args)
    assert err.value.error_code == errno.ENOMEM, str(err.value)


def test_qps_past_the_limit_get_enomem_and_freed_ones_come_back():
    with Context(name="ibemu0") as ctx:
        pd, cq = PD(ctx), CQ(ctx, 16)
        qps = [rc_qp(pd, cq) for _ in range(QPS)]
        enomem(rc_qp, pd, cq)
        qps.pop().close()
        qps.append(rc_qp(pd, cq))
        # Each context has its own allowance.
        with Context(name="ibemu0") as other:
            opd, ocq = PD(other), CQ(other, 16)
            rc_qp(opd, ocq).close()


def test_registrations_past_the_byte_limit_get_enomem():
    with Context(name="ibemu0") as ctx:
        pd = PD(ctx)
        access = e.IBV_ACCESS_LOCAL_WRITE
        half = MR(pd, BYTES // 2, access)
        enomem(MR, pd, BYTES // 2 + 1, access)
        quarter = MR(pd, BYTES // 4, access)
        half.close()
        MR(pd, BYTES // 2, access).close()
        quarter.close()
        MR(pd, BYTES, access).close()
