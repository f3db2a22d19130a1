"""Unreliable Connected between the emulated HCAs: rdma-core's
ibv_uc_pingpong with and without a GRH, with completion events, at sizes from
one byte to many packets with the data checked (-c), at several path MTUs.
perftest's UC modes run in test_perftest.py; loss inside a UC message (the
whole message dropped, nothing acknowledged) is covered by the engine's UC
protocol tests."""
import pytest

from conftest import pingpong_pair


@pytest.mark.parametrize("args", [["-s", "1", "-c"], ["-s", "4096", "-c", "-g", "0"],
                                  ["-s", "65536", "-c", "-m", "256"], ["-e", "-s", "100"]],
                         ids=["1B", "4k-grh", "64k-mtu256", "events"])
def test_uc_pingpong(fabric, args):
    pingpong_pair(fabric, "ibv_uc_pingpong", ["-n", "300", *args], done=r"300 iters in")
