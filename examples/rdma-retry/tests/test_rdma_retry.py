"""rdma_retry on an emulated fabric (pytest-ibemu): a server on ibemu0, its
client on ibemu1, through a perfect link, a lossy one and a cut one."""
import time

import pytest

from pytest_ibemu.net import free_tcp_port, wait_listening

SERVER, CLIENT = "ibemu0", "ibemu1"
EXIT_RETRY_EXCEEDED = 3  # rdma_retry's exit code for IBV_WC_RETRY_EXC_ERR
EXIT_SETUP = 1

# One port per device is all rdma_retry uses.
pytestmark = pytest.mark.ibemu(devices=2, ports=1)


def commands(rdma_retry, *options):
    """The server's and the client's command lines, on a fresh TCP port."""
    port = free_tcp_port()
    base = [rdma_retry, "-p", str(port), *options]
    return port, base + ["-d", SERVER], base + ["-d", CLIENT, "localhost"]


def transfer(fabric, rdma_retry, *options, timeout=60):
    port, server_cmd, client_cmd = commands(rdma_retry, *options)
    return fabric.run_pair(server_cmd, client_cmd, port, timeout=timeout)


def resent(capture):
    """How many request packets crossed the fabric more than once: a
    retransmission repeats the PSN of its original."""
    requests = [(p.slid, p.psn) for p in capture.packets("RC_RDMA_WRITE_*")
                + capture.packets("RC_RDMA_READ_REQUEST")]
    return len(requests) - len(set(requests))


def link_fault_drops(fabric):
    """Packets the faults destroyed, counted at their sending ports."""
    return sum(c.drops.get("link_faults", 0) for c in fabric.counters().values())


def wait_for_traffic(fabric, link, packets=200, timeout=10):
    """Returns once `packets` more packets reached `link`: the transfer runs."""
    start = fabric.port(link).counters.packets_in
    deadline = time.monotonic() + timeout
    while fabric.port(link).counters.packets_in < start + packets:
        assert time.monotonic() < deadline, f"no traffic on {link}"
        time.sleep(0.01)


def test_transfer_succeeds(ibemu_fabric, rdma_retry):
    with ibemu_fabric.capture() as cap:
        server, client = transfer(ibemu_fabric, rdma_retry, "-n", "50", "-s", "8192")
    assert client.returncode == 0, client.stdout
    assert server.returncode == 0, server.stdout
    assert "50 messages of 8192 bytes written and verified" in client.stdout
    # 8192 bytes at the 4096-byte MTU: WRITE_FIRST and WRITE_LAST per message.
    assert len(cap.packets("RC_RDMA_WRITE_*")) == 100, cap.summary()
    assert resent(cap) == 0, "a perfect link needs no retransmission"
    ibemu_fabric.assert_no_port_errors()
    ibemu_fabric.assert_qps_clean(idle=True)


def test_transfer_survives_packet_loss(ibemu_fabric, rdma_retry):
    # -t 10 (about 4 ms local ACK timeout) keeps the retransmissions quick.
    with ibemu_fabric.capture() as cap, \
            ibemu_fabric.faults(f"{SERVER}:1", drop=0.05, seed=7):
        server, client = transfer(ibemu_fabric, rdma_retry,
                                  "-n", "200", "-s", "8192", "-t", "10")
    assert client.returncode == 0, client.stdout
    assert server.returncode == 0, server.stdout
    assert link_fault_drops(ibemu_fabric) > 0, "nothing was lost: the test proved nothing"
    assert resent(cap) > 0, cap.summary()
    ibemu_fabric.assert_no_port_errors(ignore=("link_faults",))


def test_cut_link_ends_with_retry_exceeded(ibemu_fabric, rdma_retry):
    # IBA's exact retry timing: the error after retry_cnt + 1 ACK timeouts
    # (8 x 16 ms with -t 12) rather than ibemu's 10 s stall tolerance.
    strict = {"IBEMU_STALL_TOLERANCE_MS": "0"}
    port, server_cmd, client_cmd = commands(rdma_retry, "-n", "100000000", "-t", "12")
    server = ibemu_fabric.spawn(server_cmd, env=strict)
    wait_listening(server, port)
    client = ibemu_fabric.spawn(client_cmd, env=strict)
    first_line = client.stdout.readline()
    assert first_line.startswith("connected"), first_line
    wait_for_traffic(ibemu_fabric, f"{SERVER}:1")
    with ibemu_fabric.link_cut(f"{SERVER}:1"):   # mid-transfer: 10^8 messages
        assert ibemu_fabric.port(f"{SERVER}:1").state == "DOWN"
        output = first_line + client.communicate(timeout=30)[0]
    assert client.returncode == EXIT_RETRY_EXCEEDED, output
    assert "transport retry counter exceeded" in output
    # The client cleaned up: its connection closed, the server gave up too,
    # and neither left a QP behind.
    assert server.wait(10) == EXIT_SETUP
    ibemu_fabric.assert_qps_clean(idle=True)
