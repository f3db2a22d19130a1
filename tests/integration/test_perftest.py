"""Debian's perftest between the emulated HCAs: every RC bandwidth and latency
tool (WRITE, READ, SEND, atomics), at one size and at all sizes (-a, 2 B to
8 MiB), between the two ports of one HCA, through perftest's own
run_perftest_loopback script, and on a fabric whose HCAs claim a ConnectX
vendor_part_id, which makes perftest use the ibv_wr_* post-send API and
inline sends.

Nothing here asserts on timing: only that both sides exit 0, that the client
prints its results table with the sizes and iteration counts asked for, and
that the numbers in it are consistent."""
import json
import math
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import free_tcp_port, run_pair, skip_where_tsan_cannot_run

ALL_SIZES = [1 << k for k in range(1, 24)]  # what -a runs: 2 B ... 8 MiB

BW_HEADER = re.compile(r"^\s*#bytes\s+#iterations\s+BW peak\[MB/sec\]\s+BW average\[MB/sec\]"
                       r"\s+MsgRate\[Mpps\]", re.M)
LAT_HEADER = re.compile(r"^\s*#bytes\s+#iterations\s+t_min\[usec\]\s+t_max\[usec\]"
                        r"\s+t_typical\[usec\]\s+t_avg\[usec\]\s+t_stdev\[usec\]", re.M)
NUMBER = r"(\d+(?:\.\d+)?)"
BW_ROW = re.compile(rf"^\s*(\d+)\s+(\d+)\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}")
# perftest computes the standard deviation as sqrt(E[x^2] - E[x]^2) in floating
# point; when one sample dwarfs the others the difference can round below
# zero and it prints "-nan". That column alone may be nan.
STDEV = r"(-?nan|[0-9]+(?:\.[0-9]+)?)"
LAT_ROW = re.compile(rf"^\s*(\d+)\s+(\d+)\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{STDEV}")
ADDRESS = re.compile(r"^\s*(local|remote) address: LID (0x[0-9a-fA-F]+) QPN (0x[0-9a-fA-F]+)", re.M)

BW_TOOLS = ["ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw"]
LAT_TOOLS = ["ib_write_lat", "ib_read_lat", "ib_send_lat", "ib_atomic_lat"]
ATOMIC_TOOLS = ["ib_atomic_bw", "ib_atomic_lat"]


def is_bw(tool):
    return tool.endswith("_bw")


def results_table(out, tool):
    """The rows of perftest's results table in `out`, as tuples of numbers
    (size, iterations, then the tool's figures); fails when there is no header
    or no row."""
    header = (BW_HEADER if is_bw(tool) else LAT_HEADER).search(out)
    assert header, f"{tool}: no results header in:\n{out}"
    row_re = BW_ROW if is_bw(tool) else LAT_ROW
    rows = []
    for line in out[header.end():].splitlines()[1:]:
        if line.startswith("-") or not line.strip():
            break
        m = row_re.match(line)
        assert m, f"{tool}: unexpected line {line!r} in results table:\n{out}"
        rows.append((int(m.group(1)), int(m.group(2)), *(float(g) for g in m.groups()[2:])))
    assert rows, f"{tool}: results header without a numeric row:\n{out}"
    return rows


def check_table(out, tool, sizes, iters):
    rows = results_table(out, tool)
    assert [r[0] for r in rows] == sizes, f"{tool}: sizes {[r[0] for r in rows]}:\n{out}"
    for row in rows:
        assert row[1] == iters, f"{tool}: row {row} has not {iters} iterations:\n{out}"
        figures = row[2:] if is_bw(tool) else row[2:6]  # all but the stdev (see STDEV)
        assert all(math.isfinite(v) and v >= 0 for v in figures), f"{tool}: row {row}:\n{out}"
        # (Bandwidths are printed with two decimals: a few tiny messages on a
        # busy host can show 0.00 MB/sec, so zero is no error.)
        if not is_bw(tool):
            _, _, t_min, t_max, t_typical, t_avg, _ = row
            assert 0 < t_min <= t_typical <= t_max, f"{tool}: {row}:\n{out}"
            assert t_min <= t_avg <= t_max, f"{tool}: {row}:\n{out}"
    return rows


def port_lid(fabric, device, port):
    for dev in fabric.status()["devices"]:
        if dev["name"] == device:
            for p in dev["port_info"]:
                if p["port"] == port:
                    return p["lid"]
    raise AssertionError(f"no {device} port {port} in {fabric.status()}")


def check_addresses(out, local_lid, remote_lid):
    """perftest prints the LIDs it uses; they are the ports' LIDs."""
    found = {kind: int(lid, 16) for kind, lid, _ in ADDRESS.findall(out)}
    assert found == {"local": local_lid, "remote": remote_lid}, out


