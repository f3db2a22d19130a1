"""The soak test's short form (tests/soak): two pairs of processes with four
RC QPs, a UD QP and a DC initiator and target each, random SEND/WRITE/READ/
atomic traffic (SEND and WRITE-then-READ over DC) for 10 s through lossy,
duplicating, reordering links. Nothing may be lost, duplicated or
corrupted, no QP may stall, and the daemon must end as it began (no QPs
left, memory flat)."""
import json
import subprocess
import sys
from pathlib import Path

from conftest import BUILD

RUN_SOAK = Path(__file__).resolve().parents[1] / "soak" / "run_soak.py"


def test_soak_short_form_with_faults():
    r = subprocess.run([sys.executable, str(RUN_SOAK), "--build", str(BUILD), "--pairs", "2",
                        "--qps", "4", "--seconds", "10"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads(r.stdout.splitlines()[0])
    assert summary["failures"] == []
    assert summary["sends"] and summary["writes"] and summary["reads"] and summary["atomics"]
    assert summary["dc_sends"] and summary["dc_reads"]  # DC ran, through ibemu's libmlx5
    assert summary["packets_lost_to_faults"] > 0  # the faults were on
