"""Partitions (IBA 10.9): with "pkeys": [0xffff, 0x8001, 0x0001] every port's
P_Key table has the default partition, and partition 1 as full and as
limited member. The SMA reports the table (smpquery pkeys), QPs send with
the P_Key at their pkey_index (perftest --pkey_index), and a receiver drops
what comes from another partition or from a limited member to a limited
member, counting it as a P_Key violation."""
import json
import re

import pytest

from conftest import Fabric, free_tcp_port, spawn_listening
from test_perftest import check_table, perftest


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory):
    root = tmp_path_factory.mktemp("partitions")
    config = root / "config.json"
    config.write_text(json.dumps({"pkeys": [0xffff, 0x8001, 0x0001]}))
    f = Fabric(root / "rt")
    f.ibemu("up", "--config", str(config))
    yield f
    f.down()


def pkey_violations(fabric):
    return sum(p["counters"]["drops"]["pkey_violation"]
               for d in fabric.status()["devices"] for p in d["port_info"])


def test_the_sma_reports_the_table(partitioned):
    lid = partitioned.status()["devices"][0]["port_info"][0]["lid"]
    r = partitioned.run(["smpquery", "-C", "ibemu0", "-P", "1", "pkeys", str(lid)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"0:\s+0xffff\s+0x8001\s+0x0001\s+0x0000", r.stdout), r.stdout


@pytest.mark.parametrize("server_index,client_index", [(1, 1), (1, 2), (2, 1), (0, 0)],
                         ids=["full-full", "full-limited", "limited-full", "default"])
def test_members_that_may_talk_do(partitioned, server_index, client_index):
    out = perftest(partitioned, "ib_send_bw", ["-s", "4096", "-n", "200"],
                   server=("-d", "ibemu0", f"--pkey_index={server_index}"),
                   client=("-d", "ibemu1", f"--pkey_index={client_index}"))
    check_table(out, "ib_send_bw", [4096], 200)


@pytest.mark.parametrize("server_index,client_index", [(2, 2), (0, 1)],
                         ids=["limited-limited", "other-partition"])
def test_members_that_may_not_talk_are_dropped_and_counted(partitioned, server_index,
                                                            client_index):
    expect_dropped(partitioned, ["-d", "ibemu0", f"--pkey_index={server_index}"],
                   ["-d", "ibemu1", f"--pkey_index={client_index}"])


def expect_dropped(fabric, server_args, client_args):
    """ib_send_bw between two QPs whose partitions do not let them talk:
    the receiver drops every SEND and counts a P_Key violation."""
    before = pkey_violations(fabric)
    port = free_tcp_port()
    base = ["env", "IBEMU_STALL_TOLERANCE_MS=0",  # IBA's exact retry timing
            "ib_send_bw", "-p", str(port), "-s", "4096", "-n", "20"]
    server = spawn_listening(fabric, base + server_args, port)
    try:
        client = fabric.run(base + client_args + ["localhost"], timeout=60)
        # The client's SENDs are never acknowledged: retry exceeded.
        assert client.returncode != 0, client.stdout
        assert "status" in client.stdout.lower() + client.stderr.lower(), client.stdout
        assert pkey_violations(fabric) > before
    finally:
        server.kill()  # it waits for SENDs that never reach it
        server.wait()
