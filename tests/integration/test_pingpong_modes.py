"""ibv_rc_pingpong's other modes between the emulated HCAs: completion events
(-e), the ibv_wr_* post-send API (-N), the data check (-c) at several sizes,
and the options that need what the emulated HCA does not advertise (on-demand
paging -o/-O/-P, completion timestamps -t, device memory -j): those must make
the program fail cleanly, with a message and a non-zero exit, without
hanging, crashing or harming the daemon."""
import signal
import subprocess
import time

import pytest

from conftest import free_tcp_port, run_pair


def pingpong(fabric, *extra, timeout=120):
    port = free_tcp_port()
    base = ["ibv_rc_pingpong", "-p", str(port), *extra]
    server, client = run_pair(fabric, base + ["-d", "ibemu0"], base + ["-d", "ibemu1", "localhost"],
                              port, timeout=timeout)
    assert server[0] == 0, f"server failed ({server[0]}):\n{server[1]}\n{fabric.logs()}"
    assert client[0] == 0, f"client failed ({client[0]}):\n{client[1]}\n{fabric.logs()}"
    for out in (server[1], client[1]):
        assert "iters in" in out and "bytes in" in out, out
        assert "remote address" in out, out
    return server[1], client[1]


def wait_no_qps(fabric, timeout=20):
    deadline = time.time() + timeout
    while fabric.status()["qps"] != 0:
        assert time.time() < deadline, f"QPs left behind: {fabric.status()}\n{fabric.logs()}"
        time.sleep(0.1)


# ---- completion events

def test_events(fabric):
    pingpong(fabric, "-e", "-n", "500")


@pytest.mark.parametrize("size", [1, 4097, 65536])
def test_events_with_data_check(fabric, size):
    pingpong(fabric, "-e", "-c", "-s", str(size), "-n", "200")


# ---- the data check at several sizes and MTUs

@pytest.mark.parametrize("size,mtu", [(2, 1024), (100, 256), (1024, 1024), (8192, 2048),
                                      (12345, 512), (262144, 4096)])
def test_data_check(fabric, size, mtu):
    pingpong(fabric, "-c", "-s", str(size), "-m", str(mtu), "-n", "100" if size > 65536 else "300")


# ---- the new post-send API (ibv_qp_to_qp_ex, ibv_wr_start/ibv_wr_send/...)

def test_new_send_api(fabric):
    pingpong(fabric, "-N", "-n", "500")


@pytest.mark.parametrize("size", [1, 4096, 10000, 65536])
def test_new_send_api_with_data_check(fabric, size):
    pingpong(fabric, "-N", "-c", "-s", str(size), "-n", "200")


def test_new_send_api_with_events_and_small_mtu(fabric):
    pingpong(fabric, "-N", "-e", "-c", "-m", "256", "-s", "5000", "-n", "200")


def test_new_send_api_on_both_ports_of_one_hca(fabric):
    port = free_tcp_port()
    base = ["ibv_rc_pingpong", "-p", str(port), "-d", "ibemu0", "-N", "-c", "-n", "300"]
    server, client = run_pair(fabric, base + ["-i", "1"], base + ["-i", "2", "localhost"], port)
    assert server[0] == 0 and client[0] == 0, server[1] + client[1] + fabric.logs()


# ---- what the emulated HCA does not have: a clean failure

UNSUPPORTED = {
    # option(s): what ibv_rc_pingpong says after ibv_query_device_ex
    "odp": (["-o"], "The device isn't ODP capable or does not support RC send and receive with ODP"),
    "implicit-odp": (["-O"], "The device isn't ODP capable or does not support RC send and receive with ODP"),
    "odp-prefetch": (["-o", "-P"], "The device isn't ODP capable or does not support RC send and receive with ODP"),
    "timestamps": (["-t"], "The device isn't completion timestamp capable"),
    "device-memory": (["-j"], "Device doesn't support dm allocation"),
}


def run_alone(fabric, cmd, timeout=60):
    proc = fabric.spawn(cmd)
    try:
        out = proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"{cmd} hangs:\n{proc.communicate()[0]}\n{fabric.logs()}")
    return proc.returncode, out


@pytest.mark.parametrize("name", list(UNSUPPORTED))
def test_unsupported_option_fails_cleanly(fabric, name):
    options, message = UNSUPPORTED[name]
    port = free_tcp_port()
    base = ["ibv_rc_pingpong", "-p", str(port), *options]
    # Both roles check the device before any TCP exchange, so each fails on
    # its own: the server before listening, the client before connecting.
    for cmd in (base + ["-d", "ibemu0"], base + ["-d", "ibemu1", "localhost"]):
        rc, out = run_alone(fabric, cmd)
        assert rc > 0, f"{cmd}: exit {rc} (negative: killed by signal {-rc}):\n{out}"
        assert rc != 128 + signal.SIGSEGV and rc != 128 + signal.SIGABRT, out
        assert message in out, f"{cmd}:\n{out}"
    # The daemon is unharmed: it answers, has reclaimed the contexts, and a
    # plain pingpong runs.
    wait_no_qps(fabric)
    assert all(p["state"] == "ACTIVE" for d in fabric.status()["devices"] for p in d["port_info"])
    pingpong(fabric, "-c", "-n", "200")
