"""`ibemu status` and `ibemu top` show what lives in the programs: each
context's QPs with their state and PSNs, its CQs and memory regions. Checked
against rdma-core's ibv_rc_pingpong, whose QP states and PSNs are known at
each step: waiting for its client (INIT, its receives posted), running (RTS,
PSNs advanced by as many messages each way, give or take the one in flight), and gone once it exits."""
import json
import os
import re
import signal
import time

from conftest import free_tcp_port, spawn_listening

RX_DEPTH = 500  # ibv_rc_pingpong's default receive depth, posted before it connects


def status(fabric):
    return json.loads(fabric.ibemu("status", "--json").stdout)


def contexts_of(st, pid):
    for p in st["processes"]:
        if p["pid"] == pid:
            return p.get("context_details", [])
    return []


def qps_of(st, pid):
    return [q for c in contexts_of(st, pid) for q in c.get("qps", [])]


def wait_for(what, predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def pingpong_cmd(port, device, *extra):
    # Line-buffered, so that its address lines can be read while it runs.
    return ["stdbuf", "-oL", "ibv_rc_pingpong", "-p", str(port), "-d", device, *extra]


ADDRESS = re.compile(r"(local|remote) address:\s+LID (0x[0-9a-f]+), QPN (0x[0-9a-f]+), "
                     r"PSN (0x[0-9a-f]+)")


def read_addresses(proc):
    """{'local': (lid, qpn, psn), 'remote': ...} from a pingpong's output."""
    found = {}
    while len(found) < 2:
        line = proc.stdout.readline()
        assert line, "the pingpong ended before printing its addresses"
        m = ADDRESS.search(line)
        if m:
            found[m.group(1)] = tuple(int(g, 16) for g in m.groups()[1:])
    return found


def test_waiting_server_shows_its_qp_in_init_with_receives_posted(fabric):
    port = free_tcp_port()
    server = spawn_listening(fabric, pingpong_cmd(port, "ibemu0"), port)
    try:
        st = status(fabric)
        ctxs = contexts_of(st, server.pid)
        assert [c["device"] for c in ctxs] == ["ibemu0"] and ctxs[0]["answered"], st
        qps = qps_of(st, server.pid)
        assert len(qps) == 1, qps
        qp = qps[0]
        assert (qp["type"], qp["state"], qp["port"]) == ("RC", "INIT", 1)
        assert qp["recv_wrs"] == RX_DEPTH and qp["send_wrs"] == 0
        assert qp["send_cq"] == qp["recv_cq"] == ctxs[0]["cqs"][0]["cqn"]
        assert ctxs[0]["cqs"][0]["pending"] == 0
        assert ctxs[0]["mrs_total"] == 1 and ctxs[0]["mrs"][0]["length"] == 4096

        text = fabric.ibemu("status").stdout
        assert re.search(rf"pid {server.pid}\s+contexts 1\s+QPs 1", text), text
        assert re.search(rf"{qp['qpn']:#x}\s+RC\s+INIT\s+1\s", text), text
    finally:
        server.kill()
        server.wait()


def test_running_pingpong_shows_rts_and_psns_advanced_alike(fabric):
    port = free_tcp_port()
    server = spawn_listening(fabric, pingpong_cmd(port, "ibemu0", "-n", "100000"), port)
    client = fabric.spawn(pingpong_cmd(port, "ibemu1", "-n", "100000", "localhost"))
    try:
        addr = read_addresses(server)
        _, my_qpn, my_psn = addr["local"]
        peer_lid, peer_qpn, peer_psn = addr["remote"]

        def advanced():
            qps = qps_of(status(fabric), server.pid)
            return qps and qps[0]["state"] == "RTS" and qps[0]["sq_psn"] != my_psn and qps[0]
        wait_for("the server's QP to send", advanced)
        # With the client stopped, the server's QP holds still: it has sent
        # one reply for every message it received, but the last one, which
        # ibv_rc_pingpong sends only once its previous send completed (the
        # client's ACK for it may still be on the way when it stopped).
        os.kill(client.pid, signal.SIGSTOP)
        time.sleep(0.1)
        st = status(fabric)
        (qp,) = qps_of(st, server.pid)
        assert qp["qpn"] == my_qpn
        assert (qp["state"], qp["dest_qpn"], qp["dlid"]) == ("RTS", peer_qpn, peer_lid)
        sent = (qp["sq_psn"] - my_psn) % (1 << 24)
        received = (qp["rq_psn"] - peer_psn) % (1 << 24)
        assert sent > 0 and received - sent in (0, 1), qp
        # The stopped client cannot answer: status says so instead of waiting.
        (client_ctx,) = contexts_of(st, client.pid)
        assert client_ctx["answered"] is False
    finally:
        for p in (client, server):
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            p.wait()


def test_completed_pingpong_leaves_no_qps(fabric):
    port = free_tcp_port()
    server = spawn_listening(fabric, pingpong_cmd(port, "ibemu0", "-n", "5"), port)
    client = fabric.spawn(pingpong_cmd(port, "ibemu1", "-n", "5", "localhost"))
    assert client.wait(60) == 0 and server.wait(60) == 0
    wait_for("the pingpong's sessions to close",
             lambda: not any(p["pid"] in (server.pid, client.pid)
                             for p in status(fabric)["processes"]))
    fabric.assert_qps_clean(idle=True)


def test_top_shows_frames_with_ports_and_qp_states(fabric):
    port = free_tcp_port()
    server = spawn_listening(fabric, pingpong_cmd(port, "ibemu0"), port)
    try:
        out = fabric.ibemu("top", "-n", "2", "--interval", "0.2").stdout
    finally:
        server.kill()
        server.wait()
    frames = out.split("ibemu top")[1:]
    assert len(frames) == 2, out
    assert "\x1b[" not in out  # not a terminal: frames follow each other
    assert re.search(r"^ibemu0:1\s+ACTIVE\s+\d+\s+-\s+-", frames[0], re.M), out  # no rate yet
    assert re.search(r"^ibemu0:1\s+ACTIVE\s+\d+\s+\d+\.\d\s+\d+\.\d", frames[1], re.M), out
    assert re.search(rf"^{server.pid}\s+1\s+1\s+INIT 1$", out, re.M), out


def test_top_once_is_one_frame(fabric):
    out = fabric.ibemu("top", "--once").stdout
    assert out.count("ibemu top") == 1
