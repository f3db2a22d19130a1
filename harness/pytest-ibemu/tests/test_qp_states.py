"""queue_pairs() and assert_qps_clean(): the QPs of running programs, with
their states and PSNs, as the programs' providers report them."""

# A verbs program (pyverbs) that creates an RC QP, takes it to INIT and, with
# "err", on to ERR; prints its QPN and waits until stdin closes.
HOLD_QP = '''
import sys
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

ctx = Context(name="ibemu0")
pd = PD(ctx)
cq = CQ(ctx, 16)
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                       cap=QPCap(max_send_wr=4, max_recv_wr=4)))
attr = QPAttr(qp_state=e.IBV_QPS_INIT)
attr.pkey_index, attr.port_num, attr.qp_access_flags = 0, 1, 0
qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
if sys.argv[1] == "err":
    qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
print(qp.qp_num, flush=True)
sys.stdin.read()
'''

QP_STATES = f'''
import subprocess

HOLD_QP = {HOLD_QP!r}


def hold_qp(fabric, state):
    proc = fabric.spawn(["/usr/bin/python3", "-c", HOLD_QP, state], stdin=subprocess.PIPE)
    line = proc.stdout.readline()
    assert line.strip().isdigit(), line + proc.stdout.read()
    return proc, int(line)


def test_init_qp_is_listed_and_clean(ibemu_fabric):
    proc, qpn = hold_qp(ibemu_fabric, "init")
    qp = {{q.qpn: q for q in ibemu_fabric.queue_pairs()}}[qpn]
    assert (qp.type, qp.state, qp.port, qp.device) == ("RC", "INIT", 1, "ibemu0")
    assert qp.pid == proc.pid
    ibemu_fabric.assert_qps_clean()
    proc.stdin.close()
    assert proc.wait(30) == 0


def test_qp_left_in_err(ibemu_fabric):
    proc, qpn = hold_qp(ibemu_fabric, "err")
    assert {{q.qpn: q.state for q in ibemu_fabric.queue_pairs()}}[qpn] == "ERR"
    ibemu_fabric.assert_qps_clean(timeout=0.5)
'''


def test_assert_qps_clean_fails_on_a_qp_left_in_err(run_inner):
    result = run_inner(QP_STATES)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*QPs not clean on*", "*QP 0x* (RC, pid *) ERR*left in ERR*"])
