"""Unreliable Connected between the emulated HCAs: rdma-core's
ibv_uc_pingpong with and without a GRH, with completion events, at sizes from
one byte to many packets with the data checked (-c), at several path MTUs.
perftest's UC modes run in test_perftest.py; loss inside a UC message (the
whole message dropped, nothing acknowledged) is covered by the engine's UC
protocol tests."""
import re

import pytest

from conftest import free_tcp_port, run_pair


@pytest.mark.parametrize("args", [["-s", "1", "-c"], ["-s", "4096", "-c", "-g", "0"],
                                  ["-s", "65536", "-c", "-m", "256"], ["-e", "-s", "100"]],
                         ids=["1B", "4k-grh", "64k-mtu256", "events"])
def test_uc_pingpong(fabric, args):
    port = free_tcp_port()
    base = ["ibv_uc_pingpong", "-p", str(port), "-n", "300", *args]
    server, client = run_pair(fabric, base + ["-d", "ibemu0"], base + ["-d", "ibemu1", "localhost"],
                              port)
    for name, (rc, out) in (("server", server), ("client", client)):
        assert rc == 0, f"{name} failed ({rc}):\n{out}\n{fabric.logs()}"
        assert re.search(r"300 iters in", out), out
