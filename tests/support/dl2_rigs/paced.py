"""Paced training for the light executors (:mod:`dl2_rigs.lightexec`): each job trains at the
speed the measured speed table gives its current (PS, workers) counts, time-compressed.

The parity test (``tests/parity``) runs the same trace through the framework on the local
cluster and through the simulator; for the two to be comparable the light executors must train
as the simulator does:

* **Speed.** A job's generation trains at ``epochs_per_second(type, PS, workers) x scale``
  epochs per (real) second: the simulator's speed model, with ``scale`` simulated seconds per
  real second (the slot is compressed by the same factor).
* **Progress survives generations.** Epochs are kept per job in the hub (the light stand-in for
  a checkpoint), so a rescaled or resumed job continues where it stopped.
* **Restart cost.** A job that trained before pauses ``restart_seconds`` (real) whenever the hub
  first sees a new generation of it (a grow, a shrink, a resume); the first generation starts
  at once. The simulator charges the same cost at the slot start (DL2 §5).
* **Finish.** When the job's epochs are reached every task of the job ends TASK_FINISHED; the
  time to finish is slept exactly, not rounded to the report interval.

Progress goes to the framework as ``ProgressReport`` messages from an executor holding one of
the job's workers, every ``interval`` seconds. With ``events`` (a file path) the pacer appends one
JSON line per generation start and per finish (``{"job_id", "event": "start"|"finish",
"generation", "at": wall clock}``): the parity test measures launch latency from them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from dl2_mesos.messages import ClusterSpec, LaunchSpec, ProgressReport
from dl2_mesos.speed_model import default_speed_model

logger = logging.getLogger(__name__)


class TaskHolder(Protocol):
    """What the pacer needs of a light executor."""

    tasks: dict[str, Any]
    done: asyncio.Event

    async def send(self, msg: Any) -> None: ...

    async def status(self, task_id: str, state: str, message: str = "") -> None: ...


@dataclass
class _Job:
    job_id: str
    job_type: str
    epochs_total: float
    uses_ps: bool
    cluster: ClusterSpec | None = None
    epochs: float = 0.0
    trained_before: bool = False
    paused_until: float = 0.0
    last: float = 0.0
    finished: bool = False
    done_at: float = 0.0  # wall clock when the last epoch was done (exact, not when it was noticed)
    pause: float = 0.0  # the restart pause of the current generation
    begun: bool = False  # whether the current generation has started training
    tasks: dict[str, tuple[TaskHolder, str]] = field(default_factory=dict)  # task id -> (executor, role)
    driver: asyncio.Task | None = None


class Pacer:
    """Per-job training clocks shared by every executor of a hub.

    Args:
        scale: simulated seconds per real second (the time compression).
        restart_seconds: real seconds a job pauses at each new generation after its first.
        interval: real seconds between progress reports.
        spawn: runs a coroutine as a task the hub keeps until it ends.
        events: file the generation starts and finishes are appended to (JSON lines), or "".
    """

    def __init__(self, scale: float, restart_seconds: float, interval: float, spawn: Any, events: str = "") -> None:
        if scale <= 0 or restart_seconds < 0 or interval <= 0:
            raise ValueError("pace: scale and interval must be > 0, restart_seconds >= 0")
        self.scale, self.restart_seconds, self.interval = scale, restart_seconds, interval
        self.speed = default_speed_model()
        self.spawn = spawn
        self.jobs: dict[str, _Job] = {}
        self.events = events

    def _log(self, job: _Job, event: str, at: float) -> None:
        if not self.events:
            return
        line = {"job_id": job.job_id, "event": event, "at": at,
                "generation": job.cluster.generation if job.cluster else -1}
        with open(self.events, "a") as f:
            f.write(json.dumps(line) + "\n")

    # -- events from the executors ----------------------------------------------------------------
    def launched(self, holder: TaskHolder, spec: LaunchSpec) -> None:
        job = self.jobs.get(spec.job_id)
        if job is None:
            job = self.jobs[spec.job_id] = _Job(spec.job_id, spec.job_type, float(spec.epochs),
                                                uses_ps=spec.runtime != "pytorch")
        if job.finished:
            return
        now = time.monotonic()
        self._advance(job, now)  # up to now without the new task
        job.tasks[spec.task_id] = (holder, spec.role)
        self._generation(job, spec.cluster, now)

    def rescaled(self, job_id: str, cluster: ClusterSpec) -> None:
        job = self.jobs.get(job_id)
        if job is not None and not job.finished:
            now = time.monotonic()
            self._advance(job, now)
            self._generation(job, cluster, now)

    def ended(self, job_id: str, task_id: str) -> None:
        job = self.jobs.get(job_id)
        if job is None or task_id not in job.tasks:
            return
        self._advance(job, time.monotonic())
        del job.tasks[task_id]

    # -- the clock ----------------------------------------------------------------------------------
    def _rate(self, job: _Job) -> float:
        c = job.cluster
        if c is None or not c.workers or not self._has_worker(job):
            return 0.0
        eps = self.speed.epochs_per_second(job.job_type, len(c.servers), len(c.workers), job.uses_ps)
        return eps * self.scale

    @staticmethod
    def _has_worker(job: _Job) -> bool:
        return any(role == "worker" for _, role in job.tasks.values())

    def _advance(self, job: _Job, now: float) -> None:
        start = max(job.last, job.paused_until)
        rate = self._rate(job)
        if now > start and rate > 0:
            left = job.epochs_total - job.epochs
            if rate * (now - start) >= left and not job.done_at:
                job.done_at = time.time() - (now - (start + left / rate))  # a late wake-up counts as latency
            job.epochs = min(job.epochs_total, job.epochs + rate * (now - start))
        job.last = max(job.last, now)

    def _generation(self, job: _Job, cluster: ClusterSpec, now: float) -> None:
        """A task of ``cluster``'s generation was seen (the job was advanced up to ``now``)."""
        if job.cluster is None or cluster.generation > job.cluster.generation:
            job.pause = self.restart_seconds if job.trained_before else 0.0
            job.paused_until = now + job.pause
            job.cluster = cluster
            job.trained_before = True
            job.begun = False
        job.last = now
        if not job.begun and self._rate(job) > 0:
            # training begins now or when the pause ends; logged less the pause, as the time the
            # simulator's slot would have begun (the rest of the delay is launch latency)
            job.begun = True
            begin = max(now, job.paused_until)
            self._log(job, "start", time.time() + (begin - now) - job.pause)
        if job.driver is None or job.driver.done():
            job.driver = self.spawn(self._drive(job))

    async def _drive(self, job: _Job) -> None:
        while self._has_worker(job) and not job.finished:
            now = time.monotonic()
            self._advance(job, now)
            if job.epochs >= job.epochs_total - 1e-9:
                await self._finish(job)
                return
            await self._report(job)
            rate = self._rate(job)
            left = max(0.0, job.paused_until - now) + ((job.epochs_total - job.epochs) / rate if rate > 0 else 1e9)
            await asyncio.sleep(max(0.0, min(self.interval, left)))

    async def _report(self, job: _Job) -> None:
        gen = job.cluster.generation if job.cluster else 0
        worker = next(((tid, h) for tid, (h, role) in job.tasks.items() if role == "worker"), None)
        if worker is None:
            return
        tid, holder = worker
        await holder.send(ProgressReport(job.job_id, tid, gen, job.epochs, int(job.epochs * 100), 100.0,
                                         timestamp=time.time()))

    async def _finish(self, job: _Job) -> None:
        job.finished = True
        self._log(job, "finish", job.done_at)
        await self._report(job)
        for tid, (holder, _role) in list(job.tasks.items()):
            holder.tasks.pop(tid, None)
            await holder.status(tid, "TASK_FINISHED", "light executor: epochs reached")
            if not holder.tasks:
                holder.done.set()
        job.tasks.clear()
        logger.info("job %s finished its %s epochs", job.job_id, job.epochs_total)
