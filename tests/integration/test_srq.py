"""Shared receive queues: rdma-core's ibv_srq_pingpong (several QPs on one
SRQ, with and without a GRH, events, large messages), perftest's SEND
bandwidth with --use-srq, and pyverbs cases for the SRQ limit and last-WQE
events and the SRQ verbs' errors (verbs_cases/srq_cases.py)."""
import re
from pathlib import Path

import pytest

from conftest import free_tcp_port, run_pair, run_verbs_cases
from test_perftest import check_table, perftest, wait_fabric_idle

HERE = Path(__file__).parent


@pytest.mark.parametrize("args", [["-n", "500"], ["-q", "4", "-e", "-n", "200"],
                                  ["-g", "0", "-s", "65536", "-n", "100"]],
                         ids=["default", "four-qps-events", "grh-64k"])
def test_srq_pingpong(fabric, args):
    port = free_tcp_port()
    base = ["ibv_srq_pingpong", "-p", str(port), *args]
    server, client = run_pair(fabric, base + ["-d", "ibemu0"], base + ["-d", "ibemu1", "localhost"],
                              port)
    for name, (rc, out) in (("server", server), ("client", client)):
        assert rc == 0, f"{name} failed ({rc}):\n{out}\n{fabric.logs()}"
        assert re.search(r"\d+ iters in", out), out


@pytest.mark.parametrize("qps", ["1", "4"])
def test_perftest_send_bw_with_srq(fabric, qps):
    out = perftest(fabric, "ib_send_bw", ["--use-srq", "-q", qps, "-s", "4096", "-n", "500"])
    check_table(out, "ib_send_bw", [4096], 500 * int(qps))
    wait_fabric_idle(fabric)


def test_pyverbs_srq_cases(fabric):
    run_verbs_cases(fabric, "srq_cases.py", "5", timeout=180)
