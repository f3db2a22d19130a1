#!/usr/bin/python3
"""Runs rdma-core's Python test suite as its run_tests.py does and prints
one `suite-*: value` line per figure: how many tests passed, were skipped
and failed, and which failures were not expected.

    suite_run.py TESTS_DIR EXPECTED_FAILURES [run_tests.py's arguments]

TESTS_DIR holds the suite (run_tests.py, __init__.py, args_parser.py and the
test_*.py modules, uncompressed). EXPECTED_FAILURES lists test ids (as
unittest prints them, e.g. tests.test_shared_pd.SharedPDTestCase.test_imported_rc_ex_rdma_write),
one per line, each followed by the reason; `#` starts a comment. Exits 1
if a test failed that is not listed, or the suite did not run.
"""
import os
import sys
import unittest
from importlib.machinery import SourceFileLoader


def expected_failures(path):
    ids = set()
    with open(path) as listing:
        for line in listing:
            line = line.split("#", 1)[0].strip()
            if line:
                ids.add(line.split()[0])
    return ids


def main():
    tests_dir, expected_path = sys.argv[1], sys.argv[2]
    sys.argv = [os.path.join(tests_dir, "run_tests.py")] + sys.argv[3:]
    sys.path.insert(0, tests_dir)
    from args_parser import parser  # the suite's own, as run_tests.py uses it

    parser.parse_args()
    tests = SourceFileLoader("tests", os.path.join(tests_dir, "__init__.py")).load_module()
    program = unittest.main(module=tests, exit=False)
    result = program.result
    failed = [test.id() for test, _ in result.failures + result.errors]
    skipped = len(result.skipped)
    passed = result.testsRun - len(failed) - skipped - len(result.expectedFailures)
    unexpected = sorted(set(failed) - expected_failures(expected_path))
    sys.stdout.flush()
    print(f"suite-passed: {passed}")
    print(f"suite-skipped: {skipped}")
    print(f"suite-failed: {len(failed)}")
    for test_id in sorted(failed):
        print(f"suite-failure: {test_id}{'' if test_id in unexpected else ' (expected)'}")
    if result.testsRun == 0:
        print("suite-error: no test ran")
        return 1
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
