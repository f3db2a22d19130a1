"""The project's C program with the flow of the RDMA Aware Programming
manual's RC example (TCP exchange, RESET→INIT→RTR→RTS, server SEND)."""
import pytest

from conftest import BUILD, free_tcp_port, run_pair


@pytest.mark.parametrize("gid", [None, "0"])
def test_rc_example_between_two_hcas(fabric, gid):
    port = free_tcp_port()
    prog = str(BUILD / "bin" / "rc_example")
    extra = ["-g", gid] if gid else []
    server, client = run_pair(fabric, [prog, "-d", "ibemu0", "-p", str(port), *extra],
                              [prog, "-d", "ibemu1", "-p", str(port), *extra, "localhost"], port)
    assert server[0] == 0 and "test result is 0" in server[1], server[1] + fabric.logs()
    assert client[0] == 0 and "test result is 0" in client[1], client[1] + fabric.logs()
    assert "Message is: 'SEND operation '" in client[1]
