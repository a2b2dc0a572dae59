"""Fault-injection benchmark: each fault's recovery time, jobs finished / submitted, checkpoints
intact; API fuzzing (cases, 5xx); a 1000-submission burst (p50/p99); many jobs on many agents.

    .venv/bin/python bench/faults.py                      # everything (several minutes on 2 cores)
    .venv/bin/python bench/faults.py --scenarios mesos --agents 100 --load-jobs 200
    .venv/bin/python bench/faults.py --scenarios none --fuzz-cases 0 --burst 0 --large-load  # 5000 jobs, 2000 agents
    ... --master-calls 1                                  # calls to the master one after the other (as before)

Same as ``dl2 bench faults`` (options: ``--help``); the logic lives in
``dl2_mesos.testing.faultbench`` so the CLI and this script print the same table.
"""

from __future__ import annotations

import logging

from dl2_mesos.bench_cli import faults

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    faults()
