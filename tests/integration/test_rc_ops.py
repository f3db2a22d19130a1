"""pyverbs cases for every RC opcode, error status and QP transition, run
under the emulated environment (verbs_cases/rc_ops_cases.py)."""
import re
from pathlib import Path

HERE = Path(__file__).parent


def test_rc_opcodes_errors_and_transitions(fabric):
    r = fabric.run(["/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    str(HERE / "verbs_cases" / "rc_ops_cases.py")], timeout=300)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert re.search(r"\b2[0-9] passed\b", r.stdout), r.stdout


def test_memory_windows_bind_invalidate_and_every_bind_error(fabric):
    r = fabric.run(["/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    str(HERE / "verbs_cases" / "memory_window_cases.py")], timeout=120)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert re.search(r"\b15 passed\b", r.stdout), r.stdout
