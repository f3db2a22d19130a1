"""IBEMU_TRACE: rdma-core's ibv_rc_pingpong with its verbs and packets traced,
one file per process (IBEMU_TRACE_FILE with %p), and nothing at all when the
trace is off."""
import re

from conftest import free_tcp_port, run_pair

LINE = re.compile(r"^ibemu (verbs|packets) pid (\d+): (.*)$")


def pingpong(fabric, env, iters=5):
    port = free_tcp_port()
    # 512 bytes: one packet each at pingpong's path MTU (1024), so each
    # message is one SEND_ONLY with one PSN.
    base = ["env", *env, "ibv_rc_pingpong", "-p", str(port), "-n", str(iters), "-s", "512"]
    server, client = run_pair(fabric, base + ["-d", "ibemu0"],
                              base + ["-d", "ibemu1", "localhost"], port)
    assert server[0] == 0, f"server failed:\n{server[1]}\n{fabric.logs()}"
    assert client[0] == 0, f"client failed:\n{client[1]}\n{fabric.logs()}"
    return server[1], client[1]


def read_trace(path):
    """(verb lines, packet lines) of one process's trace file; every line
    carries the pid the file is named after."""
    pid = path.name.rsplit(".", 1)[1]
    verbs, packets = [], []
    for line in path.read_text().splitlines():
        m = LINE.match(line)
        assert m, f"not a trace line: {line!r}"
        assert m.group(2) == pid, line
        (verbs if m.group(1) == "verbs" else packets).append(m.group(3))
    return verbs, packets


def one(pattern, lines):
    found = [m for m in (re.search(pattern, line) for line in lines) if m]
    assert found, f"no line matches {pattern!r} in:\n" + "\n".join(lines)
    return found[0]


def psns(packets, direction, opcode):
    return [int(m.group(1), 16) for m in
            (re.match(rf"{direction} RC_{opcode} .*psn=0x([0-9a-f]+)", p) for p in packets) if m]


def test_pingpong_trace_shows_verbs_and_packets(fabric, tmp_path):
    pingpong(fabric, ["IBEMU_TRACE=verbs,packets", f"IBEMU_TRACE_FILE={tmp_path}/trace.%p"])
    files = sorted(tmp_path.glob("trace.*"))
    assert len(files) == 2, files
    sides = [read_trace(f) for f in files]
    for verbs, packets in sides:
        one(r"^ibv_open_device\(ibemu[01]\) = context ", verbs)
        one(r"^ibv_reg_mr\(pd \d+, addr 0x[0-9a-f]+, length 512, access LOCAL_WRITE\) = mr lkey",
            verbs)
        one(r"^ibv_create_qp(_ex)?\(RC .*\) = qp 0x[0-9a-f]+ cap", verbs)
        one(r"^ibv_post_recv\(qp 0x[0-9a-f]+, wr_id \d+ sge \[0x[0-9a-f]+\+512 lkey 0x[0-9a-f]+\]"
            r"\) = 0$", verbs)
        one(r"^ibv_post_send\(qp 0x[0-9a-f]+, wr_id \d+ SEND signaled sge \[.*\]\) = 0$", verbs)
        one(r"^ibv_poll_cq\(cq 0x[0-9a-f]+, 2\) = [12] \{wr_id \d+ status success (SEND|RECV) ",
            verbs)
        # Empty polls are not traced: every poll line returned something.
        for v in verbs:
            assert not re.match(r"ibv_poll_cq\(.*\) = 0", v), v
        one(r"^ibv_destroy_qp\(qp 0x[0-9a-f]+\) = 0$", verbs)
        one(r"^ibv_close_device\(ibemu[01]\)$", verbs)

        rtr = one(r"^ibv_modify_qp\(qp (0x[0-9a-f]+), state RTR .*rq_psn (0x[0-9a-f]+) .*"
                  r"dest_qp (0x[0-9a-f]+)\) = 0$", verbs)
        rts = one(r"^ibv_modify_qp\(qp 0x[0-9a-f]+, state RTS .*sq_psn (0x[0-9a-f]+)\b.*\) = 0$",
                  verbs)
        my_qp, rq_psn, dest_qp = (int(x, 16) for x in rtr.groups())
        sq_psn = int(rts.group(1), 16)

        sent, acked = psns(packets, "tx", "SEND_ONLY"), psns(packets, "rx", "ACKNOWLEDGE")
        received = psns(packets, "rx", "SEND_ONLY")
        assert sent and received and acked, "\n".join(packets)
        # Requests carry the PSNs ibv_modify_qp set: ours from sq_psn on, the
        # peer's from our rq_psn on; ACKs answer our requests' PSNs.
        assert sent[0] == sq_psn and received[0] == rq_psn, (sq_psn, rq_psn, packets)
        assert set(acked) <= set(sent), (acked, sent)
        one(rf"^tx RC_SEND_ONLY .*qpn=0x{dest_qp:06x} ", packets)
        one(rf"^rx RC_SEND_ONLY .*qpn=0x{my_qp:06x} ", packets)
        one(r"^rx RC_ACKNOWLEDGE .* aeth=ACK credits=", packets)

    # What one side sent is what the other received, PSN for PSN.
    (_, a), (_, b) = sides
    assert psns(a, "tx", "SEND_ONLY") == psns(b, "rx", "SEND_ONLY")
    assert psns(b, "tx", "SEND_ONLY") == psns(a, "rx", "SEND_ONLY")


def test_verbs_alone_leaves_packets_out(fabric, tmp_path):
    pingpong(fabric, ["IBEMU_TRACE=verbs", f"IBEMU_TRACE_FILE={tmp_path}/trace.%p"], iters=2)
    files = sorted(tmp_path.glob("trace.*"))
    assert len(files) == 2, files
    for f in files:
        verbs, packets = read_trace(f)
        assert verbs and not packets


def test_trace_to_stderr_without_a_file(fabric):
    server, client = pingpong(fabric, ["IBEMU_TRACE=packets"], iters=2)
    for out in (server, client):
        assert re.search(r"^ibemu packets pid \d+: tx RC_SEND_ONLY ", out, re.M), out
        assert "ibemu verbs" not in out


def test_no_trace_when_unset(fabric, tmp_path):
    server, client = pingpong(fabric, ["-u", "IBEMU_TRACE", f"IBEMU_TRACE_FILE={tmp_path}/t.%p"],
                              iters=2)
    assert not list(tmp_path.iterdir())
    assert "ibemu verbs" not in server + client and "ibemu packets" not in server + client
