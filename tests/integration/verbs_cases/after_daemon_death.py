"""Opens ibemu0, says "ready", waits for a line on stdin (sent once the test
has killed the daemon), then calls verbs that need the daemon. Each must
fail with an errno (or succeed), never abort the program; one line per
verb: "NAME errno N" or "NAME ok"."""
import os
import sys

from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QPCap, QPInitAttr
from pyverbs.qp import QP
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.xrcd import XRCD, XRCDInitAttr
import pyverbs.enums as e

ctx = Context(name="ibemu0")
pd = PD(ctx)
cq = CQ(ctx, 16)
# An SRQ's number is the daemon's to hand out, on first use.
srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=8, max_sge=1)))
print("ready", flush=True)
sys.stdin.readline()


def attempt(name, make):
    try:
        make()
        print(f"{name} ok", flush=True)
    except PyverbsRDMAError as err:
        print(f"{name} errno {err.error_code}", flush=True)


def rc_qp():
    return QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                             cap=QPCap(max_send_wr=4, max_recv_wr=4)))


def xrcd():
    return XRCD(ctx, XRCDInitAttr(e.IBV_XRCD_INIT_ATTR_OFLAGS | e.IBV_XRCD_INIT_ATTR_FD,
                                  os.O_CREAT, -1))


attempt("create_qp", rc_qp)
attempt("srq_number", srq.get_srq_num)
attempt("open_xrcd", xrcd)
print("done", flush=True)
