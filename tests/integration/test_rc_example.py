"""The project's C program with the flow of the RDMA Aware Programming
manual's RC example (TCP exchange, RESET→INIT→RTR→RTS, server SEND, client
RDMA READ and RDMA WRITE, 15-byte malloc'ed buffer, rnr_retry 0, each
completion within 2 s)."""
import pytest

from conftest import BUILD, free_tcp_port, run_pair


@pytest.mark.parametrize("gid", [None, "0"])
def test_rc_example_between_two_hcas(fabric, gid):
    port = free_tcp_port()
    prog = str(BUILD / "bin" / "rc_example")
    extra = ["-g", gid] if gid else []
    server, client = run_pair(fabric, [prog, "-d", "ibemu0", "-p", str(port), *extra],
                              [prog, "-d", "ibemu1", "-p", str(port), *extra, "localhost"], port)
    assert server[0] == 0 and "test result is 0" in server[1], server[1] + fabric.logs()
    assert client[0] == 0 and "test result is 0" in client[1], client[1] + fabric.logs()
    assert "Message is: 'SEND operation '" in client[1]
    assert "Contents of server's buffer: 'SEND operation '" in client[1]  # RDMA READ
    assert "Contents of server buffer: 'RDMA write oper'" in server[1]   # RDMA WRITE


def test_passive_target_needs_no_verbs_calls(fabric):
    """The receiver sleeps without any verbs call; its HCA (the provider's
    progress thread) still accepts and acknowledges every SEND, so the sender
    completes long before the receiver looks."""
    import time
    from conftest import tcp_listening
    port = free_tcp_port()
    prog = str(BUILD / "bin" / "rc_stream")
    receiver = fabric.spawn([prog, "-d", "ibemu0", "-p", str(port), "-n", "20", "-w", "5"])
    while not tcp_listening(port):
        assert receiver.poll() is None
        time.sleep(0.02)
    started = time.time()
    sender = fabric.run([prog, "-d", "ibemu1", "-p", str(port), "-n", "20", "localhost"],
                        timeout=30)
    elapsed = time.time() - started
    assert sender.returncode == 0 and "done 20" in sender.stdout, sender.stdout + sender.stderr
    assert elapsed < 4, f"sender waited for the receiver to call verbs ({elapsed:.1f} s)"
    out = receiver.communicate(timeout=30)[0]
    assert receiver.returncode == 0 and "done 20" in out, out


@pytest.mark.parametrize("threads", [1, 4, 8])
def test_post_and_poll_from_several_threads(fabric, threads):
    r = fabric.run([str(BUILD / "bin" / "rc_threads"), "-t", str(threads), "-n", "3000"],
                   timeout=120)
    assert r.returncode == 0 and f"ok {threads} x 3000" in r.stdout, r.stdout + r.stderr
