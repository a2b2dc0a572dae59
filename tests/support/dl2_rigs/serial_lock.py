"""The ``serial`` marker's lock: with the suite on several processes (pytest-xdist,
``scripts/test.sh``), a test marked ``@pytest.mark.serial`` runs with no other test beside it.

For live tests whose outcome depends on the 2 cores: a background learning round that must
finish while a live workload runs would otherwise share them with whatever another worker
runs. It is a readers-writer lock in the run's temporary folder: every test holds it shared, a
serial test exclusively; a serial test first closes a gate that new tests must pass, so a
stream of short tests on the other worker cannot keep it waiting. Run in one process, it does
nothing. tests/conftest.py imports the fixture, which makes it autouse for the whole suite.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def serial_tests_run_alone(request, tmp_path_factory):
    """Hold the run's lock for the test: exclusively when it is marked ``serial``."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    run_dir = Path(tmp_path_factory.getbasetemp()).parent  # shared by the run's workers
    serial = request.node.get_closest_marker("serial") is not None
    with open(run_dir / "serial.gate", "a") as gate, open(run_dir / "serial.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            if serial:
                fcntl.flock(lock, fcntl.LOCK_EX)  # the gate stays closed until the test ends
            else:
                fcntl.flock(lock, fcntl.LOCK_SH)
                fcntl.flock(gate, fcntl.LOCK_UN)
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)
