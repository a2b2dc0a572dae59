"""Offered load (rho) of a trace on a cluster: the one definition used everywhere.

::

    rho_r = sum over jobs of (r-demand at the job's fastest size x its fastest run time)
            / (cluster's total r x the no-queueing bound's makespan)

for each resource ``r`` in CPUs, GPUs and memory. The fastest size and run time are the ones
of :func:`dl2_mesos.policy.sim.bounds.job_bounds` (every job alone, at the (PS, workers)
within its caps that trains fastest); the bound's makespan is the last job's bound completion
(visible time + fastest run time) minus the first arrival. The reported ``rho`` is the largest
``rho_r`` and ``bottleneck`` names that resource. With the shipped job types the fastest sizes
use many CPU-only parameter servers, so CPUs are the bottleneck.

Reading it: rho ~ 1 means that, run as fast as they can go, the jobs need the whole cluster for
the shortest time the trace could possibly take; above 1 they cannot all run at their fastest
size and queueing (or smaller sizes) is unavoidable, which is where schedulers differ. Halving
the nodes doubles rho (the cluster's capacity is in the denominator, the bound does not
change while the fastest size still fits). Jobs that can never run on the cluster (no size
fits) are left out and counted in ``unrunnable``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from dl2_mesos.policy.sim.bounds import job_bounds
from dl2_mesos.policy.sim.settings import SimConfig
from dl2_mesos.policy.sim.trace import Trace

RESOURCES = ("cpus", "gpus", "mem")


@dataclass(frozen=True)
class OfferedLoad:
    """The offered load of one trace on one cluster.

    Attributes:
        rho: the bottleneck resource's offered load (see the module docstring).
        bottleneck: the resource with the largest load ("cpus", "gpus" or "mem").
        per_resource: rho of every resource.
        makespan_s: the no-queueing bound's makespan (seconds).
        unrunnable: jobs left out because no size of them fits the cluster.
    """

    rho: float
    bottleneck: str
    per_resource: Mapping[str, float]
    makespan_s: float
    unrunnable: int = 0

    def describe(self) -> str:
        """``"rho 1.86 (cpus)"``."""
        return f"rho {self.rho:.2f} ({self.bottleneck})"

    def to_dict(self) -> dict:
        return {
            "rho": self.rho,
            "bottleneck": self.bottleneck,
            "per_resource": dict(self.per_resource),
            "makespan_s": self.makespan_s,
            "unrunnable": self.unrunnable,
        }


def offered_load(config: SimConfig, trace: Trace, speed_model=None) -> OfferedLoad:
    """The offered load of ``trace`` on ``config``'s cluster (see the module docstring)."""
    bounds = job_bounds(config, trace, speed_model)
    work = dict.fromkeys(RESOURCES, 0.0)
    first = math.inf
    last = -math.inf
    unrunnable = 0
    for tj, b in zip(trace, bounds):
        if not math.isfinite(b.run_s):
            unrunnable += 1
            continue
        spec = tj.spec
        use = spec.worker.scale(b.best_workers) + spec.ps.scale(b.best_ps)
        for r in RESOURCES:
            work[r] += getattr(use, r) * b.run_s
        first = min(first, tj.arrival_time)
        last = max(last, tj.arrival_time + b.jct)
    makespan = max(0.0, last - first) if math.isfinite(first) else 0.0
    agents = config.agent_resources()
    per: dict[str, float] = {}
    for r in RESOURCES:
        cap = sum(getattr(a, r) for a in agents)
        per[r] = work[r] / (cap * makespan) if cap > 0 and makespan > 0 else 0.0
    bottleneck = max(RESOURCES, key=lambda r: per[r])
    return OfferedLoad(per[bottleneck], bottleneck, per, makespan, unrunnable)


def mean_load(loads: list[OfferedLoad]) -> tuple[float, str]:
    """Mean rho over several traces and the bottleneck most of them share."""
    if not loads:
        return 0.0, "cpus"
    names = [x.bottleneck for x in loads]
    return sum(x.rho for x in loads) / len(loads), max(set(names), key=names.count)


def format_loads(seeds: list[int], loads: list[OfferedLoad]) -> str:
    """One line: the mean rho and bottleneck, then every seed's rho."""
    mean, bottleneck = mean_load(loads)
    each = ", ".join(f"{s}: {x.rho:.2f}" for s, x in zip(seeds, loads))
    extra = sum(x.unrunnable for x in loads)
    note = f"; {extra} job(s) fit no size of the cluster and are left out" if extra else ""
    return f"offered load rho {mean:.2f} (bottleneck {bottleneck}; per seed {each}){note}"


__all__ = ["OfferedLoad", "RESOURCES", "format_loads", "mean_load", "offered_load"]
