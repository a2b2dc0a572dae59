"""Retention of ended jobs: finished, failed and cancelled jobs are deleted from the scheduler
state and the state store once they are older than ``retain_ended_for`` seconds, or beyond the
newest ``retain_ended_jobs`` ended jobs (0 disables either rule).

Runs on the loop thread (:class:`~dl2_mesos.framework.loop.SchedulingLoop` calls
:func:`expire_ended_jobs` every few seconds); a deletion is fenced like every other write.
"""

from __future__ import annotations

import logging
from typing import Any

from dl2_mesos.framework.records import TERMINAL_TASK_STATES, FrameworkJob

logger = logging.getLogger(__name__)


def ended_at(job: FrameworkJob) -> float:
    """Wall clock when the job entered its terminal phase (its submission time if unknown)."""
    return float(job.phase_times.get(job.phase.value, job.submitted_at))


def expired(jobs: dict[str, FrameworkJob], now: float, max_age: float, max_count: int) -> list[str]:
    """Ids of the ended jobs to delete: older than ``max_age`` seconds, or beyond the newest
    ``max_count`` ended jobs (0 = no such limit). Oldest first; a job whose tasks have not all
    ended yet (a kill still on its way) is kept."""
    ended = sorted((j for j in jobs.values() if j.phase.terminal and _tasks_ended(j)),
                   key=lambda j: (ended_at(j), j.job_id))
    out = [j.job_id for j in ended if max_age > 0 and now - ended_at(j) > max_age]
    if max_count > 0 and len(ended) > max_count:
        gone = set(out)
        out += [j.job_id for j in ended[:len(ended) - max_count] if j.job_id not in gone]
    return out


def _tasks_ended(job: FrameworkJob) -> bool:
    return all(t.state in TERMINAL_TASK_STATES for t in job.tasks.values())


def expire_ended_jobs(core: Any, now: float) -> list[str]:
    """Delete the expired ended jobs of ``core`` (store first, then memory). Returns their ids."""
    ids = expired(core.jobs, now, core.cfg.retain_ended_for, core.cfg.retain_ended_jobs)
    for job_id in ids:
        core.store.delete_job(job_id)
        core.book.remove(job_id)
        core.metrics.jobs_expired.inc()
    if ids:
        logger.info("retention: deleted %d ended jobs (%s%s)", len(ids), ", ".join(ids[:5]),
                    ", ..." if len(ids) > 5 else "")
    return ids
