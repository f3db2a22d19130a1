"""Crash and restart: the daemon is the emulated HCA's firmware. Killed with
SIGKILL while two programs stream SENDs, both programs learn it
(IBV_EVENT_DEVICE_FATAL) and every outstanding WR completes with a flush
error, so nothing waits for ever; `ibemu up` in the same runtime directory
then gives a working fabric."""
import errno
import os
import re
import signal
import subprocess
import threading
import time

from conftest import BUILD, VERBS_CASES, free_tcp_port, pingpong_pair, spawn_listening
from test_async_events import wait_for


def test_daemon_killed_mid_transfer_flushes_every_wr_and_comes_back(fresh_fabric):
    f = fresh_fabric
    f.up()
    port = free_tcp_port()
    prog = str(BUILD / "bin" / "rc_stream")
    receiver = spawn_listening(f, [prog, "-d", "ibemu0", "-p", str(port)], port)
    sender = f.spawn([prog, "-d", "ibemu1", "-p", str(port), "localhost"])
    watch = f.spawn(["stdbuf", "-oL", "ibv_asyncwatch", "-d", "ibemu0"])
    events = []
    threading.Thread(target=lambda: events.extend(iter(watch.stdout.readline, "")),
                     daemon=True).start()
    assert wait_for(events, "async event FD"), events
    assert sender.stdout.readline().strip() == "connected"
    time.sleep(0.5)
    assert sender.poll() is None and receiver.poll() is None
    daemon = f.status()["pid"]
    sm = f.sm_pid()
    os.kill(daemon, signal.SIGKILL)
    killed_at = time.time()
    outputs = {}
    for name, p in (("sender", sender), ("receiver", receiver)):
        try:
            outputs[name] = p.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            raise AssertionError(f"the {name} hung after the daemon died: {p.communicate()[0]}")
        assert p.returncode == 1, (name, outputs[name])
        assert re.search(r"Work Request Flushed Error \(5\): [1-9]", outputs[name]), outputs
    assert time.time() - killed_at < 20
    assert wait_for(events, "IBV_EVENT_DEVICE_FATAL (8)"), events
    watch.kill()
    watch.wait()
    # The subnet manager follows its daemon.
    deadline = time.time() + 10
    while sm and os.path.exists(f"/proc/{sm}") and "zombie" not in open(f"/proc/{sm}/status").read():
        assert time.time() < deadline, "the SM outlived its daemon"
        time.sleep(0.05)
    # A new daemon on the same directory: the dead one's socket is stale.
    f.up()
    status = f.status()
    assert status["pid"] != daemon and status["qps"] == 0
    assert all(p["state"] == "ACTIVE" for d in status["devices"] for p in d["port_info"])
    pingpong_pair(f, "ibv_rc_pingpong", ["-n", "200"])


def test_verbs_after_the_daemon_died_fail_with_eio(fresh_fabric):
    """A program that outlives its daemon (the HCA's firmware) gets EIO from
    every verb that needs it, as from an HCA in a catastrophic error state;
    before, ibv_create_qp aborted it from an exception inside the provider."""
    f = fresh_fabric
    f.up()
    prog = f.spawn(["/usr/bin/python3", str(VERBS_CASES / "after_daemon_death.py")],
                   stdin=subprocess.PIPE)
    assert prog.stdout.readline().strip() == "ready", prog.communicate()[0]
    os.kill(f.status()["pid"], signal.SIGKILL)
    time.sleep(0.5)
    out = prog.communicate("go\n", timeout=30)[0]
    assert prog.returncode == 0, out
    for verb in ("create_qp", "srq_number", "open_xrcd"):
        assert re.search(rf"^{verb} errno {errno.EIO}$", out, re.M), out
    assert "done" in out, out


def test_up_straight_after_the_daemon_was_killed(fresh_fabric):
    """`ibemu up` at once after kill -9 of the daemon: the old SM leaves as
    soon as its daemon hangs up, so a new one serves the new daemon and the
    ports come up; the old SM's lock does not stand in the way."""
    f = fresh_fabric
    f.up()
    for _ in range(3):
        daemon, sm = f.status()["pid"], f.sm_pid()
        os.kill(daemon, signal.SIGKILL)
        started = time.time()
        r = f.ibemu("up", "--timeout", "20", check=False)
        assert r.returncode == 0, r.stdout + r.stderr + f.logs()
        assert time.time() - started < 10
        status = f.status()
        assert status["pid"] != daemon and status["sm"]["pid"] != sm, status["sm"]
        assert all(p["state"] == "ACTIVE" for d in status["devices"] for p in d["port_info"])
    pingpong_pair(f, "ibv_rc_pingpong", ["-n", "100"])
