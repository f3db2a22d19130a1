"""Limits per device context (the daemon's config "limits"): one program
cannot take every QP number of a device, or register without bound, and the
daemon goes on serving the others."""
import json

import pytest

from conftest import Fabric, pingpong_pair, run_verbs_cases


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    root = tmp_path_factory.mktemp("limits")
    config = root / "config.json"
    config.write_text(json.dumps({"limits": {"qps_per_context": 8,
                                             "registered_bytes_per_context": 1 << 20}}))
    f = Fabric(root / "rt")
    f.ibemu("up", "--config", str(config))
    yield f
    f.down()


def test_past_a_limit_verbs_get_enomem(limited):
    run_verbs_cases(limited, "limits_cases.py", "2")
    assert limited.status()["qps"] == 0


def test_programs_within_the_limits_run(limited):
    pingpong_pair(limited, "ibv_rc_pingpong", ["-n", "100", "-s", "4096"])
