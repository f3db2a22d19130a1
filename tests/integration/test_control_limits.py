"""The control socket's limits: replies of any size arrive, no client can use
up the daemon's file descriptors, and at every limit a client is told why
(docs/security.md, "Limits")."""
import errno
import fcntl
import json
import os
import resource
import shutil
import socket
import subprocess
import time

import pytest

from pytest_ibemu.control import Control, ControlError
from test_control_socket import _shared_daemon, connect, in_a_process_of_nobody, request


def _ask(s, obj):
    """A request on a connection the daemon may have refused: it answers
    and closes before it reads, so the request may meet a closed socket
    while the answer waits to be read."""
    try:
        return request(s, obj)
    except (BrokenPipeError, ConnectionResetError):
        try:
            return json.loads(s.recv(1 << 20))
        except ConnectionResetError:  # reported once, ahead of the answer
            return json.loads(s.recv(1 << 20))


def _daemon_cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_status_larger_than_the_socket_buffer_arrives(fabric):
    """Thousands of rdma_cm reservations make `status` far larger than a
    socket record can be; it comes in a memfd, and every command that asks
    the daemon whether it runs still finds it."""
    s = Control(fabric.runtime_dir)
    bind = {"ps": 0x106, "ip": "0.0.0.0", "port": 0}
    for _ in range(4000):
        s.request("cm_bind", **bind)
    status = s.status()
    assert len(status["cm_ports"]) == 4000
    assert len(json.dumps(status)) > 256 * 1024
    for args in (["status"], ["status", "--json"], ["up"], ["run", "--", "true"],
                 ["top", "-n", "1"], ["topology"]):
        r = fabric.ibemu(*args, check=False, timeout=60)
        assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr)
    assert len(json.loads(fabric.ibemu("status", "--json").stdout)["cm_ports"]) == 4000
    s.close()


def test_a_connection_holds_a_bounded_number_of_rdma_cm_ports(fabric):
    s = Control(fabric.runtime_dir)
    bind = {"ps": 0x106, "ip": "0.0.0.0", "port": 0}
    for _ in range(4096):  # limits.cm_binds_per_session, the default
        s.request("cm_bind", **bind)
    with pytest.raises(ControlError) as refused:
        s.request("cm_bind", **bind)
    assert refused.value.errno == errno.EMFILE
    assert "limits.cm_binds_per_session" in str(refused.value)
    s.close()
    assert fabric.status()["cm_ports"] == []


def test_details_of_many_contexts_full_of_qps_arrive(fabric):
    """Eight contexts of 256 QPs each: `ibemu status` shows them all."""
    script = """
import sys
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.cq import CQ
from pyverbs.qp import QP, QPInitAttr, QPCap
keep = []
for i in range(8):
    ctx = Context(name=f"ibemu{i % 2}")
    pd, cq = PD(ctx), CQ(ctx, 16)
    cap = QPCap(max_send_wr=1, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
    keep += [ctx, pd, cq] + [QP(pd, QPInitAttr(qp_type=2, scq=cq, rcq=cq, cap=cap))
                             for _ in range(256)]
print("ready", flush=True)
sys.stdin.read()
"""
    proc = fabric.spawn(["/usr/bin/python3", "-c", script], stdin=subprocess.PIPE)
    assert proc.stdout.readline().strip() == "ready"
    try:
        r = fabric.ibemu("status", "--json", timeout=60)
        procs = [p for p in json.loads(r.stdout)["processes"] if p.get("context_details")]
        contexts = [c for p in procs for c in p["context_details"]]
        assert len(contexts) == 8
        assert all(c["answered"] and c["qps_total"] == 256 for c in contexts), contexts[0]
        assert sum(len(c["qps"]) for c in contexts) == 8 * 256
        assert fabric.ibemu("status", timeout=60).returncode == 0
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_an_empty_record_is_a_malformed_request_not_the_end(fabric):
    s = connect(fabric)
    s.send(b"")
    reply = json.loads(s.recv(1 << 20))
    assert reply["ok"] is False and reply["errno"] == errno.EPROTO, reply
    assert request(s, {"op": "ping"})["ok"]
    s.close()


