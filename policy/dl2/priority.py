"""The order in which the DL2 decision loop sees a slot's jobs (``DL2Config.order``).

With more concurrent jobs than the window J, the loop works on the jobs J at a time (paper
section 4.1, "more jobs than J"). Which jobs share a window decides which trades the network
can make: it can pause a long job and start a short one only when both are in the window it
is working on. The order is also the order of the starters (jobs that run nothing get their
minimum at the slot start while it fits) and of the no-stall restart.

* ``"arrival"``: the jobs in arrival order (models up to ``dl2-elastic-v5``).
* ``"priority"``: the jobs ranked by their estimated remaining time at their fastest size
  (shortest first; average JCT rewards finishing short jobs first, SRPT), and the windows
  filled from both ends of that ranking: the most deserving jobs share each window with the
  jobs whose resources are worth the least to average JCT, so the network sees both sides of
  a pre-emption at once. With at most J jobs there is one window holding every job, as before.

The estimate uses only the :class:`~dl2_mesos.cluster.ClusterState` (so the simulator and the
framework rank the same jobs the same way): remaining epochs over the job type's fastest
speed within the job's caps (the speed table every policy uses), corrected by the measured
speed when the job runs and one is known (``measured_epochs_per_second`` over the table's speed
at its running size, clipped to [1/4, 4]: real clusters are not the table).
"""

from __future__ import annotations

import math
from functools import lru_cache

from dl2_mesos.cluster import ClusterState, JobView
from dl2_mesos.speed_model import default_speed_model

#: bounds of the measured / table speed correction
_MAX_CORRECTION = 4.0


@lru_cache(maxsize=4096)
def _fastest_epochs_per_second(job_type: str, max_ps: int, max_workers: int, uses_ps: bool) -> float:
    model = default_speed_model()
    best = 0.0
    for p in range(max_ps + 1) if uses_ps else (0,):
        for w in range(1, max_workers + 1):
            best = max(best, model.epochs_per_second(job_type, p, w, uses_ps))
    return best


@lru_cache(maxsize=4096)
def _table_epochs_per_second(job_type: str, num_ps: int, num_workers: int, uses_ps: bool) -> float:
    return default_speed_model().epochs_per_second(job_type, num_ps, num_workers, uses_ps)


def estimated_remaining_seconds(job: JobView) -> float:
    """Remaining epochs over the job's fastest speed (table, corrected by its measured speed)."""
    spec = job.spec
    fastest = _fastest_epochs_per_second(spec.job_type, spec.max_ps if spec.uses_ps else 0,
                                         spec.max_workers, spec.uses_ps)
    eps = job.measured_epochs_per_second
    if eps is not None and eps > 0 and job.num_workers > 0:
        table = _table_epochs_per_second(spec.job_type, job.num_ps, job.num_workers, spec.uses_ps)
        if table > 0:
            fastest *= min(max(eps / table, 1.0 / _MAX_CORRECTION), _MAX_CORRECTION)
    if fastest <= 0:
        return math.inf
    return job.remaining_epochs / fastest


def ranked(state: ClusterState) -> list[int]:
    """Row indices of ``state.jobs``, shortest estimated remaining time first (ties: arrival)."""
    keys = [estimated_remaining_seconds(j) for j in state.jobs]
    return sorted(range(len(keys)), key=keys.__getitem__)


def from_both_ends(order: list[int]) -> list[int]:
    """``order`` re-sequenced first, last, second, second-to-last, ... (chunks of J of it put
    the most and the least deserving jobs in the same window)."""
    out = []
    lo, hi = 0, len(order) - 1
    while lo <= hi:
        out.append(order[lo])
        if hi != lo:
            out.append(order[hi])
        lo += 1
        hi -= 1
    return out


def job_order(state: ClusterState, order: str) -> tuple[list[int], list[int]]:
    """(ranking, window sequence) of the rows of ``state.jobs`` for ``order``.

    The ranking orders the starters and the no-stall restart; the window sequence is cut into
    the windows of J.
    """
    n = len(state.jobs)
    if order == "arrival":
        rows = list(range(n))
        return rows, rows
    if order == "priority":
        rank = ranked(state)
        return rank, from_both_ends(rank)
    raise ValueError(f"unknown job order {order!r}")
