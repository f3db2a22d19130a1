"""Debian's opensm as the subnet manager of a no-kernel fabric. It opens
/dev/infiniband/issmN, which sets its port's IsSM capability bit while the
file is open; it brings every port ACTIVE with no error in its log; and it
programs each port's P_Key table from its partitions.conf (IBA 14.2.5.7,
SubnSet(P_KeyTable)). QPs then send in those partitions and receivers
enforce them (IBA 10.9): a full member talks to a limited one, two limited
members do not."""
import re
import shutil
import time

import pytest

from conftest import Fabric, skip_where_tsan_cannot_run
from test_partitions import expect_dropped
from test_perftest import check_table, perftest

pytestmark = pytest.mark.skipif(shutil.which("opensm") is None, reason="opensm is not installed")

IS_SM = 1 << 1  # PortInfo:CapabilityMask.IsSM


@pytest.fixture(scope="module")
def managed(tmp_path_factory):
    """A fabric without ibemu-sm, managed by opensm on ibemu0 port 1 with
    partition 1: ibemu0 port 1 a full member, every other port limited."""
    root = tmp_path_factory.mktemp("opensm")
    f = Fabric(root / "rt")
    f.up(sm=False)
    guids = {(d["name"], p["port"]): p["port_guid"]
             for d in f.status()["devices"] for p in d["port_info"]}
    conf = root / "partitions.conf"
    conf.write_text("Default=0x7fff, ipoib : ALL=full ;\n"
                    f"storage=0x0001 : ALL=limited, {guids['ibemu0', 1]}=full ;\n")
    log = root / "opensm.log"
    # -d2: a log line is written when it happens, not when a buffer fills.
    sm = f.spawn(["env", f"OSM_CACHE_DIR={root}", "opensm", "-d2", "-g", guids["ibemu0", 1],
                  "-P", str(conf), "-f", str(log), "--dump_files_dir", str(root)])
    try:
        f.wait_active(timeout=60)
        deadline = time.monotonic() + 60
        while "SUBNET UP" not in log.read_text():
            assert time.monotonic() < deadline and sm.poll() is None, log.read_text()[-4000:]
            time.sleep(0.1)
        f.opensm_log = log
        yield f
    finally:
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


def test_opensm_brings_the_subnet_up_without_an_error(managed):
    log = managed.opensm_log.read_text()
    assert "SUBNET UP" in log
    assert not re.findall(r".*\bERR [0-9A-F]{4}\b.*", log), log[-4000:]


def test_opensm_holds_the_is_sm_bit_of_its_port(managed):
    assert int(sysfs(managed, "ibemu0", 1, "cap_mask"), 16) & IS_SM
    assert not int(sysfs(managed, "ibemu0", 2, "cap_mask"), 16) & IS_SM


def test_issm_file_is_exclusive_has_no_read_and_its_bit_goes_when_closed(managed):
    skip_where_tsan_cannot_run(["python3"])
    script = r"""
import errno, os
try:
    os.open("/dev/infiniband/issm0", os.O_RDWR | os.O_NONBLOCK)  # opensm holds it
except OSError as e:
    print("busy", errno.errorcode[e.errno])
fd = os.open("/dev/infiniband/issm1", os.O_RDWR)
try:
    os.read(fd, 1)
except OSError as e:
    print("read", errno.errorcode[e.errno])
print("held", open("/sys/class/infiniband/ibemu0/ports/2/cap_mask").read().strip())
os.close(fd)
"""
    r = managed.run(["python3", "-c", script], timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "busy EAGAIN" in r.stdout and "read EINVAL" in r.stdout, r.stdout
    held = re.search(r"held (0x[0-9a-f]+)", r.stdout)
    assert held and int(held.group(1), 16) & IS_SM, r.stdout
    deadline = time.monotonic() + 10  # the daemon sees the file close
    while int(sysfs(managed, "ibemu0", 2, "cap_mask"), 16) & IS_SM:
        assert time.monotonic() < deadline, "IsSM stayed set after the issm file closed"
        time.sleep(0.05)


def test_opensm_programs_each_ports_pkey_table(managed):
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
