"""Why a job is pending, in words: what the API's job view, ``dl2 jobs`` and the status page show.

Two steps. At each slot decision (DL2 §3.2: the scheduler decides once per time slot)
:func:`explain_slot` notes, for every job that got no task, what stood in the way: the policy
gave it nothing, or what it was given did not fit what was free (in the offers the framework
held plus its own tasks), or only fewer workers than its minimum fitted. Between decisions
:func:`pending_reason` combines that note with the job's live state (tasks starting, placed
tasks waiting for their agents' offers, a lost agent, a failure restart, a task no agent could
ever hold, a framework not registered) into one reason per pending job::

    {"code": "waiting_for_capacity", "short": "needs 1 gpus/worker, free 0", "message": "..."}

Codes: ``not_registered``, ``suspended``, ``starting``, ``waiting_for_offers``, ``fits_no_agent``,
``agent_lost``, ``requeued``, ``held_by_policy``, ``waiting_for_capacity``, ``below_minimum``,
``no_agents``, ``waiting_for_slot``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from dl2_mesos.allocation import Allocation
from dl2_mesos.cluster import ClusterState
from dl2_mesos.jobs import JobSpec
from dl2_mesos.placement import PlacementPlan
from dl2_mesos.resources import Resources
from dl2_mesos.framework.cluster_capacity import UNITS, fmt

TERMINAL_TASK_STATES = ("TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST", "TASK_DROPPED",
                        "TASK_GONE", "TASK_GONE_BY_OPERATOR", "TASK_UNKNOWN")


def reason(code: str, short: str, message: str) -> dict[str, str]:
    return {"code": code, "short": short[:60], "message": message}


# -- at a decision ------------------------------------------------------------------------------
def _leftover(state: ClusterState, placement: PlacementPlan) -> dict[str, Resources]:
    """Per agent: what is still free once the slot's plan is carried out."""
    free = {a.agent_id: a.available for a in state.agents}
    for t in placement.keep:
        free[t.agent_id] = free.get(t.agent_id, Resources()) - t.resources
    for p in placement.start:
        free[p.agent_id] = free.get(p.agent_id, Resources()) - p.resources
    return free


def _fit_count(free: dict[str, Resources], demand: Resources, n: int) -> int:
    """How many of ``n`` tasks of ``demand`` fit into ``free`` (charged as they are placed)."""
    placed = 0
    for _ in range(n):
        spot = next((aid for aid, f in free.items() if demand.fits_in(f)), None)
        if spot is None:
            break
        free[spot] = free[spot] - demand
        placed += 1
    return placed


def explain_slot(state: ClusterState, allocation: Allocation, placement: PlacementPlan) -> dict[str, dict[str, str]]:
    """For every job of ``state`` that the slot leaves without tasks: why (see the module doc)."""
    out: dict[str, dict[str, str]] = {}
    leftover: dict[str, Resources] | None = None
    seen: dict[tuple[Any, ...], dict[str, str]] = {}
    others = sum(1 for j in state.jobs if not placement.granted.get_counts(j.job_id).is_zero)
    for j in state.jobs:
        if not placement.granted.get_counts(j.job_id).is_zero:
            continue
        want = allocation.get_counts(j.job_id)
        if want.is_zero:
            given = f"gave this slot's resources to {others} other job{'s' if others != 1 else ''}" if others \
                else "allocated nothing"
            out[j.job_id] = reason("held_by_policy", f"held back by the policy (slot {state.slot})",
                                   f"held back by the policy at slot {state.slot}: it {given}")
            continue
        if leftover is None:
            leftover = _leftover(state, placement)
        spec = j.spec
        assert spec.worker is not None and spec.ps is not None
        key = (spec.worker, spec.ps, spec.min_ps, spec.min_workers, want.num_ps, want.num_workers)
        if key in seen:  # jobs of one type ask alike: one look at the free resources each
            out[j.job_id] = seen[key]
            continue
        out[j.job_id] = seen[key] = _capacity_reason(state.slot, spec, want.num_ps, want.num_workers, leftover)
    return out


