"""Bad input from a program gets a clear errno (pyverbs cases run under the
emulated environment), and a program killed mid-transfer leaves the daemon
running while its peer's QP fails with a retry-exceeded completion."""
import re
import signal
import time
from pathlib import Path

from conftest import free_tcp_port, tcp_listening

HERE = Path(__file__).parent


def test_bad_arguments_get_the_errno_of_a_real_provider(fabric):
    r = fabric.run(["/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    str(HERE / "verbs_cases" / "bad_args_cases.py")], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"\b8 passed\b", r.stdout), r.stdout


def test_killed_peer_gives_retry_exceeded_and_daemon_survives(fabric):
    port = free_tcp_port()
    # Large messages and many iterations: the transfer is surely running when
    # the server is killed. ibv_rc_pingpong uses timeout 14 (67 ms) × 7 retries.
    base = ["ibv_rc_pingpong", "-p", str(port), "-s", "65536", "-n", "1000000"]
    server = fabric.spawn(base + ["-d", "ibemu0"])
    deadline = time.time() + 20
    while not tcp_listening(port):
        assert time.time() < deadline and server.poll() is None
        time.sleep(0.02)
    client = fabric.spawn(base + ["-d", "ibemu1", "localhost"])
    time.sleep(1.0)
    assert client.poll() is None, client.communicate()[0]
    server.send_signal(signal.SIGKILL)
    server.wait()
    killed_at = time.time()
    out = client.communicate(timeout=30)[0]
    elapsed = time.time() - killed_at
    assert client.returncode != 0
    assert "transport retry counter exceeded (12)" in out, out
    # 4.096 µs × 2^14 × (7 + 1) ≈ 0.54 s, plus scheduling slack.
    assert elapsed < 10, elapsed
    st = fabric.status()  # the daemon is alive and reclaimed the dead QPs
    assert st["qps"] == 0, st
