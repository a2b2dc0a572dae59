"""Per-run metrics of a simulation: JCT statistics, makespan, utilisation, rescales.

Units are seconds throughout (``*_slots`` helpers divide by the slot length). Definitions:

* JCT of a job = its completion time minus its arrival time (fractional within a slot).
* Makespan = the last completion time minus the first arrival time.
* CPU (GPU) utilisation of a slot = CPU-seconds held by placed tasks in the slot / (cluster
  CPUs x slot length); a job that finishes mid-slot holds its tasks only until it finishes.
  The run's utilisation is the same ratio over the makespan.
* A run cut off by ``max_slots`` is ``truncated``: unfinished jobs' JCT is censored at the stop
  time (a lower bound) and they are counted in ``num_unfinished``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class JobRecord:
    """What happened to one job."""

    job_id: str
    job_type: str
    epochs: float
    arrival_time: float
    start_time: float | None  # first slot start at which it ran (None: never ran)
    end_time: float | None  # completion time (None: unfinished)
    jct: float  # seconds; censored at the stop time when unfinished
    finished: bool
    rescales: int
    epochs_done: float


@dataclass(frozen=True)
class SlotRecord:
    """Cluster use in one slot."""

    slot: int
    time: float
    cpu_util: float
    gpu_util: float
    running_jobs: int
    waiting_jobs: int
    reward: float


@dataclass(frozen=True)
class RunMetrics:
    """Summary and details of one simulation run."""

    policy: str
    seed: int
    slot_seconds: float
    avg_jct: float
    median_jct: float
    p95_jct: float
    makespan: float
    cpu_util: float
    gpu_util: float
    rescales: int
    num_jobs: int
    num_finished: int
    slots: int
    truncated: bool
    total_reward: float
    jobs: tuple[JobRecord, ...]
    slot_records: tuple[SlotRecord, ...]

    @property
    def num_unfinished(self) -> int:
        return self.num_jobs - self.num_finished

    @property
    def avg_jct_slots(self) -> float:
        return self.avg_jct / self.slot_seconds

    @property
    def makespan_slots(self) -> float:
        return self.makespan / self.slot_seconds

    def jcts(self) -> np.ndarray:
        return np.array([j.jct for j in self.jobs], dtype=float)

    def summary(self) -> dict:
        """The scalar figures (no per-job or per-slot lists)."""
        return {
            "policy": self.policy,
            "seed": self.seed,
            "avg_jct": self.avg_jct,
            "median_jct": self.median_jct,
            "p95_jct": self.p95_jct,
            "makespan": self.makespan,
            "cpu_util": self.cpu_util,
            "gpu_util": self.gpu_util,
            "rescales": self.rescales,
            "num_jobs": self.num_jobs,
            "num_finished": self.num_finished,
            "slots": self.slots,
            "truncated": self.truncated,
            "total_reward": self.total_reward,
        }

    def to_dict(self) -> dict:
        """Everything, JSON-ready."""
        d = self.summary()
        d["slot_seconds"] = self.slot_seconds
        d["jobs"] = [asdict(j) for j in self.jobs]
        d["slot_records"] = [asdict(s) for s in self.slot_records]
        return d


def build_metrics(
    policy: str,
    seed: int,
    slot_seconds: float,
    jobs: list[JobRecord],
    slots: list[SlotRecord],
    cpu_seconds: float,
    gpu_seconds: float,
    capacity_cpus: float,
    capacity_gpus: float,
    truncated: bool,
) -> RunMetrics:
    """Aggregate job and slot records into :class:`RunMetrics`."""
    jct = np.array([j.jct for j in jobs], dtype=float)
    if len(jobs):
        first = min(j.arrival_time for j in jobs)
        last = max((j.end_time if j.end_time is not None else j.arrival_time + j.jct) for j in jobs)
        makespan = max(0.0, last - first)
    else:
        makespan = 0.0

    def util(used: float, cap: float) -> float:
        return used / (cap * makespan) if cap > 0 and makespan > 0 else 0.0

    return RunMetrics(
        policy=policy,
        seed=seed,
        slot_seconds=slot_seconds,
        avg_jct=float(jct.mean()) if len(jct) else 0.0,
        median_jct=float(np.median(jct)) if len(jct) else 0.0,
        p95_jct=float(np.percentile(jct, 95)) if len(jct) else 0.0,
        makespan=makespan,
        cpu_util=util(cpu_seconds, capacity_cpus),
        gpu_util=util(gpu_seconds, capacity_gpus),
        rescales=sum(j.rescales for j in jobs),
        num_jobs=len(jobs),
        num_finished=sum(1 for j in jobs if j.finished),
        slots=len(slots),
        truncated=truncated,
        total_reward=float(sum(s.reward for s in slots)),
        jobs=tuple(jobs),
        slot_records=tuple(slots),
    )
