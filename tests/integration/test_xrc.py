"""XRC (IBA annex A14): rdma-core's ibv_xsrq_pingpong, whose server and
client processes share an XRC domain through one file (with and without a
GRH, large messages at a small MTU, completion events), and pyverbs cases for
domain sharing, SRQ numbers and the requests a receive QP refuses
(verbs_cases/xrc_cases.py)."""
import pytest

from conftest import pingpong_pair, run_verbs_cases


@pytest.mark.parametrize("args", [["-n", "100"], ["-g", "0", "-s", "4096", "-n", "100"],
                                  ["-m", "256", "-s", "10000", "-n", "50"], ["-e", "-n", "50"]],
                         ids=["default", "grh", "mtu256-10k", "events"])
def test_xsrq_pingpong(fabric, args):
    pingpong_pair(fabric, "ibv_xsrq_pingpong", args, done="success")


def test_pyverbs_xrc_cases(fabric):
    run_verbs_cases(fabric, "xrc_cases.py", "3")
