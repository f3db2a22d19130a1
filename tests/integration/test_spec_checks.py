"""IBEMU_CHECK=1 (docs/spec-checks.md): each small program of
verbs_cases/spec_check_programs.py makes one mistake and gets its warning,
on stderr, once; without IBEMU_CHECK it gets none. A correct program and
Debian's ibv_rc_pingpong get no warning with the checks on."""
import json
import re
from pathlib import Path

import pytest

from conftest import VERBS_CASES, Fabric, free_tcp_port, run_pair

PROGRAMS = str(VERBS_CASES / "spec_check_programs.py")

# Program, then the words its warning must hold.
CASES = [
    ("post_send_in_init", "ibv_post_send on QP 0x{hex} in state INIT failed (EINVAL): IBA 10.3.1"),
    ("post_recv_in_reset", "ibv_post_recv on QP 0x{hex} in state RESET failed (EINVAL)"),
    ("rnr", "QP 0x{hex} answered the request with PSN 0x0 with an RNR NAK"),
    ("cq_overrun", "entries were all unpolled: IBA 11.4.2.1"),
    ("dereg_in_flight", "ibv_dereg_mr of the region with lkey 0x{hex} while 1 posted WR(s)"),
    ("error_completion_ignored", "QP 0x{hex} is destroyed with 1 error completion(s)"),
    ("post_to_error_qp", "ibv_post_send on QP 0x{hex} in state ERR"),
    ("psn_mismatch", "QP 0x{hex} got its first request with PSN 0x9000, but its rq_psn is 0x100"),
    ("unsignaled_run", "QP 0x{hex} has had 16 unsignaled WRs posted in a row"),
]


def run_program(fabric, name, check):
    setting = "IBEMU_CHECK=1" if check else "IBEMU_CHECK=0"
    r = fabric.run(["env", setting, "/usr/bin/python3", PROGRAMS, name], timeout=60)
    assert r.returncode == 0 and "done" in r.stdout, r.stdout + r.stderr + fabric.logs()
    return [line for line in r.stderr.splitlines() if line.startswith("ibemu check: ")]


def as_pattern(words):
    """The warning's words as a regular expression: QP numbers and keys
    differ from run to run, so {hex} matches any hex digits."""
    return re.escape(words).replace(re.escape("{hex}"), "[0-9a-f]+")


@pytest.mark.parametrize("name,words", CASES, ids=[c[0] for c in CASES])
def test_mistake_is_warned_once_with_the_checks_on_only(fabric, name, words):
    warnings = run_program(fabric, name, check=True)
    assert len(warnings) == 1, warnings
    assert re.search(as_pattern(words), warnings[0]), warnings
    assert "Hint: " in warnings[0], warnings
    assert run_program(fabric, name, check=False) == []


def test_correct_program_gets_no_warning(fabric):
    assert run_program(fabric, "correct", check=True) == []


def test_moving_the_qp_to_error_itself_then_posting_is_no_mistake(fabric):
    assert run_program(fabric, "drain_after_moving_to_error", check=True) == []


def test_rc_pingpong_gets_no_warning(fabric):
    port = free_tcp_port()
    base = ["env", "IBEMU_CHECK=1", "ibv_rc_pingpong", "-p", str(port), "-n", "200"]
    for rc, out in run_pair(fabric, base + ["-d", "ibemu0"], base + ["-d", "ibemu1", "localhost"],
                            port):
        assert rc == 0 and "iters in" in out, out
        assert "ibemu check:" not in out, out


def test_path_mtu_above_the_ports_active_mtu(tmp_path):
    config = tmp_path / "mtu2048.json"
    config.write_text(json.dumps({"max_mtu": 2048}))
    f = Fabric(tmp_path / "rt")
    f.ibemu("up", "--config", str(config))
    try:
        warnings = run_program(f, "path_mtu_above_active", check=True)
        assert len(warnings) == 1, warnings
        assert "sets path_mtu 4096 above port 1's active_mtu 2048" in warnings[0], warnings
        assert run_program(f, "path_mtu_above_active", check=False) == []
    finally:
        f.down(stop_programs=True)
