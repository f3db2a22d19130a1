"""TCP helpers for the programs tests run: rdma-core's examples and perftest
exchange their QP numbers over TCP, so a client started before its server
listens fails for reasons that have nothing to do with RDMA."""
import socket
import subprocess
import time


def free_tcp_port():
    """A TCP port nobody uses now, for a server's -p option."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tcp_listening(port, pid="self"):
    """Whether some socket listens on TCP `port` in the network namespace of
    process `pid`, found without connecting (the pingpong servers accept
    exactly one connection, which a probe would use up)."""
    want = f":{port:04X}"
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except FileNotFoundError:
            continue
        if any(r[1].endswith(want) and r[3] == "0A" for r in rows):
            return True
    return False


def wait_listening(proc: subprocess.Popen, port, timeout=20.0):
    """Waits until the server `proc` listens on `port`; raises with its
    output if it exits or never listens."""
    deadline = time.monotonic() + timeout
    while not tcp_listening(port, proc.pid):
        if proc.poll() is not None:
            out = proc.communicate()[0]
            raise RuntimeError(f"{proc.args} exited ({proc.returncode}) before listening on "
                               f"{port}:\n{out}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{proc.args} does not listen on {port} after {timeout}s")
        time.sleep(0.02)
