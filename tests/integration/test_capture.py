"""ibemu capture: the packets crossing the emulated ports, written as pcap
files that tshark dissects as InfiniBand (LRH, BTH opcodes, the CRCs),
filtered by port, QP or LID, in a ring of files, and ended by a count, a
duration, Ctrl-C or the end of the command it runs."""
import re
import signal
import struct
import subprocess
import time
import zlib

import pytest

from conftest import (BUILD, REPO, free_tcp_port, pingpong_pair, run_pair,
                      skip_where_tsan_cannot_run, spawn_listening)


def start_capture(fabric, path, *args):
    proc = subprocess.Popen([fabric.ibemu_bin, "-r", str(fabric.runtime_dir), "capture", "-w",
                             str(path), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 10
    while not path.exists():  # the daemon creates the file when the capture starts
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[0]
        time.sleep(0.02)
    return proc


def finish(proc, timeout=30):
    out = proc.communicate(timeout=timeout)[0]
    assert proc.returncode == 0, out
    return int(re.search(r"(\d+) packets captured", out).group(1))


def tshark(path, *fields):
    r = subprocess.run(["tshark", "-r", str(path), "-T", "fields",
                        *sum((["-e", f] for f in fields), [])],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [line.split("\t") for line in r.stdout.splitlines()]


def erf_packets(path):
    """The IBA packets of a pcap file of ERF records (16-byte ERF header each)."""
    data = path.read_bytes()
    off, packets = 24, []
    while off < len(data):
        incl = struct.unpack("<I", data[off + 8:off + 12])[0]
        packets.append(data[off + 16 + 16:off + 16 + incl])
        off += 16 + incl
    return packets


def port_lid(fabric, device, num):
    dev = next(d for d in fabric.status()["devices"] if d["name"] == device)
    return next(p for p in dev["port_info"] if p["port"] == num)["lid"]


def test_rc_pingpong_dissected_by_tshark(fabric, tmp_path):
    pcap = tmp_path / "rc.pcap"
    cap = start_capture(fabric, pcap, "-c", "20")
    pingpong_pair(fabric, "ibv_rc_pingpong", ["-n", "5", "-s", "64"])
    assert finish(cap) == 20
    rows = tshark(pcap, "infiniband.bth.opcode", "infiniband.lrh.dlid", "infiniband.lrh.slid")
    assert len(rows) == 20, rows
    opcodes = {r[0] for r in rows}
    assert opcodes == {"4", "17"}, rows  # RC SEND Only and RC Acknowledge
    lids = {str(port_lid(fabric, "ibemu0", 1)), str(port_lid(fabric, "ibemu1", 1))}
    assert {r[1] for r in rows} == lids and {r[2] for r in rows} == lids, rows
    # The ICRC is filled in as a real link carries it (IBA 7.8.1: CRC-32 of
    # the packet with LRH:VL and BTH:Resv8a taken as ones, local packets).
    for packet in erf_packets(pcap):
        masked = bytearray(packet[:-6])
        masked[0] |= 0xF0
        masked[8 + 4] = 0xFF
        assert struct.unpack("<I", packet[-6:-2])[0] == zlib.crc32(masked), packet.hex()


def test_filter_by_port(fabric, tmp_path):
    elsewhere = start_capture(fabric, tmp_path / "p2.pcap", "-i", "ibemu0:2", "-G", "4")
    here = start_capture(fabric, tmp_path / "p1.pcap", "-i", "ibemu1:1", "-G", "4")
    pingpong_pair(fabric, "ibv_rc_pingpong", ["-n", "3", "-s", "64"])
    assert finish(elsewhere) == 0
    assert finish(here) == 12


def test_filter_by_qpn_and_lid(fabric, tmp_path):
    # The pingpong's QPs get numbers from the daemon; filter on the server's
    # LID instead and on a QPN nobody has.
    lid = port_lid(fabric, "ibemu0", 1)
    by_lid = start_capture(fabric, tmp_path / "lid.pcap", "--lid", str(lid), "-G", "4")
    no_qp = start_capture(fabric, tmp_path / "qp.pcap", "--qpn", "0xfffff0", "-G", "4")
    pingpong_pair(fabric, "ibv_rc_pingpong", ["-n", "3", "-s", "64"])
    assert finish(by_lid) == 12
    assert finish(no_qp) == 0


def test_ud_with_grh(fabric, tmp_path):
    pcap = tmp_path / "ud.pcap"
    cap = start_capture(fabric, pcap, "-c", "6")
    pingpong_pair(fabric, "ibv_ud_pingpong", ["-n", "3", "-s", "64", "-g", "0"])
    assert finish(cap) == 6
    rows = tshark(pcap, "infiniband.bth.opcode", "infiniband.deth.srcqp", "infiniband.grh.ipver")
    assert {r[0] for r in rows} == {"100"}, rows  # UD SEND Only
    assert {r[2] for r in rows} == {"6"}, rows


def test_linktype_infiniband(fabric, tmp_path):
    pcap = tmp_path / "raw.pcap"
    cap = start_capture(fabric, pcap, "--linktype", "infiniband", "-c", "4")
    pingpong_pair(fabric, "ibv_rc_pingpong", ["-n", "1", "-s", "64"])
    assert finish(cap) == 4
    magic, _, _, _, _, _, linktype = struct.unpack("<IHHiIII", pcap.read_bytes()[:24])
    assert (magic, linktype) == (0xa1b23c4d, 247)


def test_ring_of_files(fabric, tmp_path):
    pcap = tmp_path / "ring.pcap"
    cap = start_capture(fabric, pcap, "-C", "0.002", "-W", "3", "-G", "5")
    pingpong_pair(fabric, "ibv_rc_pingpong", ["-n", "25", "-s", "64"])
    assert finish(cap) >= 100
    # 2 kB files of 90-byte SENDs and 30-byte ACKs: the ring went round and
    # kept the newest three.
    files = sorted(p.name for p in tmp_path.glob("ring.pcap*"))
    assert files == ["ring.pcap", "ring.pcap.1", "ring.pcap.2"], files
    for f in files:  # every file of the ring is a whole capture file
        rows = tshark(tmp_path / f, "infiniband.bth.opcode")
        assert 0 < len(rows) <= 25, (f, rows)


def test_ctrl_c_ends_the_capture(fabric, tmp_path):
    cap = start_capture(fabric, tmp_path / "int.pcap")
    cap.send_signal(signal.SIGINT)
    assert finish(cap) == 0
    # Nothing is mirrored any more: a capture whose CLI died is gone too.
    killed = start_capture(fabric, tmp_path / "kill.pcap")
    killed.kill()
    killed.wait()
    pingpong_pair(fabric, "ibv_rc_pingpong", ["-n", "1", "-s", "64"])
    assert (tmp_path / "kill.pcap").stat().st_size == 24  # the file header only


def capture_running(fabric, path, *command):
    return fabric.run([fabric.ibemu_bin, "-r", str(fabric.runtime_dir), "capture", "-w", str(path),
                       "--", *command])


def test_command_form_misses_no_packet(fabric, tmp_path):
    """`ibemu capture -w F -- COMMAND` starts COMMAND once the capture is
    active: the file opens with the client's very first SEND, and ends with
    the last packet sent before COMMAND exited."""
    pcap = tmp_path / "command.pcap"
    port = free_tcp_port()
    base = ["ibv_rc_pingpong", "-p", str(port), "-n", "5", "-s", "64"]
    server = spawn_listening(fabric, base + ["-d", "ibemu0"], port)
    r = capture_running(fabric, pcap, *base, "-d", "ibemu1", "localhost")
    server_out = server.communicate(timeout=60)[0]
    assert r.returncode == 0 and server.returncode == 0, r.stdout + r.stderr + server_out
    assert "capturing on every port" in r.stderr, r.stderr
    local = re.search(r"local address: .*QPN (0x[0-9a-f]+), PSN (0x[0-9a-f]+)", r.stdout)
    remote = re.search(r"remote address: .*QPN (0x[0-9a-f]+)", r.stdout)
    assert local and remote, r.stdout
    rows = tshark(pcap, "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn")
    # 5 SENDs each way and their ACKs: all of them, none before and none after.
    assert int(re.search(r"(\d+) packets captured", r.stderr).group(1)) == len(rows) == 20, rows
    opcode, dest_qpn, psn = rows[0]
    assert opcode == "4", rows  # RC SEND Only
    assert int(dest_qpn, 16) == int(remote.group(1), 16), (rows[0], r.stdout)
    assert int(psn) == int(local.group(2), 16), (rows[0], r.stdout)


def test_command_form_exits_with_the_commands_status(fabric, tmp_path):
    skip_where_tsan_cannot_run(["sh"])  # the commands are shells, under ibemu's environment
    r = capture_running(fabric, tmp_path / "exit.pcap", "sh", "-c", "exit 3")
    assert r.returncode == 3 and "0 packets captured" in r.stderr, r.stderr
    r = capture_running(fabric, tmp_path / "kill.pcap", "sh", "-c", "kill -TERM $$")
    assert r.returncode == 128 + signal.SIGTERM, r.stderr
    r = capture_running(fabric, tmp_path / "none.pcap", "no-such-program-ibemu")
    assert r.returncode == 127 and "cannot run no-such-program-ibemu" in r.stderr, r.stderr


def test_a_capture_whose_file_cannot_be_written_fails(fabric):
    """Into a full disk (/dev/full) no packet lands: the command says the
    capture stopped and why, and exits non-zero, rather than counting
    packets that are not in the file."""
    port = free_tcp_port()
    base = ["ibv_rc_pingpong", "-p", str(port), "-n", "50", "-s", "64"]
    server = spawn_listening(fabric, base + ["-d", "ibemu0"], port)
    r = capture_running(fabric, "/dev/full", *base, "-d", "ibemu1", "localhost")
    server.communicate(timeout=60)
    assert r.returncode == 1, r.stderr
    assert "the capture stopped early: writing /dev/full: No space left on device" in r.stderr, \
        r.stderr
    assert "packets captured" not in r.stderr, r.stderr


@pytest.mark.parametrize("bad", [["-i", "ibemu9"], ["-i", "ibemu0:7"]])
def test_bad_interface(fabric, tmp_path, bad):
    r = fabric.ibemu("capture", "-w", str(tmp_path / "x.pcap"), *bad, check=False)
    assert r.returncode != 0 and "no such" in r.stderr, r.stderr


def test_mads_appear_as_qp0_and_qp1_packets(fabric, tmp_path):
    pcap = tmp_path / "mads.pcap"
    cap = start_capture(fabric, pcap, "-c", "4")
    lid = str(port_lid(fabric, "ibemu0", 1))
    for cmd in (["smpquery", "-C", "ibemu1", "-P", "1", "nodeinfo", lid],
                ["perfquery", "-C", "ibemu1", "-P", "1", "-x"]):
        r = fabric.run(cmd, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
    assert finish(cap) == 4
    rows = tshark(pcap, "infiniband.bth.destqp", "infiniband.lrh.vl", "_ws.col.Info")
    # An SMP and its response on QP0 (VL15), then the PMA's ClassPortInfo
    # exchange on QP1.
    assert [(r[0], r[1]) for r in rows] == [("0x000000", "0x0f")] * 2 + [("0x000001", "0x00")] * 2, rows
    assert "SubnGet(NodeInfo)" in rows[0][2] and "SubnGetResp(NodeInfo)" in rows[1][2], rows


DC_DISSECTOR = REPO / "scripts" / "wireshark" / "ibemu-dc.lua"


def test_dc_packets_decoded_by_the_shipped_dissector(fabric, tmp_path):
    """DC requests carry a DCETH (docs/dc.md): Wireshark's own dissector stops
    at the BTH; scripts/wireshark/ibemu-dc.lua names the opcodes and decodes
    the key, the connect flag and the DCI's number."""
    pcap = tmp_path / "dc.pcap"
    cap = start_capture(fabric, pcap)
    port = free_tcp_port()
    transfer = str(BUILD / "bin" / "dc_transfer")
    server, client = run_pair(
        fabric, [transfer, "server", "-a", "10.73.0.1", "-p", str(port), "-n", "3", "-s", "5000"],
        [transfer, "client", "-a", "10.73.0.3", "-p", str(port), "-n", "3", "-s", "5000",
         "127.0.0.1"], port, timeout=60)
    assert server[0] == 0 and client[0] == 0, f"{server[1]}\n{client[1]}"
    cap.send_signal(signal.SIGINT)
    finish(cap)
    r = subprocess.run(["tshark", "-X", f"lua_script:{DC_DISSECTOR}", "-r", str(pcap), "-T",
                        "fields", "-e", "ibemu_dc.opcode", "-e", "ibemu_dc.dceth.key", "-e",
                        "ibemu_dc.dceth.connect", "-e", "ibemu_dc.dceth.dci", "-e",
                        "ibemu_dc.dma_len", "-e", "infiniband.bth.destqp", "-e", "_ws.col.Info"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = [line.split("\t") for line in r.stdout.splitlines()]
    dc = [row for row in rows if row[0].startswith("DC_")]
    firsts = [row for row in dc if row[0] == "DC_RDMA_WRITE_FIRST"]
    assert len(firsts) == 3, rows  # 5000 bytes: FIRST, LAST at the 4096-byte MTU
    assert all(row[1] == "0x00dc0a1b2c3d4e5f" and row[4] == "5000" for row in firsts), firsts
    assert [row[2] for row in firsts] == ["1", "0", "0"], "only the first opens the connection"
    dci = int(firsts[0][3], 16)
    acks = [row for row in dc if row[0] == "DC_ACKNOWLEDGE"]
    assert acks and all(int(row[5], 16) == dci for row in acks), rows
    # The summary line names the opcode as Wireshark names RC's, in place of
    # its "Unknown OpCode".
    dct = firsts[0][5]
    assert firsts[0][6] == f"DC RDMA Write First QP={dct} DCI={firsts[0][3]} Connect", firsts
    assert firsts[1][6] == f"DC RDMA Write First QP={dct} DCI={firsts[0][3]}", firsts
    assert acks[0][6] == f"DC Acknowledge QP={acks[0][5]}", acks
