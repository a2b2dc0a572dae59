"""The frozen cluster-state snapshot that every policy receives.

One ``ClusterState`` is built per time slot (by the simulator or by the framework's loop) and
is never mutated; policies read it and return an :class:`~dl2_mesos.allocation.Allocation`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from dl2_mesos.jobs import JobSpec
from dl2_mesos.resources import ZERO, Resources

ROLES = ("ps", "worker")


@dataclass(frozen=True, slots=True)
class TaskView:
    """A task (one PS or one worker) currently placed on an agent."""

    task_id: str
    job_id: str
    role: str  # "ps" | "worker"
    agent_id: str
    resources: Resources


@dataclass(frozen=True, slots=True)
class AgentView:
    """An agent (Mesos agent / simulated node).

    ``available`` is what dl2 may use on it when allocating from scratch: its total resources
    minus whatever runs there outside this scheduler.
    """

    agent_id: str
    hostname: str
    total: Resources
    available: Resources
    attributes: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class JobView:
    """A non-terminal job as the policy sees it at the start of a slot."""

    job_id: str
    spec: JobSpec
    arrival_slot: int
    arrival_time: float  # seconds since the scheduler's epoch
    epochs_done: float
    num_ps: int = 0
    num_workers: int = 0
    slots_run: int = 0  # slots since arrival (the paper's d)
    slots_since_rescale: int = 0  # slots since its counts last changed (or since start)
    rescales: int = 0
    measured_epochs_per_second: float | None = None  # from progress reports, when known
    measured_restart_seconds: float | None = None  # this type's measured rescale cost (restart_costs)

    @property
    def remaining_epochs(self) -> float:
        return max(0.0, self.spec.epochs - self.epochs_done)

    @property
    def remaining_fraction(self) -> float:
        return self.remaining_epochs / self.spec.epochs

    @property
    def restart_cost_seconds(self) -> float:
        """The job's own ``restart_seconds`` if it set one, else the measured cost of its type when
        there is one, else the type's default."""
        if self.spec.restart_seconds is None and self.measured_restart_seconds is not None:
            return self.measured_restart_seconds
        return self.spec.restart_cost_seconds

    def demand(self, num_ps: int | None = None, num_workers: int | None = None) -> Resources:
        """Resources of ``num_ps`` PS and ``num_workers`` workers (default: current counts)."""
        p = self.num_ps if num_ps is None else num_ps
        w = self.num_workers if num_workers is None else num_workers
        assert self.spec.ps is not None and self.spec.worker is not None
        return self.spec.ps.scale(p) + self.spec.worker.scale(w)


@dataclass(frozen=True)
class ClusterState:
    """Snapshot of the cluster at the start of a time slot.

    Attributes:
        slot: index of the slot about to be decided (0-based).
        slot_seconds: slot length in seconds.
        now: seconds since the scheduler's epoch at the slot start.
        jobs: non-terminal jobs ordered by arrival (time, then id).
        agents: agents ordered by id.
        tasks: the tasks placed now (their counts equal the jobs' num_ps/num_workers).
    """

    slot: int
    slot_seconds: float
    now: float
    jobs: tuple[JobView, ...]
    agents: tuple[AgentView, ...]
    tasks: tuple[TaskView, ...] = ()
    info: dict = field(default_factory=dict, compare=False, hash=False)

    @cached_property
    def capacity(self) -> Resources:
        """Sum of the agents' available resources."""
        total = ZERO
        for a in self.agents:
            total = total + a.available
        return total

    @cached_property
    def jobs_by_id(self) -> dict[str, JobView]:
        return {j.job_id: j for j in self.jobs}

    def job(self, job_id: str) -> JobView:
        return self.jobs_by_id[job_id]

    def dominant_share(self, job: JobView, num_ps: int | None = None, num_workers: int | None = None) -> float:
        """The job's dominant share of the cluster at the given counts (default: current)."""
        return job.demand(num_ps, num_workers).share_of(self.capacity)
