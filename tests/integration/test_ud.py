"""Unreliable Datagram between the emulated HCAs: rdma-core's
ibv_ud_pingpong (with and without a GRH, sizes up to the path MTU, completion
events), perftest's UD modes, and pyverbs cases for what a UD QP must do
that the programs do not show: Q_Key checks, the GRH area, local length
errors, address handles made from completions (verbs_cases/ud_cases.py)."""
import re
from pathlib import Path

import pytest

from conftest import VERBS_CASES, free_tcp_port, pingpong_pair, run_verbs_cases
from test_perftest import check_table, perftest, wait_fabric_idle

HERE = Path(__file__).parent


@pytest.mark.parametrize("size", [1, 1024, 2048, 4096])
@pytest.mark.parametrize("grh", [False, True], ids=["lid", "grh"])
def test_ud_pingpong(fabric, size, grh):
    server, _ = pingpong_pair(fabric, "ibv_ud_pingpong",
                              ["-s", str(size), "-n", "300", *(["-g", "0"] if grh else [])])
    if grh:
        assert "GID fe80:" in server or re.search(r"GID [0-9a-f:]+[1-9a-f]", server), server


def test_ud_pingpong_events(fabric):
    pingpong_pair(fabric, "ibv_ud_pingpong", ["-e", "-n", "300"])


def test_ud_pingpong_larger_than_the_mtu_fails_cleanly(fabric):
    """The tool checks the port's MTU itself and stops with its message."""
    port = free_tcp_port()
    r = fabric.run(["ibv_ud_pingpong", "-p", str(port), "-s", "4097", "-d", "ibemu0"], timeout=30)
    assert r.returncode != 0 and "larger than port MTU" in r.stdout + r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("tool,args", [("ib_send_bw", ["-s", "2048", "-n", "500"]),
                                       ("ib_send_lat", ["-s", "64", "-n", "500"]),
                                       ("ib_send_bw", ["-a", "-n", "50"])],
                         ids=["send_bw", "send_lat", "send_bw_all_sizes"])
def test_perftest_ud(fabric, tool, args):
    out = perftest(fabric, tool, ["-c", "UD", *args])
    assert re.search(r"Connection type\s*:\s*UD", out), out
    if "-a" in args:
        # UD runs every size up to the path MTU (4096).
        check_table(out, tool, [1 << k for k in range(1, 13)], 50)
    else:
        check_table(out, tool, [int(args[1])], 500)
    wait_fabric_idle(fabric)


def test_pyverbs_ud_cases(fabric):
    run_verbs_cases(fabric, "ud_cases.py", "10", timeout=180)


def port_counters(fabric, device, port):
    for dev in fabric.status()["devices"]:
        if dev["name"] == device:
            return next(p["counters"] for p in dev["port_info"] if p["port"] == port)
    raise AssertionError(f"no {device}")


def test_status_counts_each_drop_under_its_cause(fabric):
    before = {d: port_counters(fabric, d, 1) for d in ("ibemu0", "ibemu1")}
    r = fabric.run(["/usr/bin/python3", str(HERE / "verbs_cases" / "ud_drops.py")], timeout=60)
    assert r.returncode == 0 and "sent" in r.stdout, r.stdout + r.stderr
    after = {d: port_counters(fabric, d, 1) for d in ("ibemu0", "ibemu1")}

    def delta(dev, *path):
        a, b = after[dev], before[dev]
        for key in path:
            a, b = a[key], b[key]
        return a - b

    # 3 + 3 + 2 datagrams reach ibemu1; 4 go nowhere; 1 is received.
    assert delta("ibemu0", "packets_out") == 3 + 3 + 2 + 4 + 1
    assert delta("ibemu0", "drops", "undeliverable") == 4
    assert delta("ibemu1", "packets_in") == 3 + 3 + 2 + 1
    assert delta("ibemu1", "drops", "qkey_violation") == 3
    assert delta("ibemu1", "drops", "no_receive") == 2
    assert delta("ibemu1", "bytes_in") == delta("ibemu0", "bytes_out") * 9 // 13
    human = fabric.ibemu("status").stdout
    assert "qkey_violation" in human and "no_receive" in human, human


def test_a_long_lived_program_forgets_departed_peers(fabric):
    """A server answers 25 short-lived clients in turn: each answer maps the
    client's inbox ring, and once the client has left, the server's route
    cache lets it go (the state page counts departed inboxes), so the
    server ends with at most the last client's ring mapped, not 25."""
    clients = 25
    server = fabric.spawn(["/usr/bin/python3", str(VERBS_CASES / "ud_echo.py"), "server",
                           str(clients)])
    first = server.stdout.readline()
    m = re.match(r"qpn (\d+) lid (\d+)", first)
    assert m, first + server.communicate()[0]
    for _ in range(clients):
        r = fabric.run(["/usr/bin/python3", str(VERBS_CASES / "ud_echo.py"), "client",
                        m.group(1), m.group(2)], timeout=60)
        assert r.returncode == 0 and "answered" in r.stdout, r.stdout + r.stderr
    out = server.communicate(timeout=60)[0]
    assert server.returncode == 0, out
    mapped = int(re.search(r"inboxes (\d+)", out).group(1))
    assert mapped <= 2, out
