#!/usr/bin/python3
"""`make bench`: RDMA figures of ibemu next to the limit measured in the same
run. Bandwidths are printed with their ratio to memcpy of the same size;
latencies in microseconds; the idle cost of a verbs process in % of a core.
Figures only — nothing here passes or fails.

    run_bench.py [--quick]   --quick: every section, the fewest iterations
                             (the integration tests run it; its figures
                             mean nothing)"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("IBEMU_BUILD", REPO / "build"))
IBEMU = str(BUILD / "bin" / "ibemu")
SIZES = [8, 4096, 65536, 1 << 20]
# --quick: every section once with the fewest sizes, iterations (perftest
# takes 5 at least) and seconds
# that still print a figure; make test runs it so this script cannot rot.
QUICK = False


def scaled(full, quick):
    """`full`, or `quick` with --quick."""
    return quick if QUICK else full


def iterations(size):
    return scaled(max(200, min(20000, (256 << 20) // size // 4)), 5)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port):
    want = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            if any(l.split()[1].endswith(want) and l.split()[3] == "0A" for l in f.readlines()[1:]):
                return True
    return False


def perftest(env, tool, size, extra=(), devices=("ibemu0", "ibemu1"), prefix=(IBEMU, "run", "--")):
    """Runs the server on devices[0] and the client on devices[1], each
    behind `prefix` (`ibemu run --`, or nothing where the devices need no
    environment); returns the client's output, None if either failed."""
    port = free_port()
    args = [*prefix, tool, "-s", str(size), "-p", str(port), *extra]
    server = subprocess.Popen([*args, "-d", devices[0]], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 20
    while not listening(port) and server.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    try:
        client = subprocess.run([*args, "-d", devices[1], "localhost"], env=env,
                                capture_output=True, text=True, timeout=300)
        server.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        return None
    return client.stdout if client.returncode == 0 and server.returncode == 0 else None


def memcpy_mb_s(sizes):
    """{size: MB/s} of memcpy on this machine now (tests/bench/memcpy_bw.c)."""
    out = subprocess.run([str(BUILD / "bin" / "memcpy_bw"), *map(str, sizes)],
                         capture_output=True, text=True, check=True).stdout
    return {int(size): float(mbps) for size, mbps in (line.split() for line in out.splitlines())}


def bandwidth(out, size):
    if not out:
        return None
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 4 and f[0] == str(size) and re.fullmatch(r"[\d.]+", f[3]):
            return float(f[3])  # BW average [MB/sec]
    return None


def latency(out):
    """(typical, 99th percentile) in microseconds, or None."""
    if not out:
        return None
    for line in out.splitlines():
        f = line.split()
        # #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
        if len(f) >= 8 and f[0] == "8" and all(re.fullmatch(r"[\d.]+", x) for x in (f[4], f[7])):
            return float(f[4]), float(f[7])
    return None


def all_to_all_section(env):
    """8 processes, 8 RC QPs to each other one, every QP writing, reading and
    sending at once; the limit is 2 processes doing the same."""
    print(f"\n{'all to all':<14}{'procs':>6}{'size':>9}{'MB/s':>11}{'ratio to 2 procs':>18}")
    figures = {}
    for procs in (2, 8):
        r = subprocess.run([IBEMU, "run", "--", str(BUILD / "bin" / "rc_all_to_all"), "-p",
                            str(procs), "-q", "8", "-M", "4096", "-s", "65536", "-n",
                            scaled("20", "2")],
                           env=env, capture_output=True, text=True, timeout=600)
        m = re.search(r"MB/s=([\d.]+)", r.stdout) if r.returncode == 0 else None
        figures[procs] = float(m.group(1)) if m else None
    for procs in (2, 8):
        bw, limit = figures[procs], figures[2]
        shown = f"{bw:11.1f}{bw / limit:18.3f}" if bw and limit else f"{'failed':>11}"
        print(f"{'rc_all_to_all':<14}{procs:>6}{65536:>9}{shown}")


def contention_section(env):
    """Latency beside busy-loop CPU hogs, as on a shared CI runner: the
    99th percentile against the typical figure of the same run. The limit
    is shm_pingpong beside the same hogs: two processes spinning on shared
    memory, no RDMA at all, so its tail is the scheduler's alone."""
    print(f"\n{'contention':<14}{'hogs':>5}{'t_typical us':>14}{'99% us':>10}{'99%/typical':>13}")
    for hogs in (0, 2):
        burners = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(hogs)]
        try:
            limit = subprocess.run([str(BUILD / "bin" / "shm_pingpong"), scaled("5000", "100"),
                                    scaled("10000", "200")],
                                   capture_output=True, text=True).stdout.split()
            figures = {"shm_pingpong": tuple(map(float, limit)) if len(limit) == 2 else None}
            for tool in ("ib_write_lat", "ib_send_lat"):
                figures[tool] = latency(perftest(env, tool, 8, ["-n", scaled("5000", "100")]))
            for name, lat in figures.items():
                shown = f"{lat[0]:14.2f}{lat[1]:10.2f}{lat[1] / lat[0]:13.1f}" if lat else \
                    f"{'failed':>14}"
                print(f"{name:<14}{hogs:>5}{shown}")
        finally:
            for b in burners:
                b.kill()
                b.wait()


