"""A job's move from one generation (set of tasks) to the next.

A :class:`Transition` is what the placement asked for one job: tasks to stop and tasks to
start on given agents. It is *executed* only once every new task has been matched to held
offers (hosts and ports are then known, so the new generation's full ClusterSpec can be
written into each LaunchSpec and RescaleRequest). :func:`build_generation` does the pure part:
new task records, ranks and the ClusterSpec.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dl2_mesos.allocation import JobAllocation
from dl2_mesos.messages import ClusterSpec, Endpoint, LaunchSpec, RescaleRequest
from dl2_mesos.placement import PlannedTask
from dl2_mesos.framework.records import FrameworkJob, TaskRecord
from dl2_mesos.framework.task_info import executor_id_for

#: Ports per task, taken from the offer and held for the task's life. Generations alternate
#: between two of them (a restarted process never needs the port its predecessor may still hold
#: in TIME_WAIT); a PS has two more so that whichever PS is rank 0 can host the MXNet scheduler
#: (ranks shift when PS are removed at a rescale).
PORTS_PER_ROLE = {"ps": 4, "worker": 2}


def endpoint_port(ports: list[int], generation: int) -> int:
    """The task's own port in ``generation``."""
    own = ports[:2] if len(ports) >= 2 else ports
    return own[generation % len(own)]


def scheduler_port(ports: list[int], generation: int) -> int:
    """The MXNet scheduler's port in ``generation`` when this PS is rank 0."""
    extra = ports[2:4] if len(ports) >= 4 else ports[-1:]
    return extra[generation % len(extra)]


@dataclass
class Transition:
    """Planned change of one job, waiting for offers."""

    job_id: str
    stop: tuple[str, ...]  # task ids
    start: tuple[PlannedTask, ...]
    granted: JobAllocation
    created: float
    reason: str = "slot"
    attempts: int = 1


@dataclass
class NewGeneration:
    """The result of :func:`build_generation`."""

    generation: int
    cluster: ClusterSpec | None
    new_tasks: list[TaskRecord]
    continuing: list[TaskRecord]
    assignments: dict[str, list[tuple[str, str, int]]] = field(default_factory=dict)  # executor -> (task, role, rank)


def build_generation(
    job: FrameworkJob,
    stop: set[str],
    new: list[tuple[PlannedTask, str, list[int]]],
) -> NewGeneration:
    """Ranks and ClusterSpec of the job's next generation.

    Args:
        job: the job (its live tasks are the current generation).
        stop: task ids that leave.
        new: (planned task, hostname, ports) for every task that joins.

    Continuing tasks keep their relative order (so PS rank 0 stays rank 0 when it continues);
    new tasks take the ranks after them.
    """
    # a job's first generation is 0 (the executor restores from generation g-1's final checkpoint)
    gen = job.generation + 1 if job.task_seq > 0 else 0
    job.previous_stop = previous_stop(job)
    continuing = [t for t in job.live_tasks() if t.task_id not in stop]
    created: list[TaskRecord] = []
    for p, hostname, ports in new:
        created.append(
            TaskRecord(
                task_id=job.new_task_id(p.role), job_id=job.job_id, role=p.role, rank=-1,
                agent_id=p.agent_id, hostname=hostname, ports=list(ports), resources=p.resources,
                executor_id=executor_id_for(job.job_id, p.agent_id), generation=gen,
            )
        )
    by_role: dict[str, list[TaskRecord]] = {"ps": [], "worker": []}
    for t in sorted(continuing, key=lambda t: (t.rank, t.task_id)):
        by_role[t.role].append(t)
    for t in created:
        by_role[t.role].append(t)
    if not by_role["worker"]:
        return NewGeneration(gen, None, created, continuing)
    new_ranks: dict[str, int] = {}
    for tasks in by_role.values():
        for rank, t in enumerate(tasks):
            new_ranks[t.task_id] = rank
    for t in created:
        t.rank = new_ranks[t.task_id]
    servers = tuple(Endpoint(t.task_id, t.hostname, endpoint_port(t.ports, gen)) for t in by_role["ps"])
    workers = tuple(Endpoint(t.task_id, t.hostname, endpoint_port(t.ports, gen)) for t in by_role["worker"])
    scheduler = None
    if job.spec.runtime == "mxnet" and by_role["ps"]:
        p0 = by_role["ps"][0]
        scheduler = Endpoint(p0.task_id, p0.hostname, scheduler_port(p0.ports, gen))
    cluster = ClusterSpec(gen, scheduler, servers, workers)
    out = NewGeneration(gen, cluster, created, continuing)
    for t in continuing:
        out.assignments.setdefault(t.executor_id, []).append((t.task_id, t.role, new_ranks[t.task_id]))
    return out


def previous_stop(job: FrameworkJob) -> str:
    """How the job's generation being replaced ends (see :data:`dl2_mesos.messages.PREVIOUS_STOPS`),
    decided when the next generation is built; notes the crashes it saw, so each counts once.

    * ``crashed``: a task crashed (failed, lost, killed behind the framework's back) since the
      last generation was built: no final checkpoint will come from that generation;
    * ``graceful``: workers still run (they continue or are being stopped now, in a rescale):
      worker 0 writes a final checkpoint the new tasks wait for;
    * ``none``: nothing runs any more (first launch; relaunch after the job was preempted and its
      tasks ended): the newest committed checkpoint is already the last one.
    """
    crashed = [t for t in job.tasks.values() if t.crashed and not t.crash_noted]
    for t in crashed:
        t.crash_noted = True
    if crashed:
        return "crashed"
    if job.live_tasks("worker"):
        return "graceful"
    return "none"


def launch_spec(job: FrameworkJob, task: TaskRecord, cluster: ClusterSpec, progress_interval: float,
                env: dict[str, str]) -> LaunchSpec:
    """The LaunchSpec carried in the new task's ``TaskInfo.data``."""
    return LaunchSpec(
        job_id=job.job_id, task_id=task.task_id, role=task.role, rank=task.rank,
        runtime=job.spec.runtime, job_type=job.spec.job_type, epochs=float(job.spec.epochs),
        command=tuple(job.spec.command), checkpoint_uri=job.checkpoint_uri, cluster=cluster,
        restart_count=job.restart_count, progress_interval_s=float(progress_interval),
        env=tuple(sorted(env.items())), previous_stop=job.previous_stop,
    )


def rescale_request(job: FrameworkJob, cluster: ClusterSpec, assignments: list[tuple[str, str, int]]) -> RescaleRequest:
    return RescaleRequest(job_id=job.job_id, cluster=cluster, assignments=tuple(assignments),
                          previous_stop="crashed" if job.previous_stop == "crashed" else "graceful")