def wait_fabric_idle(fabric, timeout=20):
    """The daemon answers and has reclaimed every QP of the exited programs."""
    deadline = time.time() + timeout
    while True:
        status = fabric.status()
        if status["qps"] == 0:
            return status
        assert time.time() < deadline, f"QPs left behind: {json.dumps(status)}\n{fabric.logs()}"
        time.sleep(0.1)


def perftest(fabric, tool, args, server=("-d", "ibemu0"), client=("-d", "ibemu1"),
             timeout=180):
    """Runs `tool` as server and client; both must exit 0. Returns the
    client's output."""
    port = free_tcp_port()
    # -F: a bandwidth tool whose sample of the CPU's clock rate fits badly
    # (a busy host) exits 1; these tests check the table, not the figures.
    base = [tool, "-p", str(port), *(["-F"] if is_bw(tool) else []), *args]
    srv, cli = run_pair(fabric, base + list(server), base + list(client) + ["localhost"], port,
                        timeout=timeout)
    assert cli[0] == 0, f"{tool} client failed ({cli[0]}):\n{cli[1]}\nserver:\n{srv[1]}\n" \
                        f"{fabric.logs()}"
    assert srv[0] == 0, f"{tool} server failed ({srv[0]}):\n{srv[1]}\nclient:\n{cli[1]}\n" \
                        f"{fabric.logs()}"
    return cli[1]


# ---- the default fabric (vendor_part_id not a ConnectX: ibv_post_send path)

@pytest.mark.parametrize("tool", BW_TOOLS + LAT_TOOLS)
def test_one_size(fabric, tool):
    if tool in ATOMIC_TOOLS:
        args, sizes = ["-n", "200"], [8]  # atomics: always 8 bytes, -s refused
    else:
        args, sizes = ["-s", "4096", "-n", "200"], [4096]
    out = perftest(fabric, tool, args)
    check_table(out, tool, sizes, 200)
    assert re.search(r"ibv_wr\* API\s*:\s*OFF", out), out
    check_addresses(out, port_lid(fabric, "ibemu1", 1), port_lid(fabric, "ibemu0", 1))
    wait_fabric_idle(fabric)


@pytest.mark.parametrize("tool", [t for t in BW_TOOLS + LAT_TOOLS if t not in ATOMIC_TOOLS])
def test_all_sizes(fabric, tool):
    out = perftest(fabric, tool, ["-a", "-n", "20"], timeout=400)
    rows = check_table(out, tool, ALL_SIZES, 20)
    assert rows[-1][0] == 8388608
    wait_fabric_idle(fabric)


@pytest.mark.parametrize("atomic_type", ["CMP_AND_SWAP", "FETCH_AND_ADD"])
@pytest.mark.parametrize("tool", ATOMIC_TOOLS)
def test_atomic_types(fabric, tool, atomic_type):
    # perftest refuses -a (and -s) for atomics ("Message size cannot be
    # changed for Atomic tests"); both operations instead.
    out = perftest(fabric, tool, ["-A", atomic_type, "-n", "50"])
    check_table(out, tool, [8], 50)


@pytest.mark.parametrize("tool", ["ib_write_bw", "ib_read_bw"])
def test_two_ports_of_one_hca(fabric, tool):
    out = perftest(fabric, tool, ["-s", "4096", "-n", "200"], server=("-d", "ibemu0", "-i", "1"),
                   client=("-d", "ibemu0", "-i", "2"))
    check_table(out, tool, [4096], 200)
    check_addresses(out, port_lid(fabric, "ibemu0", 2), port_lid(fabric, "ibemu0", 1))
    wait_fabric_idle(fabric)


@pytest.mark.parametrize("option,qps", [("-q", 4), ("-b", 1)], ids=["four-qps", "bidirectional"])
@pytest.mark.parametrize("tool", ["ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw"])
def test_several_qps_and_bidirectional(fabric, tool, option, qps):
    args = ["-n", "100"] + (["-q", str(qps)] if option == "-q" else ["-b"])
    if tool not in ATOMIC_TOOLS:
        args += ["-s", "4096"]
    out = perftest(fabric, tool, args)
    # With -q the table counts the iterations of all QPs together.
    check_table(out, tool, [8 if tool in ATOMIC_TOOLS else 4096], 100 * qps)
    wait_fabric_idle(fabric)


@pytest.mark.parametrize("tool", ["ib_write_bw", "ib_send_bw", "ib_write_lat", "ib_send_lat"])
def test_unreliable_connected(fabric, tool):
    out = perftest(fabric, tool, ["-c", "UC", "-s", "4096", "-n", "200"])
    assert re.search(r"Connection type\s*:\s*UC", out), out
    check_table(out, tool, [4096], 200)
    wait_fabric_idle(fabric)