def _capacity_reason(slot: int, spec: JobSpec, num_ps: int, num_workers: int,
                     leftover: dict[str, Resources]) -> dict[str, str]:
    """Why ``num_ps`` PS and ``num_workers`` workers of ``spec`` got nothing in ``leftover``."""
    assert spec.worker is not None and spec.ps is not None
    free = dict(leftover)
    total = Resources()
    for f in free.values():
        total = total + Resources(max(0.0, f.cpus), max(0.0, f.gpus), max(0.0, f.mem))
    got_ps = _fit_count(free, spec.ps, spec.min_ps)
    got_w = _fit_count(free, spec.worker, num_workers) if got_ps >= spec.min_ps else 0
    asked = f"{num_ps} PS and {num_workers} workers"
    if got_ps >= spec.min_ps and 0 < got_w < spec.min_workers:
        return reason(
            "below_minimum", f"cannot reach min {spec.min_workers} workers (fit {got_w})",
            f"cannot reach its minimum workers: the policy gave it {asked} at slot {slot}, but only "
            f"{got_w} worker{'s' if got_w != 1 else ''} of {fmt(spec.worker)} fit in what was free, "
            f"and it needs at least {spec.min_workers}")
    role, demand = ("PS", spec.ps) if got_ps < spec.min_ps else ("worker", spec.worker)
    most = {k: max([max(0.0, getattr(f, k)) for f in leftover.values()] + [0.0]) for k in UNITS}
    lacking = [k for k in UNITS if getattr(demand, k) > most[k] + 1e-9]
    head = f"waiting for capacity: the policy gave it {asked} at slot {slot}; a {role} needs {fmt(demand)}, but "
    tail = f" ({fmt(total)} free in all, in held offers after the other jobs' tasks)"
    if lacking:
        res = lacking[0]
        return reason("waiting_for_capacity", f"needs {getattr(demand, res):g} {res}/{role.lower()}, free {most[res]:g}",
                      f"{head}at most {most[res]:g} {UNITS[res]} of {res} was free on one agent{tail}")
    return reason("waiting_for_capacity", f"no agent has a {role.lower()}'s {fmt(demand)} free at once",
                  f"{head}no agent had all of it free at once (most free on one agent: {fmt(most)}){tail}")


# -- between decisions --------------------------------------------------------------------------
def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


def pending_reason(job: Mapping[str, Any], *, cluster: Mapping[str, Any], transition: Any | None,
                   unfit: Mapping[str, Any] | None, agents_known: bool, lost: Mapping[str, tuple[str, float]],
                   now: float) -> dict[str, str] | None:
    """The reason a pending job (its public view ``job``) waits; None when it is not pending.

    Args:
        cluster: the view's cluster section so far (``registered``, ``suspended``, ``last_decision``,
            ``slot_seconds``).
        transition: the job's transition waiting for offers, if any.
        unfit: why no known agent could hold one of its tasks
            (:func:`~dl2_mesos.framework.cluster_capacity.unfit_reason`), None when some can.
        agents_known: whether any agent is known at all.
        lost: job id -> (hostname, when) of the agent lost under it.
    """
    if job.get("phase") != "pending":
        return None
    if not cluster.get("registered"):
        return reason("not_registered", "framework not registered with Mesos",
                      "the framework is not registered with a Mesos master: nothing can be launched until it is")
    if cluster.get("suspended"):
        return reason("suspended", "ZooKeeper connection suspended",
                      "the framework lost its ZooKeeper connection for a moment and decides nothing until it is back")
    tasks = [t for t in job.get("tasks") or [] if not t.get("killing") and t.get("state") not in TERMINAL_TASK_STATES]
    if tasks:
        running = sum(t.get("state") == "TASK_RUNNING" for t in tasks)
        return reason("starting", f"starting: {running}/{len(tasks)} tasks running",
                      f"starting generation {job.get('generation')}: {running} of {len(tasks)} tasks running")
    if transition is not None:
        hosts = sorted({p.agent_id for p in transition.start})
        return reason("waiting_for_offers", f"placed; waiting for offers of {len(hosts)} agent(s)",
                      f"placed ({transition.reason}) on {', '.join(hosts)}; waiting for "
                      f"{'that agent' if len(hosts) == 1 else 'those agents'}' offers since "
                      f"{_clock(transition.created)}")
    if unfit is not None:
        return reason("fits_no_agent", f"fits no agent ({unfit['resource']})", unfit["error"])
    decision = cluster.get("last_decision") or {}
    decided_at = float(decision.get("at") or 0.0)
    noted = (decision.get("waiting") or {}).get(job.get("id"))
    gone = lost.get(str(job.get("id")))
    ran_since = float((job.get("phase_times") or {}).get("running", 0.0))
    if gone is not None and gone[1] >= ran_since and gone[1] >= decided_at:
        return reason("agent_lost", f"agent {gone[0]} lost",
                      f"its agent {gone[0]} was lost at {_clock(gone[1])}; the job is placed again at the next slot "
                      f"(from its last checkpoint)")
    entered = float((job.get("phase_times") or {}).get("pending", 0.0))
    message = str(job.get("message") or "")
    if message and entered > decided_at and entered > float(job.get("submitted_at") or 0.0):
        return reason("requeued", f"requeued: {message}",
                      f"back in the queue at {_clock(entered)} ({message}); it is placed again at the next slot")
    if noted is not None and decided_at >= float(job.get("submitted_at") or 0.0):
        out = dict(noted)
        if gone is not None and gone[1] >= ran_since:
            out["message"] += f" (its agent {gone[0]} was lost at {_clock(gone[1])})"
        return out
    if not agents_known:
        return reason("no_agents", "no agent known yet",
                      "no agent has offered resources yet (and the master's agent list is empty or unread)")
    slot_s = float(cluster.get("slot_seconds") or 0.0)
    next_at = decided_at + slot_s if decided_at else 0.0
    when = f"; the next slot starts at about {_clock(next_at)}" if next_at > now else ""
    return reason("waiting_for_slot", "waiting for the next slot",
                  f"submitted after the last decision: the policy considers it at the next slot{when}")
