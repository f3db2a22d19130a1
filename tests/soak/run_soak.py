#!/usr/bin/python3
"""The soak test (tests/soak/README.md): PAIRS pairs of soak_worker
processes, one of each pair on ibemu0 and one on ibemu1, each with QPS RC QPs,
a UD QP and a DC initiator and target, random checked traffic for SECONDS
through links that lose, duplicate, reorder and delay packets. Fails when a
worker finds anything lost, duplicated, corrupted or stalled, when the daemon
keeps QPs of the finished processes, or when its memory grew (its heap;
and its resident size, in a build without sanitizers).

    tests/soak/run_soak.py [--build build] [--pairs 4] [--qps 8] [--seconds 60]
                           [--faults "drop=1 duplicate=1 reorder=2 delay=20 jitter=30"]
                           [--dc-optional]
Prints the load held and exits 0, or says what failed and exits 1."""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# What the daemon may grow by during a soak: its heap by a record of each
# finished process and its tables' capacity (about 2 KiB in the short form),
# its resident size by allocator slack and logs' buffers. A leak per process
# or per QP shows as far more. In a sanitized build the resident size holds
# the sanitizer's quarantine of freed blocks and means nothing; the heap
# figure is the sanitizer's own count there.
HEAP_SLACK_BYTES = 64 * 1024
RSS_SLACK_KIB = 4096


def sanitized(build):
    """Whether the build has sanitizers (its sanitizers.sh names them)."""
    f = build / "sanitizers.sh"
    return f.exists() and "IBEMU_SANITIZE=''" not in f.read_text()


def free_tcp_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def fault_args(text):
    args = []
    for item in text.split():
        name, _, value = item.partition("=")
        args += [f"--{name}", value]
    return args


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("IBEMU_BUILD", "build"))
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--qps", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--faults", default="drop=1 duplicate=1 reorder=2 delay=20 jitter=30")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dc-optional", action="store_true",
                    help="run without DC traffic where the devices have no DC (default: fail)")
    o = ap.parse_args()
    build = Path(o.build).resolve()
    ibemu = str(build / "bin" / "ibemu")
    worker = str(build / "bin" / "soak_worker")
    runtime = Path(tempfile.mkdtemp(prefix="ibemu-soak-"))
    env = dict(os.environ, IBEMU_RUNTIME_DIR=str(runtime))

    def ib(*args, check=True):
        return subprocess.run([ibemu, *args], env=env, check=check, capture_output=True, text=True)

    failures = []
    try:
        ib("up")
        if o.faults:
            ib("fault", "set", "--seed", str(o.seed), *fault_args(o.faults))
        status = json.loads(ib("status", "--json").stdout)
        daemon = status["pid"]
        rss_before = rss_kib(daemon)
        heap_before = status["heap_in_use"]
        procs = []
        for i in range(o.pairs):
            port = free_tcp_port()
            common = ["-p", str(port), "-q", str(o.qps), "-t", str(o.seconds)]
            if o.dc_optional:
                common.append("-o")
            for side, extra in (("ibemu0", []), ("ibemu1", ["localhost"])):
                seed = str(o.seed * 1000 + 2 * i + len(extra))
                # `ibemu run` puts ibemu's libmlx5 first, which gives the
                # workers DC on the emulated devices.
                cmd = [ibemu, "run", "--", worker, "-d", side, "-r", seed, *common, *extra]
                procs.append((f"pair {i} {side}", subprocess.Popen(
                    cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
                time.sleep(0.05)
        reports = []
        for name, p in procs:
            try:
                out, err = p.communicate(timeout=o.seconds + 120)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                failures.append(f"{name}: did not finish (hung)")
                continue
            if p.returncode != 0:
                failures.append(f"{name}: exit {p.returncode}: {err.strip()[-500:]}")
                continue
            reports.append(json.loads(out.strip().splitlines()[-1]))
        status = json.loads(ib("status", "--json").stdout)
        if status["qps"] != 0:
            failures.append(f"the daemon still holds {status['qps']} QPs of finished processes")
        rss_after = rss_kib(daemon)
        heap_after = status["heap_in_use"]
        if heap_after - heap_before > HEAP_SLACK_BYTES:
            failures.append(f"the daemon's heap grew from {heap_before} to {heap_after} bytes")
        if not sanitized(build) and rss_after - rss_before > RSS_SLACK_KIB:
            failures.append(f"the daemon grew from {rss_before} to {rss_after} KiB")
        drops = {}
        for d in status["devices"]:
            for p in d["port_info"]:
                for cause, n in p["counters"]["drops"].items():
                    drops[cause] = drops.get(cause, 0) + n
        ops = sum(r["ops"] for r in reports)
        dc_ops = sum(r["dc_ops"] for r in reports)
        if reports and not o.dc_optional and dc_ops == 0:
            failures.append("no DC traffic")
        seconds = max((r["seconds"] for r in reports), default=o.seconds) or 1
        summary = {
            "processes": 2 * o.pairs,
            "qps_per_process": o.qps,
            "seconds": seconds,
            "rc_ops": ops,
            "rc_ops_per_s": round(ops / seconds),
            "bytes": sum(r["bytes"] for r in reports),
            "sends": sum(r["sends"] for r in reports),
            "writes": sum(r["writes"] for r in reports),
            "reads": sum(r["reads"] for r in reports),
            "atomics": sum(r["atomics"] for r in reports),
            "datagrams_sent": sum(r["datagrams_sent"] for r in reports),
            "datagrams_received": sum(r["datagrams_received"] for r in reports),
            "dc_ops": dc_ops,
            "dc_ops_per_s": round(dc_ops / seconds),
            "dc_sends": sum(r["dc_sends"] for r in reports),
            "dc_reads": sum(r["dc_reads"] for r in reports),
            "dc_bytes": sum(r["dc_bytes"] for r in reports),
            "faults": o.faults,
            "packets_lost_to_faults": drops.get("link_faults", 0),
            "daemon_rss_kib": [rss_before, rss_after],
            "daemon_heap_bytes": [heap_before, heap_after],
            "failures": failures,
        }
        print(json.dumps(summary))
        print(f"soak: {2 * o.pairs} processes x {o.qps} RC QPs (+1 UD, 1 DCI, 1 DCT each), "
              f"{seconds:.0f} s, {summary['rc_ops_per_s']} RC ops/s, "
              f"{summary['dc_ops_per_s']} DC ops/s, {summary['packets_lost_to_faults']} packets "
              f"lost to faults: " + ("nothing lost, duplicated or corrupted" if not failures
                                     else f"{len(failures)} FAILURE(S)"))
        for f in failures:
            print("  " + f)
        return 1 if failures else 0
    finally:
        ib("down", check=False)
        shutil.rmtree(runtime, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
