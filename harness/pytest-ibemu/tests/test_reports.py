"""What a failed test leaves behind: report sections, and with --ibemu-keep
the fabric's directory."""
import re
import shutil
from pathlib import Path

FAILING = '''
def test_fails(ibemu_fabric):
    with ibemu_fabric.capture():
        ibemu_fabric.pingpong("ibv_rc_pingpong", ["-n", "2", "-s", "64"])
    open("root.txt", "w").write(str(ibemu_fabric.root))
    assert False, "deliberately"
'''


def test_failure_report_sections(run_inner):
    r = run_inner(FAILING)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines([
        "*- ibemu fabric ibemud.log -*",
        "*- ibemu fabric ibemu-sm.log -*",
        "*- ibemu fabric status -*",
        "*port 1  ACTIVE*",
        "*- ibemu fabric capture -*",
        "*RC_SEND_ONLY QP=*",
    ])


def test_keep_keeps_the_directory(run_inner, pytester):
    r = run_inner(FAILING, "--ibemu-keep")
    r.assert_outcomes(failed=1)
    root = Path((pytester.path / "root.txt").read_text())
    try:
        r.stdout.fnmatch_lines(["*ibemu: kept directories of failed tests*",
                                f"*test_fails: {root}"])
        assert (root / "rt" / "ibemud.log").exists()
        assert (root / "capture-1.pcap").exists()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_without_keep_the_directory_goes(run_inner, pytester):
    run_inner(FAILING).assert_outcomes(failed=1)
    assert not Path((pytester.path / "root.txt").read_text()).exists()


def test_passing_test_has_no_sections(run_inner):
    r = run_inner("def test_ok(ibemu_fabric):\n    ibemu_fabric.assert_no_port_errors()\n",
                  "--ibemu-keep")
    r.assert_outcomes(passed=1)
    assert "kept directories" not in r.stdout.str()


def test_help_lists_the_options(pytester, request):
    plugin = [] if request.config.pluginmanager.get_plugin("ibemu") else [
        "-p", "pytest_ibemu.plugin"]
    r = pytester.runpytest_subprocess(*plugin, "--help")
    r.stdout.fnmatch_lines(["*--ibemu-build=DIR*", "*--ibemu-keep*"])
