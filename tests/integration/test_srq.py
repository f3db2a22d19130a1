"""Shared receive queues: rdma-core's ibv_srq_pingpong (several QPs on one
SRQ, with and without a GRH, events, large messages), perftest's SEND
bandwidth with --use-srq, and pyverbs cases for the SRQ limit and last-WQE
events and the SRQ verbs' errors (verbs_cases/srq_cases.py)."""
import pytest

from conftest import pingpong_pair, run_verbs_cases
from test_perftest import check_table, perftest, wait_fabric_idle


@pytest.mark.parametrize("args", [["-n", "500"], ["-q", "4", "-e", "-n", "200"],
                                  ["-g", "0", "-s", "65536", "-n", "100"]],
                         ids=["default", "four-qps-events", "grh-64k"])
def test_srq_pingpong(fabric, args):
    pingpong_pair(fabric, "ibv_srq_pingpong", args)


@pytest.mark.parametrize("qps", ["1", "4"])
def test_perftest_send_bw_with_srq(fabric, qps):
    out = perftest(fabric, "ib_send_bw", ["--use-srq", "-q", qps, "-s", "4096", "-n", "500"])
    check_table(out, "ib_send_bw", [4096], 500 * int(qps))
    wait_fabric_idle(fabric)


def test_pyverbs_srq_cases(fabric):
    run_verbs_cases(fabric, "srq_cases.py", "5", timeout=180)
