"""The one placement function, shared by the simulator and the framework.

Rule (the reference's load balancing, with its "stop at the first failure" quirk fixed):
a new task goes on the *least-loaded agent that fits it*, where an agent's load is the sum of
its used CPU and GPU fractions (see :meth:`Resources.load_of`). Ties go to the agent that
comes first in the state's agent order (agent ids sorted), so placement is deterministic.
A PS and a worker added together to a job are placed as a co-located *bundle* when one agent
fits both (the reference's bundle), else separately.

:class:`PlacementBoard` is the incremental form policies use while deciding (does one more
task still fit?); :func:`place` turns target counts into tasks to keep, stop and start.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dl2_mesos.allocation import Allocation, JobAllocation
from dl2_mesos.cluster import AgentView, ClusterState, JobView, TaskView
from dl2_mesos.resources import Resources


class PlacementBoard:
    """Free resources per agent, with least-loaded-fit placement.

    Starts from each agent's ``available`` resources with nothing used (deciding from scratch,
    as the reference's policies do every slot); running tasks can be charged explicitly.

    Implementation: agents in the same state (same capacity and same used resources) are
    interchangeable except for their tie-break order, and a homogeneous cluster has only a
    few dozen distinct states however many agents it has. So agents are grouped by state;
    the states are kept sorted by (load, state), each with a lazy min-heap of its agents'
    indices. A search walks the states in load order, stops at the first load level where
    one fits, and takes the lowest index among the fitting states of that level -- exactly
    "least-loaded agent that fits, ties to the earlier agent", in time independent of the
    number of agents.
    """

    def __init__(self, agents: Sequence[AgentView]) -> None:
        self._ids = [a.agent_id for a in agents]
        self._index = {a.agent_id: i for i, a in enumerate(agents)}
        self._cap = [(a.available.cpus, a.available.gpus, a.available.mem) for a in agents]
        self._used = [(0.0, 0.0, 0.0)] * len(agents)
        self._key: list[tuple] = [()] * len(agents)  # each agent's current state key
        self._count: dict[tuple, int] = {}  # state key -> number of agents in it
        self._members: dict[tuple, list[int]] = {}  # state key -> lazy min-heap of agent indices
        # bulk initial grouping (agents with equal capacity share a state); indices are
        # appended in increasing order, so every member list is already a valid heap
        keys: dict[tuple, tuple] = {}
        for i, cap in enumerate(self._cap):
            key = keys.get(cap)
            if key is None:
                key = keys[cap] = self._state_key(i)
            self._key[i] = key
            self._members.setdefault(key, []).append(i)
        self._count = {k: len(v) for k, v in self._members.items()}
        self._order: list[tuple] = sorted(self._members)  # state keys sorted (load first)

    # -- state bookkeeping -------------------------------------------------------------------
    def _state_key(self, i: int) -> tuple:
        (uc, ug, um), (cc, cg, cm) = self._used[i], self._cap[i]
        # the same float expression as Resources.load_of, so loads compare exactly alike
        load = 0.0
        if cc > 0:
            load += uc / cc
        if cg > 0:
            load += ug / cg
        return (load, cc - uc, cg - ug, cm - um, cc, cg, cm)

    def _first_member(self, key: tuple) -> int:
        heap = self._members[key]
        while self._key[heap[0]] != key:
            heapq.heappop(heap)
        return heap[0]

    def _set_used(self, i: int, used: tuple[float, float, float]) -> None:
        """Move agent ``i`` from its state to the state of ``used`` (runs once per placement)."""
        # leave the old state
        key = self._key[i]
        count = self._count
        n = count[key] - 1
        if n == 0:
            del count[key]
            del self._members[key]
            del self._order[bisect.bisect_left(self._order, key)]
        else:
            count[key] = n
            # the heap entry goes stale; it is dropped when it reaches the top
        # enter the new one
        self._used[i] = used
        key = self._key[i] = self._state_key(i)
        n = count.get(key, 0)
        count[key] = n + 1
        if n == 0:
            bisect.insort(self._order, key)
            self._members[key] = [i]
        else:
            heapq.heappush(self._members[key], i)

    # -- queries ---------------------------------------------------------------------------
    def load(self, agent_id: str) -> float:
        return self._key[self._index[agent_id]][0]

    def free(self, agent_id: str) -> Resources:
        k = self._key[self._index[agent_id]]
        return Resources(k[1], k[2], k[3])

    def least_loaded_fit(self, demand: Resources) -> str | None:
        """The agent a task of ``demand`` would go on, or None when no agent fits it."""
        i = self._find(demand)
        return None if i is None else self._ids[i]

    def _find(self, demand: Resources) -> int | None:
        dc, dg, dm = demand.cpus - 1e-9, demand.gpus - 1e-9, demand.mem - 1e-9
        best = None
        level = None
        for key in self._order:
            if level is not None and key[0] != level:
                break
            if key[1] >= dc and key[2] >= dg and key[3] >= dm:
                level = key[0]
                i = self._first_member(key)
                if best is None or i < best:
                    best = i
        return best

    # -- mutations -------------------------------------------------------------------------
    def charge(self, agent_id: str, demand: Resources) -> None:
        """Record ``demand`` as used on ``agent_id`` (an already placed task)."""
        i = self._index[agent_id]
        uc, ug, um = self._used[i]
        self._set_used(i, (uc + demand.cpus, ug + demand.gpus, um + demand.mem))

    def charge_many(self, placed: Iterable[tuple[str, Resources]]) -> None:
        """Charge many (agent id, demand) pairs at once (one state change per agent)."""
        totals: dict[int, list[float]] = {}
        for agent_id, d in placed:
            t = totals.setdefault(self._index[agent_id], [0.0, 0.0, 0.0])
            t[0] += d.cpus
            t[1] += d.gpus
            t[2] += d.mem
        for i, (c, g, m) in totals.items():
            uc, ug, um = self._used[i]
            self._set_used(i, (uc + c, ug + g, um + m))

    def release(self, agent_id: str, demand: Resources) -> None:
        """Give back ``demand`` on ``agent_id``."""
        i = self._index[agent_id]
        uc, ug, um = self._used[i]
        self._set_used(i, (uc - demand.cpus, ug - demand.gpus, um - demand.mem))

    def place(self, demand: Resources) -> str | None:
        """Place one task on the least-loaded agent that fits; None (and no change) if none fits."""
        i = self.place_index(demand)
        return None if i is None else self._ids[i]

    def place_index(self, demand: Resources) -> int | None:
        """:meth:`place`, returning the agent's position in the agent order given at construction."""
        i = self._find(demand)
        if i is None:
            return None
        uc, ug, um = self._used[i]
        self._set_used(i, (uc + demand.cpus, ug + demand.gpus, um + demand.mem))
        return i

    def place_bundle(self, ps: Resources, worker: Resources) -> str | None:
        """Place a PS and a worker together on one agent (the reference's bundle)."""
        return self.place(ps + worker)

    def fits_anywhere(self, demand: Resources) -> bool:
        return self._find(demand) is not None


