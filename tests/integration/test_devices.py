"""The emulated HCAs as rdma-core's own tools see them (ibverbs-utils,
infiniband-diags): before the subnet manager runs and after."""
import json
import re
import shutil
import subprocess
import time

import pytest


def port_blocks(devinfo_text):
    """{(device, port): text of that port's section} from `ibv_devinfo -v`."""
    blocks = {}
    for dev_text in re.split(r"(?=^hca_id:)", devinfo_text, flags=re.M):
        m = re.match(r"hca_id:\s+(\S+)", dev_text)
        if not m:
            continue
        for port_text in re.split(r"(?=^[ \t]+port:[ \t]+\d+)", dev_text, flags=re.M)[1:]:
            num = int(re.match(r"[ \t]+port:[ \t]+(\d+)", port_text).group(1))
            blocks[(m.group(1), num)] = port_text
    return blocks


def field(text, name):
    m = re.search(rf"^\s*{name}:\s+(.+)$", text, flags=re.M)
    assert m, f"{name} missing in:\n{text}"
    return m.group(1).strip()


def test_ibv_devices_lists_both_hcas(fabric):
    out = fabric.run(["ibv_devices"], check=True).stdout
    assert re.search(r"^\s+ibemu0\s+[0-9a-f]{16}$", out, re.M), out
    assert re.search(r"^\s+ibemu1\s+[0-9a-f]{16}$", out, re.M), out


def test_ibv_devinfo_verbose_after_sm(fabric):
    out = fabric.run(["ibv_devinfo", "-v"], check=True).stdout
    for dev in ("ibemu0", "ibemu1"):
        section = out.split(f"hca_id:\t{dev}")[1].split("hca_id:")[0]
        assert field(section, "transport") == "InfiniBand (0)"
        assert re.fullmatch(r"\d+\.\d+\.\d+", field(section, "fw_ver"))
        assert re.fullmatch(r"[0-9a-f]{4}(:[0-9a-f]{4}){3}", field(section, "node_guid"))
        assert re.fullmatch(r"[0-9a-f]{4}(:[0-9a-f]{4}){3}", field(section, "sys_image_guid"))
        assert field(section, "vendor_id").startswith("0x")
        assert field(section, "phys_port_cnt") == "2"
    lids = set()
    blocks = port_blocks(out)
    assert len(blocks) == 4
    for (dev, port), text in blocks.items():
        assert field(text, "state") == "PORT_ACTIVE (4)"
        assert field(text, "max_mtu") == "4096 (5)"
        assert field(text, "active_mtu") == "4096 (5)"
        assert field(text, "link_layer") == "InfiniBand"
        lid = int(field(text, "port_lid"))
        assert lid != 0
        assert int(field(text, "sm_lid")) != 0
        lids.add(lid)
    assert len(lids) == 4, "every port has its own LID"


@pytest.mark.skipif(shutil.which("rdma") is None, reason="iproute2's rdma is not installed")
def test_rdma_tool_sees_what_libibverbs_sees(fabric):
    """iproute2's `rdma` over the shim's NETLINK_RDMA: the same devices,
    LIDs and states as ibv_devinfo, no netdev (no IPoIB), and the device
    indexes libibverbs itself learns over netlink."""

    blocks = port_blocks(fabric.run(["ibv_devinfo", "-v"], check=True).stdout)
    links = json.loads(fabric.run(["rdma", "-j", "link", "show"], check=True).stdout)
    assert {(row["ifname"], row["port"]) for row in links} == set(blocks)
    for row in links:
        text = blocks[(row["ifname"], row["port"])]
        assert row["state"] == "ACTIVE"
        assert row["physical_state"] == "LINK_UP"
        assert row["lid"] == int(field(text, "port_lid"))
        assert row["sm_lid"] == int(field(text, "sm_lid"))
        assert "netdev" not in row
    devs = json.loads(fabric.run(["rdma", "-j", "dev", "show"], check=True).stdout)
    assert [(d["ifindex"], d["ifname"]) for d in devs] == [(0, "ibemu0"), (1, "ibemu1")]
    indexes = fabric.run(
        ["/usr/bin/python3", "-c",
         "import pyverbs.device as d\n"
         "for dev in d.get_device_list(): print(dev.name.decode(), dev.index)"],
        check=True).stdout.split("\n")
    assert sorted(line for line in indexes if line) == ["ibemu0 0", "ibemu1 1"]


