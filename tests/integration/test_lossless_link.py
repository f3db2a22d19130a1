"""The link under load behaves as IBA's lossless link layer (IBA 7.9): a
sender without room at its destination keeps the packet, so on a healthy
link nothing is ever dropped, whatever the traffic. Traffic in both
directions at once (each end's progress answering the other's requests
while its own wait: an MPI rendezvous), at every path MTU, with one and
with many QPs, and with busy-loop CPU hogs beside it on a machine that may
have only 2 CPUs: every byte arrives, every work request succeeds, and
every drop counter of every port stays where it was.

Nothing here asserts on timing: a run that stalls fails by its timeout."""
import re
import subprocess

import pytest

from conftest import BUILD, free_tcp_port, run_pair

RC_CROSSFIRE = str(BUILD / "bin" / "rc_crossfire")
RC_ALL_TO_ALL = str(BUILD / "bin" / "rc_all_to_all")
CPU_HOGS = 4
MIB = 1 << 20


@pytest.fixture
def cpu_hogs():
    """Busy loops that take every CPU they can, beside the test's programs."""
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(CPU_HOGS)]
    yield
    for hog in hogs:
        hog.kill()
        hog.wait()


def drops(fabric):
    """Every port's drop counters, summed by cause, without the zeros."""
    totals = {}
    for device in fabric.status()["devices"]:
        for port in device["port_info"]:
            for cause, n in port["counters"]["drops"].items():
                totals[cause] = totals.get(cause, 0) + n
    return {cause: n for cause, n in totals.items() if n}


@pytest.mark.parametrize("mtu", [256, 1024, 4096])
@pytest.mark.parametrize("op", ["read", "write", "send"])
def test_traffic_both_ways_arrives_whole_and_drops_nothing(fabric, cpu_hogs, op, mtu):
    before = drops(fabric)
    for qps, size, iterations in ((1, 4 * MIB, 3), (16, MIB, 2)):
        r = fabric.run([RC_CROSSFIRE, "-o", op, "-M", str(mtu), "-q", str(qps), "-s", str(size),
                        "-n", str(iterations)], timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr + fabric.logs()
        assert r.stdout.strip() == (f"crossfire {op} q={qps} mtu={mtu} size={size} "
                                    f"iterations={iterations} ok"), r.stdout
    assert drops(fabric) == before


def perftest(fabric, tool, *args):
    """One perftest run between ibemu0 and ibemu1; both must exit 0 and the
    client must print its results row. Returns the client's output."""
    port = free_tcp_port()
    base = [tool, "-F", "-p", str(port), *args]
    server, client = run_pair(fabric, base + ["-d", "ibemu0"], base + ["-d", "ibemu1", "localhost"],
                              port, timeout=300)
    for name, (rc, out) in (("server", server), ("client", client)):
        assert rc == 0, f"{tool} {name} failed ({rc}):\n{out}\n{fabric.logs()}"
    assert re.search(r"^\s*\d+\s+\d+\s+\d", client[1], re.M), client[1]
    return client[1]


@pytest.mark.parametrize("tool", ["ib_read_bw", "ib_write_bw", "ib_send_bw"])
def test_perftest_both_ways_at_mtu_1024_drops_nothing(fabric, cpu_hogs, tool):
    # The run that lost 11 000 packets and took a minute when both inboxes
    # filled (READ responses crossing READ requests at a small MTU).
    before = drops(fabric)
    perftest(fabric, tool, "-b", "-s", str(4 * MIB), "-n", "10", "-m", "1024")
    perftest(fabric, tool, "-b", "-q", "16", "-s", str(4 * MIB), "-n", "5", "-m", "1024")
    assert drops(fabric) == before


@pytest.mark.parametrize("qps,size", [(1024, 65536), (16384, 64)])
def test_perftest_with_thousands_of_qps_finishes_and_drops_nothing(fabric, cpu_hogs, qps, size):
    before = drops(fabric)
    perftest(fabric, "ib_write_bw", "-q", str(qps), "-s", str(size), "-n", "5")
    assert drops(fabric) == before


@pytest.mark.parametrize("mtu", [256, 1024, 4096])
def test_all_to_all_among_8_processes_arrives_whole_and_drops_nothing(fabric, cpu_hogs, mtu):
    # 8 processes, 8 RC QPs to each of the 7 others, every QP WRITEs, READs
    # and SENDs at once: every inbox is written by all the others while its
    # owner writes theirs (a collective among the ranks of one node).
    before = drops(fabric)
    r = fabric.run([RC_ALL_TO_ALL, "-p", "8", "-q", "8", "-M", str(mtu), "-s", "131072", "-n",
                    "3"], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr + fabric.logs()
    assert re.fullmatch(rf"all_to_all procs=8 qps=8 mtu={mtu} size=131072 iterations=3 ok "
                        r"MB/s=[\d.]+", r.stdout.strip()), r.stdout
    assert drops(fabric) == before
