#!/usr/bin/env bash
# .venv-jobs: the interpreter job processes run under (DL2_JOB_PYTHON). MXNet 1.9.1 needs
# numpy < 1.24, so jobs get their own environment while the framework and executor stay on
# current numpy. torch (CPU) serves PyTorch all-reduce jobs. Versions: constraints-jobs.txt (the
# lock). Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if [ ! -x .venv-jobs/bin/python ] || ! .venv-jobs/bin/python -c "import mxnet, torch, dl2_mesos" 2>/dev/null; then
  echo "[install_job_env] creating .venv-jobs (mxnet 1.9.1, numpy 1.23.5, torch 2.13.0)" >&2
  "$PY" -m venv .venv-jobs
  .venv-jobs/bin/python -m pip install -q --upgrade pip
  .venv-jobs/bin/python -m pip install -q -c constraints-jobs.txt mxnet numpy torch psutil
  # dl2_mesos.job_runtime (standard library only) for the training programs
  .venv-jobs/bin/python -m pip install -q --no-deps -e "$ROOT"
fi
