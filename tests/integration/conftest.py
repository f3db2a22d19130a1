"""Fixtures for ibemu's integration tests: a private emulated fabric per test
module, and helpers that run real rdma-core programs against it."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from importlib.metadata import entry_points
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("IBEMU_BUILD", REPO / "build"))

# These tests use the pytest plugin ibemu ships for its users
# (harness/pytest-ibemu): its fabrics, fixtures and failure reports. Loaded
# from the source tree unless it is installed (then pytest has it already).
sys.path.insert(0, str(REPO / "harness" / "pytest-ibemu" / "src"))
from pytest_ibemu import fabric as harness  # noqa: E402

if not any(ep.name == "ibemu" for ep in entry_points(group="pytest11")):
    pytest_plugins = ["pytest_ibemu.plugin"]


def sanitizer_setting(name):
    """IBEMU_SANITIZE (the sanitizers) or IBEMU_SANITIZER_RUNTIME (the runtime
    their libraries need loaded first) of the build under test, from
    BUILD/sanitizers.sh (written by CMake); "" for a plain build."""
    try:
        text = (BUILD / "sanitizers.sh").read_text()
    except FileNotFoundError:
        return ""
    m = re.search(rf"^{name}='(.*)'$", text, re.M)
    return m.group(1) if m else ""


def sanitizer_runtime():
    return sanitizer_setting("IBEMU_SANITIZER_RUNTIME")


def bulk_mib(mib):
    """The size of a bulk transfer test (or the length of a long run):
    `mib` on a plain build (`make integration`), a quarter on an ASan build
    (`make test`'s), whose data path runs two to three times slower, and a
    sixteenth on a ThreadSanitizer build, about ten times slower. The
    sanitizers need the interleavings of retransmission, duplicates and
    reordering, which a sixteenth of a gigabyte has many thousands of; the
    whole size is what shows that nothing wears out over a long run."""
    sanitizers = sanitizer_setting("IBEMU_SANITIZE")
    if "thread" in sanitizers:
        return mib // 16
    return mib // 4 if "address" in sanitizers else mib


def drop_sanitizer_reports_of(pid):
    """Removes what the sanitizers wrote about process `pid` (their
    log_path files, `PATH.PID`): for a run whose fault is known to be the
    program's own, not ibemu's."""
    for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"):
        for option in os.environ.get(var, "").split(":"):
            if option.startswith("log_path="):
                Path(f"{option[len('log_path='):]}.{pid}").unlink(missing_ok=True)


def skip_where_tsan_cannot_run(cmd):
    """ThreadSanitizer's runtime, preloaded into a program built without it,
    crashes the program at its first setjmp: dash, bash and python3 cannot
    run on a TSan build's provider. A test that needs one of them is skipped
    on such a build (the ASan and plain builds run it)."""
    if "thread" not in sanitizer_setting("IBEMU_SANITIZE"):
        return
    prog = os.path.realpath(shutil.which(cmd[0]) or cmd[0])
    with open(prog, "rb") as f:
        script = f.read(2) == b"#!"
    if script or os.path.basename(prog).startswith(("python", "bash", "dash")):
        pytest.skip(f"{cmd[0]} cannot host ThreadSanitizer's runtime")


def free_tcp_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tcp_listening(port, proc="/proc/self"):
    """True when some process listens on TCP `port` (without connecting to it:
    the pingpong servers accept exactly one connection), in the network
    namespace of the process whose /proc directory is `proc`."""
    want = f":{port:04X}"
    for table in ("tcp", "tcp6"):
        try:
            with open(f"{proc}/net/{table}") as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    if fields[1].endswith(want) and fields[3] == "0A":
                        return True
        except FileNotFoundError:
            pass
    return False


class Fabric(harness.Fabric):
    """One host's emulated fabric in a private runtime directory: the
    plugin's Fabric, started the way most of these tests want it (`ibemu up`
    with the default configuration; a test that needs another writes it and
    calls `ibemu up --config` itself)."""

    def __init__(self, runtime_dir: Path, wrap=()):
        super().__init__(BUILD / "bin" / "ibemu", runtime_dir.parent, wrap=wrap,
                         name=runtime_dir.name)
        self.runtime_dir = runtime_dir

    def up(self, sm=True):
        return self.ibemu(*(["up"] if sm else ["up", "--no-sm"]))

    def down(self, stop_programs=False):
        """As the plugin's, but these tests wait for their programs themselves
        and often watch them outlive the daemon."""
        return super().down(stop_programs)

    def run(self, cmd, timeout=120, check=False):
        skip_where_tsan_cannot_run(cmd)
        return super().run(cmd, timeout=timeout, check=check)

    def spawn(self, cmd, **kwargs):
        skip_where_tsan_cannot_run(cmd)
        return super().spawn(cmd, **kwargs)

    def listening(self, proc, port):
        """Whether the server `proc` listens on TCP `port` yet."""
        return tcp_listening(port)

    def sm_pid(self):
        """The pid of the subnet manager attached to the daemon, or 0."""
        sm = self.status().get("sm")
        return sm["pid"] if sm else 0


def stack_dump(proc):
    """Every thread's stack of a hung process, for the failure report."""
    if not shutil.which("gdb"):
        return ""
    r = subprocess.run(["gdb", "-batch", "-ex", "thread apply all bt", "-p", str(proc.pid)],
                       capture_output=True, text=True, timeout=60)
    return f"--- stacks of pid {proc.pid}:\n{r.stdout[-6000:]}\n"


