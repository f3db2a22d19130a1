"""ibemu_fabric and ibemu_subnet: brought up for a test, gone after it,
usable with rdma-core's own programs."""
import json
from pathlib import Path

from pytest_ibemu import Process

LIFECYCLE = '''
import json, pytest

@pytest.mark.ibemu(devices=3, ports=1)
def test_devinfo(ibemu_fabric):
    r = ibemu_fabric.run(["ibv_devinfo", "-l"], check=True)
    assert "3 HCAs found" in r.stdout
    assert [d.name for d in ibemu_fabric.devices()] == ["ibemu0", "ibemu1", "ibemu2"]
    assert all(p.state == "ACTIVE" for p in ibemu_fabric.ports())
    open("seen.json", "w").write(json.dumps({"root": str(ibemu_fabric.root),
                                             "pid": ibemu_fabric.status()["pid"]}))
'''


def test_fabric_up_and_torn_down(run_inner, pytester):
    run_inner(LIFECYCLE).assert_outcomes(passed=1)
    seen = json.loads((pytester.path / "seen.json").read_text())
    assert not Path(seen["root"]).exists()
    daemon = Process(pid=seen["pid"], role="daemon", contexts=0, qps=0)
    assert not daemon.alive, "ibemud still runs"


PINGPONG = '''
def test_rc_pingpong(ibemu_fabric):
    with ibemu_fabric.capture() as cap:
        server, client = ibemu_fabric.pingpong("ibv_rc_pingpong", ["-n", "5", "-s", "64"])
    assert server.returncode == 0 and client.returncode == 0, client.stdout
    assert "5 iters in" in client.stdout
    assert len(cap.packets("RC_SEND_ONLY")) == 10
    assert len(cap.packets("RC_ACKNOWLEDGE", nak=None)) == 10
    assert cap.opcodes() == ["RC_SEND_ONLY", "RC_ACKNOWLEDGE"]
    counters = ibemu_fabric.counters()
    assert counters["ibemu0:1"].packets_out > 0 and counters["ibemu1:1"].packets_in > 0
    ibemu_fabric.assert_no_port_errors()
    ibemu_fabric.assert_qps_clean(idle=True)


def test_spawned_pair(ibemu_fabric):
    from pytest_ibemu.net import free_tcp_port, wait_listening
    port = free_tcp_port()
    server = ibemu_fabric.spawn(["ibv_rc_pingpong", "-d", "ibemu0", "-p", str(port), "-n", "2"])
    wait_listening(server, port)
    client = ibemu_fabric.run(["ibv_rc_pingpong", "-d", "ibemu1", "-p", str(port), "-n", "2",
                               "localhost"], timeout=60)
    assert client.returncode == 0, client.stdout + client.stderr
    assert server.wait(60) == 0
'''


def test_pingpong_through_run_and_spawn(run_inner):
    run_inner(PINGPONG).assert_outcomes(passed=2)


SUBNET = '''
def test_two_hosts(ibemu_subnet):
    subnet = ibemu_subnet(hosts=2, ports=1)
    assert subnet.mode in ("namespaces", "local")
    print("mode", subnet.mode)
    lids = [p.lid for host in subnet for p in host.ports()]
    assert len(set(lids)) == 4
    server, client = subnet[0].pingpong("ibv_rc_pingpong", ["-n", "3"], client_host=subnet[1],
                                        client_device="ibemu0")
    assert client.returncode == 0, client.stdout
    for host in subnet:
        host.assert_no_port_errors()
'''


def test_subnet_of_two_hosts(run_inner):
    r = run_inner(SUBNET, "-s")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*mode *"])
