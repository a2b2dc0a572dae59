"""Fixed cluster states for the greedy-decision tests (no simulator involved).

The fast greedy loop must take the same steps as full forward passes on each of them, with the
shipped model (whatever its weights) and with seeded random networks.
"""

from __future__ import annotations

import numpy as np

from dl2_mesos.allocation import Allocation
from dl2_mesos.cluster import AgentView, ClusterState, JobView, TaskView
from dl2_mesos.job_types import job_type_names
from dl2_mesos.jobs import JobSpec
from dl2_mesos.placement import place
from dl2_mesos.resources import Resources

NODE = Resources(cpus=8.0, gpus=2.0, mem=48 * 1024.0)


def seeded_state(n_jobs: int, n_agents: int, seed: int, run_frac: float = 0.5, max_run: int = 4,
                 varied: bool = False) -> ClusterState:
    """``n_jobs`` jobs of random types and sizes; about ``run_frac`` of them already run a
    random (PS, workers) placed with the shared placement function. ``varied`` also mixes in
    PyTorch jobs (no PS), jobs with ``min_workers`` 2-3 and low caps."""
    rng = np.random.default_rng(seed)
    agents = tuple(AgentView(f"node-{i:04d}", f"node-{i:04d}", NODE, NODE) for i in range(n_agents))
    names = job_type_names()
    jobs = []
    for i in range(n_jobs):
        kw = {}
        if varied:
            r = rng.random()
            if r < 0.25:
                kw = {"runtime": "pytorch", "min_workers": int(rng.integers(1, 3))}
            elif r < 0.5:
                kw = {"min_workers": int(rng.integers(2, 4)), "max_workers": int(rng.integers(4, 9)),
                      "max_ps": int(rng.integers(1, 5))}
        spec = JobSpec(job_type=names[int(rng.integers(len(names)))], epochs=float(rng.integers(500, 30000)), **kw)
        jobs.append(JobView(f"j{i:05d}", spec, arrival_slot=i // 10, arrival_time=1200.0 * (i // 10),
                            epochs_done=float(rng.integers(0, 400)), slots_run=int(rng.integers(0, 30)),
                            slots_since_rescale=int(rng.integers(0, 10))))
    bare = ClusterState(slot=30, slot_seconds=1200.0, now=36000.0, jobs=tuple(jobs), agents=agents)
    def size(spec):
        p = min(spec.max_ps, max(spec.min_ps, int(rng.integers(1, max_run + 1)))) if spec.uses_ps else 0
        return p, min(spec.max_workers, max(spec.min_workers, int(rng.integers(1, max_run + 1))))

    target = Allocation({j.job_id: size(j.spec) for j in jobs if rng.random() < run_frac})
    plan = place(target, bare)
    tasks = tuple(TaskView(f"t{k}", p.job_id, p.role, p.agent_id, p.resources) for k, p in enumerate(plan.start))
    g = plan.granted
    jobs2 = tuple(
        JobView(j.job_id, j.spec, j.arrival_slot, j.arrival_time, j.epochs_done,
                num_ps=g.get_counts(j.job_id).num_ps, num_workers=g.get_counts(j.job_id).num_workers,
                slots_run=j.slots_run, slots_since_rescale=j.slots_since_rescale)
        for j in jobs
    )
    return ClusterState(slot=30, slot_seconds=1200.0, now=36000.0, jobs=jobs2, agents=agents, tasks=tasks)


#: (name, jobs, agents, seed, fraction running): lightly loaded (the reference), loaded (fits run
#: out mid-slot), several windows, everything new, and an over-full cluster
CASES = [
    ("reference-40", 40, 500, 1, 0.5),
    ("loaded-30-on-13", 30, 13, 2, 0.5),
    ("loaded-60-on-20", 60, 20, 3, 0.7),
    ("windows-130-on-80", 130, 80, 4, 0.4),
    ("all-new-25-on-40", 25, 40, 5, 0.0),
    ("full-50-on-8", 50, 8, 6, 0.9),
]


def golden_states() -> dict[str, ClusterState]:
    return {name: seeded_state(n, a, seed, frac) for name, n, a, seed, frac in CASES}
