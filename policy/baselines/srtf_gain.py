"""SRTF-gain: grow jobs by time saved per resource-second, never shrinking one (add-only).

A heuristic built to be the DL2 warm-up teacher on loaded clusters, and a baseline in its own
right. It decides the way the DL2 decision loop can act (``DL2Config.start="current"``):

1. Every job keeps the tasks it runs (nothing is stopped, so nothing is restarted unless it
   grows). Jobs that run nothing get a starter in arrival order while one fits: their minimum
   (``min_ps`` PS -- none for jobs without PS -- and ``min_workers`` workers; 1 PS + 1 worker
   for the usual limits, the DL2 slot's starter bundle), placed all or nothing, spread over
   agents when it does not fit on one, so a job that cannot start books nothing.
2. Then greedily, the job with the highest utility takes one step (a bundle, a worker or a PS)
   towards its best *target* size, and its candidate is recomputed. For a job at counts ``c``
   the candidate is the target ``t >= c`` (within caps and the free aggregate capacity) that
   maximises::

       utility(t) = (T(c) - T(t)) / ((share(t) - share(c)) * T(t) ** alpha)

   ``T(x)`` is the job's remaining time at size ``x``: remaining epochs / epochs per second
   (the simulator's measured table, as SRTF uses) plus its restart cost when ``x`` differs
   from the counts the job runs at the slot start and the job has trained before.
   ``share`` is the dominant share of the cluster. The numerator/share is Optimus's marginal
   gain per resource; dividing by ``T(t)`` (the time the resources will be held) favours
   short jobs, which is what average JCT rewards when the cluster is loaded (SRTF). Looking
   at whole targets rather than one task makes the restart cost a one-off: a running job grows
   only when the whole jump pays for it, and the non-convex speed table does not trap the
   search at a local step.
3. Stop when no job has a target with positive utility or nothing more fits.

``alpha=0`` gives an Optimus-like gain-per-share greedy with restart costs and true speeds.
"""

from __future__ import annotations

import heapq

import numpy as np

from dl2_mesos.allocation import Allocation, JobAllocation
from dl2_mesos.cluster import ClusterState, JobView
from dl2_mesos.placement import PlacementBoard
from dl2_mesos.policy.baselines.common import minimum, place_tasks
from dl2_mesos.speed_model import default_speed_model

_WORKER, _PS, _BUNDLE = "worker", "ps", "bundle"


class _JobPlan:
    """Per-job grids for one decision: remaining time and dominant share at every size."""

    def __init__(self, job: JobView, cap: np.ndarray, eps: np.ndarray, alpha: float) -> None:
        spec = job.spec
        self.job = job
        self.uses_ps = spec.uses_ps
        max_p = spec.max_ps if spec.uses_ps else 0
        ps_idx = np.arange(max_p + 1)
        w_idx = np.arange(spec.max_workers + 1)
        with np.errstate(divide="ignore"):
            t = np.where(eps > 0, job.remaining_epochs / np.maximum(eps, 1e-300), np.inf)
        self.p0, self.w0 = job.num_ps, job.num_workers
        has_run = job.epochs_done > 0 or (self.p0 + self.w0) > 0
        if has_run:
            changed = np.ones_like(t, dtype=bool)
            if self.p0 <= max_p and self.w0 <= spec.max_workers:
                changed[self.p0, self.w0] = False
            t = t + changed * job.restart_cost_seconds
        self.T = t
        ps_r = np.array([spec.ps.cpus, spec.ps.gpus, spec.ps.mem]) if spec.uses_ps else np.zeros(3)
        w_r = np.array([spec.worker.cpus, spec.worker.gpus, spec.worker.mem])
        self.ps_r, self.w_r = ps_r, w_r
        use = ps_idx[:, None, None] * ps_r + w_idx[None, :, None] * w_r  # (P, W, 3)
        self.use = use
        self.share = np.where(cap > 0, use / np.where(cap > 0, cap, 1.0), 0.0).max(axis=2)
        self.weight = np.where(np.isfinite(t), np.maximum(t, 1.0) ** alpha, np.inf)
        self.blocked: set[str] = set()

    def candidate(self, p: int, w: int, free: np.ndarray) -> tuple[float, int, int] | None:
        """(utility, target PS, target workers) of the best target from (p, w), or None."""
        T, S = self.T[p:, w:], self.share[p:, w:]
        extra = self.use[p:, w:] - self.use[p, w]
        ok = (extra <= free + 1e-9).all(axis=2)
        ok[0, 0] = False
        if _WORKER in self.blocked:
            ok[:, 1:] = False
        if _PS in self.blocked:
            ok[1:, :] = False
        if not ok.any():
            return None
        tcur = self.T[p, w]
        ds = S - self.share[p, w]
        with np.errstate(invalid="ignore", divide="ignore"):
            gain = np.where(np.isfinite(tcur), tcur - T, np.where(np.isfinite(T), np.inf, 0.0))
            util = np.where(ok & (ds > 0) & np.isfinite(T), gain / (np.maximum(ds, 1e-12) * self.weight[p:, w:]), -np.inf)
        k = int(np.argmax(util))
        dp, dw = divmod(k, util.shape[1])
        u = float(util.flat[k])
        if not u > 0:
            return None
        return u, p + dp, w + dw


