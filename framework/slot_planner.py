"""The slot planner: pure functions from the framework's records to a policy's input and from a
policy's allocation to transitions.

Per slot (DL2 §3.2: the scheduler decides once per time slot) the core freezes a
:class:`~dl2_mesos.cluster.ClusterState` with :func:`snapshot`, asks the policy, and hands the
allocation to :func:`plan_slot`, which runs the one placement function shared with the
simulator (:func:`dl2_mesos.placement.place`) and groups the plan per job into
:class:`~dl2_mesos.framework.transitions.Transition` s. Nothing here mutates its inputs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from dl2_mesos.allocation import Allocation, JobAllocation
from dl2_mesos.cluster import AgentView, ClusterState, TaskView
from dl2_mesos.jobs import JobPhase
from dl2_mesos.placement import PlacementPlan, PlannedTask, place
from dl2_mesos.resources import Resources
from dl2_mesos.slot_accounting import job_view, slot_reward
from dl2_mesos.framework.offer_book import OfferBook
from dl2_mesos.framework.records import FrameworkJob
from dl2_mesos.framework.transitions import Transition

logger = logging.getLogger("dl2_mesos.framework.core")


def snapshot(jobs: Sequence[FrameworkJob], offers: OfferBook, *, slot: int, now: float, slot_seconds: float,
             framework_id: str | None,
             measured_restart: Callable[[str], float | None] | None = None) -> ClusterState:
    """The frozen state a policy decides on: agents from held offers plus our own tasks.

    Args:
        jobs: the active jobs, in arrival order.
        offers: the held offers (an agent's capacity for us is what it offers plus what we run there).
        slot: the slot being decided.
        now: seconds since the framework's epoch.
        measured_restart: job type -> its measured restart cost, None while unmeasured
            (:class:`~dl2_mesos.restart_costs.RestartCostBook`).
    """
    views = []
    tasks = []
    ours: dict[str, Resources] = {}
    for j in jobs:
        live = j.live_tasks()
        views.append(job_view(
            j.job_id, j.spec, slot=slot, arrival_slot=j.arrival_slot, arrival_time=j.arrival_time,
            epochs_done=j.epochs_done, num_ps=sum(t.role == "ps" for t in live),
            num_workers=sum(t.role == "worker" for t in live), ledger=j.ledger, measured_epochs_per_second=j.measured_eps,
            measured_restart_seconds=measured_restart(j.spec.job_type) if measured_restart else None,
        ))
        for t in live:
            tasks.append(TaskView(t.task_id, j.job_id, t.role, t.agent_id, t.resources))
            ours[t.agent_id] = ours.get(t.agent_id, Resources()) + t.resources
    agents = []
    for aid in sorted(set(offers.agents) | set(ours)):
        ag = offers.get(aid)
        free = ag.free if ag else Resources()
        mine = ours.get(aid, Resources())
        agents.append(AgentView(aid, offers.hostname(aid), free + mine, free + mine, ag.attributes if ag else ()))
    return ClusterState(slot=slot, slot_seconds=slot_seconds, now=now, jobs=tuple(views),
                        agents=tuple(agents), tasks=tuple(tasks), info={"framework_id": framework_id})


def current_counts(state: ClusterState) -> Allocation:
    """Every job keeps what it runs (what a slot gets when the policy fails)."""
    return Allocation({j.job_id: (j.num_ps, j.num_workers) for j in state.jobs if j.num_ps or j.num_workers})


@dataclass(frozen=True)
class SlotPlan:
    """What :func:`plan_slot` decided for one slot."""

    placement: PlacementPlan
    transitions: dict[str, Transition]
    unchanged: frozenset[str]  # running jobs whose tasks stay as they are


def plan_slot(allocation: Allocation, state: ClusterState, jobs: Mapping[str, FrameworkJob], now: float) -> SlotPlan:
    """Place ``allocation`` and group the result into one transition per changed job.

    A job still starting or rescaling keeps its counts this slot (unless it is stopped):
    rescaling a job whose processes have not come up yet only costs another restart.
    """
    held = {}
    for j in state.jobs:
        job = jobs[j.job_id]
        settling = job.phase == JobPhase.RESCALING or (job.phase == JobPhase.PENDING and job.live_tasks())
        want = allocation.get_counts(j.job_id)
        if settling and not want.is_zero and (want.num_ps, want.num_workers) != (j.num_ps, j.num_workers):
            logger.info("job %s is still %s; keeping %d PS, %d workers this slot", j.job_id,
                        "rescaling" if job.phase == JobPhase.RESCALING else "starting", j.num_ps, j.num_workers)
            held[j.job_id] = JobAllocation(j.num_ps, j.num_workers)
    if held:
        allocation = Allocation({**dict(allocation.items()), **held})
    plan = place(allocation, state)
    changed = plan.changed_jobs()
    unchanged = frozenset(j.job_id for j in state.jobs if j.job_id not in changed and (j.num_ps or j.num_workers))
    return SlotPlan(plan, transitions_for(plan, now, reason=f"slot {state.slot}"), unchanged)


def replan(state: ClusterState, intended: Mapping[str, JobAllocation], job_ids: Iterable[str],
           now: float, reason: str) -> dict[str, Transition]:
    """Re-place the intended counts of ``job_ids`` (every other job keeps what it runs)."""
    wanted = set(job_ids)
    target = {}
    for j in state.jobs:
        if j.job_id in wanted:
            want = intended.get(j.job_id)
            if want is not None:
                target[j.job_id] = want
        elif j.num_ps or j.num_workers:
            target[j.job_id] = JobAllocation(j.num_ps, j.num_workers)
    plan = place(Allocation(target), state)
    return transitions_for(plan, now, reason=reason, only=wanted)


def transitions_for(plan: PlacementPlan, now: float, reason: str, only: set[str] | None = None) -> dict[str, Transition]:
    """One transition per job the plan changes (restricted to ``only`` when given)."""
    stops: dict[str, list[str]] = {}
    starts: dict[str, list[PlannedTask]] = {}
    for t in plan.stop:
        stops.setdefault(t.job_id, []).append(t.task_id)
    for p in plan.start:
        starts.setdefault(p.job_id, []).append(p)
    out = {}
    for job_id in sorted(set(stops) | set(starts)):
        if only is not None and job_id not in only:
            continue
        out[job_id] = Transition(
            job_id=job_id, stop=tuple(stops.get(job_id, ())), start=tuple(starts.get(job_id, ())),
            granted=plan.granted.get_counts(job_id), created=now, reason=reason,
        )
    return out


def reward_since(epochs_at_start: Mapping[str, float], jobs: Mapping[str, FrameworkJob]) -> float | None:
    """The slot reward (:func:`dl2_mesos.slot_accounting.slot_reward`) of the jobs active at the
    slot's start, from the progress they reported since. None when no job was active: an idle
    cluster says nothing about the policy, so it must not count towards a rollback."""
    if not epochs_at_start:
        return None
    still = [jid for jid in epochs_at_start if jid in jobs]
    return slot_reward({jid: jobs[jid].epochs_done - epochs_at_start[jid] for jid in still},
                       {jid: jobs[jid].spec.epochs for jid in still})