@dataclass(frozen=True, slots=True)
class PlannedTask:
    """A task to start: which job, role, agent and resources."""

    job_id: str
    role: str
    agent_id: str
    resources: Resources


@dataclass(frozen=True)
class PlacementPlan:
    """What to do to reach a target allocation.

    Attributes:
        keep: running tasks that stay where they are.
        stop: running tasks to stop.
        start: new tasks to start.
        granted: the counts each job actually gets (its target, or less when tasks did not fit).
    """

    keep: tuple[TaskView, ...]
    stop: tuple[TaskView, ...]
    start: tuple[PlannedTask, ...]
    granted: Allocation

    def changed_jobs(self) -> set[str]:
        """Jobs that lose or gain tasks."""
        return {t.job_id for t in self.stop} | {t.job_id for t in self.start}


def _tasks_by_job(tasks: Iterable[TaskView]) -> dict[str, dict[str, list[TaskView]]]:
    out: dict[str, dict[str, list[TaskView]]] = {}
    for t in tasks:
        out.setdefault(t.job_id, {"ps": [], "worker": []})[t.role].append(t)
    return out


def place(target: Allocation, state: ClusterState) -> PlacementPlan:
    """Turn target counts into tasks to keep, stop and start.

    1. Every job keeps ``min(current, target)`` tasks of each role where they are; when it
       shrinks, the tasks on the most loaded agents stop first (load balance).
    2. Jobs then grow in arrival order: PS/worker pairs as co-located bundles, the rest one by
       one, each on the least-loaded agent that fits.
    3. A job that cannot get all its new tasks is granted what did fit; a job that would end
       below its minimum (PS or workers) gets its previous tasks back if it had any, else none.

    Jobs absent from ``target`` (or with a zero target) lose all their tasks.
    """
    board = PlacementBoard(state.agents)
    running = _tasks_by_job(state.tasks)
    jobs = state.jobs_by_id
    keep: list[TaskView] = []
    stop: list[TaskView] = []
    kept_by_job: dict[str, dict[str, list[TaskView]]] = {}

    # Pass 1: charge every running task, then choose the ones to stop.
    board.charge_many((t.agent_id, t.resources) for t in state.tasks)
    for job_id, roles in running.items():
        want = target.get_counts(job_id) if job_id in jobs else JobAllocation(0, 0)
        kept_by_job[job_id] = {}
        for role, tasks in roles.items():
            n_keep = want.num_ps if role == "ps" else want.num_workers
            # stop the tasks on the most loaded agents first; stable on task id
            ordered = sorted(tasks, key=lambda t: (-board.load(t.agent_id), t.task_id))
            n_stop = max(0, len(tasks) - n_keep)
            for t in ordered[:n_stop]:
                stop.append(t)
                board.release(t.agent_id, t.resources)
            kept_tasks = ordered[n_stop:]
            kept_by_job[job_id][role] = kept_tasks
            keep.extend(kept_tasks)

    # Pass 2: grow jobs in arrival order.
    start: list[PlannedTask] = []
    granted: dict[str, JobAllocation] = {}
    for job in state.jobs:
        want = target.get_counts(job.job_id)
        kept = kept_by_job.get(job.job_id, {"ps": [], "worker": []})
        have_ps, have_w = len(kept.get("ps", [])), len(kept.get("worker", []))
        add_ps, add_w = max(0, want.num_ps - have_ps), max(0, want.num_workers - have_w)
        new: list[PlannedTask] = []
        new_ps, new_w = _grow(board, job, add_ps, add_w, new)
        got_ps, got_w = have_ps + new_ps, have_w + new_w
        spec = job.spec
        if (got_ps or got_w) and (got_ps < spec.min_ps or got_w < spec.min_workers):
            # Cannot run at this size: undo the additions; fall back to what it had.
            for p in new:
                board.release(p.agent_id, p.resources)
            new = []
            prev = running.get(job.job_id, {"ps": [], "worker": []})
            dropped = [t for t in prev["ps"] + prev["worker"] if t in stop]
            can_restore = bool(prev["ps"] or prev["worker"]) and all(
                t.resources.fits_in(board.free(t.agent_id)) for t in dropped
            )
            # restore previous tasks one by one (fits re-checked as we go)
            if can_restore:
                restored = []
                for t in dropped:
                    if not t.resources.fits_in(board.free(t.agent_id)):
                        can_restore = False
                        break
                    board.charge(t.agent_id, t.resources)
                    restored.append(t)
                if can_restore:
                    for t in restored:
                        stop.remove(t)
                        keep.append(t)
                    got_ps, got_w = len(prev["ps"]), len(prev["worker"])
                else:
                    for t in restored:
                        board.release(t.agent_id, t.resources)
            if not can_restore:
                # nothing runs: stop the kept tasks too
                for t in kept.get("ps", []) + kept.get("worker", []):
                    keep.remove(t)
                    stop.append(t)
                    board.release(t.agent_id, t.resources)
                got_ps, got_w = 0, 0
        start.extend(new)
        if got_ps or got_w:
            granted[job.job_id] = JobAllocation(got_ps, got_w)
    return PlacementPlan(tuple(keep), tuple(stop), tuple(start), Allocation(granted))