def test_ports_are_init_until_the_sm_runs(fresh_fabric):
    f = fresh_fabric
    f.up(sm=False)
    out = f.run(["ibv_devinfo"], check=True).stdout
    blocks = port_blocks(out)
    assert len(blocks) == 4
    for text in blocks.values():
        assert field(text, "state") == "PORT_INIT (2)"
        assert int(field(text, "port_lid")) == 0
    f.up()  # starts ibemu-sm, waits for ACTIVE
    out = f.run(["ibv_devinfo"], check=True).stdout
    blocks = port_blocks(out)
    assert {field(t, "state") for t in blocks.values()} == {"PORT_ACTIVE (4)"}
    assert len({int(field(t, "port_lid")) for t in blocks.values()}) == 4


def test_killing_the_sm_leaves_ports_active_and_a_new_sm_takes_over(fresh_fabric):
    f = fresh_fabric
    f.up()
    before = {(d["name"], p["port"]): p["lid"] for d in f.status()["devices"]
              for p in d["port_info"]}
    pid = f.sm_pid()
    assert pid
    subprocess.run(["kill", "-9", str(pid)], check=True)
    time.sleep(0.5)
    st = f.status()
    assert all(p["state"] == "ACTIVE" for d in st["devices"] for p in d["port_info"])
    f.up()  # a new SM
    assert f.sm_pid() and f.sm_pid() != pid
    after = {(d["name"], p["port"]): p["lid"] for d in f.status()["devices"]
             for p in d["port_info"]}
    assert after == before, "the new SM keeps the LIDs"


def test_ibstat_and_ibstatus(fabric):
    out = fabric.run(["ibstat"], check=True).stdout
    assert "CA 'ibemu0'" in out and "CA 'ibemu1'" in out
    assert out.count("State: Active") == 4
    assert out.count("Physical state: LinkUp") == 4
    assert out.count("Link layer: InfiniBand") == 4
    out = fabric.run(["ibstat", "-l"], check=True).stdout.split()
    assert out == ["ibemu0", "ibemu1"]
    out = fabric.run(["ibstatus"], check=True).stdout
    assert out.count("4: ACTIVE") == 4
    assert "Infiniband device 'ibemu1' port 2 status" in out


def test_status_shows_devices_ports_and_processes(fabric):
    out = fabric.ibemu("status").stdout
    assert "ibemu0" in out and "ibemu1" in out
    assert out.count("ACTIVE") == 4


def test_commands_say_when_the_daemon_is_not_running(tmp_path):
    from conftest import Fabric
    f = Fabric(tmp_path / "none")
    r = f.ibemu("status", check=False)
    assert r.returncode != 0
    assert "ibemud is not running (start it with: ibemu up)" in r.stderr


def test_second_daemon_on_the_same_runtime_dir_refuses(fabric):
    r = subprocess.run([str(fabric.ibemu_bin).replace("/ibemu", "/ibemud"), "--runtime-dir",
                        str(fabric.runtime_dir)], capture_output=True, text=True, timeout=10)
    assert r.returncode != 0
    assert "already runs on this runtime directory" in r.stderr


def test_sigterm_removes_socket_and_sysfs_tree(fresh_fabric):
    f = fresh_fabric
    f.up(sm=False)
    rt = f.runtime_dir
    assert (rt / "ibemud.sock").exists() and (rt / "sysfs" / "class" / "infiniband").is_dir()
    pid = int((rt / "ibemud.lock").read_text())
    subprocess.run(["kill", "-TERM", str(pid)], check=True)
    deadline = time.time() + 10
    while subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode == 0:
        assert time.time() < deadline, "ibemud did not exit on SIGTERM"
        time.sleep(0.05)
    assert not (rt / "ibemud.sock").exists()
    assert not (rt / "sysfs").exists()
    r = f.ibemu("status", check=False)
    assert "ibemud is not running" in r.stderr


