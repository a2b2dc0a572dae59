"""Optimus (Peng et al., EuroSys 2018): greedy marginal-gain allocation from a fitted speed model.

Speed estimate (Optimus' performance model). Optimus models synchronous training speed as
``f(p, w) = 1 / (a/w + b + c*w/p + d*w + e*p)`` (the batch-size factor folded into ``a``),
coefficients >= 0. Here it is fitted per job type, by non-negative least squares on
``1/f`` weighted by ``f`` (relative error), to the clean measured points of the shipped speed
table -- what Optimus would learn from profiling every configuration. The fit is off the
measurements by about 5-10% on average (up to 2x on the worst points), which is the kind of
estimation error the DL2 paper blames for Optimus's gap. ``speed="true"`` uses the simulator's
own measured model instead (the DL2 prototype's simulated Optimus, 5.5).

Remaining-time estimate: Optimus fits a loss curve to predict the epochs left; the simulator's
jobs declare their epochs, and Optimus uses known epoch counts as given, so
``T(p, w) = remaining epochs / f(p, w)``.

Allocation (the real scheduler's, 5.6, with the per-agent fit check of every baseline):

1. every job, in arrival order, gets its minimum (1 PS + 1 worker) if it fits somewhere;
2. then greedily: a job's candidate is the task (one PS or one worker) with the larger
   utility ``(T(now) - T(+1 task)) / dominant share of that task's demand``; the highest
   utility across jobs is allocated and the job's candidate recomputed. Ties (ambiguity
   11.5): between jobs, earlier arrival first; between a job's PS and worker, the worker.
   Utilities are compared at 10 significant digits: the speed model has exact ties between
   different (PS, workers) counts, and the last bits of the computed utilities (which differ
   between builds of the fit's solver) must not decide them, the tie rule must.
   A task that fits on no agent is dropped from that job's candidates (the other role may
   still be tried); the pass goes on with the other jobs.
3. Stop when the best utility is <= 0 or nothing fits.
"""

from __future__ import annotations

import heapq
import math
from functools import lru_cache

import numpy as np

from dl2_mesos.allocation import Allocation
from dl2_mesos.cluster import ClusterState, JobView
from dl2_mesos.job_types import all_job_types, get_job_type
from dl2_mesos.policy.baselines.common import Grower
from dl2_mesos.speed_model import TABLE_MAX, clean_measurements, default_speed_model, load_measurements


def fit_optimus_model(points: list[tuple[int, int, float]]) -> np.ndarray:
    """Coefficients (a, b, c, d, e) >= 0 of 1/f = a/w + b + c*w/p + d*w + e*p for (p, w, f) points."""
    from scipy.optimize import nnls  # lazily: only the fit needs scipy

    p = np.array([x[0] for x in points], dtype=float)
    w = np.array([x[1] for x in points], dtype=float)
    f = np.array([x[2] for x in points], dtype=float)
    A = np.stack([1.0 / w, np.ones_like(w), w / p, w, p], axis=1)
    theta, _ = nnls(A * f[:, None], np.ones_like(f))  # minimise sum((A theta * f - 1)^2): relative error
    return theta


class OptimusSpeedModel:
    """Optimus's fitted speed model per job type, with the speed model's interface."""

    def __init__(self) -> None:
        raw = load_measurements()
        self._tables: dict[str, np.ndarray] = {}
        grid = np.arange(TABLE_MAX + 1, dtype=float)
        pp, ww = np.meshgrid(np.maximum(grid, 1.0), np.maximum(grid, 1.0), indexing="ij")
        for jt in all_job_types():
            a, b, c, d, e = fit_optimus_model(clean_measurements(raw[jt.name]))
            denom = a / ww + b + c * ww / pp + d * ww + e * pp
            with np.errstate(divide="ignore"):
                t = np.where(denom > 0, 1.0 / denom, 0.0) / jt.epoch_size
            t[0, :] = 0.0
            t[:, 0] = 0.0
            self._tables[jt.name] = t

    def epochs_per_second(self, job_type: str, num_ps: int, num_workers: int, uses_ps: bool = True) -> float:
        if not uses_ps:
            num_ps = num_workers
        if num_ps <= 0 or num_workers <= 0:
            return 0.0
        return float(
            self._tables[get_job_type(job_type).name][min(num_ps, TABLE_MAX), min(num_workers, TABLE_MAX)]
        )


#: significant digits of a utility that take part in comparisons (see the module docstring)
UTILITY_DIGITS = 10


def comparable_utility(util: float) -> float:
    """``util`` rounded to :data:`UTILITY_DIGITS` significant digits (0, inf and nan unchanged),
    so that utilities equal in the model compare equal and the tie rule decides between them."""
    if util == 0 or not math.isfinite(util):
        return util
    return round(util, UTILITY_DIGITS - 1 - math.floor(math.log10(abs(util))))


@lru_cache(maxsize=1)
def optimus_speed_model() -> OptimusSpeedModel:
    """The fitted model (built once per process)."""
    return OptimusSpeedModel()


class OptimusPolicy:
    """Greedy marginal-gain allocation (see the module docstring)."""

    name = "optimus"

    def __init__(self, speed: str = "fitted", speed_model=None) -> None:
        if speed_model is not None:
            self.speed_model = speed_model
        elif speed == "fitted":
            self.speed_model = optimus_speed_model()
        elif speed == "true":
            self.speed_model = default_speed_model()
        else:
            raise ValueError(f"speed must be 'fitted' or 'true', got {speed!r}")

    def _remaining(self, job: JobView, ps: int, w: int) -> float:
        eps = self.speed_model.epochs_per_second(job.spec.job_type, ps, w, job.spec.uses_ps)
        return job.remaining_epochs / eps if eps > 0 else float("inf")

    def _candidate(self, g: Grower, job: JobView, blocked: set[str], cap) -> tuple[float, str] | None:
        ps, w = g.get(job)
        now = self._remaining(job, ps, w)
        best: tuple[float, str] | None = None
        for role in ("worker", "ps"):  # worker first: it wins ties
            if role in blocked or not g.can_add(job, role):
                continue
            res = job.spec.worker if role == "worker" else job.spec.ps
            assert res is not None
            after = self._remaining(job, ps + (role == "ps"), w + (role == "worker"))
            share = res.share_of(cap) or 1e-12
            util = comparable_utility((now - after) / share)
            if best is None or util > best[0]:
                best = (util, role)
        return best

    def decide(self, state: ClusterState) -> Allocation:
        g = Grower(state)
        cap = state.capacity
        for job in state.jobs:  # 1. everyone's minimum, in arrival order
            g.add_unit(job)
        blocked: dict[str, set[str]] = {j.job_id: set() for j in state.jobs}
        heap: list[tuple[float, int, str]] = []
        for i, job in enumerate(state.jobs):
            if g.get(job) == (0, 0):
                continue  # no room for its minimum: nothing more either
            c = self._candidate(g, job, blocked[job.job_id], cap)
            if c is not None:
                heap.append((-c[0], i, c[1]))
        heapq.heapify(heap)
        while heap:  # 2. greedy marginal gains
            neg_util, i, role = heapq.heappop(heap)
            if -neg_util <= 0:
                break
            job = state.jobs[i]
            if not g.add_task(job, role):
                blocked[job.job_id].add(role)
            c = self._candidate(g, job, blocked[job.job_id], cap)
            if c is not None:
                heapq.heappush(heap, (-c[0], i, c[1]))
        return g.allocation()
