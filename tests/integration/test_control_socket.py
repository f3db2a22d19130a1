"""ibemud's control socket takes bad input from any local process: it answers
with an error and keeps serving everyone else."""
import errno
import json
import os
import random
import socket
import subprocess

import pytest


def connect(fabric):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(str(fabric.runtime_dir / "ibemud.sock"))
    s.settimeout(10)
    return s


def request(s, obj):
    s.send(obj if isinstance(obj, bytes) else json.dumps(obj).encode())
    return json.loads(s.recv(1 << 20))


def test_socket_is_private_to_its_user(fabric):
    assert (fabric.runtime_dir / "ibemud.sock").stat().st_mode & 0o777 == 0o600


def test_malformed_requests_get_errors_and_the_daemon_keeps_serving(fabric):
    s = connect(fabric)
    cases = [
        b"not json",
        b"[1,2,3]",
        b"\xff\xfe\x00",
        {"op": "no_such_op"},
        {"op": "create_qp"},                        # missing field
        {"op": "create_qp", "device": "nonexistent"},
        {"op": "create_qp", "device": 0},           # no inbox registered
        {"op": "destroy_qp", "device": 0, "qpn": "x"},
        {"op": "resolve", "dlid": -1, "qpn": 5},
        {"op": "resolve", "dlid": 1, "qpn": 0xffffff},
        {"op": "smp", "device": 0, "port": 1, "mad": "zz"},
        {"op": "smp", "device": 0, "port": 9, "mad": "00" * 256},
        {"op": "smp", "device": 0, "port": 1, "mad": "00" * 3},
        {"op": "register_inbox"},                   # no fd attached
        {"op": "sm_attach", "device": 5, "port": 1},
        {"op": "resolve_srq", "device": 0, "srqn": 0x99},   # nobody holds it
        {"op": "resolve_srq", "device": 7, "srqn": 0x10},
        {"op": "resolve_qp", "device": 0},
        {"op": "resolve_session", "session": 1 << 40},
        {"op": "resolve_session", "session": "x"},
    ]
    for case in cases:
        reply = request(s, case)
        assert reply["ok"] is False, (case, reply)
        assert reply["errno"] > 0 and reply["error"], (case, reply)
    rng = random.Random(1234)
    for _ in range(300):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 600)))
        s.send(blob)
        assert json.loads(s.recv(1 << 20))["ok"] is False
    s.close()
    # Others are still served, and nothing leaked into the directory.
    status = fabric.status()
    assert status["qps"] == 0
    assert all(p["state"] == "ACTIVE" for d in status["devices"] for p in d["port_info"])


def test_a_client_that_vanishes_mid_request_does_not_hurt(fabric):
    for _ in range(50):
        s = connect(fabric)
        s.send(json.dumps({"op": "hello", "role": "provider"}).encode())
        s.close()
    assert fabric.status()["pid"] > 0


def _shared_daemon(tmp_name, users):
    """A daemon as root whose socket every user may open, as in kernel mode,
    with the given "users" setting. Returns (fabric, base dir)."""
    import tempfile
    from pathlib import Path
    from conftest import Fabric
    base = Path(tempfile.mkdtemp(prefix=tmp_name))  # pytest's tmp is root-only
    os.chmod(base, 0o755)
    config = base / "config.json"
    config.write_text(json.dumps({"users": users}))
    f = Fabric(base / "rt")
    f.ibemu("up", "--config", str(config))
    os.chmod(f.runtime_dir, 0o755)
    os.chmod(f.runtime_dir / "ibemud.sock", 0o666)
    return f, base


def _root_qp(fabric):
    """A session of root's that owns a QP on ibemu0; returns (socket, qpn)."""
    s = connect(fabric)
    assert request(s, {"op": "hello", "role": "provider", "pid": os.getpid()})["ok"]
    inbox = os.memfd_create("inbox")
    os.ftruncate(inbox, 4096)
    socket.send_fds(s, [json.dumps({"op": "register_inbox"}).encode()], [inbox])
    assert json.loads(s.recv(1 << 20))["ok"]
    os.close(inbox)
    reply = request(s, {"op": "create_qp", "device": 0})
    assert reply["ok"], reply
    return s, reply["qpn"]


def in_a_process_of_nobody(work):
    """What `work()` returns (as JSON) when it runs in a child process of
    user nobody."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.write(write, json.dumps(work()).encode())
        finally:
            os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 1 << 16):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(data)


def _as_nobody(fabric, requests):
    """The replies a process of user nobody gets to `requests`."""
    def ask():
        s = connect(fabric)
        return [request(s, r) for r in requests]
    return in_a_process_of_nobody(ask)


@pytest.mark.parametrize("users", ["isolated", "shared"])
def test_another_users_process_reaches_a_qp_only_when_the_daemon_shares(users):
    """A daemon that several users share (kernel mode) hands a process the
    inbox ring of another user's only with "users": "shared": with the ring
    it could read what others send there and write into it."""
    import shutil
    if os.geteuid() != 0:
        pytest.skip("needs root to play two users")
    f, base = _shared_daemon("ibemu-users-", users)
    try:
        s, qpn = _root_qp(f)
        lid = f.status()["devices"][0]["port_info"][0]["lid"]
        asks = [{"op": "hello", "role": "provider"},
                {"op": "resolve", "dlid": lid, "qpn": qpn, "want_fd": False},
                {"op": "resolve_qp", "device": 0, "qpn": qpn, "want_fd": False}]
        replies = _as_nobody(f, asks)
        assert replies[0]["ok"]
        for reply in replies[1:]:
            if users == "shared":
                assert reply["ok"], reply
            else:
                assert not reply["ok"] and reply["errno"] == errno.EACCES, reply
                assert "another user" in reply["error"]
        # root reaches everyone's, and the owner its own.
        assert request(s, asks[1])["ok"]
        s.close()
    finally:
        f.down()
        shutil.rmtree(base, ignore_errors=True)


def test_another_users_socket_is_named_as_such_not_as_a_missing_daemon(fabric):
    """A user who may not reach the socket is told it is another user's, not
    that no daemon runs (which `ibemu up` would then fail to fix)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to play two users")

    def as_nobody():
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)

    r = subprocess.run([fabric.ibemu_bin, "-r", str(fabric.runtime_dir), "status"],
                       capture_output=True, text=True, timeout=30, preexec_fn=as_nobody)
    assert r.returncode != 0, r.stdout
    assert "not yours to use (permission denied)" in r.stderr, r.stderr
    assert "not running" not in r.stderr, r.stderr


def test_privileged_rdma_cm_ports_are_roots_only():
    """As with the kernel's rdma_cm, binding a port below 1024 needs
    privilege: another user gets EACCES there and binds above it."""
    import shutil
    if os.geteuid() != 0:
        pytest.skip("needs root to play two users")
    f, base = _shared_daemon("ibemu-cm-ports-", "shared")
    try:
        bind = {"op": "cm_bind", "ps": 0x106, "ip": "0.0.0.0"}
        replies = _as_nobody(f, [{"op": "hello", "role": "provider"}, {**bind, "port": 80},
                                 {**bind, "port": 1023}, {**bind, "port": 18080}])
        for reply in replies[1:3]:
            assert not reply["ok"] and reply["errno"] == errno.EACCES, reply
        assert replies[3] == {"ok": True, "port": 18080}, replies[3]
        s = connect(f)  # root's session
        assert request(s, {**bind, "port": 80}) == {"ok": True, "port": 80}
        s.close()
    finally:
        f.down()
        shutil.rmtree(base, ignore_errors=True)
