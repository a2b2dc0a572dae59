"""Times and durations as people read them in the CLI (``dl2 jobs``): ``3m12s``, ``2h05m``,
``03:41:07`` today, ``2026-11-30 22:10`` before; and a job's completion time (JCT: from submission
to the end of its last phase)."""

from __future__ import annotations

import time
from typing import Any

from dl2_mesos.jobs import JobPhase

END_PHASES = tuple(p.value for p in JobPhase if p.terminal)


def duration(seconds: float | None) -> str:
    """``45s``, ``3m12s``, ``2h05m``, ``3d04h``; ``-`` for none or a negative value."""
    if seconds is None or seconds < 0:
        return "-"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def clock(ts: float | None, now: float | None = None) -> str:
    """Local ``HH:MM:SS`` for a time of today, else ``YYYY-MM-DD HH:MM``; ``-`` for none."""
    if not ts:
        return "-"
    now = time.time() if now is None else now
    local = time.localtime(ts)
    if time.strftime("%Y-%m-%d", local) == time.strftime("%Y-%m-%d", time.localtime(now)):
        return time.strftime("%H:%M:%S", local)
    return time.strftime("%Y-%m-%d %H:%M", local)


def ended_at(job: dict[str, Any]) -> float | None:
    """When the job reached its terminal phase, if it did."""
    phase_times = job.get("phase_times") or {}
    if job.get("phase") in END_PHASES:
        return phase_times.get(job["phase"])
    return None


def jct(job: dict[str, Any]) -> float | None:
    """Job completion time in seconds (submission to end), or None while the job has not ended."""
    end, start = ended_at(job), job.get("submitted_at")
    return end - start if end is not None and start else None


def queue_wait(job: dict[str, Any], now: float | None = None) -> float | None:
    """Seconds from submission to the first run (the API's ``queue_wait_seconds`` when given;
    still growing for a job that has not run and not ended)."""
    given = job.get("queue_wait_seconds")
    if isinstance(given, (int, float)):
        return float(given)
    start, submitted = job.get("started_at"), job.get("submitted_at")
    if not submitted:
        return None
    if isinstance(start, (int, float)):
        return start - submitted
    if ended_at(job) is None:
        return (time.time() if now is None else now) - submitted
    return None
