"""The middleware users' code sits on, over ibemu: UCX (ucx_perftest, and
its client/server connections over rdma_cm), Open MPI (pml ucx, ob1 with
the openib BTL, the ofi MTL over verbs;ofi_rxm) and libfabric (fi_info,
fi_pingpong), all Debian's own builds. Each run's data is checked where the tool can, and
the port counters show it crossed the emulated HCAs: shared memory and TCP
are kept out of every transport list."""
import re
import shutil
import time
from pathlib import Path

import pytest

from conftest import BUILD, free_tcp_port, run_pair, sanitizer_setting
from test_rdmacm import cm_listening

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]

# Debian's /etc/openmpi/openmpi-mca-params.conf turns UCX, openib and ofi
# off; each configuration names what it uses on the command line instead.
MPI_CONFIGS = {
    "pml-ucx": ["--mca", "pml", "ucx", "--mca", "osc", "^ucx",
                "-x", "UCX_TLS=rc_verbs,ud_verbs,self"],
    "ob1-openib": ["--mca", "pml", "ob1", "--mca", "btl", "openib,self",
                   "--mca", "btl_openib_allow_ib", "1",
                   "--mca", "btl_openib_warn_no_device_params_found", "0",
                   "--mca", "btl_openib_warn_default_gid_prefix", "0"],
    "mtl-ofi": ["--mca", "pml", "cm", "--mca", "mtl", "ofi",
                "--mca", "mtl_ofi_provider_include", "verbs;ofi_rxm",
                "-x", "FI_PROVIDER=verbs;ofi_rxm"],
}


def bytes_through_ports(fabric):
    """Bytes every port of the fabric has received, summed."""
    return sum(p["counters"]["bytes_in"] for dev in fabric.status()["devices"]
               for p in dev["port_info"])


class CrossedTheHca:
    """Port bytes received while the block ran, for checking that traffic
    went through the emulated ports and not around them."""

    def __init__(self, fabric):
        self.fabric = fabric

    def __enter__(self):
        self.before = bytes_through_ports(self.fabric)
        return self

    def __exit__(self, *exc):
        self.bytes = bytes_through_ports(self.fabric) - self.before


def need(*programs):
    missing = [p for p in programs if not shutil.which(p)]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed (scripts/install-deps.sh installs it)")


# --- UCX ---------------------------------------------------------------------

UCX_PERFTESTS = [
    # (transports, test, message size, iterations)
    ("rc_verbs,ud_verbs,self", "tag_bw", 1 << 20, 200),
    ("rc_verbs,ud_verbs,self", "tag_lat", 8, 1000),
    ("rc_verbs,ud_verbs,self", "ucp_put_bw", 65536, 1000),
    ("rc_verbs,ud_verbs,self", "ucp_get", 65536, 1000),
    ("rc_verbs,ud_verbs,self", "ucp_add", 8, 1000),
    ("rc_verbs,ud_verbs,self", "ucp_fadd", 8, 1000),
    ("rc_verbs,ud_verbs,self", "ucp_cswap", 8, 1000),
    ("ud_verbs,self", "tag_bw", 65536, 500),
    ("ud_verbs,self", "tag_lat", 8, 1000),
]


@pytest.mark.parametrize("tls,test,size,iterations", UCX_PERFTESTS,
                         ids=[f"{t[0].split('_')[0]}-{t[1]}" for t in UCX_PERFTESTS])
def test_ucx_perftest(fabric, tls, test, size, iterations):
    need("ucx_perftest")
    port = free_tcp_port()
    env = ["env", f"UCX_TLS={tls}", "UCX_WARN_UNUSED_ENV_VARS=n"]
    server = env + ["UCX_NET_DEVICES=ibemu0:1", "ucx_perftest", "-p", str(port)]
    client = env + ["UCX_NET_DEVICES=ibemu1:1", "ucx_perftest", "-p", str(port), "127.0.0.1",
                    "-t", test, "-s", str(size), "-n", str(iterations), "-w", "10", "-f"]
    with CrossedTheHca(fabric) as crossed:
        (src, sout), (crc, cout) = run_pair(fabric, server, client, port, timeout=120)
    assert src == 0 and crc == 0, f"server ({src}):\n{sout}\nclient ({crc}):\n{cout}"
    final = re.search(rf"^\s+{iterations}\s+\S+\s+\S+", cout, re.M)
    assert final, f"no final line of {iterations} iterations:\n{cout}"
    # Every iteration moved its message (or operand) through the ports.
    assert crossed.bytes >= iterations * size, crossed.bytes


