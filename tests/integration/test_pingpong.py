"""rdma-core's ibv_rc_pingpong between the two emulated HCAs: RC SEND/RECV
through the whole stack (provider, transport, shared-memory link, daemon)."""
import pytest

from conftest import free_tcp_port, run_pair


def pingpong(fabric, *extra):
    port = free_tcp_port()
    base = ["ibv_rc_pingpong", "-p", str(port), *extra]
    server, client = run_pair(fabric, base + ["-d", "ibemu0"], base + ["-d", "ibemu1", "localhost"],
                              port)
    assert server[0] == 0, f"server failed:\n{server[1]}\n{fabric.logs()}"
    assert client[0] == 0, f"client failed:\n{client[1]}\n{fabric.logs()}"
    assert "iters in" in server[1] and "iters in" in client[1]
    return server[1], client[1]


def test_rc_pingpong_with_gid(fabric):
    pingpong(fabric, "-g", "0")


def test_rc_pingpong_with_lid_only(fabric):
    pingpong(fabric)


@pytest.mark.parametrize("size", [1, 15, 255, 4096, 4097, 65536, 1 << 20])
def test_rc_pingpong_sizes_with_data_check(fabric, size):
    iters = 100 if size >= 65536 else 500
    pingpong(fabric, "-g", "0", "-s", str(size), "-n", str(iters), "-c")


def test_rc_pingpong_ten_thousand_iterations(fabric):
    pingpong(fabric, "-n", "10000", "-c")


@pytest.mark.parametrize("mtu", [256, 1024, 2048])
def test_rc_pingpong_path_mtu(fabric, mtu):
    pingpong(fabric, "-m", str(mtu), "-s", "10000", "-n", "200", "-c")


def test_rc_pingpong_same_device_both_ports(fabric):
    port = free_tcp_port()
    base = ["ibv_rc_pingpong", "-p", str(port), "-d", "ibemu0", "-n", "500"]
    server, client = run_pair(fabric, base + ["-i", "1"], base + ["-i", "2", "localhost"], port)
    assert server[0] == 0 and client[0] == 0, server[1] + client[1]
