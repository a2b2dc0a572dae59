"""The job book: every job and task the framework knows, what changed since the last write, and
the status updates whose acknowledgement waits for that write.

Status updates are persisted before they are acknowledged: :meth:`JobBook.flush` writes the
changed jobs and only then hands back the updates to acknowledge (Mesos re-sends an
unacknowledged update, so a crash between the two loses nothing).
"""

from __future__ import annotations

from typing import Any

from dl2_mesos.allocation import JobAllocation
from dl2_mesos.framework.records import TERMINAL_TASK_STATES, FrameworkJob, TaskRecord
from dl2_mesos.framework.state_store import StateStore


class JobBook:
    """Jobs, tasks, the dirty set and pending acknowledgements; also each job's intended counts.

    Args:
        store: where jobs are persisted.
    """

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.jobs: dict[str, FrameworkJob] = {}
        self.task_index: dict[str, str] = {}  # task id -> job id
        #: PS/worker counts each active job was granted at its last decision (re-placed as a whole
        #: when a task is lost between slots)
        self.intended: dict[str, JobAllocation] = {}
        self._dirty: set[str] = set()
        self._touched: set[str] = set()  # jobs changed (or removed) since the view last took them
        self._acks: list[dict[str, Any]] = []
        self._progress_saved: dict[str, float] = {}

    def restore(self) -> None:
        """Load every job from the store; running jobs intend the counts of their current generation."""
        self.jobs = self.store.load_jobs(quarantine=True)  # unreadable records are moved aside
        self.task_index = {t.task_id: j.job_id for j in self.jobs.values() for t in j.tasks.values()}
        for job in self.jobs.values():
            if job.cluster is not None and not job.phase.terminal:
                self.intended[job.job_id] = JobAllocation(len(job.cluster.servers), len(job.cluster.workers))

    # -- reading -------------------------------------------------------------------------------
    def get(self, job_id: str) -> FrameworkJob | None:
        return self.jobs.get(job_id)

    def find_task(self, task_id: str) -> tuple[FrameworkJob | None, TaskRecord | None]:
        job = self.jobs.get(self.task_index.get(task_id, ""))
        return job, (job.tasks.get(task_id) if job else None)

    def active(self) -> list[FrameworkJob]:
        """Jobs not ended yet, in arrival order."""
        jobs = [j for j in self.jobs.values() if not j.phase.terminal]
        return sorted(jobs, key=lambda j: (j.arrival_time, j.job_id))

    def executors_in_use(self) -> set[tuple[str, str]]:
        """(job id, agent id) of every executor that runs a live task."""
        return {(j.job_id, t.agent_id) for j in self.jobs.values() for t in j.live_tasks()}

    def unfinished_tasks(self) -> list[TaskRecord]:
        return [t for j in self.jobs.values() for t in j.tasks.values() if t.state not in TERMINAL_TASK_STATES]

    # -- changing ------------------------------------------------------------------------------
    def add(self, job: FrameworkJob) -> None:
        self.jobs[job.job_id] = job
        self.mark_dirty(job)

    def add_task(self, job: FrameworkJob, task: TaskRecord) -> None:
        job.tasks[task.task_id] = task
        self.task_index[task.task_id] = job.job_id
        self.mark_dirty(job)

    def remove(self, job_id: str) -> FrameworkJob | None:
        """Forget an ended job (after the store deleted it): the retention rule."""
        job = self.jobs.pop(job_id, None)
        if job is not None:
            for task_id in job.tasks:
                self.task_index.pop(task_id, None)
        self.intended.pop(job_id, None)
        self._dirty.discard(job_id)
        self._touched.add(job_id)
        self._progress_saved.pop(job_id, None)
        return job

    def dirty_jobs(self) -> list[FrameworkJob]:
        """The jobs the next :meth:`flush` persists."""
        return [self.jobs[j] for j in self._dirty if j in self.jobs]

    def mark_dirty(self, job: FrameworkJob) -> None:
        self._dirty.add(job.job_id)
        self._touched.add(job.job_id)

    def take_touched(self) -> set[str]:
        """Ids of the jobs marked changed, added or removed since the last call (for the API
        view: a command's reply shows the jobs it changed without rebuilding every job's view)."""
        touched, self._touched = self._touched, set()
        return touched

    def mark_killing(self, job: FrameworkJob, task: TaskRecord) -> bool:
        """Note that ``task`` is being stopped; True when a kill must be sent (it is not ended yet)."""
        task.killing = True
        self.mark_dirty(job)
        return task.state not in TERMINAL_TASK_STATES

    def progress_changed(self, job: FrameworkJob, now: float, every: float) -> None:
        """Reported progress changed ``job``: persist it at most every ``every`` seconds (it is
        cumulative and re-reported, so a new leader learns it again at once)."""
        if now - self._progress_saved.get(job.job_id, 0.0) >= every:
            self._progress_saved[job.job_id] = now
            self.mark_dirty(job)

    def await_ack(self, status: dict[str, Any]) -> None:
        """Acknowledge ``status`` after the next :meth:`flush`."""
        self._acks.append(status)

    def flush(self) -> list[dict[str, Any]]:
        """Persist the changed jobs; returns the status updates that may be acknowledged now."""
        self.store.put_jobs([self.jobs[j] for j in sorted(self._dirty) if j in self.jobs])
        self._dirty.clear()
        acks, self._acks = self._acks, []
        return acks
