"""ibemu fault: what a link does to packets, and link failures, on one host.
RC delivers everything exactly once over a link that loses, duplicates and
reorders (a capture shows the go-back-N retransmissions); UD loses what the
link loses and the counters say so; a link pulled in the middle of a
transfer ends it with IBV_WC_RETRY_EXC_ERR, and once it is back the subnet
manager brings the port up again and new connections work; forced RNR and
PSN sequence NAKs on a QP; ibemu topology shows the cables."""
import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BUILD, Fabric, bulk_mib, pingpong_pair, rc_stream_until_cut

RC_BULK = str(BUILD / "bin" / "rc_bulk")
UD_LOSSY = str(Path(__file__).parent / "verbs_cases" / "ud_lossy.py")


@pytest.fixture
def lossy(tmp_path):
    f = Fabric(tmp_path / "rt")
    f.up()
    yield f
    f.down()


def port_status(fabric, device, num):
    dev = next(d for d in fabric.status()["devices"] if d["name"] == device)
    return next(p for p in dev["port_info"] if p["port"] == num)


def test_rc_moves_a_gigabyte_whole_over_a_lossy_link(lossy):
    lossy.ibemu("fault", "set", "-i", "ibemu0:1", "--drop", "5", "--duplicate", "5", "--reorder",
                "5", "--seed", "11")
    assert port_status(lossy, "ibemu0", 1)["faults"]["drop_ppm"] == 50000
    # A 16 ms local ACK timeout: the emulated link delivers in microseconds.
    mib = bulk_mib(1024)
    r = lossy.run([RC_BULK, "-m", str(mib), "-t", "12"], timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr + lossy.logs()
    assert r.stdout.split("\n")[:2] == [f"write {mib} MiB ok", f"send {mib} MiB ok"], r.stdout
    drops = port_status(lossy, "ibemu0", 1)["counters"]["drops"]["link_faults"]
    assert drops > 1000, drops


def test_capture_shows_the_retransmissions(lossy, tmp_path):
    lossy.ibemu("fault", "set", "-i", "ibemu0:1", "--drop", "5", "--seed", "5")
    pcap = tmp_path / "lossy.pcap"
    cap = subprocess.Popen([lossy.ibemu_bin, "-r", str(lossy.runtime_dir), "capture", "-w",
                            str(pcap)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    while not pcap.exists():
        time.sleep(0.02)
    r = lossy.run([RC_BULK, "-m", "32", "-t", "12"], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    cap.terminate()
    cap.communicate(timeout=30)
    out = subprocess.run(["tshark", "-r", str(pcap), "-T", "fields", "-e", "infiniband.bth.opcode",
                          "-e", "infiniband.bth.psn", "-e", "infiniband.aeth.syndrome"],
                         capture_output=True, text=True, timeout=120).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    write_psns = [r[1] for r in rows if r[0] in ("6", "7", "8")]  # RDMA WRITE First/Middle/Last
    assert len(write_psns) > len(set(write_psns)), "no WRITE packet was sent twice"
    # PSN sequence error NAKs (AETH syndrome 011 00000) asked for them.
    naks = [r for r in rows if r[0] == "17" and r[2] and int(r[2], 0) == 0x60]
    assert naks, "no PSN sequence error NAK"


def test_ud_loses_what_the_link_loses(lossy):
    lossy.ibemu("fault", "set", "-i", "ibemu1:1", "--drop", "30", "--seed", "2")
    r = lossy.run(["/usr/bin/python3", UD_LOSSY, "200"], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    received = int(re.search(r"received (\d+)", r.stdout).group(1))
    assert 100 < received < 180, received
    lost = port_status(lossy, "ibemu0", 1)["counters"]["drops"]["link_faults"]
    assert lost == 200 - received, (lost, received)


def test_same_seed_same_losses(lossy):
    got = []
    for _ in range(2):
        lossy.ibemu("fault", "set", "-i", "ibemu1:1", "--drop", "30", "--seed", "9")
        r = lossy.run(["/usr/bin/python3", UD_LOSSY, "100"], timeout=120)
        got.append(r.stdout)
    assert got[0] == got[1], got


def test_delay_is_added_to_every_packet(lossy):
    fast = pingpong_pair(lossy, "ibv_rc_pingpong", ["-n", "20", "-s", "64"])[1]
    lossy.ibemu("fault", "set", "-i", "ibemu0:1", "--delay", "2000")
    slow = pingpong_pair(lossy, "ibv_rc_pingpong", ["-n", "20", "-s", "64"])[1]

    def usec_per_iter(out):
        return float(re.search(r"([\d.]+) usec/iter", out).group(1))
    # Each iteration crosses the link twice (a SEND each way; ACKs ride back
    # meanwhile): at least 4 ms per iteration, which no host is slow enough
    # to take without the delay.
    assert usec_per_iter(slow) >= 4000, slow
    assert usec_per_iter(fast) < usec_per_iter(slow), (fast, slow)


def test_link_down_ends_a_transfer_and_up_brings_the_port_back(lossy):
    rc, out = rc_stream_until_cut(lossy, "ibemu0", lossy, "ibemu1", "localhost",
                                  lambda: lossy.ibemu("fault", "link", "ibemu0:1", "down"))
    # Retry exceeded once the peer was silent for the stall tolerance (10 s;
    # 4 ms x 8 attempts with none), then the rest flushed.
    assert rc == 1 and "transport retry counter exceeded" in out, out
    assert port_status(lossy, "ibemu0", 1)["state"] == "DOWN"
    lossy.ibemu("fault", "link", "ibemu0:1", "up")
    deadline = time.time() + 30
    while port_status(lossy, "ibemu0", 1)["state"] != "ACTIVE":
        assert time.time() < deadline, lossy.logs()
        time.sleep(0.1)
    pingpong_pair(lossy, "ibv_rc_pingpong", ["-n", "10"])


def test_bad_requests(lossy):
    r = lossy.ibemu("fault", "set", "-i", "ibemu7", "--drop", "1", check=False)
    assert r.returncode != 0 and "no such" in r.stderr, r.stderr
    r = lossy.ibemu("fault", "link", "ibemu0", "down", check=False)
    assert r.returncode != 0, r.stderr
    r = lossy.ibemu("fault", "set", "--drop", "101", check=False)
    assert r.returncode != 0
    lossy.ibemu("fault", "set", "--drop", "1")
    lossy.ibemu("fault", "clear")
    assert "faults" not in port_status(lossy, "ibemu1", 2)


# Mistyped values: refused with a message naming the option and the value,
# before the daemon is asked (none runs here); never an exception's text, a
# NaN passed on, or a number clipped or cut short.
@pytest.mark.parametrize("args,option", [
    (["fault", "set", "--drop", "nan"], "--drop"),
    (["fault", "set", "--reorder", "inf"], "--reorder"),
    (["fault", "set", "-i", ":"], "--interface"),
    (["fault", "set", "-i", "ibemu0:1:2"], "--interface"),
    (["fault", "clear", "-i", "ibemu0:"], "--interface"),
    (["fault", "set", "--seed", "-1"], "--seed"),
    (["fault", "set", "--seed", "99999999999999999999"], "--seed"),
    (["fault", "set", "--delay", "-1"], "--delay"),
    (["fault", "nak", "ibemu0", "abc", "rnr"], "qpn"),
    (["fault", "nak", "ibemu0", "0x1000000", "rnr"], "qpn"),
    (["capture", "-w", "/dev/null", "--qpn", "abc"], "--qpn"),
    (["capture", "-w", "/dev/null", "-i", "ibemu0:x"], "--interface"),
    (["capture", "-w", "/dev/null", "--lid", "70000"], "--lid"),
])
def test_mistyped_values_are_refused_by_name(tmp_path, args, option):
    r = subprocess.run([str(BUILD / "bin" / "ibemu"), *args], capture_output=True, text=True,
                       env={"IBEMU_RUNTIME_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
                       timeout=30)
    assert r.returncode != 0, r.stdout + r.stderr
    bad = args[3] if args[:2] == ["fault", "nak"] else args[-1]
    assert r.stderr.startswith(f"{option}: '{bad}'"), r.stderr
    assert not re.search(r"sto[iu]l?|type_error|terminate|not running", r.stderr), r.stderr


@pytest.mark.parametrize("kind,syndromes", [("rnr", range(0x20, 0x40)), ("psn", [0x60])])
def test_forced_naks_on_a_qp(lossy, tmp_path, kind, syndromes):
    pcap = tmp_path / f"{kind}.pcap"
    cap = subprocess.Popen([lossy.ibemu_bin, "-r", str(lossy.runtime_dir), "capture", "-w",
                            str(pcap)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    while not pcap.exists():
        time.sleep(0.02)
    bulk = subprocess.Popen([RC_BULK, "-m", "32", "-t", "12", "-w"], env=lossy.env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    target = bulk.stdout.readline().split()[2]  # the QP on ibemu1 that receives
    lossy.ibemu("fault", "nak", "ibemu1", target, kind, "--count", "3")
    out = bulk.communicate("go\n", timeout=120)[0]
    assert bulk.returncode == 0 and "send 32 MiB ok" in out, out
    cap.terminate()
    cap.communicate(timeout=30)
    rows = subprocess.run(["tshark", "-r", str(pcap), "-T", "fields", "-e", "infiniband.bth.opcode",
                           "-e", "infiniband.aeth.syndrome"],
                          capture_output=True, text=True, timeout=120).stdout.splitlines()
    naks = [r for r in rows if r.startswith("17\t") and int(r.split("\t")[1], 0) in syndromes]
    assert len(naks) == 3, naks


def test_forced_naks_name_live_qps_and_fault_clear_cancels_them(lossy):
    r = lossy.ibemu("fault", "nak", "ibemu1", "0xabcdef", "rnr", check=False)
    assert r.returncode != 0 and "has no QP 0xabcdef" in r.stderr, r.stderr
    bulk = subprocess.Popen([RC_BULK, "-m", "32", "-t", "12", "-w"], env=lossy.env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    target = bulk.stdout.readline().split()[2]  # the QP on ibemu1 that receives
    # Enough RNR NAKs to exhaust any rnr_retry: the transfer would fail ...
    lossy.ibemu("fault", "nak", "ibemu1", target, "rnr", "--count", "1000")
    lossy.ibemu("fault", "clear")  # ... had clear not cancelled them.
    out = bulk.communicate("go\n", timeout=120)[0]
    assert bulk.returncode == 0 and "send 32 MiB ok" in out, out


def test_topology_shows_every_cable_and_a_pulled_one(lossy):
    out = lossy.ibemu("topology").stdout
    for dev, port in (("ibemu0", 1), ("ibemu0", 2), ("ibemu1", 1), ("ibemu1", 2)):
        p = port_status(lossy, dev, port)
        assert re.search(rf"-> {dev}/{port}\s+Active\s+LinkUp\s+port guid {p['port_guid']} "
                         rf"lid {p['lid']}\b", out), out
    assert "(SM)" in out
    lossy.ibemu("fault", "link", "ibemu1:2", "down")
    assert re.search(r"-> ibemu1/2\s+Down\s+Polling", lossy.ibemu("topology").stdout)


def test_faults_from_the_config(tmp_path):
    """A config's faults are set when the daemon starts, as `ibemu fault`
    would set them; a pulled cable keeps its port DOWN and `ibemu up` does
    not wait for it."""
    config = tmp_path / "faults.json"
    config.write_text(json.dumps({"faults": [
        {"interface": "ibemu0:1", "drop": 2.5, "reorder": 1, "seed": 9},
        {"interface": "ibemu1:2", "link": "down"}]}))
    f = Fabric(tmp_path / "rt")
    try:
        f.ibemu("up", "--config", str(config))
        faults = port_status(f, "ibemu0", 1)["faults"]
        assert faults["drop_ppm"] == 25000 and faults["reorder_ppm"] == 10000, faults
        assert faults["seed"] == 9
        assert port_status(f, "ibemu1", 2)["state"] == "DOWN"
        assert port_status(f, "ibemu1", 1)["state"] == "ACTIVE"
    finally:
        f.down()
    config.write_text(json.dumps({"faults": [{"interface": "ibemu0:1", "drop": 200}]}))
    r = Fabric(tmp_path / "rt2").ibemu("up", "--config", str(config), check=False)
    assert r.returncode != 0