def hosts_section():
    """Two hosts in network namespaces, one subnet over UDP: RDMA WRITE
    bandwidth next to raw UDP between the same namespaces."""
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    import hosts  # noqa: E402 (the integration tests' namespace helpers)
    why = hosts.namespaces_unusable()
    print("\ntwo hosts (network namespaces, UDP between their daemons)\n")
    if why:
        print(f"skipped: {why}")
        return
    lab = hosts.Lab(Path(tempfile.mkdtemp(prefix="ibemu-bench-hosts-")), 2)
    try:
        a, b = lab.hosts
        for i, h in enumerate(lab.hosts):
            h.up_with({"bind": h.address, "peers": lab.peers_of(h)}, sm=(i == 0))
        lab.wait_all_active()
        datagram = 16384  # fabric.datagram_bytes' default
        udp = str(BUILD / "bin" / "udp_bw")
        receiver = subprocess.Popen([*a.wrap, udp, "recv", a.address, "19515"],
                                    stdout=subprocess.PIPE, text=True)
        time.sleep(0.3)
        subprocess.run([*b.wrap, udp, "send", a.address, "19515", scaled("3", "1"), str(datagram)],
                       check=True)
        raw = float(receiver.communicate(timeout=60)[0].split()[0])
        print(f"{'test':<14}{'size':>9}{'MB/s':>11}{'raw UDP MB/s':>14}{'ratio':>8}")
        for size in scaled((65536, 1 << 20), (65536,)):
            port = free_port()
            args = ["ib_write_bw", "-s", str(size), "-p", str(port), "-n", str(iterations(size))]
            try:
                _, out = hosts.run_across(a, args + ["-d", "ibemu0"], b,
                                          args + ["-d", "ibemu0", a.address], port)
            except BaseException:  # pytest.fail in a helper: report and go on
                out = None
            bw = bandwidth(out, size)
            shown = f"{bw:11.1f}{raw:14.1f}{bw / raw:8.3f}" if bw else f"{'failed':>11}{raw:14.1f}"
            print(f"{'ib_write_bw':<14}{size:>9}{shown}")
        port = free_port()
        args = ["ib_write_lat", "-s", "8", "-p", str(port), "-n", scaled("2000", "100")]
        try:
            _, out = hosts.run_across(a, args + ["-d", "ibemu0"], b,
                                      args + ["-d", "ibemu0", a.address], port)
        except BaseException:
            out = None
        lat = latency(out)
        print(f"\n{'test':<14}{'size':>9}{'t_typical us':>14}")
        print(f"{'ib_write_lat':<14}{8:>9}{(f'{lat[0]:14.2f}' if lat else 'failed'):>14}")
    finally:
        lab.close()


def gpu_section(env):
    """RDMA WRITE into GPU memory against cudaMemcpy HtoD of the same sizes
    (docs/gpu.md), where the GPU benchmark was built and a GPU is present."""
    bench = BUILD / "bin" / "gpu_write_bw"
    if not bench.exists() or not shutil.which("nvidia-smi"):
        print("\nGPU: skipped (gpu_write_bw not built or no NVIDIA driver)")
        return
    r = subprocess.run([IBEMU, "run", "--", str(bench), "65536", "16777216"], env=env,
                       capture_output=True, text=True, timeout=600)
    print(f"\n{'test':<14}{'size':>9}{'MB/s':>11}{'HtoD MB/s':>13}{'ratio':>8}")
    for line in r.stdout.splitlines():
        _, size, rdma, htod, ratio = line.split()
        print(f"{'gpu_write':<14}{size:>9}{float(rdma):11.1f}{float(htod):13.1f}"
              f"{float(ratio):8.3f}")
    if r.returncode:
        print(f"GPU benchmark failed: {r.stderr.strip()}")


