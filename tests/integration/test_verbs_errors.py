"""Bad input from a program gets a clear errno (pyverbs cases run under the
emulated environment), and a program killed mid-transfer leaves the daemon
running while its peer's QP fails with a retry-exceeded completion."""
import re
import signal
import time
from pathlib import Path

from conftest import BUILD, free_tcp_port, run_verbs_cases, spawn_listening

HERE = Path(__file__).parent


def test_bad_arguments_get_the_errno_of_a_real_provider(fabric):
    run_verbs_cases(fabric, "bad_args_cases.py", "7", timeout=120)


def test_killed_peer_gives_retry_exceeded_and_daemon_survives(fabric):
    """The receiver is killed while the sender streams SENDs: the sender's
    oldest WR fails with IBV_WC_RETRY_EXC_ERR after timeout x (retry_cnt + 1)
    and every other outstanding WR is flushed; the daemon reclaims the dead
    process's QP."""
    port = free_tcp_port()
    prog = str(BUILD / "bin" / "rc_stream")
    receiver = spawn_listening(fabric, [prog, "-d", "ibemu0", "-p", str(port)], port)
    # timeout 12: 4.096 us x 2^12 = 16.8 ms per try, 8 tries ~ 0.13 s.
    # IBA's exact retry timing, no stall tolerance (docs/configuration.md).
    sender = fabric.spawn(["env", "IBEMU_STALL_TOLERANCE_MS=0", prog, "-d", "ibemu1", "-p",
                           str(port), "-t", "12", "localhost"])
    assert sender.stdout.readline().strip() == "connected"
    time.sleep(0.5)
    assert sender.poll() is None
    receiver.send_signal(signal.SIGKILL)
    receiver.wait()
    killed_at = time.time()
    out = sender.communicate(timeout=30)[0]
    elapsed = time.time() - killed_at
    assert sender.returncode == 1, out
    assert "status transport retry counter exceeded (12): 1" in out, out
    assert re.search(r"status Work Request Flushed Error \(5\): \d+", out), out
    assert elapsed < 5, elapsed
    deadline = time.time() + 5
    while fabric.status()["qps"] != 0:  # the daemon noticed the exits
        assert time.time() < deadline, fabric.status()
        time.sleep(0.05)


def test_objects_in_use_are_not_destroyed(fabric):
    """ibv_dealloc_pd, ibv_destroy_cq, ibv_destroy_srq and ibv_close_xrcd on
    an object that others still use fail with EBUSY and leave it usable, as
    the kernel's uverbs does; once the users are gone they succeed."""
    r = fabric.run([str(BUILD / "bin" / "destroy_order"), "-d", "ibemu0"], timeout=60)
    assert r.returncode == 0 and r.stdout.endswith("ok\n"), r.stdout + r.stderr


def test_registration_checks_memory_and_vanished_memory_fails_the_request(fabric):
    """ibv_reg_mr checks the memory as the kernel's pin does (EFAULT for an
    address with nothing mapped, a PROT_NONE page, a read-only page asked
    for write access); registered memory that is unmapped, protected or
    truncated later ends the request that reaches it with an error
    completion (remote access error for a peer's WRITE, READ or atomic,
    local protection error for a local gather or scatter) and never kills
    the target, whose devices serve a new QP pair afterwards."""
    r = fabric.run([str(BUILD / "bin" / "mr_memory"), "-a", "ibemu0", "-b", "ibemu1"],
                   timeout=120)
    assert r.returncode == 0 and r.stdout.endswith("ok\n"), r.stdout + r.stderr
