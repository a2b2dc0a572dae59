#!/usr/bin/env bash
# Install everything the tests need (idempotent), then run the whole suite.
#   bash scripts/test.sh [pytest args...]
# The suite runs on DL2_TEST_WORKERS processes (pytest-xdist; default 2, 0 = in this process):
# each worker starts its own services on free ports and temporary folders, and most tests wait
# on those services rather than the CPU. Work is stolen between workers, so one long test does
# not hold a queue behind it. A test marked `serial` runs with no other test beside it
# (tests/support/dl2_rigs/serial_lock.py): live runs whose learning rounds race the workload.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/bootstrap.sh --test
# `pip install` of the built wheel into a clean venv, and its commands (README "Installing")
bash scripts/check_install.sh
# The pytest *script* (not `python -m pytest`) so the repo root is not put first on sys.path
# (see README "Layout"); --import-mode=importlib is set in pyproject.toml.
exec .venv/bin/pytest -n "${DL2_TEST_WORKERS:-2}" --dist worksteal "$@"