def _sealed_memfd(size):
    fd = os.memfd_create("page", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    return fd


def _fabric_with(tmp_path, config, preexec_fn=None):
    """A fabric started by `ibemu up --config` with `config` (and, with
    `preexec_fn`, under what that sets up, inherited by the daemon)."""
    from conftest import Fabric
    f = Fabric(tmp_path / "rt")
    f.runtime_dir.mkdir(mode=0o700, parents=True)
    f.config_path().write_text(json.dumps(config))
    r = subprocess.run([f.ibemu_bin, "-r", str(f.runtime_dir), "up", "--config",
                        str(f.config_path())], capture_output=True, text=True, timeout=90,
                       preexec_fn=preexec_fn)
    assert r.returncode == 0, r.stdout + r.stderr
    return f


def test_contexts_cost_the_daemon_no_descriptors_and_are_limited(tmp_path):
    f = _fabric_with(tmp_path, {"limits": {"contexts_per_session": 64}})
    try:
        pid = f.status()["pid"]
        before = _open_fds(pid)
        s = connect(f)
        assert request(s, {"op": "hello", "role": "provider"})["ok"]
        page = _sealed_memfd(1 << 20)
        for _ in range(64):
            socket.send_fds(s, [json.dumps({"op": "open_context", "device": 0}).encode()], [page])
            assert json.loads(s.recv(1 << 20))["ok"]
        assert _open_fds(pid) <= before + 2, os.listdir(f"/proc/{pid}/fd")
        socket.send_fds(s, [json.dumps({"op": "open_context", "device": 0}).encode()], [page])
        reply = json.loads(s.recv(1 << 20))
        assert reply["errno"] == errno.EMFILE and "contexts_per_session" in reply["error"], reply
        os.close(page)
        s.close()
    finally:
        f.ibemu("down", check=False)


def test_a_user_has_a_bounded_number_of_connections():
    """On a daemon every user may reach, one user cannot take all of its
    connections: past limits.sessions_per_user they are refused with EMFILE,
    and root, and other users, are still served."""
    if os.geteuid() != 0:
        pytest.skip("needs root to play two users")
    f, base = _shared_daemon("ibemu-sessions-", "isolated")
    try:
        f.ibemu("down")
        config = json.loads((base / "config.json").read_text())
        config["limits"] = {"sessions_per_user": 4}
        (base / "config.json").write_text(json.dumps(config))
        f.ibemu("up", "--config", str(base / "config.json"))
        os.chmod(f.runtime_dir, 0o755)
        os.chmod(f.runtime_dir / "ibemud.sock", 0o666)

        def connect_five_times():
            held = [connect(f) for _ in range(4)]
            replies = [request(s, {"op": "ping"}) for s in held]
            replies.append(_ask(connect(f), {"op": "ping"}))
            held.pop().close()
            time.sleep(0.2)
            replies.append(request(connect(f), {"op": "ping"}))
            return replies

        replies = in_a_process_of_nobody(connect_five_times)
        assert all(r["ok"] for r in replies[:4]), replies
        assert replies[4].get("errno") == errno.EMFILE, replies[4]
        assert "limits.sessions_per_user" in replies[4]["error"]
        assert replies[5]["ok"], replies[5]
        roots = [connect(f) for _ in range(8)]
        assert all(request(s, {"op": "ping"})["ok"] for s in roots)
    finally:
        f.down()
        shutil.rmtree(base, ignore_errors=True)


def _limit_descriptors(soft, hard):
    def apply():
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return apply


def test_at_its_descriptor_limit_the_daemon_refuses_and_never_spins(tmp_path):
    """Under `ulimit -n 256`, connections past what the daemon's descriptors
    allow are told so (EMFILE) instead of hanging, the daemon does not spin,
    and once clients leave everyone is served again. When its descriptors
    run out all the same (here: its limit lowered under it), it refuses with
    the one it keeps in reserve, again without spinning."""
    f = _fabric_with(tmp_path, {}, preexec_fn=_limit_descriptors(256, 256))
    try:
        pid = f.status()["pid"]
        held, refusal = [], None
        for _ in range(300):
            s = connect(f)
            reply = _ask(s, {"op": "ping"})
            if not reply["ok"]:
                refusal = reply
                break
            held.append(s)
        assert refusal and refusal["errno"] == errno.EMFILE, refusal
        assert "ulimit -n" in refusal["error"], refusal
        assert 50 < len(held) < 128, len(held)
        r = f.ibemu("status", check=False)
        assert r.returncode != 0 and "refused the connection" in r.stderr, r.stderr

        cpu = _daemon_cpu_seconds(pid)
        waiting = [socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in range(20)]
        for s in waiting:
            s.connect(str(f.runtime_dir / "ibemud.sock"))
        time.sleep(1.0)
        assert _daemon_cpu_seconds(pid) - cpu < 0.3

        for s in held + waiting:
            s.close()
        time.sleep(0.3)
        assert f.ibemu("status").returncode == 0

        # Out of descriptors for another reason: the limit shrinks under it.
        in_use = _open_fds(pid)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (in_use, 256))
        cpu = _daemon_cpu_seconds(pid)
        s = connect(f)
        reply = _ask(s, {"op": "ping"})
        assert reply["errno"] == errno.EMFILE and "no file descriptors" in reply["error"], reply
        time.sleep(1.0)
        assert _daemon_cpu_seconds(pid) - cpu < 0.3
        s.close()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (256, 256))
        assert f.ibemu("status").returncode == 0
    finally:
        f.ibemu("down", check=False)
