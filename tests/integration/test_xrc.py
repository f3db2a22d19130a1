"""XRC (IBA annex A14): rdma-core's ibv_xsrq_pingpong, whose server and
client processes share an XRC domain through one file (with and without a
GRH, large messages at a small MTU, completion events), with two and three
clients — the receive QP of each client then delivers into the SRQs of the
other clients, which live in other processes; a program in which one
process's receive QP delivers into another process's SRQ and that process
opens the QP with ibv_open_qp (tests/programs/xrc_shared.c); and pyverbs
cases for domain sharing, SRQ numbers and the requests a receive QP refuses
(verbs_cases/xrc_cases.py)."""
import subprocess
import time

import pytest

from conftest import BUILD, free_tcp_port, pingpong_pair, run_verbs_cases, stack_dump, \
    tcp_listening

XRC_SHARED = str(BUILD / "bin" / "xrc_shared")


@pytest.mark.parametrize("args", [["-n", "100"], ["-g", "0", "-s", "4096", "-n", "100"],
                                  ["-m", "256", "-s", "10000", "-n", "50"], ["-e", "-n", "50"]],
                         ids=["default", "grh", "mtu256-10k", "events"])
def test_xsrq_pingpong(fabric, args):
    pingpong_pair(fabric, "ibv_xsrq_pingpong", args, done="success")


def run_server_and_clients(fabric, clients, args, timeout=120):
    """ibv_xsrq_pingpong -c CLIENTS on ibemu0 and that many clients on
    ibemu1, all in one XRC domain there; every process must print "success"
    and exit 0."""
    port = free_tcp_port()
    base = ["ibv_xsrq_pingpong", "-p", str(port), *args]
    server = fabric.spawn(base + ["-d", "ibemu0", "-c", str(clients)])
    deadline = time.time() + 20
    while not tcp_listening(port):
        if server.poll() is not None or time.time() > deadline:
            server.kill()
            pytest.fail(f"server did not listen: {server.communicate()[0]}\n{fabric.logs()}")
        time.sleep(0.02)
    procs = [server] + [fabric.spawn(base + ["-d", "ibemu1", "localhost"]) for _ in range(clients)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    except subprocess.TimeoutExpired:
        stacks = "".join(stack_dump(p) for p in procs if p.poll() is None)
        for p in procs:
            p.kill()
        pytest.fail(f"timeout: {[p.communicate()[0] for p in procs]}\n{stacks}\n{fabric.logs()}")
    for p, out in zip(procs, outs):
        assert p.returncode == 0 and "success" in out, f"{out}\n{fabric.logs()}"


@pytest.mark.parametrize("clients,args", [(2, ["-n", "100"]), (2, ["-e", "-n", "50"]),
                                          (2, ["-m", "256", "-s", "10000", "-n", "30"]),
                                          (3, ["-n", "50"])],
                         ids=["two", "two-events", "two-mtu256-10k", "three"])
def test_xsrq_pingpong_clients_deliver_into_each_others_srqs(fabric, clients, args):
    run_server_and_clients(fabric, clients, args)


def test_receive_qp_of_one_process_delivers_into_srq_of_another_and_ibv_open_qp(fabric, tmp_path):
    r = fabric.run([XRC_SHARED, str(tmp_path / "domain")], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr + fabric.logs()
    assert "xrc_shared: all ok" in r.stdout, r.stdout
    assert r.stdout.count("ok ") == 12, r.stdout


def test_pyverbs_xrc_cases(fabric):
    run_verbs_cases(fabric, "xrc_cases.py", "3")
