"""The ``serial`` marker (tests/support/dl2_rigs/serial_lock.py): on two pytest-xdist workers a
serial test runs with nothing beside it, while the other tests still run two at a time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODULE = '''
import time
from pathlib import Path

import pytest

LOG = Path({log!r})


def _span(name, seconds):
    start = time.monotonic()
    time.sleep(seconds)
    with open(LOG, "a") as fh:
        fh.write(f"{{name}} {{start}} {{time.monotonic()}}\\n")


@pytest.mark.serial
def test_alone():  # collected first: without the lock it would start beside the other worker's first test
    _span("serial", 1.0)


@pytest.mark.parametrize("k", range(8))
def test_plain(k):
    _span(f"plain{{k}}", 0.4)
'''


def test_a_serial_test_runs_with_no_other_test_beside_it(tmp_path):
    log = tmp_path / "spans.log"
    (tmp_path / "conftest.py").write_text("from dl2_rigs.serial_lock import serial_tests_run_alone  # noqa: F401\n")
    (tmp_path / "test_spans.py").write_text(MODULE.format(log=str(log)))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests" / "support")}
    out = subprocess.run([str(Path(sys.executable).parent / "pytest"), "-q", "-p", "no:cacheprovider", "-c", os.devnull,
                          "--rootdir", str(tmp_path), "-n", "2", "--dist", "worksteal", "-W", "ignore::pytest.PytestUnknownMarkWarning",
                          str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    spans = {name: (float(a), float(b)) for name, a, b in (line.split() for line in log.read_text().splitlines())}
    assert len(spans) == 9, spans
    serial = spans.pop("serial")
    beside = [name for name, (a, b) in spans.items() if a < serial[1] and serial[0] < b]
    assert not beside, (serial, spans)
    plain = sorted(spans.values())
    assert any(plain[i + 1][0] < plain[i][1] for i in range(len(plain) - 1)), "the plain tests ran two at a time"
