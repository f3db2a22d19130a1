"""The Dynamically Connected transport through mlx5dv (docs/dc.md), with
programs linked against Debian's libmlx5 and librdmacm and run on ibemu's
(tests/programs): dc_transfer follows Mellanox's gpu_direct_rdma_access
(a client's DCT, a server's DCI, devices found by IP address), dc_fanout
has one DCI reach 8 DCTs in 4 processes, dc_errors makes DC fail and
recover. Every program checks every byte it moves."""
import re
import signal
import subprocess
import time

import pytest

from conftest import BUILD, free_tcp_port, run_pair, stack_dump
from hosts import cm_address, meshed_lab, needs_namespaces, run_across

DC_TRANSFER = str(BUILD / "bin" / "dc_transfer")
DC_FANOUT = str(BUILD / "bin" / "dc_fanout")
DC_ERRORS = str(BUILD / "bin" / "dc_errors")
SERVER = "10.73.0.1"  # ibemu0 port 1: the DCI
CLIENT = "10.73.0.3"  # ibemu1 port 1: the DCT
OPS = {0: "WRITE", 1: "READ"}
BANDWIDTH = r"\d+ bytes in [\d.]+ seconds = [\d.]+ Mbit/sec"


def transfer(fabric, server_args, client_args, timeout=120):
    """dc_transfer server on SERVER and client on CLIENT; both must exit 0.
    Returns (server_output, client_output)."""
    port = free_tcp_port()
    server, client = run_pair(
        fabric, [DC_TRANSFER, "server", "-a", SERVER, "-p", str(port), *server_args],
        [DC_TRANSFER, "client", "-a", CLIENT, "-p", str(port), *client_args, "127.0.0.1"], port,
        timeout=timeout)
    for name, (rc, _) in (("server", server), ("client", client)):
        assert rc == 0, (f"dc_transfer {name} failed ({rc}):\nserver: {server[1]}\n"
                         f"client: {client[1]}\n{fabric.logs()}")
    return server[1], client[1]


