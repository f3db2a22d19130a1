"""ibemu's libmlx5.so.1 (provider/compat/mlx5) in place of Debian's: every
symbol of the system's in the same version node, and the nodes rdma-core added
since (MLX5_1.25 .. MLX5_1.27), so every program linked against the system's
or a newer one binds to it (perftest's tools among them); the calls ibemu
emulates reach the provider, and the others fail as on a device libmlx5 does
not drive (tests/programs/mlx5dv_probe). The newer nodes' functions, looked up
by version as NCCL does: mlx5dv_reg_dmabuf_mr registers a dma-buf, the others
fail as on a foreign device (tests/programs/mlx5dv_newer_nodes)."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import BUILD, sanitizer_runtime

SYSTEM_LIB = Path("/usr/lib/x86_64-linux-gnu/libmlx5.so.1")
COMPAT_DIR = BUILD / "lib" / "compat"
COMPAT_LIB = COMPAT_DIR / "libmlx5.so.1"
PROVIDER = next((BUILD / "lib").glob("libibemu-rdmav*.so"), BUILD / "lib" / "libibemu-rdmav.so")
MLX5DV_PROBE = str(BUILD / "bin" / "mlx5dv_probe")
MLX5DV_NEWER_NODES = str(BUILD / "bin" / "mlx5dv_newer_nodes")
PERFTEST_TOOLS = ["ib_write_bw", "ib_write_lat", "ib_read_bw", "ib_read_lat", "ib_send_bw",
                  "ib_send_lat", "ib_atomic_bw", "ib_atomic_lat"]
# objdump -T: "ADDR FLAGS SECTION SIZE VERSION NAME"; a non-default version
# (one a program can no longer link to) is printed in parentheses.
DYNSYM = re.compile(r"^[0-9a-f]+\s.*\s(\S+)\s+[0-9a-f]+\s+(\(?[\w.]+\)?)\s+(\S+)$")


def dynamic_symbols(path, undefined=False):
    """{(name, version)} of the defined (or undefined) dynamic symbols of
    `path` that carry an MLX5_ version."""
    out = subprocess.run(["objdump", "-T", str(path)], check=True, capture_output=True,
                         text=True).stdout
    symbols = set()
    for line in out.splitlines():
        m = DYNSYM.match(line)
        if m and "MLX5_" in m.group(2) and (m.group(1) == "*UND*") == undefined:
            symbols.add((m.group(3), m.group(2)))
    return symbols


def version_parents(path):
    """{version definition of `path`: [its parents]}."""
    out = subprocess.run(["readelf", "-V", "-W", str(path)], check=True, capture_output=True,
                         text=True).stdout
    section = out.split("Version definition section")[1].split("Version needs section")[0]
    parents = {}
    for kind, name in re.findall(r"(Name|Parent \d+): (\S+)", section):
        if kind == "Name":
            node = name
            parents[node] = []
        else:
            parents[node].append(name)
    return parents


# The nodes of rdma-core's libmlx5 newer than Debian 12's (its
# providers/mlx5/libmlx5.map as of v64): parent and functions.
NEWER_NODES = {
    "MLX5_1.25": ("MLX5_1.24", {"mlx5dv_get_data_direct_sysfs_path", "mlx5dv_reg_dmabuf_mr"}),
    "MLX5_1.25.1": ("MLX5_1.25", {"__mlx5dv_create_flow"}),
    "MLX5_1.26": ("MLX5_1.25", {"mlx5dv_devx_uar_export_dmabuf_fd"}),
    "MLX5_1.27": ("MLX5_1.26", {
        "_mlx5dv_get_export_sizes", "mlx5dv_devx_obj_export", "mlx5dv_devx_obj_import",
        "mlx5dv_devx_obj_unimport", "mlx5dv_devx_umem_export", "mlx5dv_devx_umem_import",
        "mlx5dv_devx_umem_unimport", "mlx5dv_var_export", "mlx5dv_var_import",
        "mlx5dv_var_unimport"}),
}


def provider_has_dv_entry():
    """Whether the provider offers the table of emulated mlx5dv calls."""
    if not PROVIDER.exists():
        return False
    out = subprocess.run(["nm", "-D", "--defined-only", str(PROVIDER)], capture_output=True,
                         text=True).stdout
    return re.search(r"\bibemu_mlx5dv_entry$", out, re.M) is not None


needs_dv_entry = pytest.mark.xfail(
    not provider_has_dv_entry(), strict=False,
    reason="the provider does not export ibemu_mlx5dv_entry (provider/dv_entry.h) yet")

needs_system_lib = pytest.mark.skipif(not SYSTEM_LIB.exists(),
                                      reason=f"{SYSTEM_LIB} (Debian's libmlx5-1) not installed")


def compat_env():
    env = dict(os.environ, LD_LIBRARY_PATH=str(COMPAT_DIR), LD_BIND_NOW="1")
    if sanitizer_runtime():
        env["LD_PRELOAD"] = sanitizer_runtime()
    return env


@needs_system_lib
def test_every_system_symbol_in_the_same_node():
    ours, theirs = dynamic_symbols(COMPAT_LIB), dynamic_symbols(SYSTEM_LIB)
    assert len(theirs) > 100, theirs
    assert theirs <= ours, f"missing: {sorted(theirs - ours)}"
    # A symbol of the system's exported here at another version too would
    # bind a newly linked program to the wrong node.
    names = {name for name, _ in theirs}
    elsewhere = {(name, version) for name, version in ours - theirs if name in names}
    assert not elsewhere, f"in another node: {sorted(elsewhere)}"
    assert ("mlx5dv_init_obj", "(MLX5_1.0)") in ours and ("mlx5dv_init_obj", "MLX5_1.2") in ours


@needs_system_lib
def test_system_nodes_with_the_same_parents():
    ours, theirs = version_parents(COMPAT_LIB), version_parents(SYSTEM_LIB)
    differ = {node: (parents, ours.get(node)) for node, parents in theirs.items()
              if ours.get(node) != parents}
    assert not differ, f"node: (system's parents, ours): {differ}"


def test_newer_rdma_core_nodes():
    parents, ours = version_parents(COMPAT_LIB), dynamic_symbols(COMPAT_LIB)
    for node, (parent, functions) in NEWER_NODES.items():
        assert parents.get(node) == [parent], (node, parents.get(node))
        # objdump lists each node also as a symbol of its own name.
        exported = {name for name, version in ours if version == node and name != node}
        assert exported == functions, (node, sorted(exported ^ functions))


def perftest_tools_linking_mlx5():
    tools = []
    for name in PERFTEST_TOOLS:
        path = shutil.which(name)
        if path and any(v for _, v in dynamic_symbols(path, undefined=True)):
            tools.append(path)
    return tools


@pytest.mark.parametrize("tool", perftest_tools_linking_mlx5() or
                         [pytest.param(None, marks=pytest.mark.skip("no perftest linking libmlx5"))])
def test_perftest_binds_to_compat_library(tool):
    # objdump prints every import's version in parentheses.
    wanted = {(name, version.strip("()")) for name, version in
              dynamic_symbols(tool, undefined=True)}
    assert wanted, tool
    exported = {(name, version.strip("()")) for name, version in dynamic_symbols(COMPAT_LIB)}
    assert wanted <= exported, f"not exported: {sorted(wanted - exported)}"

    # ldd is a shell script: without the sanitizer runtime (TSan's crashes
    # shells); the compat library names its runtime as a dependency anyway.
    plain = {k: v for k, v in compat_env().items() if k != "LD_PRELOAD"}
    ldd = subprocess.run(["ldd", "-r", tool], env=plain, capture_output=True, text=True)
    assert f"libmlx5.so.1 => {COMPAT_LIB}" in ldd.stdout, ldd.stdout
    assert "undefined symbol" not in ldd.stdout + ldd.stderr, ldd.stdout + ldd.stderr

    # Every import bound at start-up (LD_BIND_NOW), then perftest's usage.
    r = subprocess.run([tool, "--help"], env=compat_env(), capture_output=True, text=True,
                       timeout=30)
    out = r.stdout + r.stderr
    assert "symbol lookup error" not in out and "undefined symbol" not in out, out
    assert "Usage:" in out, out


def run_probe(fabric, mode, device="ibemu0"):
    r = fabric.run([MLX5DV_PROBE, mode, device], timeout=60)
    out = r.stdout + r.stderr
    assert f"libmlx5 {COMPAT_LIB.resolve()}" in out or f"libmlx5 {COMPAT_LIB}" in out, out
    return r.returncode, out


NOT_EMULATED = ["open_device", "devx_general_cmd", "devx_obj_create", "devx_umem_reg",
                "devx_alloc_uar", "devx_query_eqn", "devx_create_event_channel",
                "get_clock_info", "query_port", "set_context_attr", "reserved_qpn_alloc",
                "sched_node_create", "alloc_dm", "get_vfio_device_list", "dr_domain_create",
                "dr_domain_create bad type", "dr_action_create_drop", "dr_action_destroy",
                "create_flow_matcher", "create_mkey", "dek_create", "crypto_login",
                "init_obj CQ", "init_obj nothing", "create_cq", "devx_qp_query",
                "query_qp_lag_port", "modify_qp_udp_sport"]


def test_calls_not_emulated_fail_as_on_a_foreign_device(fabric):
    rc, out = run_probe(fabric, "basic")
    failed = [line for line in out.splitlines()
              if line.startswith("FAIL") and not line.startswith("FAIL is_supported")]
    assert not failed, out
    for what in NOT_EMULATED:
        assert f"ok {what}\n" in out, f"{what} missing:\n{out}"


def test_no_provider_yet_means_not_supported(fabric):
    """Before ibv_get_device_list loads the provider, the emulated calls answer
    as for a device libmlx5 does not drive; the provider is found later."""
    rc, out = run_probe(fabric, "basic")
    for what in ["early is_supported false", "early query_device", "early create_qp",
                 "early qp_ex_from_ibv_qp_ex NULL"]:
        assert f"ok {what}\n" in out, out


@needs_dv_entry
def test_ibemu_devices_are_mlx5dv_devices(fabric):
    rc, out = run_probe(fabric, "basic")
    assert "ok is_supported ibemu0\n" in out and "ok is_supported ibemu1\n" in out, out
    assert rc == 0, out


@needs_dv_entry
def test_dc_qps_through_mlx5dv(fabric):
    rc, out = run_probe(fabric, "dc")
    assert rc == 0, out
    for what in ["query_device", "query_device DC_ODP_CAPS", "query_device DCI_STREAMS",
                 "create_qp DCT", "create_qp DCI", "qp_ex_from_ibv_qp_ex wr_set_dc_addr",
                 "dci_stream_id_reset"]:
        assert f"ok {what}\n" in out, out


@pytest.fixture(scope="module")
def newer_nodes_run(connectx_fabric):
    """tests/programs/mlx5dv_newer_nodes on HCAs that claim to be
    ConnectX-6s: (returncode, output)."""
    r = connectx_fabric.run([MLX5DV_NEWER_NODES], timeout=60)
    out = r.stdout + r.stderr
    assert f"libmlx5 {COMPAT_LIB.resolve()}" in out or f"libmlx5 {COMPAT_LIB}" in out, out
    return r.returncode, out


@needs_dv_entry
def test_reg_dmabuf_mr_at_mlx5_1_25_on_a_connectx(newer_nodes_run):
    """NCCL's way in: dlopen, dlvsym(..., "MLX5_1.25"); a region of a memfd
    works both ways by RDMA WRITE, data direct is refused as on a ConnectX
    without a data-direct device."""
    rc, out = newer_nodes_run
    for what in ["is_supported", "get_data_direct_sysfs_path ENODEV", "fd -1 EBADF",
                 "data direct EINVAL", "data direct unaligned iova EOPNOTSUPP",
                 "unknown mlx5 flag EINVAL", "reg_dmabuf_mr", "reg_dmabuf_mr fields",
                 "RDMA WRITE into it (rkey)", "RDMA WRITE from it (lkey)", "dereg"]:
        assert f"ok {what}\n" in out, f"{what} missing:\n{out}"
    assert rc == 0, out


def test_newer_calls_fail_as_on_a_foreign_device(newer_nodes_run):
    rc, out = newer_nodes_run
    for what in ["__mlx5dv_create_flow", "devx_uar_export_dmabuf_fd", "get_export_sizes"]:
        assert f"ok {what}\n" in out, f"{what} missing:\n{out}"
    for kind in ["mlx5dv_devx_obj", "mlx5dv_devx_umem", "mlx5dv_var"]:
        for what in [f"{kind}_export EOPNOTSUPP", f"{kind}_import EOPNOTSUPP",
                     f"{kind}_unimport"]:
            assert f"ok {what}\n" in out, f"{what} missing:\n{out}"
