"""What every baseline shares: growing jobs unit by unit with a per-agent fit check.

Decisions (where the DL2 paper's §6 comparison and the authors' public prototype leave a
choice open), the same for every baseline:

* Baselines decide **from scratch** every slot, as in the reference: the board starts from the
  agents' available resources with nothing placed; the simulator/framework then keeps running
  tasks where the new counts allow (``dl2_mesos.placement.place``).
* The allocation **unit** is the reference's bundle: +1 PS and +1 worker (just +1 worker for
  jobs without PS, and just the role still below its cap when the other one is capped),
  placed co-located on the least-loaded agent that fits both, else the two tasks separately
  on the least-loaded agents that fit each -- exactly what ``place`` will do with them, so
  what a baseline decides is what it gets. A job's first unit is its minimum (``min_ps`` PS,
  ``min_workers`` workers), all or nothing.
* A unit that fits nowhere is **not** the end of the pass (the prototype stopped its whole
  pass at the first unit that did not fit on the single least-loaded node): that
  job is skipped and the others are still tried.
"""

from __future__ import annotations

from dl2_mesos.allocation import Allocation, JobAllocation
from dl2_mesos.cluster import ClusterState, JobView
from dl2_mesos.jobs import JobSpec
from dl2_mesos.placement import PlacementBoard
from dl2_mesos.resources import Resources


def minimum(spec: JobSpec) -> tuple[int, int]:
    """(PS, workers) of a job's smallest runnable size: ``min_ps`` (0 without PS), ``min_workers``."""
    return (max(spec.min_ps, 1) if spec.uses_ps else 0), max(spec.min_workers, 1)


def place_tasks(
    board: PlacementBoard, ps_r: Resources, w_r: Resources, n_ps: int, n_w: int
) -> list[tuple[str, Resources]] | None:
    """Place ``n_ps`` PS and ``n_w`` workers on ``board``, all or nothing.

    PS/worker pairs go as co-located bundles while one fits, the rest one task at a time, each
    on the least-loaded agent that fits (what ``dl2_mesos.placement.place`` does with them).
    Returns the (agent, demand) placed, or None -- with nothing left charged -- when some task
    fits nowhere: a job that cannot get its whole minimum books nothing.
    """
    placed: list[tuple[str, Resources]] = []
    bundle_r = ps_r + w_r
    for _ in range(min(n_ps, n_w)):
        agent = board.place(bundle_r)
        if agent is None:
            break
        placed.append((agent, bundle_r))
        n_ps -= 1
        n_w -= 1
    for res, n in ((w_r, n_w), (ps_r, n_ps)):
        for _ in range(n):
            agent = board.place(res)
            if agent is None:
                for a, r in placed:
                    board.release(a, r)
                return None
            placed.append((agent, res))
    return placed


class Grower:
    """Counts decided so far plus the board that checks each new task fits some agent."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.board = PlacementBoard(state.agents)
        self.counts: dict[str, list[int]] = {}
        self._resources: dict[str, tuple[Resources, Resources, Resources]] = {}
        cap = state.capacity
        self._cap = (cap.cpus, cap.gpus, cap.mem)

    # -- queries ---------------------------------------------------------------------------------
    def get(self, job: JobView) -> tuple[int, int]:
        c = self.counts.get(job.job_id)
        return (c[0], c[1]) if c else (0, 0)

    def can_grow(self, job: JobView) -> bool:
        ps, w = self.get(job)
        return w < job.spec.max_workers or (job.spec.uses_ps and ps < job.spec.max_ps)

    def can_add(self, job: JobView, role: str) -> bool:
        ps, w = self.get(job)
        if role == "ps":
            return job.spec.uses_ps and ps < job.spec.max_ps
        return w < job.spec.max_workers

    def dominant_share(self, job: JobView) -> float:
        """The job's dominant share of the cluster at the counts decided so far."""
        ps, w = self.get(job)
        ps_r, w_r, _ = self._res(job)
        share = 0.0
        for used, cap in zip(
            (ps * ps_r.cpus + w * w_r.cpus, ps * ps_r.gpus + w * w_r.gpus, ps * ps_r.mem + w * w_r.mem),
            self._cap,
        ):
            if cap > 0 and used / cap > share:
                share = used / cap
        return share

    def allocation(self) -> Allocation:
        return Allocation({jid: JobAllocation(c[0], c[1]) for jid, c in self.counts.items() if c[0] or c[1]})

    # -- growing -----------------------------------------------------------------------------------
    def _res(self, job: JobView) -> tuple[Resources, Resources, Resources]:
        """(PS demand, worker demand, bundle demand) of ``job``, built once per decision."""
        r = self._resources.get(job.job_id)
        if r is None:
            ps_r, w_r = job.spec.ps, job.spec.worker
            assert ps_r is not None and w_r is not None
            r = self._resources[job.job_id] = (ps_r, w_r, ps_r + w_r)
        return r

    def _place_tasks(self, job: JobView, n_ps: int, n_w: int) -> bool:
        """Place n_ps PS and n_w workers (pairs as bundles), all or nothing."""
        ps_r, w_r, bundle_r = self._res(job)
        if n_ps == 1 and n_w == 1 and self.board.place(bundle_r) is not None:  # the common case
            return True
        return place_tasks(self.board, ps_r, w_r, n_ps, n_w) is not None

    def add_unit(self, job: JobView) -> bool:
        """Add one unit (first: the minimum; then a bundle); False (and no change) if it fits nowhere."""
        c = self.counts.get(job.job_id)
        ps, w = (c[0], c[1]) if c else (0, 0)
        spec = job.spec
        if ps == 0 and w == 0:
            add_ps, add_w = minimum(spec)
        else:
            add_ps = 1 if (spec.uses_ps and ps < spec.max_ps) else 0
            add_w = 1 if w < spec.max_workers else 0
        if add_ps == 0 and add_w == 0:
            return False
        if not self._place_tasks(job, add_ps, add_w):
            return False
        if c:
            c[0] += add_ps
            c[1] += add_w
        else:
            self.counts[job.job_id] = [add_ps, add_w]
        return True

    def add_task(self, job: JobView, role: str) -> bool:
        """Add one PS or one worker (a job's first task brings the minimum of the other role)."""
        ps, w = self.get(job)
        if not self.can_add(job, role):
            return False
        if ps == 0 and w == 0:
            return self.add_unit(job)
        add_ps, add_w = (1, 0) if role == "ps" else (0, 1)
        if not self._place_tasks(job, add_ps, add_w):
            return False
        self.counts[job.job_id] = [ps + add_ps, w + add_w]
        return True

    def fill(self, job: JobView) -> int:
        """Add units to ``job`` until its caps or the cluster stop it; returns how many were added."""
        n = 0
        while self.can_grow(job) and self.add_unit(job):
            n += 1
        return n
