"""Per-job results by job size: which jobs make the gap between two schedulers.

A job's *size* is its no-queueing run time, the lower bound's ``run_s`` (its epochs at its
fastest feasible size, :mod:`~dl2_mesos.policy.sim.bounds`). The jobs of all seeds are cut
into classes of about equal count by quantiles of that run time; the edges are the same for
every policy, so a class holds the same jobs under each. Per class and policy:

* mean JCT, and mean *wait* (arrival to the first start; a job that never started waits its
  whole censored JCT);
* mean *stretch*, ``(JCT - wait) / run_s``: 1 is a job at its fastest size from its start to
  its end; above 1 it ran smaller, paused or paid restarts;
* mean rescales;
* *share*: the class's JCT sum divided by the number of jobs of all classes. The shares of a
  policy add up to its avg JCT, so subtracting two policies' shares class by class splits
  the gap between their avg JCTs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class SizeClass:
    """One policy's jobs in one size class."""

    policy: str
    index: int  # 0 = the shortest jobs
    low_s: float  # run_s range of the class: [low_s, high_s]
    high_s: float
    jobs: int
    mean_jct: float
    mean_wait: float
    stretch: float  # nan when no job of the class has a positive finite run_s
    rescales: float
    share: float

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (JSON has no NaN: a missing stretch is None)."""
        d = asdict(self)
        if math.isnan(self.stretch):
            d["stretch"] = None
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SizeClass:
        """The inverse of :meth:`to_dict`."""
        return cls(**{**d, "stretch": math.nan if d["stretch"] is None else float(d["stretch"])})


def _finite(run_s: Sequence[float]) -> np.ndarray:
    finite = np.array([r for r in run_s if math.isfinite(r)], dtype=float)
    if not len(finite):
        raise ValueError("no job has a finite no-queueing run time")
    return finite


def class_edges(run_s: Sequence[float], classes: int) -> np.ndarray:
    """The ``classes - 1`` inner edges (quantiles) of the finite run times ``run_s``."""
    if classes < 1:
        raise ValueError(f"classes must be >= 1, got {classes}")
    return np.quantile(_finite(run_s), np.arange(1, classes) / classes)


def _wait(job: Mapping[str, Any]) -> float:
    start = job.get("start_time")
    if start is None:  # never ran: it waited all of its (censored) JCT
        return float(job["jct"])
    return float(start) - float(job["arrival_time"])


def size_classes(
    runs: Mapping[str, Sequence[Mapping[str, Any]]],
    seeds: Sequence[int],
    run_s: Mapping[tuple[int, str], float],
    classes: int = 5,
) -> list[SizeClass]:
    """Break every policy's jobs down into ``classes`` size classes.

    Args:
        runs: policy name -> its run documents (``RunMetrics.to_dict()``, with ``jobs``), one
            per seed in the order of ``seeds``.
        seeds: the seeds of the runs.
        run_s: (seed, job id) -> the job's no-queueing run time (``inf``: it can never run).
        classes: number of classes; classes left empty by ties in run_s are left out.

    Raises:
        ValueError: ``classes`` < 1, a run without per-job records, a job without a run time,
            or runs and seeds of different lengths.
    """
    edges = class_edges(list(run_s.values()), classes)
    finite = _finite(list(run_s.values()))
    bounds = [float(finite.min()), *edges.tolist(), float(finite.max())]
    out: list[SizeClass] = []
    for name, docs in runs.items():
        if len(docs) != len(seeds):
            raise ValueError(f"{name}: {len(docs)} runs for {len(seeds)} seeds")
        cols: list[list[tuple[float, float, float, int]]] = [[] for _ in range(classes)]
        n = 0
        for seed, doc in zip(seeds, docs):
            jobs = doc.get("jobs")
            if jobs is None:
                raise ValueError(f"{name} seed {seed}: the run has no per-job records")
            for job in jobs:
                key = (int(seed), str(job["job_id"]))
                if key not in run_s:
                    raise ValueError(f"{name} seed {seed}: no run time for job {job['job_id']!r}")
                r = run_s[key]
                k = classes - 1 if not math.isfinite(r) else int(np.searchsorted(edges, r, side="right"))
                jct, wait = float(job["jct"]), _wait(job)
                stretch = (jct - wait) / r if math.isfinite(r) and r > 0 else math.nan
                cols[k].append((jct, wait, stretch, int(job.get("rescales", 0))))
                n += 1
        for k, rows in enumerate(cols):
            if not rows:
                continue
            a = np.array(rows, dtype=float)
            st = a[:, 2][~np.isnan(a[:, 2])]
            out.append(SizeClass(
                policy=name, index=k, low_s=bounds[k], high_s=bounds[k + 1], jobs=len(rows),
                mean_jct=float(a[:, 0].mean()), mean_wait=float(a[:, 1].mean()),
                stretch=float(st.mean()) if len(st) else math.nan, rescales=float(a[:, 3].mean()),
                share=float(a[:, 0].sum() / n),
            ))
    return out


def format_size_classes(rows: Sequence[SizeClass]) -> str:
    """A plain-text table: one line per class and policy, classes from the shortest jobs up."""
    lines = [
        "jobs by size (no-queueing run time; classes of about equal count over all seeds; "
        "stretch = (JCT - wait) / run time; share = the class's part of the avg JCT)",
        f"{'class':>5} {'run time (s)':>17} {'jobs':>5}  {'policy':<10} {'mean JCT':>9} {'wait':>8} "
        f"{'stretch':>7} {'rescales':>8} {'share':>8}",
    ]
    last = None
    for row in sorted(rows, key=lambda r: r.index):
        head = f"{row.index + 1:>5} {f'{row.low_s:.0f}-{row.high_s:.0f}':>17} {row.jobs:>5}"
        if row.index == last:
            head = " " * len(head)
        last = row.index
        stretch = "-" if math.isnan(row.stretch) else f"{row.stretch:.2f}"
        lines.append(f"{head}  {row.policy:<10} {row.mean_jct:>9.0f} {row.mean_wait:>8.0f} "
                     f"{stretch:>7} {row.rescales:>8.1f} {row.share:>8.0f}")
    return "\n".join(lines)


__all__ = ["SizeClass", "class_edges", "format_size_classes", "size_classes"]