def test_everything_works_for_an_unprivileged_user(tmp_path):
    """No root anywhere: daemon, SM and programs as `nobody`."""
    import os
    import shutil
    import pytest
    from conftest import BUILD, free_tcp_port, tcp_listening
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: every other test covers this case")
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is needed to drop privileges")
    import tempfile
    from pathlib import Path
    base = Path(tempfile.mkdtemp(prefix="ibemu-nobody-"))  # pytest's own tmp is root-only
    os.chmod(base, 0o777)
    ibemu = str(BUILD / "bin" / "ibemu")
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env",
            f"IBEMU_RUNTIME_DIR={base}/rt", "HOME=/"]
    if subprocess.run(drop + ["test", "-x", ibemu]).returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"user nobody cannot reach {ibemu} (the checkout is private)")
    try:
        r = subprocess.run(drop + [ibemu, "up"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert (base / "rt" / "ibemud.sock").stat().st_uid == 65534
        port = free_tcp_port()
        server = subprocess.Popen(drop + [ibemu, "run", "--", "ibv_rc_pingpong", "-d", "ibemu0",
                                          "-p", str(port), "-n", "200"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 20
        while not tcp_listening(port):
            assert time.time() < deadline and server.poll() is None
            time.sleep(0.02)
        client = subprocess.run(drop + [ibemu, "run", "--", "ibv_rc_pingpong", "-d", "ibemu1",
                                        "-p", str(port), "-n", "200", "localhost"],
                                capture_output=True, text=True, timeout=60)
        server_out = server.communicate(timeout=60)[0]
        assert client.returncode == 0 and server.returncode == 0, client.stdout + server_out
    finally:
        subprocess.run(drop + [ibemu, "down"], capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


def test_each_hca_hangs_off_a_virtual_device(fabric):
    """As in the kernel's sysfs, the class entry links to the HCA's place
    under devices/, inside the device it hangs off; that one is virtual (no
    bus address) and carries the ids the HCA reports."""
    dev = "/sys/class/infiniband/ibemu0"
    out = fabric.run(["readlink", "-f", dev, f"{dev}/device"], check=True).stdout.split()
    assert out == ["/sys/devices/virtual/ibemu/ibemu0/infiniband/ibemu0",
                   "/sys/devices/virtual/ibemu/ibemu0"], out
    devinfo = fabric.run(["ibv_devinfo", "-d", "ibemu0"], check=True).stdout
    vendor = int(field(devinfo, "vendor_id"), 16)
    part = int(field(devinfo, "vendor_part_id"))
    files = fabric.run(["cat", f"{dev}/device/vendor", f"{dev}/device/device",
                        f"{dev}/device/numa_node"], check=True).stdout.split()
    assert files == [f"0x{vendor:04x}", f"0x{part:04x}", "-1"], files
    # No netdev behind it: pyverbs' tests look for one only where device/net exists.
    assert fabric.run(["test", "-e", f"{dev}/device/net"]).returncode == 1


def test_ucx_finds_the_device_and_its_ids(fabric):
    """UCX takes the device directory from the resolved class entry and
    reads the ids there; without it, it logs "sysfs path undetected" and a
    vendor id of 0."""
    if not shutil.which("ucx_info"):
        pytest.skip("ucx_info (ucx-utils) is not installed")
    r = fabric.run(["env", "UCX_LOG_LEVEL=debug", "ucx_info", "-d"], timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "sysfs path undetected" not in out, out[-4000:]
    devinfo = fabric.run(["ibv_devinfo", "-d", "ibemu0"], check=True).stdout
    vendor = int(field(devinfo, "vendor_id"), 16)
    part = int(field(devinfo, "vendor_part_id"))
    for dev in ("ibemu0", "ibemu1"):
        assert re.search(rf"{dev}: vendor_id 0x{vendor:x} device_id {part}\b", out), out[-4000:]
        assert re.search(rf"{dev}: PF sysfs path is '\S*/devices/virtual/ibemu/{dev}'", out), \
            out[-4000:]
    assert re.search(r"Device: ibemu0:1", out), out[-4000:]
