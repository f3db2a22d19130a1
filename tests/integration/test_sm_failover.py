"""Two subnet managers on one subnet (IBA 14.4.1). The SM that `ibemu up`
starts is master; a second ibemu-sm started beside it on ibemu1 port 1 (its
own lock file, a higher priority) finds a master running and stands by. When
the master is killed, the standby takes over within three polls: it keeps
every LID, becomes the SM LID of every port, answers SMInfo and the SA, and
brings a link that went down and up back to ACTIVE."""
import re
import subprocess
import time

import pytest

from conftest import BUILD, Fabric

SM_BIN = str(BUILD / "bin" / "ibemu-sm")
POLL_S = 0.3  # the standby's sweep interval: its master polls


def wait_for(what, predicate, fabric, log=None, timeout=15):
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            extra = f"--- standby log\n{log.read_text()[-4000:]}" if log else ""
            pytest.fail(f"timed out waiting for {what}\n{fabric.logs()}{extra}")
        time.sleep(0.05)


def ports(status):
    return {(d["name"], p["port"]): p for d in status["devices"] for p in d["port_info"]}


@pytest.fixture
def two_sms(tmp_path):
    f = Fabric(tmp_path / "rt")
    f.up()
    log = tmp_path / "standby-sm.log"
    with open(log, "w") as out:
        standby = subprocess.Popen(
            [SM_BIN, "--runtime-dir", str(f.runtime_dir), "--device", "ibemu1", "--port", "1",
             "--priority", "5", "--sweep-interval", str(POLL_S),
             "--lock-file", str(tmp_path / "standby-sm.lock")],
            stdout=out, stderr=subprocess.STDOUT)
    yield f, standby, log
    if standby.poll() is None:
        standby.terminate()
        standby.wait(timeout=10)
    f.down()


def sminfo(fabric, device, port):
    """sminfo's line for the SM that `device`/`port` knows as its SM LID."""
    r = fabric.run(["sminfo", "-C", device, "-P", str(port)], timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr + fabric.logs()
    return r.stdout


def test_standby_takes_over_a_killed_master(two_sms):
    f, standby, log = two_sms
    wait_for("the second SM to stand by",
             lambda: "state DISCOVERING -> STANDBY" in log.read_text(), f, log)
    assert standby.poll() is None, log.read_text()

    st = f.status()
    master_pid = st["sm"]["pid"]
    assert master_pid != standby.pid
    assert st["sm"]["state"] == "master" and st["sm"]["priority"] == 0
    by_pid = {sm["pid"]: sm for sm in st["sms"]}
    assert by_pid[standby.pid]["state"] == "standby", st["sms"]
    assert by_pid[standby.pid]["priority"] == 5
    text = f.ibemu("status").stdout
    assert re.search(r"ibemu-sm pid \d+ on ibemu0 port 1 +MASTER priority 0", text), text
    assert re.search(rf"ibemu-sm pid {standby.pid} on ibemu1 port 1 +STANDBY priority 5", text)

    before = ports(st)
    master_lid = before[("ibemu0", 1)]["lid"]
    standby_lid = before[("ibemu1", 1)]["lid"]
    assert all(p["sm_lid"] == master_lid for p in before.values())
    # The standby configured nothing, and SMInfo says what each SM is.
    assert "state 3 SMINFO_MASTER" in sminfo(f, "ibemu1", 2)
    standby_guid = before[("ibemu1", 1)]["port_guid"]
    r = f.run(["sminfo", "-C", "ibemu0", "-P", "2", str(standby_lid)], timeout=30)
    assert "priority 5 state 2 SMINFO_STANDBY" in r.stdout, r.stdout + r.stderr

    master_guid = before[("ibemu0", 1)]["port_guid"]
    subprocess.run(["kill", "-9", str(master_pid)], check=True)
    wait_for("the standby to take over",
             lambda: "state STANDBY -> MASTER" in log.read_text(), f, log,
             timeout=3 * POLL_S + 10)
    line = next(l for l in log.read_text().splitlines() if "state STANDBY -> MASTER" in l)
    assert f"master {master_guid} stopped answering" in line, line

    wait_for("every port to name the new master",
             lambda: all(p["sm_lid"] == standby_lid and p["state"] == "ACTIVE"
                         for p in ports(f.status()).values()), f, log)
    after = ports(f.status())
    assert {k: p["lid"] for k, p in after.items()} == {k: p["lid"] for k, p in before.items()}, \
        "the new master keeps every LID"
    st = f.status()
    assert st["sm"]["pid"] == standby.pid and st["sm"]["state"] == "master", st["sm"]
    out = sminfo(f, "ibemu0", 2)
    assert f"sm lid {standby_lid} " in out and "state 3 SMINFO_MASTER" in out, out
    assert f"sm guid {hex(int(standby_guid, 16))}" in out, out
    # The new master is the SA now.
    r = f.run(["saquery", "-C", "ibemu0", "-P", "2", "NR"], timeout=30)
    assert r.returncode == 0 and r.stdout.count("NodeRecord dump") == 5, r.stdout + r.stderr

    # It repairs the subnet as a master does.
    f.ibemu("fault", "link", "ibemu0:2", "down")
    wait_for("ibemu0/2 to go down",
             lambda: ports(f.status())[("ibemu0", 2)]["state"] == "DOWN", f, log)
    f.ibemu("fault", "link", "ibemu0:2", "up")
    wait_for("ibemu0/2 to come back ACTIVE under the new master",
             lambda: ports(f.status())[("ibemu0", 2)]["state"] == "ACTIVE", f, log)
    p = ports(f.status())[("ibemu0", 2)]
    assert p["lid"] == before[("ibemu0", 2)]["lid"] and p["sm_lid"] == standby_lid
    assert standby.poll() is None, log.read_text()


def test_a_second_sm_on_the_default_lock_refuses(two_sms):
    f, _, _ = two_sms
    r = subprocess.run([SM_BIN, "--runtime-dir", str(f.runtime_dir), "--port", "2", "--once"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "already runs on this runtime directory" in r.stderr
    assert "--lock-file" in r.stderr


def test_two_sms_cannot_share_a_port(two_sms, tmp_path):
    f, _, log = two_sms
    wait_for("the second SM to stand by",
             lambda: "state DISCOVERING -> STANDBY" in log.read_text(), f, log)
    r = subprocess.run([SM_BIN, "--runtime-dir", str(f.runtime_dir), "--device", "ibemu1",
                        "--port", "1", "--lock-file", str(tmp_path / "third.lock"), "--once"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "another subnet manager is attached to that port" in r.stderr, r.stderr
