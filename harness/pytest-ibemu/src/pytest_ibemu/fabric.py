"""One emulated host: an ibemud (and its subnet manager) in a private
runtime directory, the programs a test runs against it, and what the test
does to its links."""
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

from . import status as st
from .capture import Capture
from .control import Control, link_selector
from .net import free_tcp_port, wait_listening

FRACTION_FAULTS = ("drop", "duplicate", "reorder")
LOG_FILES = ("ibemud.log", "ibemu-sm.log")


class FabricError(RuntimeError):
    """The fabric could not be brought up or down; the message carries the
    logs, because the reason is almost always in them."""


def _percent(name, fraction):
    """The protocol takes percentages; the API takes fractions, as rates
    usually are in Python. Refused out of 0..1 so that drop=5 (meaning 5%)
    is caught rather than silently clamped."""
    if not 0 <= fraction <= 1:
        raise ValueError(f"{name}={fraction}: give a fraction between 0 and 1 (0.05 is 5%)")
    return fraction * 100


def _command(cmd):
    return shlex.split(cmd) if isinstance(cmd, str) else [os.fspath(c) for c in cmd]


def _finish(proc, deadline):
    """Waits for `proc` until `deadline`, killing it then; its result, with
    `timed_out` telling the two apart (a hung RDMA program is a finding,
    not an error of the harness)."""
    try:
        out = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))[0]
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        out = proc.communicate()[0]
        timed_out = True
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out)
    result.timed_out = timed_out
    return result


