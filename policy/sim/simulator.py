"""Discrete-time cluster simulator.

One step = one scheduling slot. At the start of slot ``t`` the policy sees a frozen
:class:`~dl2_mesos.cluster.ClusterState` (every job that arrived by the slot start and is not
finished) and returns target counts; the simulator places them with the shared
:func:`dl2_mesos.placement.place`, trains every placed job for the slot with the measured speed
model, and advances.

Semantics (the authors' prototype's, with explicit choices where it is silent or quirky):

* **Arrival.** A job arriving at time ``a`` is first visible at the first slot start ``>= a``
  (generated traces arrive exactly at slot starts). JCT is measured from ``a``.
* **Progress.** Epochs in a slot = epochs/s(type, PS, workers) x training seconds, where
  epochs/s is the measured table's samples/s divided by the type's ``epoch_size`` (reference),
  times ``1 + speed_noise * U(-1, 1)`` when noise is on. Failed measurements are dropped and
  counts beyond the measured range are clamped (``dl2_mesos.speed_model``).
  A job needs >= 1 worker (and >= 1 PS if it uses PS) to progress.
* **Restart cost** (the prototype charged nothing, although DL2 §5 is about
  making rescaling cheap). A job that has trained before
  and starts a slot with (PS, workers) different from the previous slot -- a grow, a shrink, a
  resume after being preempted -- is charged its restart cost that slot: it trains only
  ``slot_seconds - restart_seconds``. The first launch is free (no checkpoint to restore).
  Each such slot counts as one *rescale*. This bookkeeping (and ``slots_since_rescale``) is
  :func:`dl2_mesos.slot_accounting.account_counts`, the framework's too. The cost is, in order
  of precedence, the job spec's ``restart_seconds``, ``SimConfig.restart_seconds[type]``, ``JobType.restart_seconds``
  (60 s stop + 300 s restore); ``charge_restart_cost=False`` makes it 0. The value charged is
  what ``JobView.restart_cost_seconds`` shows the policy (times ``restart_charge_scale``, a
  training curriculum that is 1 everywhere else).
* **Completion, fractional JCT** (the prototype's slot-index arithmetic
  can be read two ways, one slot apart). A job whose remaining epochs are reached
  mid-slot ends at ``slot_start + restart + remaining / speed``; JCT = end - arrival in
  seconds. So a job that arrives at a slot start and finishes within that slot has
  JCT < one slot. (In the prototype's slot units this is "end = index of the slot it ran in +
  used fraction; JCT = end - arrival slot".) Its tasks are released at the slot end.
* **Reward** (paper eq. 1): sum over jobs of epochs trained in the slot / the job's epochs
  (:func:`dl2_mesos.slot_accounting.slot_reward`, shared with the framework).
* **Stop.** The run ends when every trace job finished, or after ``max_slots`` slots
  (``truncated``; unfinished jobs' JCT censored at the stop time) -- the prototype aborted.
* **Invalid allocations** (unknown job, limits, aggregate capacity) raise
  :class:`~dl2_mesos.errors.InvalidAllocation`; per-agent misfits are not errors, the
  placement grants what fits.

Deterministic for a given trace, config and seed (the seed drives only the speed noise).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from dl2_mesos.allocation import Allocation, JobAllocation, validate_allocation
from dl2_mesos.cluster import AgentView, ClusterState, TaskView
from dl2_mesos.placement import place
from dl2_mesos.policy.sim.settings import SimConfig
from dl2_mesos.policy.sim.metrics import JobRecord, RunMetrics, SlotRecord, build_metrics
from dl2_mesos.policy.sim.trace import Trace
from dl2_mesos.policy_api import Policy
from dl2_mesos.slot_accounting import RescaleLedger, account_counts, job_view, slot_reward
from dl2_mesos.speed_model import default_speed_model

logger = logging.getLogger(__name__)

_EPS = 1e-9


@dataclass(frozen=True)
class SlotOutcome:
    """What one slot did.

    Attributes:
        reward: sum over jobs of epochs trained this slot / the job's total epochs.
        epochs: epochs each placed job trained this slot.
        finished: jobs that completed in this slot.
        rescaled: jobs charged a restart cost in this slot.
        done: whether the run is over.
        granted: the counts the placement actually gave.
    """

    reward: float
    epochs: Mapping[str, float]
    finished: tuple[str, ...]
    rescaled: tuple[str, ...]
    done: bool
    granted: Allocation = field(default_factory=Allocation)


class _Job:
    """Mutable per-job bookkeeping (never leaves the simulator)."""

    __slots__ = (
        "job_id",
        "spec",
        "arrival_time",
        "arrival_slot",
        "epochs_done",
        "num_ps",
        "num_workers",
        "ledger",
        "start_time",
        "end_time",
        "measured_eps",
        "restart_seconds",
    )

    def __init__(self, job_id, spec, arrival_time, arrival_slot, restart_seconds):
        self.job_id = job_id
        self.spec = spec
        self.arrival_time = arrival_time
        self.arrival_slot = arrival_slot
        self.restart_seconds = restart_seconds
        self.epochs_done = 0.0
        self.num_ps = 0
        self.num_workers = 0
        self.ledger = RescaleLedger(last_change_slot=arrival_slot)
        self.start_time: float | None = None
        self.end_time: float | None = None
        self.measured_eps: float | None = None

    def record(self, now: float) -> JobRecord:
        finished = self.end_time is not None
        end = self.end_time if finished else now
        return JobRecord(
            job_id=self.job_id,
            job_type=self.spec.job_type,
            epochs=self.spec.epochs,
            arrival_time=self.arrival_time,
            start_time=self.start_time,
            end_time=self.end_time,
            jct=max(0.0, end - self.arrival_time),
            finished=finished,
            rescales=self.ledger.rescales,
            epochs_done=self.epochs_done,
        )


class Simulator:
    """The cluster simulator (see the module docstring for the semantics).

    Args:
        config: cluster and run settings.
        trace: the jobs (sorted by arrival; ids unique).
        speed_model: object with ``epochs_per_second(job_type, num_ps, num_workers, uses_ps)``;
            default the shipped measured model.
        seed: seeds the speed noise.
    """

    def __init__(self, config: SimConfig, trace: Trace, speed_model=None, seed: int = 0) -> None:
        self.config = config
        self.trace = tuple(sorted(trace, key=lambda j: (j.arrival_time, j.job_id)))
        ids = [j.job_id for j in self.trace]
        if len(set(ids)) != len(ids):
            raise ValueError("trace job ids must be unique")
        self.speed_model = speed_model if speed_model is not None else default_speed_model()
        self.seed = seed
        self._agents = tuple(
            AgentView(agent_id=f"node-{i:04d}", hostname=f"node-{i:04d}", total=r, available=r)
            for i, r in enumerate(config.agent_resources())
        )
        self._cap_cpus = sum(a.total.cpus for a in self._agents)
        self._cap_gpus = sum(a.total.gpus for a in self._agents)
        # the restart cost each job is charged (and shows in its spec / JobView)
        self._specs = {}
        for tj in self.trace:
            spec = tj.spec
            secs = (
                spec.restart_seconds
                if spec.restart_seconds is not None
                else config.restart_seconds_for(spec.job_type)
            )
            if not config.charge_restart_cost:
                secs = 0.0
            if spec.restart_seconds != secs:
                spec = replace(spec, restart_seconds=float(secs))
            self._specs[tj.job_id] = spec
        self.reset()

    # -- lifecycle ----------------------------------------------------------------------------
    def reset(self) -> ClusterState:
        """Start over at slot 0 (same trace, same seed); returns the first state."""
        self._rng = np.random.default_rng(self.seed)
        self.slot = 0
        self.now = 0.0
        self._pending = deque(self.trace)
        self._active: dict[str, _Job] = {}
        self._done_jobs: list[_Job] = []
        self._tasks: tuple[TaskView, ...] = ()
        self._task_seq = 0
        self._slot_records: list[SlotRecord] = []
        self._cpu_seconds = 0.0
        self._gpu_seconds = 0.0
        self._truncated = False
        self._state: ClusterState | None = None
        self._admit()
        self.done = not self._pending and not self._active
        return self.state()

    def _admit(self) -> None:
        while self._pending and self._pending[0].arrival_time <= self.now + _EPS:
            tj = self._pending.popleft()
            self._active[tj.job_id] = _Job(
                tj.job_id,
                self._specs[tj.job_id],
                tj.arrival_time,
                self.slot,
                # what is charged; the spec keeps what the policy is shown
                self._specs[tj.job_id].restart_seconds * self.config.restart_charge_scale,
            )

    # -- observation ----------------------------------------------------------------------------
    def state(self) -> ClusterState:
        """The snapshot the policy decides the current slot from."""
        if self._state is None:
            jobs = tuple(
                job_view(
                    j.job_id,
                    j.spec,
                    slot=self.slot,
                    arrival_slot=j.arrival_slot,
                    arrival_time=j.arrival_time,
                    epochs_done=j.epochs_done,
                    num_ps=j.num_ps,
                    num_workers=j.num_workers,
                    ledger=j.ledger,
                    measured_epochs_per_second=j.measured_eps,
                )
                for j in self._active.values()
            )
            self._state = ClusterState(
                slot=self.slot,
                slot_seconds=self.config.slot_seconds,
                now=self.now,
                jobs=jobs,
                agents=self._agents,
                tasks=self._tasks,
                info={
                    "simulated": True,
                    "finished": len(self._done_jobs),
                },  # no look-ahead at future arrivals
            )
        return self._state

    # -- dynamics -------------------------------------------------------------------------------
    def step(self, allocation: Allocation) -> SlotOutcome:
        """Apply ``allocation`` for the current slot and advance to the next.

        Raises:
            InvalidAllocation: the allocation breaks a job's limits or the cluster's capacity.
            RuntimeError: the run is already done.
        """
        if self.done:
            raise RuntimeError("the simulation is done; call reset()")
        state = self.state()
        validate_allocation(allocation, state)
        if self._unchanged(allocation):
            # nothing to stop or start: place() would keep every task (same result, no work)
            plan = None
            granted = Allocation(
                {
                    j.job_id: JobAllocation(j.num_ps, j.num_workers)
                    for j in self._active.values()
                    if j.num_workers or j.num_ps
                }
            )
            tasks = list(self._tasks)
        else:
            plan = place(allocation, state)
            granted = plan.granted
            tasks = list(plan.keep)
        slot_s = self.config.slot_seconds
        if plan is not None:
            for p in plan.start:
                self._task_seq += 1
                tasks.append(
                    TaskView(
                        f"t{self._task_seq}-{p.job_id}-{p.role}", p.job_id, p.role, p.agent_id, p.resources
                    )
                )

        epochs: dict[str, float] = {}
        totals: dict[str, float] = {}
        finished: list[str] = []
        rescaled: list[str] = []
        cpu_s = gpu_s = 0.0
        running = 0
        noise = self.config.speed_noise
        for job in self._active.values():
            g = granted.get_counts(job.job_id)
            now_counts = (g.num_ps, g.num_workers)
            booked = account_counts(job.ledger, self.slot, (job.num_ps, job.num_workers), now_counts,
                                    job.restart_seconds, slot_s)
            job.ledger = booked.ledger
            job.num_ps, job.num_workers = now_counts
            if g.is_zero:
                continue
            running += 1
            restart = booked.restart_seconds
            if booked.restarted:
                rescaled.append(job.job_id)
            if job.start_time is None:
                job.start_time = self.now
            eps = self.speed_model.epochs_per_second(
                job.spec.job_type, g.num_ps, g.num_workers, job.spec.uses_ps
            )
            if noise:
                eps *= 1.0 + noise * float(self._rng.uniform(-1.0, 1.0))
            train_s = slot_s - restart
            remaining = job.spec.epochs - job.epochs_done
            done_epochs = eps * train_s
            held_s = slot_s
            if eps > 0 and done_epochs >= remaining - _EPS * max(1.0, job.spec.epochs):
                done_epochs = remaining
                job.end_time = self.now + restart + remaining / eps
                held_s = job.end_time - self.now
                finished.append(job.job_id)
            job.epochs_done += done_epochs
            job.measured_eps = eps if train_s > 0 else job.measured_eps
            epochs[job.job_id] = done_epochs
            totals[job.job_id] = job.spec.epochs
            d = job.spec.ps.scale(g.num_ps) + job.spec.worker.scale(g.num_workers)
            cpu_s += d.cpus * held_s
            gpu_s += d.gpus * held_s

        reward = slot_reward(epochs, totals)
        if finished:
            gone = set(finished)
            tasks = [t for t in tasks if t.job_id not in gone]
            for jid in finished:
                self._done_jobs.append(self._active.pop(jid))
        self._tasks = tuple(tasks)
        self._cpu_seconds += cpu_s
        self._gpu_seconds += gpu_s
        self._slot_records.append(
            SlotRecord(
                slot=self.slot,
                time=self.now,
                cpu_util=cpu_s / (self._cap_cpus * slot_s) if self._cap_cpus else 0.0,
                gpu_util=gpu_s / (self._cap_gpus * slot_s) if self._cap_gpus else 0.0,
                running_jobs=running,
                waiting_jobs=len(self._active) + len(finished) - running,
                reward=reward,
            )
        )
        self.slot += 1
        self.now = self.slot * slot_s
        self._state = None
        self._admit()
        if not self._pending and not self._active:
            self.done = True
        elif self.slot >= self.config.max_slots:
            self.done = True
            self._truncated = True
            never = ""  # jobs that never arrived: the trace outlasts the run, say so
            if self._pending:
                last = self._pending[-1].arrival_time
                never = (f", {len(self._pending)} of them not yet arrived (the trace's last arrival is at "
                         f"{last:.0f} s, slot {math.ceil(last / slot_s)}): raise max_slots to run them")
            logger.warning(
                "simulation stopped at max_slots=%d with %d jobs unfinished%s",
                self.config.max_slots,
                len(self._active) + len(self._pending),
                never,
            )
        return SlotOutcome(reward, epochs, tuple(finished), tuple(rescaled), self.done, granted)

    def _unchanged(self, allocation: Allocation) -> bool:
        """True when ``allocation`` asks every job for exactly the counts it has."""
        for job in self._active.values():
            c = allocation.get_counts(job.job_id)
            if c.num_ps != job.num_ps or c.num_workers != job.num_workers:
                return False
        return True

    # -- results ---------------------------------------------------------------------------------
    def end_times(self, job_ids: Iterable[str]) -> dict[str, float]:
        """End times (s) of the finished jobs among ``job_ids`` (e.g. the ``finished`` of the
        slot just stepped, whose jobs are the last ones to have finished)."""
        wanted = set(job_ids)
        out: dict[str, float] = {}
        for job in reversed(self._done_jobs):
            if len(out) == len(wanted):
                break
            if job.job_id in wanted:
                out[job.job_id] = float(job.end_time)
        return out

    def metrics(self, policy: str = "") -> RunMetrics:
        """Metrics of the run so far (complete once ``done``)."""
        records = [j.record(self.now) for j in self._done_jobs]
        records += [j.record(self.now) for j in self._active.values()]
        if self._truncated:
            # jobs that never arrived before the stop count as unfinished with zero JCT
            records += [
                JobRecord(
                    tj.job_id,
                    tj.spec.job_type,
                    tj.spec.epochs,
                    tj.arrival_time,
                    None,
                    None,
                    max(0.0, self.now - tj.arrival_time),
                    False,
                    0,
                    0.0,
                )
                for tj in self._pending
            ]
        records.sort(key=lambda r: (r.arrival_time, r.job_id))
        return build_metrics(
            policy=policy,
            seed=self.seed,
            slot_seconds=self.config.slot_seconds,
            jobs=records,
            slots=self._slot_records,
            cpu_seconds=self._cpu_seconds,
            gpu_seconds=self._gpu_seconds,
            capacity_cpus=self._cap_cpus,
            capacity_gpus=self._cap_gpus,
            truncated=self._truncated,
        )


def run(
    policy: Policy,
    config: SimConfig,
    trace: Trace,
    seed: int = 0,
    speed_model=None,
    on_slot: Callable[[SlotOutcome], None] | None = None,
) -> RunMetrics:
    """Simulate ``trace`` under ``policy`` to the end; the one code path for every policy.

    The policy is not consulted in slots with no job to schedule.
    """
    sim = Simulator(config, trace, speed_model=speed_model, seed=seed)
    state = sim.state()
    while not sim.done:
        alloc = policy.decide(state) if state.jobs else Allocation()
        outcome = sim.step(alloc)
        if on_slot is not None:
            on_slot(outcome)
        state = sim.state()
    return sim.metrics(getattr(policy, "name", type(policy).__name__))


__all__ = ["SlotOutcome", "Simulator", "run", "slot_reward"]
