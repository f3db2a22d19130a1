"""The control ops the user-space rdma_cm relies on, spoken directly on the
control socket: the ports' addresses, address resolution and the host's
rdma_cm port space (docs/control-protocol.md)."""
import errno
import time

from test_control_socket import connect, request

TCP, UDP = 0x106, 0x111


def test_ip_addresses_lists_every_port_with_its_gid(fabric):
    s = connect(fabric)
    reply = request(s, {"op": "ip_addresses"})
    assert reply["ok"], reply
    ports = {(a["device"], a["port"]): a for a in reply["addresses"]}
    assert sorted(ports) == [("ibemu0", 1), ("ibemu0", 2), ("ibemu1", 1), ("ibemu1", 2)]
    assert [a["ipv4"] for a in reply["addresses"]] == [f"10.73.0.{n}" for n in range(1, 5)]
    status = fabric.status()
    for dev in status["devices"]:
        for p in dev["port_info"]:
            a = ports[(dev["name"], p["port"])]
            assert a["ipv4_prefix"] == 16 and "ipv6" not in a
            assert a["lid"] == p["lid"] and a["state"] == "ACTIVE"
            # GID index 0: the subnet prefix, then the port GUID.
            assert a["gid"].startswith("fe80000000000000"), a
            assert int(a["gid"][16:], 16) == int(p["port_guid"], 16), a


def test_resolve_ip_finds_local_ports_in_any_textual_form(fabric):
    s = connect(fabric)
    gids = {a["ipv4"]: a["gid"] for a in request(s, {"op": "ip_addresses"})["addresses"]}
    reply = request(s, {"op": "resolve_ip", "ip": "10.73.0.3"})
    assert reply == {"ok": True, "gid": gids["10.73.0.3"], "local": True, "device": "ibemu1",
                     "port": 1}
    for ip in ("10.73.0.200", "fd00::1", "not an address"):
        reply = request(s, {"op": "resolve_ip", "ip": ip})
        assert reply["ok"] is False and reply["errno"] == errno.EHOSTUNREACH, (ip, reply)


def test_cm_bind_conflicts_like_the_kernels_and_goes_with_the_session(fabric):
    a, b = connect(fabric), connect(fabric)
    assert request(a, {"op": "cm_bind", "ps": TCP, "ip": "10.73.0.1", "port": 7600}) == {
        "ok": True, "port": 7600}
    # Another address, or another port space: no conflict.
    assert request(b, {"op": "cm_bind", "ps": TCP, "ip": "10.73.0.2", "port": 7600})["ok"]
    assert request(b, {"op": "cm_bind", "ps": UDP, "ip": "0.0.0.0", "port": 7600})["ok"]
    for ip in ("10.73.0.1", "0.0.0.0", "::"):
        reply = request(b, {"op": "cm_bind", "ps": TCP, "ip": ip, "port": 7600})
        assert reply["ok"] is False and reply["errno"] == errno.EADDRINUSE, (ip, reply)
    bad = [{"op": "cm_bind", "ps": 7, "ip": "0.0.0.0", "port": 1},
           {"op": "cm_bind", "ps": TCP, "ip": "nowhere", "port": 1},
           {"op": "cm_bind", "ps": TCP, "ip": "0.0.0.0", "port": 70000},
           {"op": "cm_unbind", "ps": TCP, "ip": "10.73.0.1", "port": 7600}]  # a's, not b's
    for req in bad:
        reply = request(b, req)
        assert reply["ok"] is False and reply["errno"] == errno.EINVAL, (req, reply)

    ephemeral = request(b, {"op": "cm_bind", "ps": TCP, "ip": "::", "port": 0})
    assert ephemeral["ok"] and 32768 <= ephemeral["port"] <= 60999, ephemeral
    held = {(x["ps"], x["ip"], x["port"]): x["listening"] for x in fabric.status()["cm_ports"]}
    assert (TCP, "10.73.0.1", 7600) in held and (TCP, "::", ephemeral["port"]) in held
    assert not any(held.values()), held  # bound, nobody listens
    assert request(b, {"op": "cm_unbind", "ps": TCP, "ip": "::", "port": ephemeral["port"]})["ok"]

    assert request(b, {"op": "cm_unbind", "ps": TCP, "ip": "10.73.0.2", "port": 7600})["ok"]
    a.close()  # the daemon releases what the session held
    deadline = time.time() + 10
    while not request(b, {"op": "cm_bind", "ps": TCP, "ip": "0.0.0.0", "port": 7600})["ok"]:
        assert time.time() < deadline, fabric.status()["cm_ports"]
        time.sleep(0.05)
    b.close()
