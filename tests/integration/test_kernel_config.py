"""The daemon's choice between kernel mode (ibemu.ko's /dev/ibemu) and
no-kernel mode, on a machine without the module: "auto" runs without it,
"on" refuses to start and says why, "off" never looks. The module itself is
tested in qemu (tests/kernel)."""
import json
import os

import pytest
from conftest import Fabric

pytestmark = pytest.mark.skipif(os.path.exists("/dev/ibemu"),
                                reason="ibemu.ko is loaded on this machine")


def up_with(tmp_path, config):
    f = Fabric(tmp_path / "rt")
    path = tmp_path / "ibemu.json"
    path.write_text(json.dumps(config))
    return f, f.ibemu("up", "--no-sm", "--config", str(path), check=False)


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_without_the_module_the_daemon_runs_in_no_kernel_mode(tmp_path, mode):
    f, result = up_with(tmp_path, {"kernel": mode})
    try:
        assert result.returncode == 0, result.stderr
        assert f.status()["kernel"]["registered"] is False
    finally:
        f.down()


@pytest.mark.parametrize("mode, says", [
    ("on", "/dev/ibemu: No such file or directory (is ibemu.ko loaded"),
    ("maybe", 'kernel must be "auto", "on" or "off"'),
])
def test_the_daemon_refuses_to_start_and_says_why(tmp_path, mode, says):
    f, result = up_with(tmp_path, {"kernel": mode})
    try:
        assert result.returncode != 0
        log = (f.runtime_dir / "ibemud.log").read_text()
        assert says in log, log
    finally:
        f.down()