@pytest.mark.parametrize("messages,size", [(100, 8), (20, 1 << 20)])
def test_ucx_connects_through_rdma_cm(fabric, messages, size):
    """UCX's client/server connection establishment over rdma_cm
    (tests/programs/ucx_sockaddr): the client resolves the server's
    emulated address and connects; every byte it sends arrives intact."""
    program = str(BUILD / "bin" / "ucx_sockaddr")
    assert Path(program).exists(), "tests/programs/ucx_sockaddr was not built: libucx-dev?"
    port = free_tcp_port()
    env = ["env", "UCX_SOCKADDR_TLS_PRIORITY=rdmacm", "UCX_TLS=rc_verbs,ud_verbs,self",
           "UCX_NET_DEVICES=ibemu0:1,ibemu1:1"]
    args = ["10.73.0.1", str(port), str(messages), str(size)]
    server = fabric.spawn(env + [program, "server"] + args)
    try:
        deadline = time.time() + 20
        while not cm_listening(fabric, port):
            assert server.poll() is None and time.time() < deadline, server.communicate()[0]
            time.sleep(0.05)
        with CrossedTheHca(fabric) as crossed:
            client = fabric.run(env + [program, "client"] + args, timeout=120)
            server_out = server.communicate(timeout=60)[0]
    finally:
        server.kill()
    assert client.returncode == 0 and "ok client" in client.stdout, client.stdout + client.stderr
    assert server.returncode == 0 and "ok server" in server_out, server_out
    assert crossed.bytes >= messages * size, crossed.bytes


# --- Open MPI ----------------------------------------------------------------

@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("config", list(MPI_CONFIGS))
def test_mpi_program(fabric, config, ranks):
    need("mpirun")
    program = BUILD / "bin" / "mpi_check"
    assert program.exists(), "tests/programs/mpi_check was not built: is libopenmpi-dev installed?"
    options = list(MPI_CONFIGS[config])
    if config == "ob1-openib" and "address" in sanitizer_setting("IBEMU_SANITIZE"):
        # AddressSanitizer's allocator returns memory to the system behind the
        # back of Open MPI's memory hooks, so registrations of freed buffers
        # stay in its cache until MPI_Finalize, which releases them through
        # the openib BTL it has already unloaded (a jump into unmapped code).
        # Without the cache nothing is left over.
        options += ["--mca", "mpi_leave_pinned", "0"]
    with CrossedTheHca(fabric) as crossed:
        r = fabric.run(MPIRUN + ["-np", str(ranks)] + options + [str(program)], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"all checks passed on {ranks} ranks" in r.stdout, r.stdout + r.stderr
    # Each rank sent its 4 MiB ring message across an emulated port at least.
    assert crossed.bytes >= ranks * (4 << 20), crossed.bytes


# --- libfabric ---------------------------------------------------------------

def test_fi_info_lists_the_verbs_domains(fabric):
    need("fi_info")
    r = fabric.run(["fi_info", "-p", "verbs"], timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    found = set(re.findall(r"domain: (\S+)\s+version: \S+\s+type: (\S+)", r.stdout))
    for wanted in [("ibemu0", "FI_EP_MSG"), ("ibemu0", "FI_EP_RDM"),
                   ("ibemu0-dgram", "FI_EP_DGRAM"), ("ibemu1-dgram", "FI_EP_RDM")]:
        assert wanted in found, r.stdout


# MSG and RDM endpoints are addressed by IP: with no IPoIB interface on the
# host both ends use the device 127.0.0.1 binds to (ibemu0). DGRAM endpoints
# are addressed by LID and QP number, so each end has a device of its own.
# fi_pingpong's sizes go from 64 B up to 1 MiB, or to the MTU on DGRAM.
FI_PINGPONGS = {
    "msg": ([], [], "1m"),
    "rdm": ([], [], "1m"),
    "dgram": (["-d", "ibemu0-dgram"], ["-d", "ibemu1-dgram"], "4k"),
}


@pytest.mark.parametrize("endpoint", list(FI_PINGPONGS))
def test_fi_pingpong_verifies_its_data(fabric, endpoint):
    need("fi_pingpong")
    port = free_tcp_port()
    server_dev, client_dev, largest = FI_PINGPONGS[endpoint]
    base = ["fi_pingpong", "-p", "verbs", "-e", endpoint, "-I", "50", "-c"]
    with CrossedTheHca(fabric) as crossed:
        (src, sout), (crc, cout) = run_pair(
            fabric, base + server_dev + ["-B", str(port)],
            base + client_dev + ["-P", str(port), "127.0.0.1"], port, timeout=120)
    assert src == 0 and crc == 0, f"server ({src}):\n{sout}\nclient ({crc}):\n{cout}"
    sizes = re.findall(r"^(\d+[km]?)\s+50\s+=50\s", cout, re.M)
    assert sizes and sizes[0] == "64" and sizes[-1] == largest, cout
    assert crossed.bytes >= 2 * 50 * 4096, crossed.bytes