def moved_bytes(size, sges):
    """What one request moves: the buffer, or sges portions of
    (size / sges) rounded down to 64 bytes."""
    return size if sges == 0 else sges * ((size // sges) & ~63)


@pytest.mark.parametrize("sges", [0, 10], ids=["1sge", "10sges"])
@pytest.mark.parametrize("op", [0, 1], ids=["write", "read"])
@pytest.mark.parametrize("size,iters", [(4096, 1000), (10000000, 5)], ids=["4k", "10mb"])
def test_dc_transfer(fabric, size, iters, op, sges):
    common = ["-n", str(iters), "-s", str(size)]
    server, client = transfer(fabric, [*common, "-l", str(sges)], [*common, "-t", str(op)])
    assert f"{iters} iterations of RDMA {OPS[op]} verified" in client, client
    assert f"{iters} requests served" in server, server
    total = iters * moved_bytes(size, sges)
    for out in (server, client):
        assert re.search(BANDWIDTH, out) and f"{total} bytes in " in out, out


@pytest.mark.parametrize("op", [0, 1], ids=["write", "read"])
def test_dc_transfer_sges_over_several_wrs(fabric, op):
    """25 SGEs: three WRs of at most 10 in one ibv_wr_start..complete, the
    last one signaled, as the reference splits them."""
    common = ["-n", "200", "-s", "65536"]
    server, client = transfer(fabric, [*common, "-l", "25"], [*common, "-t", str(op)])
    assert f"200 iterations of RDMA {OPS[op]} verified" in client, client
    assert f"{200 * moved_bytes(65536, 25)} bytes in " in client, client


def test_persistent_server_survives_a_failed_request(fabric):
    """A client that gives a wrong rkey makes the server's WR fail: the
    server answers with the error, flushes and resets its DCI (the
    reference's rdma_reset_device) and serves the next clients."""
    port = free_tcp_port()
    client = [DC_TRANSFER, "client", "-p", str(port), "-s", "8192"]
    server = fabric.spawn([DC_TRANSFER, "server", "-P", "-a", SERVER, "-p", str(port), "-s",
                           "8192", "-l", "12"])  # 12 SGEs: 2 WRs, the second one flushed
    try:
        deadline = time.time() + 20
        while not fabric.listening(server, port):
            assert server.poll() is None and time.time() < deadline, (
                f"server did not listen: {server.communicate()[0]}\n{fabric.logs()}")
            time.sleep(0.02)
        bad = fabric.run([*client, "-a", CLIENT, "-n", "3", "-B", "127.0.0.1"], timeout=60)
        out = bad.stdout + bad.stderr
        assert bad.returncode == 1, out
        assert "the server answered: error RDMA WRITE failed: remote access error" in out, out
        for op, addr in ((1, CLIENT), (0, "10.73.0.4")):
            good = fabric.run([*client, "-a", addr, "-n", "100", "-t", str(op), "127.0.0.1"],
                              timeout=60)
            out = good.stdout + good.stderr
            assert good.returncode == 0, out + fabric.logs()
            assert f"100 iterations of RDMA {OPS[op]} verified" in out, out
        server.send_signal(signal.SIGTERM)
        out = server.communicate(timeout=30)[0]
    except BaseException:
        if server.poll() is None:
            stacks = stack_dump(server)
            server.kill()
            print(server.communicate()[0], stacks)
        raise
    assert server.returncode == 0, out
    assert "client 1 iteration 0: RDMA WRITE failed: remote access error" in out, out
    assert re.search(r"flush marker came back flushed \(1 more completions before it\)", out), out
    assert "DCI reset to RTS" in out, out
    assert "client 2: 100 requests served" in out and "client 3: 100 requests served" in out, out
    assert "served 3 clients, 1 failed" in out, out


def test_one_dci_fans_out_to_eight_dcts_in_four_processes(fabric):
    r = fabric.run([DC_FANOUT, "-n", "400"], timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out + fabric.logs()
    assert "80 WRITE, 80 READ, 80 SEND, 80 FETCH_ADD, 80 CMP_SWP" in out, out
    assert out.count("20 SENDs and every WRITE, READ region and atomic word verified") == 4, out
    assert "dc_fanout: 400 WRs to 8 DCTs in 4 processes verified" in out, out


ERROR_CASES = {
    "key": ["WRITE with the wrong DC key: remote access error", "DCI after the wrong key: ERR",
            "right key after recovery: DCI"],
    "nodct": ["WRITE to a DCT number nobody has: transport retry counter exceeded",
              "DCI after the retries: ERR", "a real DCT after recovery: DCI"],
    "destroyed": ["transport retry counter exceeded", "(4 of them posted after the error)",
                  "DCI after the destroyed DCT: ERR",
                  "the target's other DCT after recovery: DCI"],
    "rkey": ["WRITE with a wrong rkey: remote access error", "second DCI after: DCI",
             "first DCI after recovery: DCI"],
    "dct_states": ["DCT RTR->RTS: Invalid argument", "ibv_post_send on the DCT:",
                   "DCT after all that: RTR"],
    # The Linux mlx5 driver's mlx5_ib_modify_dct knows only RESET -> INIT
    # and INIT -> RTR: EINVAL for anything else, ERR and RESET included.
    "dct_stays_rtr": ["DCT RTR->ERR: Invalid argument", "DCT RTR->RESET: Invalid argument",
                      "DCT: RTR"],
    # The Linux mlx5 driver's modify_dci_qp_is_ok: ACCESS_FLAGS are refused
    # on a DCI's RESET -> INIT, PATH_MTU and MAX_QP_RD_ATOMIC are required.
    "dci_states": ["DCI RESET->INIT with ACCESS_FLAGS: Invalid argument",
                   "DCI INIT->RTR without PATH_MTU: Invalid argument",
                   "DCI RTR->RTS without MAX_QP_RD_ATOMIC: Invalid argument"],
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_dc_errors(fabric, case):
    r = fabric.run([DC_ERRORS, case], timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "dc_errors: all 1 cases passed" in out, out + fabric.logs()
    assert "FAIL" not in out, out
    for line in ERROR_CASES[case]:
        assert f"ok {case}: " in out and line in out, f"{line!r} missing:\n{out}"


# ---- two hosts ----

@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    with meshed_lab(tmp_path_factory.mktemp("dclab"), 2) as lab:
        yield lab


@needs_namespaces
@pytest.mark.parametrize("op,sges", [(0, 0), (1, 10)], ids=["write", "read-10sges"])
def test_dc_transfer_between_hosts(two_hosts, op, sges):
    """The DCI on host A, the DCT on host B: DC packets cross the UDP link,
    each end finds its device by its own port's address."""
    a, b = two_hosts.hosts
    port = free_tcp_port()
    common = ["-p", str(port), "-n", "100", "-s", "65536"]
    server, client = run_across(
        a, [DC_TRANSFER, "server", "-a", cm_address(a), *common, "-l", str(sges)],
        b, [DC_TRANSFER, "client", "-a", cm_address(b), *common, "-t", str(op), a.address], port)
    assert f"100 iterations of RDMA {OPS[op]} verified" in client, client
    assert f"{100 * moved_bytes(65536, sges)} bytes in " in server, server


def test_programs_fail_cleanly_without_a_device(fabric):
    """An address no port has: a clear message and status 1, no hang."""
    r = fabric.run([DC_TRANSFER, "server", "-a", "10.73.0.250", "-p", str(free_tcp_port())],
                   timeout=60)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "FAILURE" in out and "10.73.0.250" in out, out
    r = fabric.run([DC_FANOUT, "-i", "nosuchdev:1"], timeout=60)
    assert r.returncode == 1 and "FAILURE" in r.stderr, r.stdout + r.stderr


def test_dc_transfer_usage_errors():
    r = subprocess.run([DC_TRANSFER, "client", "-a", CLIENT], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "usage" in r.stderr, r.stderr
