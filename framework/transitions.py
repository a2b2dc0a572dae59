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
from dl2_mesos.framework.records import JobRecord, TaskRecord
from dl2_mesos.framework.task_info import executor_id_for

#: ports per task: a PS gets a second one so that whichever PS is rank 0 can host the MXNet
#: scheduler (ranks shift when PS are removed at a rescale).
PORTS_PER_ROLE = {"ps": 2, "worker": 1}


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
    job: JobRecord,
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
    gen = job.generation + 1
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
    for role, tasks in by_role.items():
        for rank, t in enumerate(tasks):
            new_ranks[t.task_id] = rank
    for t in created:
        t.rank = new_ranks[t.task_id]
    servers = tuple(Endpoint(t.task_id, t.hostname, t.ports[0]) for t in by_role["ps"])
    workers = tuple(Endpoint(t.task_id, t.hostname, t.ports[0]) for t in by_role["worker"])
    scheduler = None
    if job.spec.runtime == "mxnet" and by_role["ps"]:
        p0 = by_role["ps"][0]
        scheduler = Endpoint(p0.task_id, p0.hostname, p0.ports[1] if len(p0.ports) > 1 else p0.ports[0])
    cluster = ClusterSpec(gen, scheduler, servers, workers)
    out = NewGeneration(gen, cluster, created, continuing)
    for t in continuing:
        out.assignments.setdefault(t.executor_id, []).append((t.task_id, t.role, new_ranks[t.task_id]))
    return out


def launch_spec(job: JobRecord, task: TaskRecord, cluster: ClusterSpec, progress_interval: float,
                env: dict[str, str]) -> LaunchSpec:
    """The LaunchSpec carried in the new task's ``TaskInfo.data``."""
    return LaunchSpec(
        job_id=job.job_id, task_id=task.task_id, role=task.role, rank=task.rank,
        runtime=job.spec.runtime, job_type=job.spec.job_type, epochs=float(job.spec.epochs),
        command=tuple(job.spec.command), checkpoint_uri=job.checkpoint_uri, cluster=cluster,
        restart_count=job.restart_count, progress_interval_s=float(progress_interval),
        env=tuple(sorted(env.items())),
    )


def rescale_request(job: JobRecord, cluster: ClusterSpec, assignments: list[tuple[str, str, int]]) -> RescaleRequest:
    return RescaleRequest(job_id=job.job_id, cluster=cluster, assignments=tuple(assignments))
