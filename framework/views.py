"""The read-only view of the scheduler state that the HTTP API serves (built on the loop thread,
published as one immutable dict)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dl2_mesos.jobs import JobPhase
from dl2_mesos.resources import Resources
from dl2_mesos.framework.cluster_capacity import CapacityBook, agents_of, unfit_reason
from dl2_mesos.framework.job_book import JobBook
from dl2_mesos.framework.metrics import FrameworkMetrics
from dl2_mesos.framework.offer_book import OfferBook
from dl2_mesos.framework.pending_reasons import pending_reason


def job_times(job: Mapping[str, Any], now: float) -> dict[str, float | None]:
    """Submit, start and finish times of a job's public view, its queue wait and JCT (seconds).

    Queue wait: submission to first run (still growing while it never ran). JCT: submission to
    its end (None until it ended).
    """
    submitted = job.get("submitted_at")
    started = job.get("started_at")
    times = job.get("phase_times") or {}
    phase = job.get("phase")
    ended = times.get(phase) if phase in ("finished", "failed", "cancelled") else None
    wait = None
    if isinstance(submitted, (int, float)):
        if isinstance(started, (int, float)):
            wait = max(0.0, started - submitted)
        elif ended is None:
            wait = max(0.0, now - submitted)
    return {"submitted_at": submitted, "started_at": started, "finished_at": ended, "queue_wait_seconds": wait,
            "jct_seconds": (ended - submitted) if ended is not None and isinstance(submitted, (int, float)) else None}


def build_view(book: JobBook, offers: OfferBook, pending: Mapping[str, Any], metrics: FrameworkMetrics,
               cluster: dict[str, Any], policy: dict[str, Any], *, capacity: CapacityBook | None = None,
               now: float = 0.0) -> dict[str, Any]:
    """A JSON-able snapshot for the HTTP API (jobs, cluster, policy); also refreshes the gauges.

    Args:
        book: the jobs.
        offers: the held offers.
        pending: transitions waiting for offers, by job id.
        metrics: gauges to refresh.
        cluster: the core's own fields of the ``cluster`` section (framework id, slot, policy...).
        policy: the ``policy`` section.
        capacity: the agents' totals (also updated here from held offers plus dl2's tasks).
        now: wall clock, for queue waits still growing.
    """
    live = [t for j in book.jobs.values() for t in j.live_tasks()]
    counts = {p.value: 0 for p in JobPhase}
    for j in book.jobs.values():
        counts[j.phase.value] += 1
    for p, n in counts.items():
        metrics.jobs.labels(p).set(n)
    for role in ("ps", "worker"):
        metrics.tasks.labels(role).set(sum(t.role == role for t in live))
    tot = Resources()
    for t in live:
        tot = tot + t.resources
    for k, v in tot.to_dict().items():
        metrics.allocated.labels(k).set(v)
    by_agent: dict[str, list[Any]] = {}  # one pass over the tasks (not one per agent: 500 x 2000)
    for t in live:
        by_agent.setdefault(t.agent_id, []).append(t)
    per_agent: dict[str, dict[str, Any]] = {}
    for aid in sorted(set(offers.agents) | set(by_agent)):
        ag = offers.get(aid)
        used = Resources()
        for t in by_agent.get(aid, ()):
            used = used + t.resources
        per_agent[aid] = {"agent_id": aid, "hostname": offers.hostname(aid),
                          "offered": ag.free.to_dict() if ag else None, "used_by_dl2": used.to_dict(),
                          "tasks": sorted(t.task_id for t in by_agent.get(aid, ()))}
        if capacity is not None:
            capacity.observe(aid, offers.hostname(aid), ag.free if ag else Resources(), used)
    cap = capacity.snapshot() if capacity is not None else None
    ctx = _reason_context(cluster, capacity, cap)
    jobs = {j.job_id: _job_view(j, cluster, pending, ctx, now) for j in book.jobs.values()}
    return {
        "jobs": jobs,
        "cluster": {
            **cluster,
            "capacity": cap,
            "agents": list(per_agent.values()),
            "allocations": {j.job_id: {"num_ps": j.num_ps, "num_workers": j.num_workers}
                            for j in book.jobs.values() if not j.phase.terminal},
            "jobs_by_phase": counts,
            "pending_transitions": sorted(pending),
        },
        "policy": policy,
    }


def patch_view(previous: Mapping[str, Any], book: JobBook, touched: set[str], pending: Mapping[str, Any],
               cluster: dict[str, Any], policy: dict[str, Any], *, capacity: CapacityBook | None = None,
               now: float = 0.0) -> dict[str, Any]:
    """``previous`` (a :func:`build_view` result) with the jobs in ``touched`` rebuilt or dropped.

    The core's own cluster fields, the allocations, phase counts, pending transitions and the
    policy section are brought up to date too; agents, capacity and the gauges stay as
    ``previous`` had them (the next full view refreshes them). O(touched jobs) instead of O(jobs +
    agents): what answering a stream of API commands needs.
    """
    old_cluster = previous["cluster"]
    ctx = _reason_context(cluster, capacity, old_cluster.get("capacity"))
    jobs = dict(previous["jobs"])
    allocations = dict(old_cluster.get("allocations") or {})
    for job_id in touched:
        job = book.jobs.get(job_id)
        if job is None:
            jobs.pop(job_id, None)
            allocations.pop(job_id, None)
            continue
        jobs[job_id] = view = _job_view(job, cluster, pending, ctx, now)
        if job.phase.terminal:
            allocations.pop(job_id, None)
        else:
            allocations[job_id] = {"num_ps": view["num_ps"], "num_workers": view["num_workers"]}
    counts = {p.value: 0 for p in JobPhase}
    for v in jobs.values():
        counts[v["phase"]] += 1
    return {
        **previous,
        "jobs": jobs,
        "cluster": {**old_cluster, **cluster, "allocations": allocations, "jobs_by_phase": counts,
                    "pending_transitions": sorted(pending)},
        "policy": policy,
    }


def _job_view(job: Any, cluster: Mapping[str, Any], pending: Mapping[str, Any], ctx: dict[str, Any],
              now: float) -> dict[str, Any]:
    """A job's public view with its times and, while it is pending, why."""
    out = job.public()
    out.update(job_times(out, now))
    if job.phase != JobPhase.PENDING:
        out["pending_reason"] = None
        return out
    spec = job.spec
    key = (spec.worker, spec.ps, spec.min_ps, spec.min_workers)
    unfit = ctx["unfit"]
    if key not in unfit:  # one check per distinct demand, not per job
        unfit[key] = unfit_reason(spec, ctx["agents"], ctx["overhead"])
        if unfit[key] is not None and ctx["estimated"]:
            unfit[key] = {**unfit[key], "error": unfit[key]["error"] + " (as far as offers show: the master's agent "
                          "list has not been read, so agents may be larger)"}
    out["pending_reason"] = pending_reason(out, cluster=cluster, transition=pending.get(job.job_id),
                                           unfit=unfit[key], agents_known=bool(ctx["agents"]), lost=ctx["lost"],
                                           now=now)
    return out


def _reason_context(cluster: Mapping[str, Any], capacity: CapacityBook | None,
                    cap: Mapping[str, Any] | None) -> dict[str, Any]:
    """What every pending job's reason is computed against (once per view)."""
    over = cluster.get("executor_overhead") or {}
    lost: dict[str, tuple[str, float]] = {}
    if capacity is not None:
        for host, at, hit in capacity.lost.values():
            for jid in hit:
                if jid not in lost or lost[jid][1] < at:
                    lost[jid] = (host, at)
    # from the live book when there is one (a patched view keeps the last full view's snapshot,
    # which may predate the agents that have offered since)
    agents = ([(a.agent_id, a.hostname, a.total) for a in capacity.agents()] if capacity is not None
              else agents_of(cap))
    source = capacity.source if capacity is not None else (cap or {}).get("source")
    return {"agents": agents, "lost": lost, "unfit": {}, "estimated": source != "master",
            "overhead": Resources(float(over.get("cpus", 0) or 0), 0.0, float(over.get("mem", 0) or 0))}
