"""ibemud's control socket takes bad input from any local process: it answers
with an error and keeps serving everyone else."""
import json
import random
import socket


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
