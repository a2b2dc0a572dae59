"""Trace augmentation: many training episodes from one cluster's job history.

An operator's history is one trace (or a few). Training on it as is would fit the policy to one
arrival sequence; :func:`augment` draws a different, plausible episode from it per seed:

1. **random window** (``window_seconds``): the jobs arriving in a window of that length, its
   start drawn uniformly between the first arrival and the last arrival minus the window (moved
   to the next arrival when it holds no job), shifted so the window starts at 0;
2. **arrival-rate scaling** (``rate``): every arrival time divided by ``rate`` (2.0: the same
   jobs arrive twice as fast, a heavier load);
3. **time shifts** (``jitter_seconds``): each job's arrival moved by U(-jitter, +jitter),
   clamped at 0;
4. **resampled jobs** (``resample``): each arrival keeps its time but takes the type, length,
   limits and demands of a job drawn (with replacement) from the whole source trace -- the
   workload's mix, not its exact order;
5. **resampled lengths** (``length_jitter``): each job's epochs times U(1 - a, 1 + a);
6. ``max_jobs``: keep only the first that many arrivals.

Job ids are kept (they stay unique); the result is sorted by (arrival, id). Deterministic for a
given source, config and random generator. This module reads no files; ``generate_trace``
applies it to the trace files named by a ``trace:`` preset (:mod:`dl2_mesos.policy.sim.settings`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dl2_mesos.errors import ConfigError


@dataclass(frozen=True)
class AugmentConfig:
    """How to draw an episode from a source trace (see the module docstring); defaults change nothing."""

    window_seconds: float | None = None
    rate: float = 1.0
    jitter_seconds: float = 0.0
    resample: bool = False
    length_jitter: float = 0.0
    max_jobs: int | None = None

    def __post_init__(self) -> None:
        w = self.window_seconds
        if w is not None and not (isinstance(w, (int, float)) and math.isfinite(w) and w > 0):
            raise ConfigError(f"augment window_seconds: must be > 0, got {w!r}")
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ConfigError(f"augment rate: must be > 0, got {self.rate!r}")
        if not (math.isfinite(self.jitter_seconds) and self.jitter_seconds >= 0):
            raise ConfigError(f"augment jitter_seconds: must be >= 0, got {self.jitter_seconds!r}")
        if not 0.0 <= self.length_jitter < 1.0:
            raise ConfigError(f"augment length_jitter: must be in [0, 1), got {self.length_jitter!r}")
        if self.max_jobs is not None and self.max_jobs < 1:
            raise ConfigError(f"augment max_jobs: must be >= 1, got {self.max_jobs!r}")

    @property
    def is_identity(self) -> bool:
        return self == AugmentConfig()

    def to_dict(self) -> dict[str, Any]:
        return {
            "window_seconds": self.window_seconds,
            "rate": self.rate,
            "jitter_seconds": self.jitter_seconds,
            "resample": self.resample,
            "length_jitter": self.length_jitter,
            "max_jobs": self.max_jobs,
        }


def _window(jobs: list, seconds: float, rng: np.random.Generator) -> list:
    first, last = jobs[0].arrival_time, jobs[-1].arrival_time
    start = float(rng.uniform(first, max(first, last - seconds)))
    start = min(j.arrival_time for j in jobs if j.arrival_time >= start)  # never an empty window
    inside = [j for j in jobs if start <= j.arrival_time < start + seconds]
    return [replace(j, arrival_time=j.arrival_time - start) for j in inside]


def augment(jobs: Sequence, cfg: AugmentConfig, rng: np.random.Generator) -> tuple:
    """An episode drawn from ``jobs`` (trace jobs: ``job_id``, ``arrival_time``, ``spec``).

    Raises:
        ConfigError: ``jobs`` is empty.
    """
    out = sorted(jobs, key=lambda j: (j.arrival_time, j.job_id))
    if not out:
        raise ConfigError("cannot augment an empty trace")
    source = out
    if cfg.window_seconds is not None:
        out = _window(out, cfg.window_seconds, rng)
    if cfg.rate != 1.0:
        out = [replace(j, arrival_time=j.arrival_time / cfg.rate) for j in out]
    if cfg.jitter_seconds > 0:
        shifts = rng.uniform(-cfg.jitter_seconds, cfg.jitter_seconds, size=len(out))
        out = [replace(j, arrival_time=max(0.0, j.arrival_time + float(d))) for j, d in zip(out, shifts)]
    if cfg.resample:
        picks = rng.integers(0, len(source), size=len(out))
        out = [replace(j, spec=replace(source[int(k)].spec, name=j.spec.name)) for j, k in zip(out, picks)]
    if cfg.length_jitter > 0:
        factors = rng.uniform(1.0 - cfg.length_jitter, 1.0 + cfg.length_jitter, size=len(out))
        out = [
            replace(j, spec=replace(j.spec, epochs=j.spec.epochs * float(f))) for j, f in zip(out, factors)
        ]
    out.sort(key=lambda j: (j.arrival_time, j.job_id))
    if cfg.max_jobs is not None:
        out = out[: cfg.max_jobs]
    return tuple(out)


__all__ = ["AugmentConfig", "augment"]