def _grow(board: PlacementBoard, job: JobView, add_ps: int, add_w: int, out: list[PlannedTask]) -> tuple[int, int]:
    """Place up to ``add_ps`` PS and ``add_w`` workers for ``job``; returns how many were placed."""
    ps_res, w_res = job.spec.ps, job.spec.worker
    assert ps_res is not None and w_res is not None
    got_ps = got_w = 0
    while got_ps < add_ps and got_w < add_w:
        agent = board.place_bundle(ps_res, w_res)
        if agent is None:
            break
        out.append(PlannedTask(job.job_id, "ps", agent, ps_res))
        out.append(PlannedTask(job.job_id, "worker", agent, w_res))
        got_ps += 1
        got_w += 1
    # the rest (or bundles that did not fit on one agent) one task at a time, alternating
    while got_ps < add_ps or got_w < add_w:
        progressed = False
        if got_w < add_w:
            agent = board.place(w_res)
            if agent is not None:
                out.append(PlannedTask(job.job_id, "worker", agent, w_res))
                got_w += 1
                progressed = True
        if got_ps < add_ps:
            agent = board.place(ps_res)
            if agent is not None:
                out.append(PlannedTask(job.job_id, "ps", agent, ps_res))
                got_ps += 1
                progressed = True
        if not progressed:
            break
    return got_ps, got_w
