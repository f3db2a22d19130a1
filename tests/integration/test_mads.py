"""Management datagrams through umad in no-kernel mode: infiniband-diags'
smpquery and ibaddr (SMPs answered by the daemon's SMAs), perfquery (its
PMA), saquery (the SA of ibemu-sm: NodeRecords, PathRecords and
MCMemberRecords), and perftest's multicast mode,
which joins its group through the SA (MCMemberRecord Set) and leaves it
(Delete) when done."""
import re

import pytest

from conftest import pingpong_pair
from test_perftest import check_table, perftest, wait_fabric_idle


def port(fabric, device, num):
    dev = next(d for d in fabric.status()["devices"] if d["name"] == device)
    return next(p for p in dev["port_info"] if p["port"] == num)


def run_ok(fabric, cmd):
    r = fabric.run(cmd, timeout=60)
    assert r.returncode == 0, f"{cmd}: {r.stdout}{r.stderr}{fabric.logs()}"
    return r.stdout


def test_umad_nodes_are_listed(fabric):
    out = run_ok(fabric, ["ls", "/dev/infiniband"])
    assert out.split() == ["issm0", "issm1", "issm2", "issm3", "umad0", "umad1", "umad2",
                           "umad3", "uverbs0", "uverbs1"], out


@pytest.mark.parametrize("device,num", [("ibemu0", 2), ("ibemu1", 1)])
def test_smpquery_reaches_the_sma_of_a_lid(fabric, device, num):
    target = port(fabric, device, num)
    out = run_ok(fabric, ["smpquery", "-C", "ibemu0", "-P", "1", "nodeinfo", str(target["lid"])])
    assert re.search(r"PortGuid:\.+" + target["port_guid"], out), out
    assert re.search(rf"LocalPort:\.+{num}\b", out), out
    out = run_ok(fabric, ["smpquery", "-C", "ibemu0", "-P", "1", "portinfo", str(target["lid"]),
                          str(num)])
    assert re.search(rf"^Lid:\.+{target['lid']}$", out, re.M), out
    assert re.search(r"LinkState:\.+Active", out), out


def test_smpquery_directed_route(fabric):
    # Hop 0: the local node itself, by a directed route of no hops.
    out = run_ok(fabric, ["smpquery", "-C", "ibemu1", "-P", "2", "-D", "nodedesc", "0"])
    assert "ibemu1" in out, out


def test_ibaddr_of_a_port(fabric):
    p = port(fabric, "ibemu1", 2)
    out = run_ok(fabric, ["ibaddr", "-C", "ibemu1", "-P", "2"])
    assert f"LID start {hex(p['lid'])}" in out, out


def test_saquery_path_records_to_every_port(fabric):
    out = run_ok(fabric, ["saquery", "-C", "ibemu1", "-P", "1", "-p"])
    dlids = sorted(int(x) for x in re.findall(r"^\s*dlid\.+(\d+)$", out, re.M))
    lids = sorted(port(fabric, d, n)["lid"] for d in ("ibemu0", "ibemu1") for n in (1, 2))
    assert dlids == lids, out
    assert set(re.findall(r"^\s*slid\.+(\d+)$", out, re.M)) == {
        str(port(fabric, "ibemu1", 1)["lid"])}, out
    # 4096-byte MTU, "exactly" selector.
    assert set(re.findall(r"^\s*mtu\.+(0x\w+)$", out, re.M)) == {"0x85"}, out


def test_saquery_node_records(fabric):
    out = run_ok(fabric, ["saquery", "-C", "ibemu0", "-P", "1"])
    # One record per CA port, one for the switch.
    assert len(re.findall(r"^NodeRecord dump:", out, re.M)) == 5, out
    lid = port(fabric, "ibemu1", 2)["lid"]
    assert run_ok(fabric, ["saquery", "-C", "ibemu0", "-P", "1", "-O", str(lid)]).strip().endswith(
        "ibemu1"), out


def test_saquery_unknown_lid_has_no_path(fabric):
    r = fabric.run(["saquery", "-C", "ibemu0", "-P", "1", "-p", "--dlid", "999"], timeout=60)
    assert "dlid" not in r.stdout, r.stdout + r.stderr


def perf_counters(fabric, *args):
    out = run_ok(fabric, ["perfquery", "-C", "ibemu0", "-P", "1", *args])
    return {k: int(v) for k, v in re.findall(r"^(Port\w+):\.+(\d+)$", out, re.M)}


def test_perfquery_reads_and_clears_the_port_counters(fabric):
    pingpong_pair(fabric, "ibv_rc_pingpong", ["-n", "50", "-s", "1024"])
    lid = str(port(fabric, "ibemu0", 1)["lid"])
    basic = perf_counters(fabric, lid, "1")
    status = port(fabric, "ibemu0", 1)["counters"]
    assert basic["PortXmitPkts"] == status["packets_out"] > 0, (basic, status)
    assert basic["PortRcvData"] == status["bytes_in"] // 4, (basic, status)
    extended = perf_counters(fabric, "-x", lid, "1")
    assert extended["PortRcvPkts"] == basic["PortRcvPkts"], (basic, extended)
    run_ok(fabric, ["perfquery", "-C", "ibemu0", "-P", "1", "-R", lid, "1"])
    cleared = perf_counters(fabric, lid, "1")
    assert cleared["PortXmitPkts"] == cleared["PortRcvData"] == 0, cleared


def test_status_counts_mads(fabric):
    before = fabric.status()["mads"]
    run_ok(fabric, ["saquery", "-C", "ibemu0", "-P", "1", "-p"])
    after = fabric.status()["mads"]
    assert after["sent"] >= before["sent"] + 2  # the query and the SA's answer
    assert after["delivered"] >= before["delivered"] + 2


MGID = "255:18:1:0:0:0:0:0:0:0:0:0:0:0:0:9"


@pytest.mark.parametrize("tool", ["ib_send_bw", "ib_send_lat"])
def test_perftest_multicast_joins_through_the_sa(fabric, tool):
    out = perftest(fabric, tool, ["-c", "UD", "-M", MGID, "-s", "1024", "-n", "200"])
    check_table(out, tool, [1024], 200)
    assert re.search(r"Connection type\s*:\s*UD", out), out
    # Both sides left the group when they finished: the SA has no members.
    groups = run_ok(fabric, ["saquery", "-C", "ibemu0", "-P", "1", "-g"])
    assert "MGID" not in groups, groups
    wait_fabric_idle(fabric)


def test_sa_query_without_an_sm_fails(fresh_fabric):
    fresh_fabric.up(sm=False)
    r = fresh_fabric.run(["saquery", "-C", "ibemu0", "-P", "1", "-p", "-t", "200"], timeout=60)
    assert r.returncode != 0, r.stdout + r.stderr
