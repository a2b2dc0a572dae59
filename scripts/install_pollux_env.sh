#!/usr/bin/env bash
# .venv-pollux: the interpreter the "pollux" baseline's optimiser runs under. The policy is the
# published one (adaptdl-sched 0.2.11, adaptdl_sched.policy.pollux.PolluxPolicy). It uses numpy
# aliases removed in numpy 1.24 (np.int, np.float) and pymoo 0.5's module layout, so it gets an
# environment of its own; the framework talks to it over a pipe (policy/baselines/pollux.py).
# adaptdl-sched is installed without its dependencies: those are the Kubernetes controller's
# (kubernetes-asyncio, aiohttp, prometheus, adaptdl); the policy module needs numpy and pymoo
# only; pymoo 0.5.0 imports scipy and autograd (its plotting and CMA-ES extras are not needed).
# Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
CHECK="from adaptdl_sched.policy.pollux import PolluxPolicy; import numpy; assert numpy.__version__ == '1.23.5'"
if [ ! -x .venv-pollux/bin/python ] || ! .venv-pollux/bin/python -c "$CHECK" 2>/dev/null; then
  echo "[install_pollux_env] creating .venv-pollux (adaptdl-sched 0.2.11, numpy 1.23.5, scipy 1.10.1, pymoo 0.5.0)" >&2
  "$PY" -m venv .venv-pollux
  .venv-pollux/bin/python -m pip install -q --upgrade pip
  .venv-pollux/bin/python -m pip install -q numpy==1.23.5 scipy==1.10.1
  .venv-pollux/bin/python -m pip install -q --no-deps pymoo==0.5.0 autograd==1.9.1 adaptdl-sched==0.2.11
  .venv-pollux/bin/python -c "$CHECK"
fi