def both_ways_section(env):
    """Traffic in both directions at once (perftest -b), where full inboxes
    once dropped packets: 4 MiB RDMA READs at a small MTU against the same at
    4096 (the limit is the large MTU's figure), and the spread of 64 KiB
    bandwidth over 5 runs (max / min)."""
    size = 4 << 20
    print(f"\n{'both ways':<14}{'size':>9}{'MTU':>6}{'MB/s':>11}{'ratio to MTU 4096':>19}")
    read = {}
    for mtu in (4096, 1024):
        args = ["-b", "-n", scaled("20", "5"), "-m", str(mtu)]
        read[mtu] = bandwidth(perftest(env, "ib_read_bw", size, args), size)
    for mtu in (4096, 1024):
        bw, limit = read[mtu], read[4096]
        shown = f"{bw:11.1f}{bw / limit:19.3f}" if bw and limit else f"{'failed':>11}{'-':>19}"
        print(f"{'ib_read_bw':<14}{size:>9}{mtu:>6}{shown}")
    runs_title = f"{scaled(5, 2)} runs"
    print(f"\n{runs_title:<14}{'size':>9}{'min MB/s':>11}{'max MB/s':>11}{'max/min':>9}")
    for tool in ("ib_write_bw", "ib_send_bw"):
        runs = [bandwidth(perftest(env, tool, 65536, ["-n", str(iterations(65536))]), 65536)
                for _ in range(scaled(5, 2))]
        runs = [r for r in runs if r]
        shown = f"{min(runs):11.1f}{max(runs):11.1f}{max(runs) / min(runs):9.2f}" if runs else \
            f"{'failed':>11}"
        print(f"{tool:<14}{65536:>9}{shown}")


def main():
    global QUICK
    QUICK = "--quick" in sys.argv[1:]
    runtime = tempfile.mkdtemp(prefix="ibemu-bench-")
    env = dict(os.environ, IBEMU_RUNTIME_DIR=runtime)
    subprocess.run([IBEMU, "up"], env=env, check=True, capture_output=True)
    try:
        sizes = scaled(SIZES, [8, 65536])
        memcpy = memcpy_mb_s(sizes)
        print(f"ibemu benchmarks ({os.cpu_count()} CPUs), two processes on one host\n")
        print(f"{'test':<14}{'size':>9}{'MB/s':>11}{'memcpy MB/s':>13}{'ratio':>8}")
        for tool in ("ib_write_bw", "ib_read_bw", "ib_send_bw"):
            for size in sizes:
                bw = bandwidth(perftest(env, tool, size, ["-n", str(iterations(size))]), size)
                shown = f"{bw:11.1f}{memcpy[size]:13.1f}{bw / memcpy[size]:8.3f}" if bw else \
                    f"{'failed':>11}{memcpy[size]:13.1f}{'-':>8}"
                print(f"{tool:<14}{size:>9}{shown}")
        print(f"\n{'test':<14}{'size':>9}{'t_typical us':>14}")
        for tool in ("ib_write_lat", "ib_send_lat"):
            lat = latency(perftest(env, tool, 8, ["-n", scaled("5000", "100")]))
            print(f"{tool:<14}{8:>9}{(f'{lat[0]:14.2f}' if lat else 'failed'):>14}")
        idle = subprocess.run([IBEMU, "run", "--", str(BUILD / "bin" / "idle_probe"),
                               scaled("5", "1")],
                              env=env, capture_output=True, text=True)
        print(f"\nidle process (device open, receive posted): "
              f"{idle.stdout.strip() or 'failed'} % of one core over {scaled(5, 1)} s")
        both_ways_section(env)
        all_to_all_section(env)
        contention_section(env)
        gpu_section(env)
    finally:
        subprocess.run([IBEMU, "down"], env=env, capture_output=True)
    hosts_section()


if __name__ == "__main__":
    sys.exit(main())
