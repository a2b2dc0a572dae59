"""Benchmark: each policy's decision cost per slot (the head-to-head table's cost column).

Per point (preset) and policy: the first ``--slots`` slots of one seed's run, every ``decide``
timed. Printed per row: slots decided, mean active jobs, wall ms per slot, CPU ms per slot of
this process, and for ``pollux`` also its optimiser process's CPU seconds per slot (it runs in a
process of its own, so this process's CPU time does not show it) and the generations it ran.
The machine is shared, so CPU time is the steadier figure.

    .venv/bin/python bench/decision_cost.py [--points testbed-rho2,sweep-rho0.25]
        [--policies dl2,pollux,tiresias,optimus,drf,srtf-gain] [--slots 30] [--seed 101]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from dl2_mesos.policy.registry import make_policy
from dl2_mesos.policy.sim.settings import preset
from dl2_mesos.policy.sim.simulator import run
from dl2_mesos.policy.sim.trace import generate_trace


class Timed:
    """Wraps a policy; records wall and process-CPU seconds and the job count of every decision."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.name = policy.name
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.jobs: list[int] = []

    def decide(self, state):
        w0, c0 = time.perf_counter(), time.process_time()
        alloc = self.policy.decide(state)
        self.wall.append(time.perf_counter() - w0)
        self.cpu.append(time.process_time() - c0)
        self.jobs.append(len(state.jobs))
        return alloc


def measure(point: str, name: str, slots: int, seed: int) -> str:
    sc, tc = preset(point)
    sc = replace(sc, max_slots=slots)
    policy = make_policy(name)
    t = Timed(policy)
    try:
        run(t, sc, generate_trace(tc, seed), seed=seed)
    finally:
        if hasattr(policy, "close"):
            policy.close()
    n = len(t.wall)
    extra = ""
    if hasattr(policy, "cpu_seconds") and policy.cpu_seconds:
        gens = policy.generations_used
        extra = (f"  optimiser CPU {sum(policy.cpu_seconds) / n:7.2f} s/slot (max {max(policy.cpu_seconds):.2f}), "
                 f"generations {min(gens)}-{max(gens)}")
    return (f"{point:14s} {name:10s} {n:5d} {sum(t.jobs) / n:7.1f} {1000 * sum(t.wall) / n:10.1f} "
            f"{1000 * sum(t.cpu) / n:10.1f}{extra}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="testbed-rho2,sweep-rho0.25")
    ap.add_argument("--policies", default="dl2,pollux,tiresias,optimus,drf,srtf-gain")
    ap.add_argument("--slots", type=int, default=30)
    ap.add_argument("--seed", type=int, default=101)
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    print(f"{'point':14s} {'policy':10s} {'slots':>5s} {'jobs':>7s} {'wall ms':>10s} {'CPU ms':>10s}")
    for point in a.points.split(","):
        for name in a.policies.split(","):
            print(measure(point, name, a.slots, a.seed), flush=True)


if __name__ == "__main__":
    main()