def pingpong_pair(fabric, tool, args, done=r"\d+ iters in"):
    """Runs one of rdma-core's example programs as server on ibemu0 and
    client on ibemu1 (a free TCP port each time); both must exit 0 and print
    `done` (a regular expression). Returns (server_output, client_output)."""
    port = free_tcp_port()
    base = [tool, "-p", str(port), *args]
    server, client = run_pair(fabric, base + ["-d", "ibemu0"], base + ["-d", "ibemu1", "localhost"],
                              port)
    for name, (rc, out) in (("server", server), ("client", client)):
        assert rc == 0, f"{tool} {name} failed ({rc}):\n{out}\n{fabric.logs()}"
        assert re.search(done, out), out
    return server[1], client[1]


VERBS_CASES = Path(__file__).parent / "verbs_cases"


def run_verbs_cases(fabric, name, passed, timeout=180):
    """Runs pytest on verbs_cases/NAME under the emulated environment (the
    system python3, which has pyverbs); all must pass, and `passed` of them
    (a regular expression for the count) so that none went missing."""
    r = fabric.run(["/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    str(VERBS_CASES / name)], timeout=timeout)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:] + fabric.logs()
    assert re.search(rf"\b{passed} passed\b", r.stdout), r.stdout


def spawn_listening(fabric, cmd, port, timeout=20):
    """Starts a server program and returns it once it listens on TCP `port`."""
    server = fabric.spawn(cmd)
    deadline = time.time() + timeout
    while not tcp_listening(port):
        assert time.time() < deadline and server.poll() is None, \
            server.communicate()[0] if server.poll() is not None else f"{cmd} does not listen"
        time.sleep(0.02)
    return server


def run_pair(fabric, server_cmd, client_cmd, port, timeout=120, client_fabric=None):
    """Starts a server, waits until it listens on `port`, runs the client
    (on `client_fabric`, another host, if given); returns (server_result,
    client_result) as (returncode, output)."""
    client_fabric = client_fabric or fabric
    server = fabric.spawn(server_cmd)
    deadline = time.time() + 20
    while not fabric.listening(server, port):
        if server.poll() is not None or time.time() > deadline:
            out = server.communicate()[0] if server.poll() is not None else ""
            server.kill()
            pytest.fail(f"server did not listen on {port}: {out}\n{fabric.logs()}")
        time.sleep(0.02)
    client = client_fabric.spawn(client_cmd)
    # The server's output is read while the client runs: a server that prints
    # more than a pipe holds (perftest with thousands of QPs) would block.
    server_out = []
    reader = threading.Thread(target=lambda: server_out.append(server.stdout.read()), daemon=True)
    reader.start()
    try:
        client_out = client.communicate(timeout=timeout)[0]
        server.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stacks = "".join(stack_dump(p) for p in (server, client) if p.poll() is None)
        server.kill()
        client.kill()
        reader.join()
        logs = fabric.logs() + (client_fabric.logs() if client_fabric is not fabric else "")
        pytest.fail(f"timeout; server: {''.join(server_out)}\nclient: "
                    f"{client.communicate()[0]}\n{stacks}\n{logs}")
    reader.join()
    return (server.returncode, "".join(server_out)), (client.returncode, client_out)


def rc_stream_until_cut(server_fabric, server_dev, client_fabric, client_dev, server_name,
                        cut):
    """tests/programs/rc_stream SENDs from the client to the server until
    `cut()` (called once the stream runs) breaks the link between them;
    returns the client's (returncode, output)."""
    rc_stream = str(BUILD / "bin" / "rc_stream")
    port = free_tcp_port()
    server = server_fabric.spawn([rc_stream, "-d", server_dev, "-p", str(port), "-t", "10"])
    deadline = time.time() + 20
    while not server_fabric.listening(server, port):
        assert time.time() < deadline and server.poll() is None
        time.sleep(0.02)
    client = client_fabric.spawn([rc_stream, "-d", client_dev, "-p", str(port), "-t", "10",
                                  server_name])
    time.sleep(0.5)
    cut()
    out = client.communicate(timeout=60)[0]
    server.kill()
    server.communicate()
    return client.returncode, out


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    runtime = tmp_path_factory.mktemp("ibemu")
    f = Fabric(runtime)
    f.up()
    yield f
    f.down(stop_programs=True)


CONNECTX6 = {"vendor_id": 0x02c9, "vendor_part_id": 4123}


@pytest.fixture(scope="module")
def connectx_fabric(tmp_path_factory):
    """A fabric whose two HCAs claim to be ConnectX-6s (Mellanox's vendor id
    and a ConnectX part id)."""
    config = tmp_path_factory.mktemp("cx-config") / "connectx.json"
    config.write_text(json.dumps({"devices": [dict(name="ibemu0", **CONNECTX6),
                                              dict(name="ibemu1", **CONNECTX6)]}))
    f = Fabric(tmp_path_factory.mktemp("ibemu-cx"))
    f.ibemu("up", "--config", str(config))
    yield f
    f.down(stop_programs=True)


@pytest.fixture
def fresh_fabric(tmp_path):
    """A fabric whose SM the test starts itself (ports begin INIT)."""
    f = Fabric(tmp_path / "rt")
    yield f
    f.down(stop_programs=True)
