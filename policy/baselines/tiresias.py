"""Tiresias (Gu et al., NSDI'19): discretised two-dimensional least-attained-service (2D-LAS).

Tiresias schedules without knowing job lengths (section 3). What it needs and how it maps here:

* **Fixed size** (non-elastic). Every job runs at one size, all of it or nothing (gang
  scheduling), never rescaled. Our jobs declare limits rather than a size, so the size a job
  requests is :func:`requested_size` under a documented rule, ``size``:

  - ``"minimum"`` (default): the job's minimum, ``min_workers`` workers with ``max(1, min_ps)``
    PS (1 + 1 by default) -- the smallest request, what most jobs of production traces ask for
    (one GPU);
  - ``"fastest"``: the worker count at which the measured speed table gives the job its highest
    speed, with the PS count :func:`~dl2_mesos.policy.baselines.pollux.ps_for_workers` gives that
    many workers (the fastest PS count up to one per worker) -- what a user who wants the job
    done soonest asks for. On contended clusters this is 1.9-4.5x worse in average JCT than
    ``"minimum"`` (measured on testbed-rho2, sweep-rho2 and sweep-rho4, seeds 101-102): large
    gangs wait and get preempted.

  ``"fastest"`` is capped so the job fits the cluster's aggregate capacity.
* **Attained service** (2D: space x time, section 3.2) = the job's GPUs x seconds it has run,
  summed at slot boundaries from the counts it ran with. CPU-only jobs count one unit per
  worker instead of GPUs (otherwise they would never be demoted).
* **Discretised priority queues** (section 3.3): ``K`` queues ``Q0`` (highest) .. ``Q(K-1)``;
  a job enters ``Q0`` and moves down one queue each time its attained service crosses the
  next threshold; thresholds are exponentially spaced (default: 1 and 10 GPU-hours, K = 3).
  Jobs are served queue by queue, FIFO (arrival time) within a queue; a job whose whole size
  fits nowhere is skipped and later jobs are still tried. Lower-priority running jobs are
  preempted when higher-priority jobs need their resources (the simulator charges the restart
  cost when they resume).
* **Starvation** (section 3.3): a waiting job that has run before is promoted back to ``Q0``
  once it has waited ``STARVELIMIT`` x its last run stretch (default ``STARVELIMIT`` = 2); its
  attained-service count starts again from 0 there, so it is not demoted at once.
* Placement is the shared placement function's (least-loaded fit); Tiresias's
  skew-based consolidation is not modelled (no locality in the speed table).

The queues, thresholds and STARVELIMIT are the paper's knobs; the defaults are this project's
choice for 20-minute slots and jobs of tens of GPU-hours. The policy keeps each job's queue and
counters across slots; a new run (the slot number goes back) starts them afresh.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from dl2_mesos.allocation import Allocation, JobAllocation
from dl2_mesos.cluster import ClusterState, JobView
from dl2_mesos.jobs import JobSpec
from dl2_mesos.placement import PlacementBoard
from dl2_mesos.policy.baselines.common import place_tasks
from dl2_mesos.policy.baselines.pollux import ps_for_workers
from dl2_mesos.resources import Resources
from dl2_mesos.speed_model import default_speed_model


@lru_cache(maxsize=4096)
def _fastest_workers(spec: JobSpec) -> int:
    sm = default_speed_model()
    best_w, best = spec.min_workers, -1.0
    for w in range(spec.min_workers, spec.max_workers + 1):
        s = sm.epochs_per_second(spec.job_type, ps_for_workers(spec, w), w, spec.uses_ps)
        if s > best + 1e-12:
            best_w, best = w, s
    return best_w


def requested_size(spec: JobSpec, capacity: Resources, size: str = "minimum") -> tuple[int, int]:
    """(PS, workers) the job runs at under Tiresias with the ``size`` rule (see the module docstring)."""
    if size == "minimum":
        w = spec.min_workers
        p = max(1, spec.min_ps) if spec.uses_ps else 0
        return p, w
    w = _fastest_workers(spec)
    while True:
        p = ps_for_workers(spec, w)
        need = spec.worker.scale(w) + (spec.ps.scale(p) if p else Resources())
        if need.fits_in(capacity) or w <= spec.min_workers:
            return p, w
        w -= 1


def service_units(spec: JobSpec, num_ps: int, num_workers: int) -> float:
    """The job's 'GPUs' for attained service: its tasks' GPUs, or its workers when it uses none."""
    gpus = spec.worker.gpus * num_workers + (spec.ps.gpus * num_ps if spec.uses_ps else 0.0)
    return gpus if gpus > 0 else float(num_workers)


@dataclass
class _Track:
    """What Tiresias remembers about one job."""

    queue: int = 0
    service: float = 0.0  # attained service counted since it entered Q0 (GPU-seconds)
    ran: float = 0.0  # seconds of the current run stretch
    last_run: float = 0.0  # seconds of the last finished run stretch
    waited: float = 0.0  # seconds of the current wait stretch


class TiresiasPolicy:
    """Discretised 2D-LAS with starvation promotion (see the module docstring).

    Args:
        thresholds: attained-service thresholds (GPU-seconds) between consecutive queues, ascending;
            ``len(thresholds) + 1`` queues.
        starve_limit: STARVELIMIT; 0 disables promotion.
        size: the fixed-size rule, "minimum" or "fastest".
    """

    name = "tiresias"

    def __init__(self, thresholds: tuple[float, ...] = (3600.0, 36000.0), starve_limit: float = 2.0,
                 size: str = "minimum") -> None:
        if size not in ("minimum", "fastest"):
            raise ValueError(f"size must be 'minimum' or 'fastest', got {size!r}")
        self.size = size
        ts = tuple(float(t) for t in thresholds)
        if any(t <= 0 for t in ts) or list(ts) != sorted(ts):
            raise ValueError(f"thresholds must be positive and ascending, got {thresholds!r}")
        if starve_limit < 0:
            raise ValueError(f"starve_limit must be >= 0, got {starve_limit!r}")
        self.thresholds = ts
        self.starve_limit = float(starve_limit)
        self.tracks: dict[str, _Track] = {}
        self._last_slot: int | None = None
        self._last_now = 0.0

    def queue_of(self, job_id: str) -> int:
        """The queue ``job_id`` is in after the last decision (0 = highest priority)."""
        return self.tracks[job_id].queue

    def _update(self, state: ClusterState) -> None:
        """Account the interval since the last decision, then demote and promote."""
        if self._last_slot is not None and state.slot <= self._last_slot:
            self.tracks = {}  # a new run
        dt = max(0.0, state.now - self._last_now) if self._last_slot is not None else 0.0
        self._last_slot, self._last_now = state.slot, state.now
        live = {j.job_id for j in state.jobs}
        self.tracks = {k: v for k, v in self.tracks.items() if k in live}
        for job in state.jobs:
            tr = self.tracks.get(job.job_id)
            if tr is None:
                self.tracks[job.job_id] = tr = _Track()
                seen = 0.0  # nothing to account before we first saw it
            else:
                seen = dt
            if job.num_workers > 0:  # it ran the whole interval with these counts
                tr.service += service_units(job.spec, job.num_ps, job.num_workers) * seen
                tr.ran += seen
                tr.waited = 0.0
            else:
                if tr.ran > 0:
                    tr.last_run, tr.ran = tr.ran, 0.0
                tr.waited += seen
            while tr.queue < len(self.thresholds) and tr.service >= self.thresholds[tr.queue]:
                tr.queue += 1
            if (job.num_workers == 0 and self.starve_limit > 0 and tr.last_run > 0
                    and tr.waited >= self.starve_limit * tr.last_run):
                tr.queue, tr.service, tr.last_run = 0, 0.0, 0.0

    def order(self, state: ClusterState) -> list[JobView]:
        """Jobs in service order: queue, then arrival (FIFO), then id."""
        return sorted(state.jobs, key=lambda j: (self.tracks[j.job_id].queue, j.arrival_time, j.job_id))

    def decide(self, state: ClusterState) -> Allocation:
        self._update(state)
        board = PlacementBoard(state.agents)
        cap = state.capacity
        out: dict[str, JobAllocation] = {}
        for job in self.order(state):
            p, w = requested_size(job.spec, cap, self.size)
            if place_tasks(board, job.spec.ps, job.spec.worker, p, w) is not None:  # the whole job or nothing
                out[job.job_id] = JobAllocation(p, w)
        return Allocation(out)

