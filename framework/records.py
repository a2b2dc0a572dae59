"""The framework's mutable bookkeeping of jobs and tasks, and their JSON form for the state store.

Only the loop thread touches these objects. Everything that must survive a failover of the
leader (phase, progress, tasks, the generation in flight) is in ``to_dict``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from dl2_mesos.errors import Dl2Error
from dl2_mesos.jobs import JobPhase, JobSpec
from dl2_mesos.messages import ClusterSpec, Endpoint, to_jsonable
from dl2_mesos.resources import Resources
from dl2_mesos.slot_accounting import RescaleLedger

#: Mesos task states after which a task uses no resources.
TERMINAL_TASK_STATES = frozenset(
    {
        "TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST", "TASK_DROPPED",
        "TASK_GONE", "TASK_GONE_BY_OPERATOR", "TASK_UNKNOWN",
    }
)
#: States meaning "the task is gone without finishing its work": reschedule it.
LOST_TASK_STATES = frozenset(
    {"TASK_LOST", "TASK_DROPPED", "TASK_GONE", "TASK_GONE_BY_OPERATOR", "TASK_UNKNOWN", "TASK_UNREACHABLE"}
)
#: States meaning "the task crashed": it failed, or vanished with its agent or executor.
CRASH_TASK_STATES = frozenset({"TASK_FAILED", "TASK_ERROR"}) | LOST_TASK_STATES


#: Job ids the framework makes (``<name or type>-<8 hex>``), and what the store accepts as a key.
JOB_ID_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,80}")


def valid_job_id(job_id: Any) -> bool:
    """Full match (never ``$``, which lets a trailing newline through)."""
    return isinstance(job_id, str) and JOB_ID_RE.fullmatch(job_id) is not None


def job_id_of_task(task_id: str) -> str:
    """The job a task id belongs to (task ids are ``<job id>.<role>.<n>``)."""
    parts = task_id.rsplit(".", 2)
    return parts[0] if len(parts) == 3 else ""


class IdempotencyConflict(Dl2Error):
    """An ``Idempotency-Key`` was used before for a different job spec."""

    def __init__(self, key: str, job_id: str) -> None:
        self.key = key
        self.job_id = job_id
        super().__init__(f"Idempotency-Key {key!r} was used for job {job_id} with a different spec")


def spec_digest(spec: JobSpec) -> str:
    """A digest of the spec's canonical JSON (what an idempotent retry must repeat exactly)."""
    data = json.dumps(spec.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(data.encode()).hexdigest()


@dataclass
class TaskRecord:
    """One PS or worker task of a job."""

    task_id: str
    job_id: str
    role: str  # ps | worker
    rank: int
    agent_id: str
    hostname: str
    ports: list[int]
    resources: Resources
    executor_id: str
    generation: int  # generation it was launched in
    state: str = "LAUNCHING"  # LAUNCHING (accepted, no update yet) or a Mesos TASK_* state
    killing: bool = False
    message: str = ""
    crash_noted: bool = False  # its crash was taken into account by a later generation

    @property
    def crashed(self) -> bool:
        """Ended without being asked to: failed, lost, or killed by someone else than the framework."""
        return self.state in CRASH_TASK_STATES or (self.state == "TASK_KILLED" and not self.killing)

    @property
    def live(self) -> bool:
        """Counts towards the job's tasks (not terminal, not being killed)."""
        return not self.killing and self.state not in TERMINAL_TASK_STATES

    @property
    def port(self) -> int:
        return self.ports[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id, "job_id": self.job_id, "role": self.role, "rank": self.rank,
            "agent_id": self.agent_id, "hostname": self.hostname, "ports": list(self.ports),
            "resources": self.resources.to_dict(), "executor_id": self.executor_id,
            "generation": self.generation, "state": self.state, "killing": self.killing,
            "message": self.message, "crash_noted": self.crash_noted,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TaskRecord:
        return cls(
            task_id=d["task_id"], job_id=d["job_id"], role=d["role"], rank=int(d["rank"]),
            agent_id=d["agent_id"], hostname=d["hostname"], ports=[int(p) for p in d["ports"]],
            resources=Resources.from_dict(d["resources"]), executor_id=d["executor_id"],
            generation=int(d["generation"]), state=d["state"], killing=bool(d["killing"]),
            message=d.get("message", ""), crash_noted=bool(d.get("crash_noted", False)),
        )


@dataclass
class FrameworkJob:
    """One submitted job as the framework tracks and persists it (phase, tasks, generation, progress)."""

    job_id: str
    spec: JobSpec
    submitted_at: float  # wall clock
    arrival_slot: int
    arrival_time: float  # seconds since the framework epoch
    phase: JobPhase = JobPhase.PENDING
    phase_times: dict[str, float] = field(default_factory=dict)  # phase -> wall clock it was entered
    epochs_done: float = 0.0
    generation: int = 0
    cluster: ClusterSpec | None = None  # the current generation's shape
    tasks: dict[str, TaskRecord] = field(default_factory=dict)
    slots_run: int = 0
    # rescale bookkeeping, booked at each slot decision by the rule the simulator uses
    # (dl2_mesos.slot_accounting.account_counts); the core starts it at the arrival slot
    ledger: RescaleLedger = field(default_factory=lambda: RescaleLedger(0))
    restart_count: int = 0
    failures: int = 0
    measured_eps: float | None = None
    last_progress: tuple[float, float] | None = None  # (wall clock, epochs) of the last report
    rescale_waiting: dict[str, str] = field(default_factory=dict)  # executor id -> agent id (no report yet)
    checkpoint_uri: str = ""
    last_checkpoint: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    task_seq: int = 0  # for unique task ids
    # how the generation before the current one ended (messages.PREVIOUS_STOPS), told to its tasks
    previous_stop: str = "none"
    idempotency_key: str = ""  # the submission's Idempotency-Key header, if any
    request_digest: str = ""  # spec_digest of the submitted spec (with idempotency_key)
    started_at: float | None = None  # wall clock it first ran (queue wait = started_at - submitted_at)
    _cluster_json: tuple[Any, dict[str, Any]] | None = field(default=None, repr=False, compare=False)
    _spec_json: tuple[Any, dict[str, Any]] | None = field(default=None, repr=False, compare=False)

    def set_phase(self, phase: JobPhase, now: float, message: str = "") -> None:
        if phase != self.phase:
            self.phase = phase
            self.phase_times[phase.value] = now
            if phase == JobPhase.RUNNING and self.started_at is None:
                self.started_at = now
        if message:
            self.message = message

    def live_tasks(self, role: str | None = None) -> list[TaskRecord]:
        out = [t for t in self.tasks.values() if t.live and (role is None or t.role == role)]
        return sorted(out, key=lambda t: (t.role, t.rank, t.task_id))

    @property
    def num_ps(self) -> int:
        return len(self.live_tasks("ps"))

    @property
    def num_workers(self) -> int:
        return len(self.live_tasks("worker"))

    def training_ended(self) -> bool:
        """Whether a worker of the current generation exited finished on its own.

        The training program exits 0 on a worker only after the job's last epoch (the workers
        of a generation stop at the same batch), so training is over even while the other
        workers' statuses are still on their way; the job finishes once worker rank 0 (the
        checkpoint writer, whose executor reports only after storing the final checkpoint)
        has reported."""
        if self.cluster is None:
            return False
        members = {e.task_id for e in self.cluster.workers}
        return any(t.role == "worker" and t.state == "TASK_FINISHED" and not t.killing and t.task_id in members
                   for t in self.tasks.values())

    def new_task_id(self, role: str) -> str:
        self.task_seq += 1
        return f"{self.job_id}.{role}.{self.task_seq}"

    def forget_terminal_tasks(self) -> None:
        """Drop records of tasks that ended (after their final update was handled)."""
        for tid in [t.task_id for t in self.tasks.values() if t.state in TERMINAL_TASK_STATES]:
            del self.tasks[tid]

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "spec": self.spec.to_dict(), "submitted_at": self.submitted_at,
            "arrival_slot": self.arrival_slot, "arrival_time": self.arrival_time,
            "phase": self.phase.value, "phase_times": dict(self.phase_times),
            "epochs_done": self.epochs_done, "generation": self.generation,
            "cluster": self._cluster_dict(),
            "tasks": {k: t.to_dict() for k, t in self.tasks.items()},
            "slots_run": self.slots_run, "rescale_ledger": self.ledger.to_dict(),
            "restart_count": self.restart_count, "failures": self.failures,
            "measured_eps": self.measured_eps,
            "last_progress": list(self.last_progress) if self.last_progress else None,
            "rescale_waiting": dict(self.rescale_waiting), "checkpoint_uri": self.checkpoint_uri,
            "last_checkpoint": dict(self.last_checkpoint), "message": self.message,
            "task_seq": self.task_seq, "previous_stop": self.previous_stop,
            "idempotency_key": self.idempotency_key, "request_digest": self.request_digest,
            "started_at": self.started_at,
        }

    def _cluster_dict(self) -> dict[str, Any] | None:
        # the ClusterSpec is immutable: convert it once per generation, not at every write
        if self.cluster is None:
            return None
        if self._cluster_json is None or self._cluster_json[0] is not self.cluster:
            self._cluster_json = (self.cluster, to_jsonable(self.cluster))
        return self._cluster_json[1]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FrameworkJob:
        """Read a stored record back; the spec is validated as a submission is.

        Raises:
            KeyError, TypeError, ValueError: the record is incomplete or invalid.
        """
        if not isinstance(d, dict) or not isinstance(d.get("spec"), dict):
            raise TypeError("a job record must be an object with a spec object")
        if not valid_job_id(d.get("job_id")):
            raise ValueError(f"bad job id {str(d.get('job_id'))[:80]!r}")
        spec_d = dict(d["spec"])
        for role in ("worker", "ps"):
            if spec_d.get(role) is not None:
                spec_d[role] = Resources.from_dict(spec_d[role])
        spec_d["command"] = tuple(spec_d.get("command") or ())
        spec = JobSpec(**spec_d)
        return cls(
            job_id=d["job_id"], spec=spec, submitted_at=d["submitted_at"], arrival_slot=d["arrival_slot"],
            arrival_time=d["arrival_time"], phase=JobPhase(d["phase"]), phase_times=dict(d["phase_times"]),
            epochs_done=d["epochs_done"], generation=d["generation"],
            cluster=cluster_from_dict(d["cluster"]) if d.get("cluster") else None,
            tasks={k: TaskRecord.from_dict(t) for k, t in d["tasks"].items()},
            slots_run=d["slots_run"], ledger=_ledger_from(d),
            restart_count=d["restart_count"], failures=d["failures"], measured_eps=d.get("measured_eps"),
            last_progress=tuple(d["last_progress"]) if d.get("last_progress") else None,  # type: ignore[arg-type]
            rescale_waiting=dict(d.get("rescale_waiting", {})), checkpoint_uri=d.get("checkpoint_uri", ""),
            last_checkpoint=dict(d.get("last_checkpoint", {})), message=d.get("message", ""),
            task_seq=d.get("task_seq", 0), previous_stop=d.get("previous_stop", "none"),
            idempotency_key=str(d.get("idempotency_key", "")), request_digest=str(d.get("request_digest", "")),
            started_at=_time_or_none(d.get("started_at", (d.get("phase_times") or {}).get("running"))),
        )

    @property
    def rescales(self) -> int:
        """Slots that restarted the job from its checkpoint (grow, shrink, resume)."""
        return self.ledger.rescales

    def _spec_dict(self) -> dict[str, Any]:
        # the spec is immutable: convert it once (the API view is rebuilt several times a second,
        # and shares this dict between views; nothing mutates a published view)
        if self._spec_json is None or self._spec_json[0] is not self.spec:
            self._spec_json = (self.spec, self.spec.to_dict())
        return self._spec_json[1]

    def public(self) -> dict[str, Any]:
        """The job as the HTTP API shows it."""
        live = {"ps": 0, "worker": 0}
        for t in self.tasks.values():
            if t.live and t.role in live:
                live[t.role] += 1
        return {
            "id": self.job_id, "name": self.spec.name, "job_type": self.spec.job_type,
            "phase": self.phase.value, "epochs": self.spec.epochs, "epochs_done": round(self.epochs_done, 4),
            "progress": round(min(1.0, self.epochs_done / self.spec.epochs), 4),
            "num_ps": live["ps"], "num_workers": live["worker"], "generation": self.generation,
            "rescales": self.rescales, "restart_count": self.restart_count,
            "measured_epochs_per_second": self.measured_eps, "submitted_at": self.submitted_at,
            "phase_times": dict(self.phase_times), "message": self.message, "started_at": self.started_at,
            "checkpoint_uri": self.checkpoint_uri,
            "tasks": [
                {"task_id": t.task_id, "role": t.role, "rank": t.rank, "agent_id": t.agent_id,
                 "hostname": t.hostname, "ports": list(t.ports), "state": t.state, "killing": t.killing}
                for t in sorted(self.tasks.values(), key=lambda t: (t.role, t.rank, t.task_id))
            ],
            "spec": self._spec_dict(),
        }


def _time_or_none(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _ledger_from(d: dict[str, Any]) -> RescaleLedger:
    """The rescale ledger of a stored job; records written before the ledger kept
    ``slots_since_rescale`` and ``rescales`` instead."""
    if "rescale_ledger" in d:
        return RescaleLedger.from_dict(d["rescale_ledger"])
    since = int(d.get("slots_since_rescale", 0))
    ran = bool(d.get("generation")) or bool(d.get("tasks")) or float(d.get("epochs_done", 0)) > 0
    return RescaleLedger(int(d["arrival_slot"]) + int(d["slots_run"]) - since, ran, int(d.get("rescales", 0)))


def cluster_from_dict(d: dict[str, Any]) -> ClusterSpec:
    def ep(x: dict[str, Any] | None) -> Endpoint | None:
        return None if x is None else Endpoint(x["task_id"], x["host"], int(x["port"]))

    return ClusterSpec(
        generation=int(d["generation"]),
        scheduler=ep(d.get("scheduler")),
        servers=tuple(ep(x) for x in d.get("servers", [])),  # type: ignore[misc]
        workers=tuple(ep(x) for x in d.get("workers", [])),  # type: ignore[misc]
    )
