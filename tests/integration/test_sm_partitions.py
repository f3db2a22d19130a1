"""Partitions that a subnet manager programs (IBA 10.9, 14.2.5.7
SubnSet(P_KeyTable)), from one partitions.conf in opensm's syntax, by
ibemu-sm (`ibemu up --partitions FILE`) and by Debian's opensm: partition 1
with ibemu0 port 1 a full member and every other port a limited one. The
tables reach sysfs and the SMAs, QPs send in them, and receivers enforce
them: a full member talks to a limited one, two limited members do not."""
import re
import shutil
import time

import pytest

from conftest import Fabric
from test_partitions import expect_dropped
from test_perftest import check_table, perftest

PARTITIONS = ("Default=0x7fff, ipoib : ALL=full ;\n"
              "storage=0x0001 : ALL=limited, {full}=full ;\n")


def port_guids(fabric):
    return {(d["name"], p["port"]): p["port_guid"]
            for d in fabric.status()["devices"] for p in d["port_info"]}


def start_opensm(fabric, root, conf, guid):
    """Debian's opensm on the port `guid`, once its log says SUBNET UP; its
    log is fabric.opensm_log."""
    log = root / "opensm.log"
    # -d2: a log line is written when it happens, not when a buffer fills.
    sm = fabric.spawn(["env", f"OSM_CACHE_DIR={root}", "opensm", "-d2", "-g", guid,
                       "-P", str(conf), "-f", str(log), "--dump_files_dir", str(root)])
    fabric.wait_active(timeout=60)
    deadline = time.monotonic() + 60
    while "SUBNET UP" not in log.read_text():
        assert time.monotonic() < deadline and sm.poll() is None, log.read_text()[-4000:]
        time.sleep(0.1)
    fabric.opensm_log = log
    return sm


@pytest.fixture(scope="module", params=["ibemu-sm", "opensm"])
def managed(request, tmp_path_factory):
    if request.param == "opensm" and shutil.which("opensm") is None:
        pytest.skip("opensm is not installed")
    root = tmp_path_factory.mktemp(request.param)
    f = Fabric(root / "rt")
    f.up(sm=False)
    guids = port_guids(f)
    conf = root / "partitions.conf"
    conf.write_text(PARTITIONS.format(full=guids["ibemu0", 1]))
    sm = None
    try:
        if request.param == "opensm":
            sm = start_opensm(f, root, conf, guids["ibemu0", 1])
        else:
            f.ibemu("up", "--partitions", str(conf))
        yield f
    finally:
        if sm:
            sm.terminate()
            sm.wait(timeout=30)
        f.down(stop_programs=True)


def sysfs(fabric, device, port, name):
    r = fabric.run(["cat", f"/sys/class/infiniband/{device}/ports/{port}/{name}"])
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def pkey_index(fabric, device, port, pkey):
    """Where in the port's P_Key table `pkey` is (the SM chose the index)."""
    for i in range(16):
        if int(sysfs(fabric, device, port, f"pkeys/{i}"), 16) == pkey:
            return i
    pytest.fail(f"{device}/{port} has no P_Key {pkey:#06x}")


def test_the_sm_programs_each_ports_pkey_table(managed):
    lid = managed.status()["devices"][1]["port_info"][0]["lid"]
    r = managed.run(["smpquery", "-C", "ibemu0", "-P", "1", "pkeys", str(lid)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"0:\s+0xffff\s+0x0001\s", r.stdout), r.stdout
    assert pkey_index(managed, "ibemu0", 1, 0x8001) > 0
    for device, port in [("ibemu0", 2), ("ibemu1", 1), ("ibemu1", 2)]:
        assert pkey_index(managed, device, port, 0x0001) > 0


def test_a_full_and_a_limited_member_talk(managed):
    full = pkey_index(managed, "ibemu0", 1, 0x8001)
    limited = pkey_index(managed, "ibemu1", 1, 0x0001)
    out = perftest(managed, "ib_send_bw", ["-s", "4096", "-n", "200"],
                   server=("-d", "ibemu0", "-i", "1", f"--pkey_index={full}"),
                   client=("-d", "ibemu1", "-i", "1", f"--pkey_index={limited}"))
    check_table(out, "ib_send_bw", [4096], 200)


def test_two_limited_members_do_not(managed):
    expect_dropped(managed,
                   ["-d", "ibemu1", "-i", "1",
                    f"--pkey_index={pkey_index(managed, 'ibemu1', 1, 0x0001)}"],
                   ["-d", "ibemu1", "-i", "2",
                    f"--pkey_index={pkey_index(managed, 'ibemu1', 2, 0x0001)}"])
