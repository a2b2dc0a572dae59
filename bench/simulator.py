"""Benchmark: the simulator at the reference scale (500 nodes, 200 jobs) under DRF and Optimus.

Prints, per policy, the wall and CPU seconds of one full run (trace generation and the one-off
speed-model build excluded; they are printed separately), the simulated slots and the slots
per second. Goal: DRF at this scale in <= 2 s on a 2-core machine.

    .venv/bin/python bench/simulator.py [--policies drf,optimus] [--seed 1] [--jobs 200]
        [--agents 500] [--repeat 1]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from dl2_mesos.policy.baselines.optimus import optimus_speed_model
from dl2_mesos.policy.registry import make_policy
from dl2_mesos.policy.sim.config import preset
from dl2_mesos.policy.sim.simulator import run
from dl2_mesos.policy.sim.trace import generate_trace
from dl2_mesos.speed_model import default_speed_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="drf,optimus")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--agents", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=1, help="runs per policy (the best is reported too)")
    args = ap.parse_args()

    t0 = time.perf_counter()
    default_speed_model()
    optimus_speed_model()
    build = time.perf_counter() - t0
    sim_cfg, trace_cfg = preset("reference")
    sim_cfg = replace(sim_cfg, num_agents=args.agents)
    trace_cfg = replace(trace_cfg, num_jobs=args.jobs)
    trace = generate_trace(trace_cfg, args.seed)
    print(
        f"reference scale: {args.agents} nodes, {len(trace)} jobs, seed {args.seed}; "
        f"speed models built in {build:.2f} s (once per process, excluded below)"
    )
    print(
        f"{'policy':8s} {'wall s':>8s} {'cpu s':>8s} {'slots':>6s} {'slots/s':>9s} {'avg JCT (slots)':>16s}"
    )
    for name in args.policies.split(","):
        walls, cpus = [], []
        m = None
        for _ in range(args.repeat):
            policy = make_policy(name)
            w0, c0 = time.perf_counter(), time.process_time()
            m = run(policy, sim_cfg, trace, seed=args.seed)
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
        assert m is not None
        best = min(walls)
        each = f"   (wall of each run: {', '.join(f'{w:.2f}' for w in walls)})" if args.repeat > 1 else ""
        row = f"{name:8s} {best:8.2f} {min(cpus):8.2f} {m.slots:6d} {m.slots / best:9.1f}"
        print(f"{row} {m.avg_jct_slots:16.2f}{each}")


if __name__ == "__main__":
    main()
