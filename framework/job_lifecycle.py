"""How a job's phase follows its tasks: finish, fail and restart from the checkpoint, re-place
lost tasks, cancel, and the progress it reports.

Every method changes records through the :class:`~dl2_mesos.framework.job_book.JobBook` and
returns the :mod:`~dl2_mesos.framework.driver_commands` that follow (kills, re-plans); the
core sends them.
"""

from __future__ import annotations

import logging

from dl2_mesos.jobs import JobPhase
from dl2_mesos.messages import ProgressReport
from dl2_mesos.framework.driver_commands import Command, KillTask, Replan
from dl2_mesos.framework.job_book import JobBook
from dl2_mesos.framework.launcher import Launcher
from dl2_mesos.framework.records import LOST_TASK_STATES, TERMINAL_TASK_STATES, FrameworkJob, TaskRecord

logger = logging.getLogger("dl2_mesos.framework.core")

# progress is cumulative and re-reported by every executor every few seconds, so a new leader
# learns it again at once; persisting it often only costs store writes on the loop thread
# (with 1000 jobs, every 5 s was 200 writes/s and most of the loop's time)
PROGRESS_PERSIST_SECONDS = 30.0


class JobLifecycle:
    """Phase rules of jobs over a job book and the launcher's waiting transitions.

    Args:
        book: the jobs.
        launcher: whose waiting transition of a job ends with the job.
        max_task_failures: task failures a job survives (restarting from its checkpoint).
    """

    def __init__(self, book: JobBook, launcher: Launcher, max_task_failures: int) -> None:
        self.book = book
        self.launcher = launcher
        self.max_task_failures = max_task_failures

    def kill(self, job: FrameworkJob, task: TaskRecord) -> list[Command]:
        """Stop ``task`` (a kill is sent unless it has ended already)."""
        return [KillTask(task.task_id, task.agent_id)] if self.book.mark_killing(job, task) else []

    def task_state(self, job: FrameworkJob, task: TaskRecord, status: dict, now: float) -> list[Command]:
        """A status update of one of ``job``'s tasks (already recorded on ``task``).

        The caller refreshes the job's phase (:meth:`refresh_phase`) once the returned commands
        (a re-plan may launch at once) are carried out.
        """
        state = task.state
        tid = task.task_id
        if job.phase.terminal:
            if state not in TERMINAL_TASK_STATES and not task.killing:
                return self.kill(job, task)
            return []
        out: list[Command] = []
        if state == "TASK_FINISHED" and not task.killing:
            out += self._maybe_finish(job, task, now)
        elif state == "TASK_FINISHED" and task.role == "worker" and job.epochs_done >= job.spec.epochs:
            # the worker trained its last epoch before a stop (pause, shrink) reached it: the job
            # is done. Waiting for a restart instead would run the job again from its final
            # checkpoint only to finish at once.
            out += self.end(job, JobPhase.FINISHED, "workers finished (before a stop reached them)", now)
        elif state in ("TASK_FAILED", "TASK_ERROR") and not task.killing:
            out += self.task_failed(job, f"task {tid} {state}: {status.get('message', '')}".strip(), now)
        elif state == "TASK_KILLED" and not task.killing:
            out += self._task_lost(job, task, "killed outside the framework", now)
        elif state in LOST_TASK_STATES and not task.killing:
            if state == "TASK_UNREACHABLE":
                out += self.kill(job, task)  # partition-aware: it may come back; we move on
            out += self._task_lost(job, task, f"{state} {status.get('reason', '')}".strip(), now)
        return out

    def agent_lost(self, agent_id: str) -> list[Command]:
        """Every live task on ``agent_id`` is lost; jobs that intended to run there are re-placed."""
        hit = []
        for job in list(self.book.jobs.values()):
            lost = [t for t in job.tasks.values() if t.agent_id == agent_id and t.live]
            for t in lost:
                t.state = "TASK_LOST"
                self.book.mark_dirty(job)
            if lost and not job.phase.terminal:
                logger.warning("job %s: %d tasks lost with agent %s", job.job_id, len(lost), agent_id)
                hit.append(job.job_id)
        hit = [j for j in hit if j in self.book.intended]
        return [Replan(tuple(hit), f"agent {agent_id} lost")] if hit else []

    def progress(self, job: FrameworkJob, msg: ProgressReport, now: float) -> None:
        """Record reported progress and the measured speed (a moving average)."""
        if job.phase.terminal:
            return
        epoch = min(float(msg.epoch), float(job.spec.epochs))
        ts = msg.timestamp if msg.timestamp > 0 else now
        if job.last_progress is not None:
            t0, e0 = job.last_progress
            dt = ts - t0
            if dt >= 1.0 and epoch >= e0:
                inst = (epoch - e0) / dt
                job.measured_eps = inst if job.measured_eps is None else 0.5 * job.measured_eps + 0.5 * inst
                job.last_progress = (ts, epoch)
        else:
            job.last_progress = (ts, epoch)
        if epoch > job.epochs_done:
            job.epochs_done = epoch
        self.book.progress_changed(job, now, PROGRESS_PERSIST_SECONDS)

    def end(self, job: FrameworkJob, phase: JobPhase, message: str, now: float) -> list[Command]:
        """Finish, fail or cancel ``job``: its tasks are killed."""
        job.set_phase(phase, now, message)
        job.rescale_waiting.clear()
        self.launcher.drop(job.job_id)
        self.book.intended.pop(job.job_id, None)
        out: list[Command] = []
        for t in list(job.tasks.values()):
            if t.live:
                out += self.kill(job, t)
        self.book.mark_dirty(job)
        logger.info("job %s %s: %s", job.job_id, phase.value, message)
        return out

    def _maybe_finish(self, job: FrameworkJob, task: TaskRecord, now: float) -> list[Command]:
        # the training program exits 0 on every worker once the job's epochs are done
        # records of workers that failed or were lost earlier (and were replaced) do not count
        workers = [t for t in job.tasks.values() if t.role == "worker" and not t.killing
                   and (t.live or t.state == "TASK_FINISHED")]
        if workers and all(t.state == "TASK_FINISHED" for t in workers):
            job.epochs_done = max(job.epochs_done, float(job.spec.epochs))
            return self.end(job, JobPhase.FINISHED, "workers finished", now)
        if task.role == "worker" and job.training_ended():
            # Training is over; the other workers' statuses are on their way (after a master
            # restart they came one by one, and the outage had dropped the last progress
            # reports). The job ends once its checkpoint writer (worker rank 0, whose executor
            # reports only after storing the final checkpoint) has reported; ending it at the
            # first status reported it finished before its final checkpoint was stored. Until
            # then nothing re-places it (the slot's snapshot leaves it out): the next slot used
            # to launch a worker for the finished one as missing, and the job ran again from its
            # final checkpoint (~25 s lost).
            job.epochs_done = max(job.epochs_done, float(job.spec.epochs))
            writer = job.tasks.get(job.cluster.workers[0].task_id) if job.cluster and job.cluster.workers else None
            if writer is None or writer.state == "TASK_FINISHED":
                return self.end(job, JobPhase.FINISHED, "workers finished (the checkpoint writer among them)", now)
            self.launcher.drop(job.job_id)
            self.book.intended.pop(job.job_id, None)
            self.book.mark_dirty(job)
            logger.info("job %s: a worker finished training; waiting for the checkpoint writer's status", job.job_id)
        return []

    def task_failed(self, job: FrameworkJob, reason: str, now: float) -> list[Command]:
        """A task of ``job`` failed: restart the whole job from its checkpoint, or give up."""
        job.failures += 1
        if job.failures > self.max_task_failures:
            return self.end(job, JobPhase.FAILED, f"{reason} (failure {job.failures}, giving up)", now)
        # restart the whole job from its checkpoint at the next slot
        logger.warning("job %s: %s; restarting from checkpoint (failure %d)", job.job_id, reason, job.failures)
        return self._preempt(job, reason, now)

    def _preempt(self, job: FrameworkJob, reason: str, now: float) -> list[Command]:
        out: list[Command] = []
        for t in list(job.tasks.values()):
            if t.live:
                out += self.kill(job, t)
        job.rescale_waiting.clear()
        job.cluster = None
        self.launcher.drop(job.job_id)
        self.book.intended.pop(job.job_id, None)
        if job.epochs_done > 0 or job.generation > 0:
            job.restart_count += 1
        job.set_phase(JobPhase.PENDING, now, reason)
        self.book.mark_dirty(job)
        return out

    def _task_lost(self, job: FrameworkJob, task: TaskRecord, reason: str, now: float) -> list[Command]:
        """A task vanished: re-place the job's intended counts against current offers."""
        if job.training_ended():
            # its last statuses will not all come: run it from its checkpoint (the final one when
            # stored, and the job then finishes at once) rather than wait for ever
            return self._preempt(job, f"task {task.task_id} lost ({reason}) after training ended", now)
        logger.warning("job %s: task %s lost (%s); rescheduling", job.job_id, task.task_id, reason)
        members = {e.task_id for e in (*job.cluster.servers, *job.cluster.workers)} if job.cluster else set()
        if job.phase != JobPhase.RUNNING and task.task_id in members:
            # the generation being started or rescaled to counts on this task and can never come
            # up without it (ps-lite/gloo wait for every member): restart the job from its checkpoint
            return self._preempt(job, f"task {task.task_id} lost while generation {job.generation} was starting", now)
        if job.job_id in self.book.intended:
            return [Replan((job.job_id,), "lost task")]
        return []

    def refresh_phase(self, job: FrameworkJob, now: float) -> None:
        """PENDING when nothing runs (and nothing waits to launch); RUNNING once every task runs."""
        if job.phase.terminal:
            return
        live = job.live_tasks()
        if not live:
            if job.phase != JobPhase.PENDING and job.job_id not in self.launcher.pending:
                job.set_phase(JobPhase.PENDING, now)
                self.book.mark_dirty(job)
            return
        if all(t.state == "TASK_RUNNING" for t in live) and not job.rescale_waiting:
            if job.phase != JobPhase.RUNNING:
                job.set_phase(JobPhase.RUNNING, now)
                self.book.mark_dirty(job)
