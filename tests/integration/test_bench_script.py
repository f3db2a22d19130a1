"""`make bench`'s script (tests/bench/run_bench.py) with --quick: every
section runs, with the fewest iterations, so that a change that breaks the
script (its arguments, its set-up of fabrics and hosts, its parsing of
perftest) fails here rather than at the next `make bench`. Its figures are
not looked at: timings never pass or fail a test."""
import os
import subprocess

from conftest import BUILD, REPO


def test_every_section_of_the_bench_prints_figures():
    script = REPO / "tests" / "bench" / "run_bench.py"
    r = subprocess.run(["/usr/bin/python3", str(script), "--quick"],
                       env=dict(os.environ, IBEMU_BUILD=str(BUILD)), capture_output=True, text=True,
                       timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "failed" not in out and "Traceback" not in out, out
    for heading in ("ib_write_bw", "ib_write_lat", "idle process", "both ways", "all to all",
                    "contention"):
        assert heading in r.stdout, out
    # Two hosts need network namespaces (root); where they are unusable the
    # section says why.
    assert "two hosts" in r.stdout and ("raw UDP MB/s" in r.stdout or "skipped:" in r.stdout), out
