"""The read-only view of the scheduler state that the HTTP API serves (built on the loop thread,
published as one immutable dict)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dl2_mesos.jobs import JobPhase
from dl2_mesos.resources import Resources
from dl2_mesos.framework.job_book import JobBook
from dl2_mesos.framework.metrics import FrameworkMetrics
from dl2_mesos.framework.offer_book import OfferBook


def build_view(book: JobBook, offers: OfferBook, pending: Mapping[str, Any], metrics: FrameworkMetrics,
               cluster: dict[str, Any], policy: dict[str, Any]) -> dict[str, Any]:
    """A JSON-able snapshot for the HTTP API (jobs, cluster, policy); also refreshes the gauges.

    Args:
        book: the jobs.
        offers: the held offers.
        pending: transitions waiting for offers, by job id.
        metrics: gauges to refresh.
        cluster: the core's own fields of the ``cluster`` section (framework id, slot, policy...).
        policy: the ``policy`` section.
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
    return {
        "jobs": {j.job_id: j.public() for j in book.jobs.values()},
        "cluster": {
            **cluster,
            "agents": list(per_agent.values()),
            "allocations": {j.job_id: {"num_ps": j.num_ps, "num_workers": j.num_workers}
                            for j in book.jobs.values() if not j.phase.terminal},
            "jobs_by_phase": counts,
            "pending_transitions": sorted(pending),
        },
        "policy": policy,
    }