@pytest.mark.parametrize("tool", ["ib_send_bw", "ib_send_lat", "ib_read_lat"])
def test_completion_events(fabric, tool):
    # (perftest refuses -e for the WRITE tools.)
    out = perftest(fabric, tool, ["-e", "-s", "4096", "-n", "200"])
    check_table(out, tool, [4096], 200)
    wait_fabric_idle(fabric)


def run_loopback(fabric, tmp_path, tool_args, timeout=180):
    """perftest's run_perftest_loopback: server and client of one tool on one
    host (pinned to two CPUs with taskset), the client started one second
    after the server. The script returns the client's status only (its bare
    `wait` ignores the server's), and waits forever for a server whose client
    could not connect, so it runs in its own process group."""
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpu = cpus[0], cpus[1 % len(cpus)]
    for attempt in range(2):
        port = free_tcp_port()
        log = tmp_path / f"loopback{attempt}.out"
        cmd = ["run_perftest_loopback", str(server_cpu), str(client_cpu), *tool_args,
               "-p", str(port)]
        skip_where_tsan_cannot_run(cmd)  # a /bin/sh script, under ibemu's environment
        with open(log, "w") as f:
            proc = subprocess.Popen(cmd, env=fabric.env(), stdout=f, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        deadline = time.time() + timeout
        no_connect = False
        while proc.poll() is None and time.time() < deadline:
            # The one race of the script itself: the server was not listening
            # yet after its one second. Start over rather than wait.
            if "Couldn't connect" in log.read_text(errors="replace"):
                no_connect = True
                break
            time.sleep(0.2)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if no_connect and attempt == 0:
                continue
            pytest.fail(f"run_perftest_loopback did not finish:\n{log.read_text()}\n"
                        f"{fabric.logs()}")
        return proc.returncode, log.read_text(errors="replace")
    raise AssertionError("unreachable")


@pytest.mark.parametrize("tool", ["ib_write_bw", "ib_read_bw", "ib_send_lat"])
def test_run_perftest_loopback(fabric, tmp_path, tool):
    rc, out = run_loopback(fabric, tmp_path, [tool, *(["-F"] if is_bw(tool) else []), "-d",
                                              "ibemu0", "-s", "4096", "-n", "200"])
    assert rc == 0, f"{out}\n{fabric.logs()}"
    # Both processes print their addresses and, for these tools, a results
    # row; the client's status is the script's, the server's shows here.
    lid = port_lid(fabric, "ibemu0", 1)
    addresses = ADDRESS.findall(out)
    assert len(addresses) == 4 and {int(a[1], 16) for a in addresses} == {lid}, out
    # (The two outputs may interleave, so rows are counted, not parsed as a
    # table.)
    header = BW_HEADER if is_bw(tool) else LAT_HEADER
    row = BW_ROW if is_bw(tool) else LAT_ROW
    assert len(header.findall(out)) == 2, out
    assert len([l for l in out.splitlines() if row.match(l) and l.split()[:2] == ["4096", "200"]]) \
        == 2, out
    wait_fabric_idle(fabric)


# ---- a fabric whose HCAs claim to be ConnectX-6 (connectx_fabric): the ibv_wr_* path

def test_connectx_fabric_reports_the_configured_ids(connectx_fabric):
    out = connectx_fabric.run(["ibv_devinfo", "-d", "ibemu1"], check=True).stdout
    assert re.search(r"vendor_id:\s*0x02c9\b", out), out
    assert re.search(r"vendor_part_id:\s*4123\b", out), out


CX_TOOLS = ["ib_write_bw", "ib_send_bw", "ib_read_bw", "ib_write_lat", "ib_send_lat"]


@pytest.mark.parametrize("tool", CX_TOOLS)
def test_connectx_new_post_send_one_size(connectx_fabric, tool):
    out = perftest(connectx_fabric, tool, ["-s", "4096", "-n", "200"])
    assert re.search(r"ibv_wr\* API\s*:\s*ON", out), out
    check_table(out, tool, [4096], 200)
    wait_fabric_idle(connectx_fabric)


@pytest.mark.parametrize("tool", CX_TOOLS)
def test_connectx_small_messages_inline(connectx_fabric, tool):
    """64-byte messages: the latency tools send them inline by default on a
    ConnectX; the bandwidth tools are asked to with -I (READ has no inline)."""
    args = ["-s", "64", "-n", "200"]
    if tool in ("ib_write_bw", "ib_send_bw"):
        args += ["-I", "64"]
    out = perftest(connectx_fabric, tool, args)
    assert re.search(r"ibv_wr\* API\s*:\s*ON", out), out
    if tool != "ib_read_bw":
        inline = re.search(r"Max inline data\s*:\s*(\d+)\[B\]", out)
        assert inline and int(inline.group(1)) >= 64, out
    check_table(out, tool, [64], 200)
    wait_fabric_idle(connectx_fabric)


@pytest.mark.parametrize("tool", ["ib_write_bw", "ib_send_lat"])
def test_connectx_all_sizes(connectx_fabric, tool):
    """From inline sizes through 8 MiB on the ibv_wr_* path."""
    out = perftest(connectx_fabric, tool, ["-a", "-n", "20"], timeout=400)
    assert re.search(r"ibv_wr\* API\s*:\s*ON", out), out
    check_table(out, tool, ALL_SIZES, 20)
    wait_fabric_idle(connectx_fabric)


@pytest.mark.parametrize("tool", ["ib_atomic_bw", "ib_atomic_lat"])
def test_connectx_atomics(connectx_fabric, tool):
    out = perftest(connectx_fabric, tool, ["-A", "CMP_AND_SWAP", "-n", "200"])
    assert re.search(r"ibv_wr\* API\s*:\s*ON", out), out
    check_table(out, tool, [8], 200)
    wait_fabric_idle(connectx_fabric)


@pytest.mark.parametrize("tool", ["ib_write_bw", "ib_send_bw", "ib_read_bw", "ib_atomic_bw"])
def test_connectx_post_lists(connectx_fabric, tool):
    """-l: several WRs between one ibv_wr_start and ibv_wr_complete."""
    args = ["-l", "8", "-n", "200"]
    if tool in ("ib_write_bw", "ib_send_bw"):
        args += ["-s", "64", "-I", "64"]
    elif tool == "ib_read_bw":
        args += ["-s", "4096"]
    out = perftest(connectx_fabric, tool, args)
    assert re.search(r"ibv_wr\* API\s*:\s*ON", out), out
    check_table(out, tool, [4096 if tool == "ib_read_bw" else 64 if tool != "ib_atomic_bw" else 8],
                200)
    wait_fabric_idle(connectx_fabric)


@pytest.mark.parametrize("args", [["-q", "4"], ["-c", "UC"], ["-e"]], ids=["four-qps", "uc", "events"])
def test_connectx_send_variants(connectx_fabric, args):
    tool = "ib_send_lat" if "-e" in args else "ib_send_bw"
    out = perftest(connectx_fabric, tool, args + ["-s", "64", "-n", "200"] +
                   ([] if "-e" in args else ["-I", "64"]))
    assert re.search(r"ibv_wr\* API\s*:\s*ON", out), out
    check_table(out, tool, [64], 200 * (4 if "-q" in args else 1))
    wait_fabric_idle(connectx_fabric)


def test_connectx_old_post_send(connectx_fabric):
    """--use_old_post_send: the ConnectX code path with ibv_post_send."""
    out = perftest(connectx_fabric, "ib_write_bw",
                   ["--use_old_post_send", "-s", "64", "-I", "64", "-n", "200"])
    assert re.search(r"ibv_wr\* API\s*:\s*OFF", out), out
    check_table(out, "ib_write_bw", [64], 200)


# ---- DC (docs/dc.md): perftest's -c DC, through the compat libmlx5. perftest
# runs DC only on a ConnectX (the ibv_wr_* path), hence this fabric.

@pytest.mark.parametrize("tool", BW_TOOLS + LAT_TOOLS)
def test_connectx_dc(connectx_fabric, tool):
    if tool in ATOMIC_TOOLS:
        args, sizes = ["-n", "200"], [8]
    else:
        args, sizes = ["-s", "4096", "-n", "200"], [4096]
    out = perftest(connectx_fabric, tool, ["-c", "DC", *args])
    assert re.search(r"Connection type\s*:\s*DC", out), out
    check_table(out, tool, sizes, 200)
    wait_fabric_idle(connectx_fabric)


def test_connectx_dc_all_sizes_two_qps(connectx_fabric):
    """Two DCIs to two DCTs, every size from 2 bytes to 8 MiB."""
    out = perftest(connectx_fabric, "ib_write_bw", ["-c", "DC", "-q", "2", "-a", "-n", "20"],
                   timeout=400)
    check_table(out, "ib_write_bw", ALL_SIZES, 40)
    wait_fabric_idle(connectx_fabric)


def test_dc_refused_without_the_ibv_wr_path(fabric):
    """On a device perftest does not take for a ConnectX it uses ibv_post_send,
    which cannot address a DCT: QP creation fails, as on any non-mlx5 HCA."""
    port = free_tcp_port()
    base = ["ib_write_bw", "-c", "DC", "-p", str(port)]
    srv, cli = run_pair(fabric, base + ["-d", "ibemu0"], base + ["-d", "ibemu1", "localhost"],
                        port, timeout=60)
    assert cli[0] != 0 and "Failed to create QP" in cli[1], cli[1]
