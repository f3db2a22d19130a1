"""pyverbs cases for every RC opcode, error status and QP transition, run
under the emulated environment (verbs_cases/rc_ops_cases.py)."""

from conftest import run_verbs_cases


def test_rc_opcodes_errors_and_transitions(fabric):
    run_verbs_cases(fabric, "rc_ops_cases.py", "2[0-9]", timeout=300)


def test_memory_windows_bind_invalidate_and_every_bind_error(fabric):
    run_verbs_cases(fabric, "memory_window_cases.py", "15", timeout=120)
