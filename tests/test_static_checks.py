"""Lint (ruff) and type checks (mypy) as part of the suite, with the settings in pyproject.toml.

mypy does not run the import hook of an editable install, and ``dl2_mesos.framework`` lives
in the top-level ``framework/`` folder (see README "Layout"). The test therefore lays the
package out as it is installed -- ``dl2_mesos/`` with ``framework/``, ``executor/`` and
``policy/`` inside, all symlinks to the checkout -- and type-checks that tree.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

#: what mypy checks: the core modules of dl2_mesos, the local Mesos and the framework
MYPY_TARGETS = (
    "-p", "dl2_mesos.framework", "-p", "dl2_mesos.localmesos",
    *(arg for m in ("allocation", "cluster", "placement", "policy_api", "resources", "speed_model", "messages",
                    "jobs", "job_types", "errors", "config", "job_runtime", "slot_accounting")
      for arg in ("-m", f"dl2_mesos.{m}")),
)


def _tool(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{name} is missing: install the test extra (pip install -e '.[test]')"
    return str(path)


def _installed_layout(tmp: Path) -> Path:
    pkg = tmp / "dl2_mesos"
    pkg.mkdir()
    for entry in (ROOT / "dl2_mesos").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for name in ("framework", "executor", "policy"):
        (pkg / name).symlink_to(ROOT / name)
    return tmp


def test_ruff_finds_nothing():
    out = subprocess.run([_tool("ruff"), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_finds_nothing_in_the_core_and_the_framework(tmp_path):
    tree = _installed_layout(tmp_path)
    cmd = [_tool("mypy"), "--config-file", str(ROOT / "pyproject.toml"), "--python-executable", sys.executable,
           "--cache-dir", str(tmp_path / ".mypy_cache"), *MYPY_TARGETS]
    out = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, env={**os.environ, "MYPYPATH": str(tree)})
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("source, rule", [
    ("import os\n", "F401"),  # unused import
    ("def f(x=[]):\n    return x\n", "B006"),  # mutable default argument
])
def test_ruff_settings_catch_real_mistakes(tmp_path, source, rule):
    bad = tmp_path / "bad.py"
    bad.write_text(source)
    out = subprocess.run([_tool("ruff"), "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad)],
                         capture_output=True, text=True)
    assert out.returncode != 0 and rule in out.stdout


def test_mypy_settings_catch_a_type_error(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(x: int) -> str:\n    return x\n")
    out = subprocess.run([_tool("mypy"), "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir",
                          str(tmp_path / ".mypy_cache"), str(bad)], capture_output=True, text=True)
    assert out.returncode != 0 and "Incompatible return value" in out.stdout
