"""Where the rdma_retry program under test is: $RDMA_RETRY_BIN, set by
run-tests.sh (or by hand) to the program a build of this example made."""
import os

import pytest


@pytest.fixture(scope="session")
def rdma_retry():
    path = os.environ.get("RDMA_RETRY_BIN")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("set RDMA_RETRY_BIN to the built rdma_retry program", pytrace=False)
    return path