class SRTFGainPolicy:
    """Add-only greedy growth by time saved per resource-second (see the module docstring).

    Args:
        alpha: exponent of the remaining time in the utility's denominator (0: no SRTF weight).
        speed_model: epochs/s model (default: the simulator's measured table).
    """

    name = "srtf-gain"

    def __init__(self, alpha: float = 2.0, reserve: float = 0.35, speed_model=None) -> None:
        self.alpha = float(alpha)
        self.reserve = float(reserve)
        self.speed_model = speed_model if speed_model is not None else default_speed_model()
        self._eps: dict[tuple[str, int, int, bool], np.ndarray] = {}

    def _speed_grid(self, job: JobView) -> np.ndarray:
        """epochs/s at every (PS, workers) within the job's caps (cached: the model is fixed)."""
        spec = job.spec
        max_p = spec.max_ps if spec.uses_ps else 0
        key = (spec.job_type, max_p, spec.max_workers, spec.uses_ps)
        grid = self._eps.get(key)
        if grid is None:
            grid = np.zeros((max_p + 1, spec.max_workers + 1))
            for p in range(max_p + 1):
                for w in range(spec.max_workers + 1):
                    grid[p, w] = self.speed_model.epochs_per_second(spec.job_type, p, w, spec.uses_ps)
            grid.flags.writeable = False
            self._eps[key] = grid
        return grid

    def decide(self, state: ClusterState) -> Allocation:
        board = PlacementBoard(state.agents)
        for t in state.tasks:
            board.charge(t.agent_id, t.resources)
        cap_r = state.capacity
        cap = np.array([cap_r.cpus, cap_r.gpus, cap_r.mem])
        free = cap.copy()
        for t in state.tasks:
            free -= (t.resources.cpus, t.resources.gpus, t.resources.mem)
        counts = {j.job_id: [j.num_ps, j.num_workers] for j in state.jobs}

        def place(job: JobView, kind: str) -> bool:
            spec = job.spec
            if kind == _BUNDLE:
                d = spec.ps + spec.worker
            elif kind == _PS:
                d = spec.ps
            else:
                d = spec.worker
            if board.place(d) is None:
                return False
            free[:] -= (d.cpus, d.gpus, d.mem)
            c = counts[job.job_id]
            if kind != _PS:
                c[1] += 1
            if kind != _WORKER:
                c[0] += 1
            return True

        for job in state.jobs:  # 1. starters (each job's minimum, all or nothing), arrival order
            if job.num_ps == 0 and job.num_workers == 0:
                n_ps, n_w = minimum(job.spec)
                placed = place_tasks(board, job.spec.ps, job.spec.worker, n_ps, n_w)
                if placed is not None:
                    for _, d in placed:
                        free[:] -= (d.cpus, d.gpus, d.mem)
                    counts[job.job_id] = [n_ps, n_w]

        reserve = self.reserve * cap  # kept free for the next arrivals' starters
        plans: dict[int, _JobPlan] = {}
        heap: list[tuple[float, int, int, int]] = []
        for i, job in enumerate(state.jobs):
            p, w = counts[job.job_id]
            if p == 0 and w == 0:
                continue  # no room even for its starter
            plans[i] = plan = _JobPlan(job, cap, self._speed_grid(job), self.alpha)
            c = plan.candidate(p, w, free - reserve)
            if c is not None:
                heap.append((-c[0], i, c[1], c[2]))
        heapq.heapify(heap)
        while heap:  # 2. greedy steps towards each job's best target
            _, i, tp, tw = heapq.heappop(heap)
            job, plan = state.jobs[i], plans[i]
            p, w = counts[job.job_id]
            kinds = []
            if tp > p and tw > w:
                kinds.append(_BUNDLE)
            if tw > w:
                kinds.append(_WORKER)
            if tp > p:
                kinds.append(_PS)
            if not any(place(job, k) for k in kinds):
                # nothing towards this target fits any agent: that role is done for this slot
                if tw > w:
                    plan.blocked.add(_WORKER)
                if tp > p:
                    plan.blocked.add(_PS)
            p, w = counts[job.job_id]
            c = plan.candidate(p, w, free - reserve)
            if c is not None:
                heapq.heappush(heap, (-c[0], i, c[1], c[2]))
        return Allocation({jid: JobAllocation(c[0], c[1]) for jid, c in counts.items() if c[0] or c[1]})
