#!/usr/bin/env bash
# Install everything the tests need (idempotent), then run the whole suite.
#   bash scripts/test.sh [pytest args...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/bootstrap.sh --test
# `pip install` of the built wheel into a clean venv, and its commands (README "Installing")
bash scripts/check_install.sh
# The pytest *script* (not `python -m pytest`) so the repo root is not put first on sys.path
# (see README "Layout"); --import-mode=importlib is set in pyproject.toml.
exec .venv/bin/pytest "$@"
