"""The pytest plugin: fixtures that give a test its own emulated fabric (or
subnet of hosts), torn down however the test ends, and failure reports
that carry what explains an RDMA failure: the daemon's and SM's logs, the
fabric's status and the last packets captured."""
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from .fabric import Fabric
from .subnet import Subnet

RESOURCES = pytest.StashKey[list]()   # on an item: its fabrics and subnets
REPORTS = pytest.StashKey[dict]()     # on an item: its reports by phase
KEPT = pytest.StashKey[list]()        # on the config: directories kept


def pytest_addoption(parser):
    group = parser.getgroup("ibemu", "emulated InfiniBand fabrics (pytest-ibemu)")
    group.addoption("--ibemu-build", metavar="DIR", default=None,
                    help="ibemu build or install directory holding bin/ibemu "
                         "(default: $IBEMU_BUILD, else ibemu on PATH)")
    group.addoption("--ibemu-keep", action="store_true", default=False,
                    help="keep the runtime directories and logs of failed tests "
                         "and print where they are")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "ibemu(devices=2, ports=2, sm=True, config=None): how the ibemu_fabric "
                   "(and ibemu_subnet hosts) of the test are built; config adds keys to the "
                   "daemon's config file")
    config.stash[KEPT] = []


def ibemu_binary(config):
    """Where bin/ibemu is: --ibemu-build, else $IBEMU_BUILD, else `ibemu` on
    PATH (a build named explicitly wins over an installed one). The other
    programs are found next to it."""
    build = config.getoption("ibemu_build") or os.environ.get("IBEMU_BUILD")
    candidates = [Path(build) / "bin" / "ibemu"] if build else [shutil.which("ibemu")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return str(candidate)
    pytest.fail("pytest-ibemu: no ibemu found; pass --ibemu-build DIR (the directory with "
                "bin/ibemu), set IBEMU_BUILD or put ibemu on PATH", pytrace=False)


def _workdir(prefix):
    """A fresh directory with a short path: the daemon's socket path must fit
    a Unix socket address (107 bytes), which pytest's tmp_path may not."""
    return Path(tempfile.mkdtemp(prefix=f"ibemu-{prefix}-"))


def _marker_options(item):
    marker = item.get_closest_marker("ibemu")
    return dict(marker.kwargs) if marker else {}


def _failed(item):
    return any(r.failed for r in item.stash.get(REPORTS, {}).values())


def _track(request, resource):
    """Registers a fabric or subnet for the failure report and tears it down
    at the end of the test, keeping its files if the test failed and
    --ibemu-keep was given."""
    item = request.node
    item.stash.setdefault(RESOURCES, []).append(resource)

    def teardown():
        keep = request.config.getoption("ibemu_keep") and _failed(item)
        resource.close(keep=keep)
        if keep:
            request.config.stash[KEPT].append((item.nodeid, str(resource.root)))

    request.addfinalizer(teardown)
    return resource


@pytest.fixture
def ibemu_fabric(request):
    """One emulated host, up with every port ACTIVE; shaped by
    @pytest.mark.ibemu(devices=..., ports=..., sm=..., config={...})."""
    options = _marker_options(request.node)
    options.setdefault("name", "fabric")
    fabric = Fabric(ibemu_binary(request.config), _workdir("fabric"), **options)
    _track(request, fabric)
    return fabric.up()


@pytest.fixture
def ibemu_subnet(request):
    """A factory: ibemu_subnet(hosts=3, mode=None, devices=..., ports=...)
    returns a started Subnet (its hosts have the Fabric API)."""
    binary = ibemu_binary(request.config)
    defaults = {k: v for k, v in _marker_options(request.node).items() if k != "sm"}

    def make(hosts=2, **options):
        subnet = Subnet(binary, _workdir("subnet"), hosts=hosts, **{**defaults, **options})
        _track(request, subnet)
        return subnet.start()

    return make


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Remembers each phase's report (teardown decides on --ibemu-keep with
    it) and adds the fabrics' logs, status and last packets to a failure,
    while the fabrics still run."""
    outcome = yield
    report = outcome.get_result()
    item.stash.setdefault(REPORTS, {})[report.when] = report
    if report.failed and report.when in ("setup", "call"):
        for resource in item.stash.get(RESOURCES, []):
            report.sections.extend(resource.report_sections())


def pytest_terminal_summary(terminalreporter, config):
    kept = config.stash.get(KEPT, [])
    if kept:
        terminalreporter.section("ibemu: kept directories of failed tests")
        for nodeid, path in kept:
            terminalreporter.write_line(f"{nodeid}: {path}")
