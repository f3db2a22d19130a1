"""The queue sizes ibv_create_srq grants, as pyverbs sees them: mlx5's
rounding on HCAs claiming a ConnectX id (an SRQ of 0 WRs or 0 SGEs is
created, as rdma-core's test_mlx5_huge_page expects), the IBA's letter on
the others (0 is refused)."""
import re


# For each (max_wr, max_sge): "granted WR SGE, query WR SGE" or "errno N".
SRQ_SIZES = r"""
import sys
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr

pd = PD(Context(name=sys.argv[1]))
for wr, sge in ((0, 0), (0, 1), (1, 0), (1, 1), (100, 5), (16, 16)):
    init = SrqInitAttr(SrqAttr(max_wr=wr, max_sge=sge))
    try:
        srq = SRQ(pd, init)
    except PyverbsRDMAError as ex:
        print(f"{wr} {sge}: errno {ex.error_code}")
        continue
    q = srq.query()
    print(f"{wr} {sge}: granted {init.max_wr} {init.max_sge}, query {q.max_wr} {q.max_sge}")
    srq.close()
srq = SRQ(pd, SrqInitAttr())  # all zero, as test_mlx5_huge_page creates it
print("default:", srq.query().max_wr, srq.query().max_sge)
"""


def srq_sizes(fabric):
    r = fabric.run(["/usr/bin/python3", "-c", SRQ_SIZES, "ibemu0"], timeout=60)
    return r.returncode, r.stdout + r.stderr


def test_connectx_srq_sizes_follow_mlx5(connectx_fabric):
    rc, out = srq_sizes(connectx_fabric)
    assert rc == 0, out
    for line in ["0 0: granted 0 1, query 0 1", "0 1: granted 0 1, query 0 1",
                 "1 0: granted 1 1, query 1 1", "1 1: granted 1 1, query 1 1",
                 "100 5: granted 127 7, query 127 7", "16 16: granted 31 16, query 31 16",
                 "default: 0 1"]:
        assert re.search(rf"^{line}$", out, re.M), f"{line!r} missing:\n{out}"


def test_other_hcas_refuse_empty_srqs(fabric):
    rc, out = srq_sizes(fabric)
    assert rc != 0, out  # the all-zero SRQ at the end is refused too
    for line in ["0 0: errno 22", "0 1: errno 22", "1 0: errno 22",
                 "1 1: granted 1 1, query 1 1", "100 5: granted 100 5, query 100 5",
                 "16 16: granted 16 16, query 16 16"]:
        assert re.search(rf"^{line}$", out, re.M), f"{line!r} missing:\n{out}"
