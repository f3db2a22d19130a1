"""The extended verbs API: ibv_create_qp_ex with the ibv_wr_* send API,
ibv_create_cq_ex with its polling API, ibv_query_device_ex with the struct
sizes of older and newer programs; pyverbs cases, a C probe, and rdma-core's
ibv_rc_pingpong with -N (new send API) and -t (timestamps, not offered)."""

import pytest

from conftest import BUILD, free_tcp_port, run_pair, run_verbs_cases


def test_pyverbs_qp_ex_and_cq_ex(fabric):
    run_verbs_cases(fabric, "extended_api_cases.py", "8", timeout=180)


def test_c_probe_query_device_ex_sizes_and_classic_poll_on_cq_ex(fabric):
    r = fabric.run([str(BUILD / "bin" / "ext_api_probe")], timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr + fabric.logs()


@pytest.mark.parametrize("size", [8, 100, 4096, 65536])
def test_rc_pingpong_new_send_api(fabric, size):
    """-N posts with ibv_wr_start/ibv_wr_send/ibv_wr_set_sge/ibv_wr_complete
    (small sizes carry IBV_SEND_INLINE in wr_flags, which the API ignores)."""
    port = free_tcp_port()
    base = ["ibv_rc_pingpong", "-N", "-p", str(port), "-s", str(size), "-n", "200", "-c"]
    server, client = run_pair(fabric, base + ["-d", "ibemu0"],
                              base + ["-d", "ibemu1", "localhost"], port)
    assert server[0] == 0, f"server failed:\n{server[1]}\n{fabric.logs()}"
    assert client[0] == 0, f"client failed:\n{client[1]}\n{fabric.logs()}"
    assert "200 iters in" in server[1] and "200 iters in" in client[1]


def test_rc_pingpong_timestamps_fail_cleanly(fabric):
    """-t needs completion timestamps, which the device does not offer
    (completion_timestamp_mask 0): both sides stop with rdma-core's message
    before connecting, and nothing is left behind in the daemon."""
    for dev, extra in (("ibemu0", []), ("ibemu1", ["localhost"])):
        port = free_tcp_port()
        r = fabric.run(["ibv_rc_pingpong", "-t", "-d", dev, "-p", str(port), *extra], timeout=30)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "isn't completion timestamp capable" in r.stderr, r.stdout + r.stderr
    assert fabric.status()["qps"] == 0
