"""A lower bound on average JCT: every job alone, at its fastest size, from the moment it is seen.

Under the simulator's rules (:mod:`dl2_mesos.policy.sim.simulator`) no policy can finish a job
sooner than this:

* a job arriving at time ``a`` is first visible at the first slot start ``>= a``, so it cannot
  train before then;
* its speed in any slot is the speed model's epochs/s at the (PS, workers) it runs, within its
  caps (``min_* .. max_*``) and with a total demand that fits the cluster's aggregate capacity
  (the simulator rejects anything larger), times at most ``1 + speed_noise``;
* restarts only take training time away (the first launch is free), and a job finishing
  mid-slot is charged its fractional time exactly (no rounding up to the slot end).

So ``JCT_j >= (visible_j - a_j) + epochs_j / max_speed_j`` for every job and every policy, and
the average of these is a lower bound on any policy's average JCT on that trace. It ignores
queueing and per-agent packing entirely, so it is tight only on a lightly loaded cluster (the
``reference`` preset); on a loaded one (``small``) the real optimum is well above it.

Runs stopped at ``max_slots`` report censored JCTs, which can be below the bound; the bound is
for complete runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dl2_mesos.policy.sim.settings import SimConfig
from dl2_mesos.policy.sim.trace import Trace
from dl2_mesos.resources import Resources
from dl2_mesos.speed_model import default_speed_model

_EPS = 1e-9


@dataclass(frozen=True)
class JobBound:
    """One job's lower bound.

    Attributes:
        job_id: the job.
        wait_s: seconds from arrival to the first slot start it is visible at.
        run_s: epochs / the fastest feasible speed.
        best_ps, best_workers: the size that reaches that speed.
    """

    job_id: str
    wait_s: float
    run_s: float
    best_ps: int
    best_workers: int

    @property
    def jct(self) -> float:
        return self.wait_s + self.run_s


def fastest_speed(spec, capacity: Resources, speed_model=None, noise: float = 0.0) -> tuple[float, int, int]:
    """(epochs/s, PS, workers) of ``spec``'s fastest size within its caps and ``capacity``.

    ``noise`` is the simulator's ``speed_noise``: the speed can be up to ``1 + noise`` times the
    table's, so the bound uses that factor.
    """
    sm = speed_model if speed_model is not None else default_speed_model()
    best = (0.0, 0, 0)
    ps_range = range(max(spec.min_ps, 1), spec.max_ps + 1) if spec.uses_ps else (0,)
    for w in range(max(spec.min_workers, 1), spec.max_workers + 1):
        for p in ps_range:
            need = spec.worker.scale(w)
            if p:
                need = need + spec.ps.scale(p)
            if not need.fits_in(capacity):
                continue
            v = sm.epochs_per_second(spec.job_type, p, w, spec.uses_ps)
            if v > best[0]:
                best = (v, p, w)
    return best[0] * (1.0 + noise), best[1], best[2]


def job_bounds(config: SimConfig, trace: Trace, speed_model=None) -> list[JobBound]:
    """Per-job lower bounds (see the module docstring); jobs that can never run get ``inf``."""
    agents = config.agent_resources()
    capacity = Resources(
        sum(a.cpus for a in agents), sum(a.gpus for a in agents), sum(a.mem for a in agents)
    )
    slot = config.slot_seconds
    cache: dict[tuple, tuple[float, int, int]] = {}
    out = []
    for tj in trace:
        spec = tj.spec
        key = (spec.job_type, spec.min_ps, spec.max_ps, spec.min_workers, spec.max_workers, spec.worker, spec.ps)
        if key not in cache:
            cache[key] = fastest_speed(spec, capacity, speed_model, config.speed_noise)
        eps, p, w = cache[key]
        visible = math.ceil(tj.arrival_time / slot - _EPS) * slot
        run_s = spec.epochs / eps if eps > 0 else math.inf
        out.append(JobBound(tj.job_id, max(0.0, visible - tj.arrival_time), run_s, p, w))
    return out


def avg_jct_lower_bound(config: SimConfig, trace: Trace, speed_model=None) -> float:
    """The average over the trace's jobs of :func:`job_bounds` (seconds)."""
    b = job_bounds(config, trace, speed_model)
    return sum(x.jct for x in b) / len(b) if b else 0.0


__all__ = ["JobBound", "avg_jct_lower_bound", "fastest_speed", "job_bounds"]
