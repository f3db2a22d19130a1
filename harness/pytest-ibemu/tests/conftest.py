"""Helpers for the plugin's own tests: each writes a small test file and runs
pytest on it in a subprocess, with the plugin, against a real fabric."""
import os
from pathlib import Path

import pytest

import pytest_ibemu

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def importable_plugin(monkeypatch):
    """The inner pytest runs in another directory: a relative PYTHONPATH
    that found the plugin here would not find it there."""
    source = str(Path(pytest_ibemu.__file__).resolve().parents[1])
    rest = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", source + (os.pathsep + rest if rest else ""))


@pytest.fixture
def run_inner(pytester, request):
    """Runs pytest on `source` (a test module's text) and returns the result.
    The plugin is named with -p only where its entry point is not installed,
    since registering one module twice is an error."""
    loaded = request.config.pluginmanager.get_plugin("ibemu") is not None

    def run(source, *args):
        pytester.makepyfile(test_inner=source)
        plugin = [] if loaded else ["-p", "pytest_ibemu.plugin"]
        return pytester.runpytest_subprocess(*plugin, "-p", "no:cacheprovider", *args,
                                             timeout=300)

    return run
