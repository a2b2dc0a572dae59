#!/usr/bin/env bash
# Install (idempotent) and run the main job on embedded defaults.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/bootstrap.sh
exec .venv/bin/dl2 demo "$@"
