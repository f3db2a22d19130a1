"""Debian's opensm as the subnet manager of a no-kernel fabric: it opens
/dev/infiniband/issmN, which sets its port's IsSM capability bit while the
file is open, and it brings every port ACTIVE with no error in its log.
The partitions it programs are test_sm_partitions.py's."""
import re
import shutil
import time

import pytest

from conftest import skip_where_tsan_cannot_run
from test_sm_partitions import managed, sysfs  # noqa: F401 (managed is a fixture)

pytestmark = [pytest.mark.skipif(shutil.which("opensm") is None, reason="opensm is not installed"),
              pytest.mark.parametrize("managed", ["opensm"], indirect=True)]

IS_SM = 1 << 1  # PortInfo:CapabilityMask.IsSM


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