class Fabric:
    """One host: `devices` HCAs of `ports` ports each, in `root`/rt.

    `config` adds keys to the daemon's config file (docs/configuration.md);
    `wrap` prefixes every command (`ip netns exec NS` for a host in a
    network namespace); `address` is where other hosts reach this one."""

    def __init__(self, ibemu_bin, root, devices=2, ports=2, config=None, sm=True,
                 sm_priority=None, wrap=(), address="127.0.0.1", name="host"):
        self.ibemu_bin = os.fspath(ibemu_bin)
        self.root = Path(root)
        self.runtime_dir = self.root / "rt"
        self.name = name
        self.address = address
        self.sm = sm
        self.sm_priority = sm_priority
        self.wrap = list(wrap)
        self.config = {"devices": [{"ports": ports} for _ in range(devices)], **(config or {})}
        self.last_capture = None
        self._control = None
        self._env = None
        self._children = []
        self._captures = 0

    def __enter__(self):
        try:
            return self.up()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<Fabric {self.name} {self.runtime_dir}>"

    # Starting and stopping: the only things done with the `ibemu` command.

    def ibemu(self, *args, check=True, timeout=60):
        r = subprocess.run([*self.wrap, self.ibemu_bin, "-r", str(self.runtime_dir), *args],
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise FabricError(f"ibemu {' '.join(args)} failed ({r.returncode}):\n{r.stdout}"
                              f"{r.stderr}\n{self.logs()}")
        return r

    def config_path(self):
        return self.runtime_dir / "ibemud.json"

    def up(self, timeout=20):
        """Writes the config into the runtime directory and starts the
        daemon (and the SM unless sm=False); returns once every port is
        ACTIVE, as `ibemu up` does."""
        self.runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.config_path().write_text(json.dumps(self.config, indent=2))
        args = ["up", "--config", str(self.config_path()), "--timeout", str(timeout)]
        if not self.sm:
            args.append("--no-sm")
        if self.sm_priority is not None:
            args += ["--sm-priority", str(self.sm_priority)]
        self.ibemu(*args, timeout=3 * timeout + 30)
        return self

    def down(self, stop_programs=True):
        """Stops the SM and the daemon; first, unless `stop_programs` is
        false, the programs spawn() started (false lets a test watch them
        meet the daemon's death: IBV_EVENT_DEVICE_FATAL, flushed WRs)."""
        if stop_programs:
            self._stop_children()
        if self.last_capture:
            self.last_capture.stop()
        if self._control:
            self._control.close()
            self._control = None
        return self.ibemu("down", check=False)

    def _stop_children(self):
        for proc in self._children:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(Exception):
                proc.communicate(timeout=10)
        self._children.clear()

    # Running programs on the host.

    def env(self):
        """The environment of a verbs program on this host (`ibemu env`)."""
        if self._env is None:
            out = self.ibemu("env").stdout
            self._env = dict(os.environ)
            for line in out.splitlines():
                name, _, value = line.removeprefix("export ").partition("=")
                self._env[name] = shlex.split(value)[0] if value else ""
        return dict(self._env)

    def run(self, cmd, timeout=120, check=False, env=None, **kwargs):
        """Runs a program on the host and waits: a CompletedProcess with
        text stdout and stderr."""
        return subprocess.run([*self.wrap, *_command(cmd)], env={**self.env(), **(env or {})},
                              timeout=timeout, check=check, capture_output=True, text=True,
                              **kwargs)

    def spawn(self, cmd, env=None, **kwargs):
        """Starts a program on the host: a Popen whose stdout carries stdout
        and stderr together. Killed at teardown if still running."""
        options = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True, **kwargs}
        proc = subprocess.Popen([*self.wrap, *_command(cmd)],
                                env={**self.env(), **(env or {})}, **options)
        self._children.append(proc)
        return proc

    def run_pair(self, server_cmd, client_cmd, port, client_host=None, timeout=120, env=None):
        """A server program here, then once it listens on TCP `port` its
        client (on `client_host`, another host, if given). Returns (server,
        client) as CompletedProcess (output in stdout) whatever their status;
        past `timeout` both are killed and their results say timed_out."""
        server = self.spawn(server_cmd, env=env)
        wait_listening(server, port)
        client = (client_host or self).spawn(client_cmd, env=env)
        deadline = time.monotonic() + timeout
        return tuple(_finish(p, deadline) for p in (server, client))

    def pingpong(self, tool="ibv_rc_pingpong", args=(), server_device="ibemu0",
                 client_device="ibemu1", client_host=None, timeout=120, env=None):
        """One of rdma-core's pingpong examples between two devices (of this
        host, or of this one and `client_host`): (server, client) results."""
        port = free_tcp_port()
        base = [tool, "-p", str(port), *args]
        server_name = self.address if client_host and client_host is not self else "localhost"
        return self.run_pair(base + ["-d", server_device],
                             base + ["-d", client_device, server_name], port,
                             client_host=client_host, timeout=timeout, env=env)

    # Through the control protocol.

    @property
    def control(self):
        """This test's session with the daemon, opened on first use and again
        after a daemon restart."""
        if self._control is None:
            self._control = Control(self.runtime_dir)
        return self._control

    def request(self, op, **fields):
        try:
            return self.control.request(op, **fields)
        except (ConnectionError, BrokenPipeError):
            self._control = None
            return self.control.request(op, **fields)

    def status(self, details=False):
        """The daemon's status reply; with `details`, each verbs program's
        contexts with their QPs, CQs and memory regions (the daemon asks the
        programs, which takes a few milliseconds)."""
        return self.request("status", details=True) if details else self.request("status")

    def devices(self):
        return st.devices(self.status())

    def ports(self):
        return st.ports(self.status())

    def port(self, link):
        """The Port of "ibemu0:1" (or ("ibemu0", 1))."""
        want = link_selector(link)
        for p in self.ports():
            if p.device == want.get("device") and p.port == want.get("port"):
                return p
        raise KeyError(f"no port {link} on {self.name}")

    def counters(self):
        """{"ibemu0:1": Counters, ...}"""
        return {p.name: p.counters for p in self.ports()}

    def processes(self):
        """Every session, verbs programs with their contexts' objects."""
        return st.processes(self.status(details=True))

    def qps(self):
        """The sessions that hold QP numbers."""
        return [p for p in self.processes() if p.qps]

    def queue_pairs(self):
        """Every QP of the programs on this host, with state and PSNs."""
        return st.queue_pairs(self.status(details=True))

    def faults(self, link=None, drop=0.0, duplicate=0.0, reorder=0.0, delay_us=0, jitter_us=0,
               rate_mbps=0, seed=1):
        """Context manager: the links of `link` (a port "ibemu0:1", a device,
        None for all) lose, duplicate, reorder (fractions 0..1) and delay
        packets until the block ends."""
        return self._faults_block(link, dict(
            drop=_percent("drop", drop), duplicate=_percent("duplicate", duplicate),
            reorder=_percent("reorder", reorder), delay_us=int(delay_us),
            jitter_us=int(jitter_us), rate_mbps=int(rate_mbps), seed=int(seed)))

    @contextlib.contextmanager
    def _faults_block(self, link, faults):
        self.request("fault_set", **link_selector(link), **faults)
        try:
            yield self
        finally:
            self.request("fault_clear", **link_selector(link))

    def link_down(self, link):
        """Pulls the cable of a port ("ibemu0:1") or to a host ("host:ADDR")."""
        self.request("link", **link_selector(link), up=False)

    def link_up(self, link, wait=True, timeout=20):
        """Plugs it back; with `wait`, returns once the SM made the port
        ACTIVE again (a host link comes up with the peer's next hello)."""
        self.request("link", **link_selector(link), up=True)
        if wait and "port" in link_selector(link):
            self.wait_active([link], timeout)

    @contextlib.contextmanager
    def link_cut(self, link):
        """Context manager: the link is down inside the block, up after it."""
        self.link_down(link)
        try:
            yield self
        finally:
            self.link_up(link)

    def wait_active(self, links=None, timeout=20):
        """Waits until the ports (all, or those named) are ACTIVE."""
        names = {self._port_name(link) for link in links} if links else None
        deadline = time.monotonic() + timeout
        while True:
            ports = [p for p in self.ports() if names is None or p.name in names]
            if all(p.state == "ACTIVE" for p in ports):
                return ports
            if time.monotonic() > deadline:
                raise TimeoutError(f"ports not ACTIVE: {[(p.name, p.state) for p in ports]}")
            time.sleep(0.05)

    @staticmethod
    def _port_name(link):
        sel = link_selector(link)
        return f"{sel['device']}:{sel['port']}"

    def force_nak(self, device, qpn, kind="rnr", count=1):
        """The responder of QP `qpn` of `device` answers its next `count` new
        requests with an RNR NAK ("rnr") or a PSN sequence error NAK ("psn")."""
        if kind not in ("rnr", "psn"):
            raise ValueError("kind is 'rnr' or 'psn'")
        self.request("fault_nak", device=device, qpn=int(qpn), kind=kind, count=int(count))

    @contextlib.contextmanager
    def capture(self, link=None, qpn=None, lid=None, count=None):
        """Context manager: captures the packets of the host (or of `link`,
        to `qpn`, from or to `lid`) into the fabric's directory; yields a
        Capture whose packets() decodes them."""
        self._captures += 1
        path = self.root / f"capture-{self._captures}.pcap"
        cap = Capture(self.runtime_dir, path, link=link, qpn=qpn, lid=lid, count=count)
        self.last_capture = cap
        try:
            yield cap
        finally:
            cap.stop()

    # What a person reads when something failed.

    def logs(self, tail=20000):
        """The daemon's and the SM's logs (their last `tail` characters)."""
        return "".join(f"--- {name}\n{text}\n" for name, text in self.log_files(tail).items())

    def log_files(self, tail=20000):
        found = {}
        for name in LOG_FILES:
            path = self.runtime_dir / name
            if path.exists():
                found[name] = path.read_text(errors="replace")[-tail:]
        return found

    def report_sections(self):
        """(title, text) pairs for a failed test's report."""
        label = f"ibemu {self.name}"
        sections = [(f"{label} {name}", text) for name, text in self.log_files().items()]
        try:
            sections.append((f"{label} status", st.describe(self.status(details=True))))
        except Exception as e:  # the daemon is gone: the logs say why
            sections.append((f"{label} status", f"no status: {e!r}"))
        if self.last_capture:
            sections.append((f"{label} capture", self.last_capture.summary()))
        return sections

    # Assertions.

    def assert_no_port_errors(self, ignore=()):
        """No port dropped anything (see `Counters.drops`), nor the devices
        before any port; `ignore` names drop causes a test expects, such as
        "link_faults" under faults()."""
        found = {p.name: p.counters.errors(ignore) for p in self.ports()}
        found.update({f"{d.name} (before any port)": {k: v for k, v in d.drops.items()
                                                       if v and k not in ignore}
                      for d in self.devices()})
        bad = {name: errors for name, errors in found.items() if errors}
        assert not bad, f"port errors on {self.name}: {bad}"

    def assert_qps_clean(self, idle=False, timeout=5.0):
        """Every QP is clean: no process that exited still holds QPs (its
        session would be leaked), and every QP of a running program is in a
        clean state, meaning

        - not in ERR or SQE (an error completion or a transport failure put
          it there, and nothing brought it back through RESET), and
        - with no send work request outstanding (posted and not completed:
          a peer that never answered, a send stuck behind an RNR loop).

        A program that does not answer the daemon (stopped, hung) is not
        clean either. With `idle`, no verbs program may hold any QP at all.
        Waits up to `timeout` for QPs to settle and for the daemon to see
        processes that just exited."""
        deadline = time.monotonic() + timeout
        while True:
            problems = self._qp_problems(idle)
            if not problems or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert not problems, f"QPs not clean on {self.name}:\n" + "\n".join(problems)

    def _qp_problems(self, idle):
        problems = []
        for p in self.processes():
            if p.role != "provider" or not p.qps and not p.context_details:
                continue
            if p.qps and (idle or not p.alive):
                problems.append(f"pid {p.pid} {'holds' if p.alive else 'exited holding'} "
                                f"{p.qps} QP(s)")
                continue
            for ctx in p.context_details:
                if not ctx.answered:
                    problems.append(f"pid {p.pid} context {ctx.context} on {ctx.device} did "
                                    "not answer")
            for qp in p.queue_pairs:
                if qp.state in ("ERR", "SQE"):
                    problems.append(f"{qp}: left in {qp.state}")
                elif qp.send_wrs:
                    problems.append(f"{qp}: {qp.send_wrs} send WR(s) outstanding")
        return problems

    def close(self, keep=False):
        """down(), then the directory goes unless `keep`."""
        try:
            self.down()
        finally:
            if not keep:
                shutil.rmtree(self.root, ignore_errors=True)
