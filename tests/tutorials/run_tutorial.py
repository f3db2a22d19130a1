#!/usr/bin/env python3
"""Runs tutorials (Markdown files) as written: tests/tutorials/README.md.

    run_tutorial.py [--build DIR] [--timeout S] [--verbose] [--keep] FILE.md...

The fenced blocks of each file, in order, become one bash script that runs
with `set -euo pipefail` in a fresh temporary directory, with DIR/bin first
on PATH, IBEMU_SRC the source tree and IBEMU_RUNTIME_DIR a private runtime
directory. Exit status: 0 when every tutorial passed or was skipped, 1 when
one failed.
"""

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(```+|~~~+)\s*(.*)$")
HEREDOC_END = "__IBEMU_TUTORIAL_EOF__"
SKIP = 77


class Block:
    def __init__(self, line, info, text):
        self.line = line  # line of the opening fence, counting from 1
        words = info.split()
        self.lang = words[0] if words else ""
        self.attrs = {}
        for w in words[1:]:
            key, _, value = w.partition("=")
            self.attrs[key] = value
        self.text = text


def parse(path):
    """The fenced blocks of a Markdown file, and the file's own options
    (`<!-- tutorial: requires=root run-as=unprivileged -->`)."""
    blocks, options = [], {}
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^<!--\s*tutorial:(.*?)-->", lines[i])
        if m:
            for w in m.group(1).split():
                key, _, value = w.partition("=")
                options[key] = value
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, start = m.group(1), m.group(2), i + 1
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith(fence[0] * len(fence)):
            body.append(lines[i])
            i += 1
        blocks.append(Block(start, info, "\n".join(body) + "\n"))
        i += 1
    return blocks, options


def sanitizers_of(build):
    """The sanitizers the build under test was made with ("" for none)."""
    try:
        text = (build / "sanitizers.sh").read_text()
    except FileNotFoundError:
        return ""
    m = re.search(r"^IBEMU_SANITIZE='(.*)'$", text, re.M)
    return m.group(1) if m else ""


def has_gpu():
    """What tests/integration/test_gpu.py asks for: an NVIDIA device node
    and a CUDA driver that loads. None when present, else why not."""
    if not any(Path("/dev").glob("nvidia[0-9]*")):
        return "no NVIDIA GPU (/dev/nvidia0 is missing)"
    try:
        import ctypes

        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no CUDA driver (libcuda.so.1 does not load)"
    return None


def requirement_missing(req, build):
    if not req:
        return None
    for r in req.split(","):
        if r == "root" and os.geteuid() != 0:
            return "needs root (network namespaces)"
        if r == "netns" and not shutil.which("ip"):
            return "needs ip (iproute2)"
        if r == "kernel" and os.environ.get("TUTORIAL_KERNEL_GUEST") != "1":
            # It loads modules and runs the system's daemon: only where that
            # changes nothing that matters, the kernel test's qemu guest.
            return "loads ibemu.ko: runs in the qemu guest of `make kernel-test`"
        if r == "gpu":
            why = has_gpu()
            if why:
                return why
            if not (build / "bin" / "gpu_rdma").exists():
                return "the build has no gpu_rdma (built only when CMake finds a CUDA toolkit)"
    return None


def script_for(path, blocks, build):
    """The bash script of a tutorial. Blocks:
    sh                 runs
    sh norun           for the reader only (the runner does it itself)
    sh cleanup         runs in order, and again (errors ignored) if an earlier
                       command failed
    sh requires=R      runs only where R (root, gpu, kernel) is met, else says SKIP
    LANG file=PATH     its text is written to PATH (relative to the work dir)
    anything else      not run (text, console, yaml, json ...)"""
    out = [
        "set -Eeuo pipefail",
        "__line=0",
        "trap '__rc=$?; echo \"tutorial: FAILED (status $__rc) in the block at "
        + str(path)
        + ":$__line: $BASH_COMMAND\" >&2' ERR",
    ]
    cleanups = []
    ran = 0
    for b in blocks:
        if "file" in b.attrs:
            target = b.attrs["file"]
            out.append(f"__line={b.line}")
            out.append(f"mkdir -p \"$(dirname {shlex.quote(target)})\"")
            out.append(f"cat > {shlex.quote(target)} <<'{HEREDOC_END}'")
            out.append(b.text.rstrip("\n"))
            out.append(HEREDOC_END)
            continue
        if b.lang != "sh" or "norun" in b.attrs:
            continue
        missing = requirement_missing(b.attrs.get("requires", ""), build)
        out.append(f"__line={b.line}")
        if missing:
            out.append(f"echo {shlex.quote(f'tutorial: SKIP the block at {path}:{b.line}: {missing}')}")
            continue
        out.append(f"echo {shlex.quote(f'--- {path}:{b.line}')}")
        out.append(b.text.rstrip("\n"))
        ran += 1
        if "cleanup" in b.attrs:
            cleanups.append(b.text)
    # On failure, the cleanup blocks run once more with errors ignored.
    trap = ["__cleanup() {", "  set +eEu", "  trap - ERR", "  echo '--- cleanup after a failure'"]
    for c in cleanups:
        trap += ["  " + line for line in c.rstrip("\n").splitlines()] + ["  :"]
    trap += ["}", "trap '__s=$?; [ $__s -eq 0 ] || __cleanup; exit $__s' EXIT"]
    return "\n".join(out[:3] + trap + out[3:]) + "\n", ran


def run_one(path, args, build):
    rel = os.path.relpath(path, SRC) if str(path).startswith(str(SRC)) else str(path)
    blocks, options = parse(path)
    missing = requirement_missing(options.get("requires", ""), build)
    if missing:
        print(f"SKIP {rel}: {missing}")
        return "skip"
    script, ran = script_for(rel, blocks, build)
    if ran == 0:
        print(f"FAIL {rel}: no runnable ```sh block")
        return "fail"
    work = Path(tempfile.mkdtemp(prefix="ibemu-tutorial-"))
    runtime = Path(tempfile.mkdtemp(prefix="ibemu-tut.", dir="/tmp"))  # short: a socket path
    (work / ".tutorial.sh").write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("IBEMU_") and k != "XDG_RUNTIME_DIR"}
    env.update(
        # The build under test, then the system's programs (python3 is
        # Debian's, with its packages, even where another one comes first).
        PATH=f"{build / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin:{env.get('PATH', '')}",
        IBEMU_SRC=str(SRC),
        IBEMU_RUNTIME_DIR=str(runtime),
        TUTORIAL_BUILD=str(build),
        LC_ALL="C.UTF-8",
    )
    if "address" in sanitizers_of(build):
        # An AddressSanitizer build's runtime is preloaded into every program,
        # mpirun's ranks too; its allocator frees memory behind the back of
        # Open MPI's memory hooks, whose registration cache then outlives the
        # openib BTL that must release it (a crash in MPI_Finalize). Without
        # the cache there is nothing left over; plain builds keep Open MPI's
        # defaults.
        env["OMPI_MCA_mpi_leave_pinned"] = "0"
    cmd = ["bash", str(work / ".tutorial.sh")]
    unprivileged = options.get("run-as") == "unprivileged" and os.geteuid() == 0
    if unprivileged:
        # Prove "no root": the whole tutorial as nobody.
        for d in (work, runtime):
            for root, dirs, files in os.walk(d):
                for n in dirs + files:
                    os.lchown(os.path.join(root, n), 65534, 65534)
            os.chown(d, 65534, 65534)
        env["HOME"] = str(work)
        env["USER"] = env["LOGNAME"] = "nobody"
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + cmd
    log = work / ".tutorial.log"
    started = time.monotonic()
    print(f"RUN  {rel}" + (" (as nobody)" if unprivileged else ""), flush=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=None if args.verbose else out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            rc = "timeout"
    # Whatever the tutorial left behind: its processes, the fabric of the
    # private runtime directory.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if rc == "timeout":
        proc.wait()
    subprocess.run(
        [str(build / "bin" / "ibemu"), "-r", str(runtime), "down"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    took = time.monotonic() - started
    text = log.read_text(errors="replace") if log.exists() else ""
    skipped = [l for l in text.splitlines() if l.startswith("tutorial: SKIP")]
    for s in skipped:
        print("  " + s[len("tutorial: "):])
    if rc == 0:
        result = "pass"
        print(f"PASS {rel} ({took:.1f} s)")
    else:
        result = "fail"
        why = f"timed out after {args.timeout} s" if rc == "timeout" else f"exit status {rc}"
        print(f"FAIL {rel} ({why}, {took:.1f} s); the last lines of its output:")
        for l in text.splitlines()[-60:]:
            print("  | " + l)
        for name in ("ibemud.log", "ibemu-sm.log"):
            f = runtime / name
            if f.exists():
                print(f"  --- {name}")
                for l in f.read_text(errors="replace").splitlines()[-15:]:
                    print("  | " + l)
    if args.keep and result == "fail":
        print(f"  kept: {work} {runtime}")
    else:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.environ.get("IBEMU_BUILD", str(SRC / "build")))
    p.add_argument("--timeout", type=int, default=240, help="seconds per tutorial")
    p.add_argument("--verbose", "-v", action="store_true", help="show each tutorial's output as it runs")
    p.add_argument("--keep", action="store_true", help="keep the directories of failed tutorials")
    p.add_argument("files", nargs="+", type=Path)
    args = p.parse_args()
    build = Path(args.build).resolve()
    if not (build / "bin" / "ibemu").exists():
        sys.exit(f"run_tutorial: {build}/bin/ibemu does not exist (build first)")
    results = [run_one(f.resolve(), args, build) for f in args.files]
    n = {r: results.count(r) for r in ("pass", "fail", "skip")}
    print(f"tutorials: {n['pass']} passed, {n['fail']} failed, {n['skip']} skipped")
    return 1 if n["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
