"""JSON shapes of the Mesos v1 messages this stand-in accepts, as pydantic models.

Each model names the protobuf message it follows (``mesos/v1/mesos.proto``,
``mesos/v1/scheduler/scheduler.proto``, ``mesos/v1/executor/executor.proto``). As in Mesos's
JSON-to-protobuf conversion, unknown fields are ignored, missing *required* fields and wrong
types are errors (the master answers 400 Bad Request with the reason). Only the fields this
stand-in reads are declared; the raw JSON of a TaskInfo/ExecutorInfo is kept and passed to
executors unchanged.
"""

from __future__ import annotations

import base64
import binascii
import math
import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

# --- mesos.proto TaskState; "terminal" per the Mesos docs (task-state-reasons / reconciliation) ---
TASK_STATES = (
    "TASK_STAGING",
    "TASK_STARTING",
    "TASK_RUNNING",
    "TASK_KILLING",
    "TASK_FINISHED",
    "TASK_FAILED",
    "TASK_KILLED",
    "TASK_ERROR",
    "TASK_LOST",
    "TASK_DROPPED",
    "TASK_UNREACHABLE",
    "TASK_GONE",
    "TASK_GONE_BY_OPERATOR",
    "TASK_UNKNOWN",
)
TERMINAL_STATES = frozenset(
    {
        "TASK_FINISHED",
        "TASK_FAILED",
        "TASK_KILLED",
        "TASK_ERROR",
        "TASK_LOST",
        "TASK_DROPPED",
        "TASK_GONE",
        "TASK_GONE_BY_OPERATOR",
    }
)

# scheduler.proto Call.Type and executor.proto Call.Type
SCHEDULER_CALL_TYPES = (
    "SUBSCRIBE",
    "TEARDOWN",
    "ACCEPT",
    "DECLINE",
    "ACCEPT_INVERSE_OFFERS",
    "DECLINE_INVERSE_OFFERS",
    "REVIVE",
    "KILL",
    "SHUTDOWN",
    "ACKNOWLEDGE",
    "ACKNOWLEDGE_OPERATION_STATUS",
    "RECONCILE",
    "RECONCILE_OPERATIONS",
    "MESSAGE",
    "REQUEST",
    "SUPPRESS",
    "UPDATE_FRAMEWORK",
)
EXECUTOR_CALL_TYPES = ("SUBSCRIBE", "UPDATE", "MESSAGE")


class CallError(Exception):
    """A call the master/agent refuses, with the HTTP status Mesos would answer and the reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def is_terminal(state: str | None) -> bool:
    return state in TERMINAL_STATES


def now() -> float:
    return time.time()


def b64encode(data: bytes) -> str:
    """``bytes`` fields travel base64-encoded in Mesos JSON."""
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def new_uuid_b64() -> str:
    """A ``TaskStatus.uuid`` (16 raw UUID bytes, base64 in JSON)."""
    return b64encode(uuid.uuid4().bytes)


def _check_b64(value: str) -> str:
    try:
        b64decode(value)
    except (binascii.Error, ValueError, UnicodeEncodeError) as exc:
        raise ValueError(f"not valid base64 for a 'bytes' field: {exc}") from None
    return value


def _check_uuid(value: str) -> str:
    _check_b64(value)
    if len(b64decode(value)) != 16:
        raise ValueError("not a valid UUID (expected 16 bytes)")
    return value


Bytes = Annotated[str, AfterValidator(_check_b64)]
UUIDBytes = Annotated[str, AfterValidator(_check_uuid)]
TaskStateName = Literal[TASK_STATES]  # type: ignore[valid-type]


class Msg(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=False)


class ID(Msg):
    """FrameworkID / AgentID / TaskID / ExecutorID / OfferID / ContainerID: ``{"value": str}``."""

    value: str


class Scalar(Msg):
    value: float

    @field_validator("value")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("scalar value must be finite")
        return v


class Range(Msg):
    begin: int
    end: int


class Ranges(Msg):
    range: list[Range] = Field(default_factory=list)


class ValueSet(Msg):
    item: list[str] = Field(default_factory=list)


class Resource(Msg):
    """mesos.proto ``Resource`` (unreserved resources only in this stand-in)."""

    name: str
    type: Literal["SCALAR", "RANGES", "SET"]
    scalar: Scalar | None = None
    ranges: Ranges | None = None
    set: ValueSet | None = None
    role: str | None = None


class EnvVariable(Msg):
    name: str
    type: Literal["UNKNOWN", "VALUE", "SECRET"] | None = None
    value: str | None = None


class Environment(Msg):
    variables: list[EnvVariable] = Field(default_factory=list)


class CommandInfo(Msg):
    """mesos.proto ``CommandInfo`` (``uris`` are accepted and ignored: no fetcher here)."""

    value: str | None = None
    arguments: list[str] = Field(default_factory=list)
    shell: bool = True
    environment: Environment | None = None
    user: str | None = None


class DurationInfo(Msg):
    nanoseconds: int


class KillPolicy(Msg):
    grace_period: DurationInfo | None = None


class ExecutorInfo(Msg):
    """mesos.proto ``ExecutorInfo``."""

    executor_id: ID
    framework_id: ID | None = None
    type: Literal["UNKNOWN", "DEFAULT", "CUSTOM"] | None = None
    command: CommandInfo | None = None
    resources: list[Resource] = Field(default_factory=list)
    name: str | None = None
    data: Bytes | None = None
    shutdown_grace_period: DurationInfo | None = None


class TaskInfo(Msg):
    """mesos.proto ``TaskInfo``."""

    name: str
    task_id: ID
    agent_id: ID
    resources: list[Resource] = Field(default_factory=list)
    executor: ExecutorInfo | None = None
    command: CommandInfo | None = None
    data: Bytes | None = None
    kill_policy: KillPolicy | None = None


class LaunchOp(Msg):
    task_infos: list[TaskInfo] = Field(default_factory=list)


class Operation(Msg):
    """mesos.proto ``Offer.Operation``: only LAUNCH is carried out by this stand-in."""

    type: Literal[
        "UNKNOWN",
        "LAUNCH",
        "LAUNCH_GROUP",
        "RESERVE",
        "UNRESERVE",
        "CREATE",
        "DESTROY",
        "GROW_VOLUME",
        "SHRINK_VOLUME",
        "CREATE_DISK",
        "DESTROY_DISK",
    ]
    launch: LaunchOp | None = None


class Filters(Msg):
    """mesos.proto ``Filters``; Mesos's default ``refuse_seconds`` is 5."""

    refuse_seconds: float = 5.0


class Capability(Msg):
    type: str | None = None


class FrameworkInfo(Msg):
    """mesos.proto ``FrameworkInfo`` (``user`` and ``name`` are required there)."""

    user: str
    name: str
    id: ID | None = None
    failover_timeout: float | None = None
    checkpoint: bool | None = None
    role: str | None = None
    roles: list[str] = Field(default_factory=list)
    hostname: str | None = None
    principal: str | None = None
    webui_url: str | None = None
    capabilities: list[Capability] = Field(default_factory=list)


class Subscribe(Msg):
    framework_info: FrameworkInfo
    suppressed_roles: list[str] = Field(default_factory=list)


class Accept(Msg):
    offer_ids: list[ID] = Field(default_factory=list)
    operations: list[Operation] = Field(default_factory=list)
    filters: Filters | None = None


class Decline(Msg):
    offer_ids: list[ID] = Field(default_factory=list)
    filters: Filters | None = None


class Roles(Msg):
    roles: list[str] = Field(default_factory=list)


class Kill(Msg):
    task_id: ID
    agent_id: ID | None = None
    kill_policy: KillPolicy | None = None


class Shutdown(Msg):
    executor_id: ID
    agent_id: ID


class Acknowledge(Msg):
    agent_id: ID
    task_id: ID
    uuid: UUIDBytes


class ReconcileTask(Msg):
    task_id: ID
    agent_id: ID | None = None


class Reconcile(Msg):
    tasks: list[ReconcileTask] = Field(default_factory=list)


class SchedulerMessage(Msg):
    agent_id: ID
    executor_id: ID
    data: Bytes


class SchedulerCall(Msg):
    """scheduler.proto ``Call``."""

    type: Literal[SCHEDULER_CALL_TYPES]  # type: ignore[valid-type]
    framework_id: ID | None = None
    subscribe: Subscribe | None = None
    accept: Accept | None = None
    decline: Decline | None = None
    revive: Roles | None = None
    suppress: Roles | None = None
    kill: Kill | None = None
    shutdown: Shutdown | None = None
    acknowledge: Acknowledge | None = None
    reconcile: Reconcile | None = None
    message: SchedulerMessage | None = None


class TaskStatus(Msg):
    """mesos.proto ``TaskStatus`` as sent by an executor."""

    task_id: ID
    state: TaskStateName
    uuid: UUIDBytes | None = None
    message: str | None = None
    data: Bytes | None = None
    executor_id: ID | None = None
    agent_id: ID | None = None
    timestamp: float | None = None
    source: Literal["SOURCE_MASTER", "SOURCE_AGENT", "SOURCE_EXECUTOR"] | None = None


class ExecutorSubscribe(Msg):
    unacknowledged_tasks: list[dict[str, Any]] = Field(default_factory=list)
    unacknowledged_updates: list[dict[str, Any]] = Field(default_factory=list)


class ExecutorUpdate(Msg):
    status: TaskStatus


class ExecutorMessage(Msg):
    data: Bytes


class ExecutorCall(Msg):
    """executor.proto ``Call``: framework_id and executor_id are required there."""

    type: Literal[EXECUTOR_CALL_TYPES]  # type: ignore[valid-type]
    framework_id: ID
    executor_id: ID
    subscribe: ExecutorSubscribe | None = None
    update: ExecutorUpdate | None = None
    message: ExecutorMessage | None = None


def _explain(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{where or '<root>'}: {err.get('msg')}")
    return "; ".join(parts)


def _require_member(call: Msg, ctype: str) -> None:
    # validation::scheduler::call::validate / executor::call::validate: the member named after
    # the type must be present ("Expecting 'accept' to be present").
    member = ctype.lower()
    if member in type(call).model_fields and getattr(call, member) is None:
        raise CallError(400, f"Expecting '{member}' to be present")


def parse_scheduler_call(body: Any) -> SchedulerCall:
    """Validate a scheduler ``Call`` JSON object like Mesos's master does (400 on failure)."""
    if not isinstance(body, dict):
        raise CallError(400, "Failed to convert JSON into Call protobuf: expected a JSON object")
    try:
        call = SchedulerCall.model_validate(body)
    except ValidationError as exc:
        raise CallError(400, f"Failed to convert JSON into Call protobuf: {_explain(exc)}") from None
    if call.type in ("SUBSCRIBE", "ACCEPT", "DECLINE", "KILL", "SHUTDOWN", "ACKNOWLEDGE", "MESSAGE"):
        _require_member(call, call.type)
    if call.type == "SUBSCRIBE":
        info_id = call.subscribe.framework_info.id  # type: ignore[union-attr]
        if call.framework_id is not None and (info_id is None or info_id.value != call.framework_id.value):
            raise CallError(400, "'framework_id' differs from 'subscribe.framework_info.id'")
    elif call.framework_id is None:
        raise CallError(400, "Expecting 'framework_id' to be present")
    return call


def parse_executor_call(body: Any) -> ExecutorCall:
    """Validate an executor ``Call`` JSON object like Mesos's agent does (400 on failure)."""
    if not isinstance(body, dict):
        raise CallError(400, "Failed to convert JSON into Call protobuf: expected a JSON object")
    try:
        call = ExecutorCall.model_validate(body)
    except ValidationError as exc:
        raise CallError(400, f"Failed to convert JSON into Call protobuf: {_explain(exc)}") from None
    _require_member(call, call.type)
    if call.type == "UPDATE":
        status = call.update.status  # type: ignore[union-attr]
        if status.uuid is None:
            raise CallError(400, "Expecting 'uuid' to be present")
        if status.state == "TASK_STAGING":
            raise CallError(400, "Received TASK_STAGING from executor")
        if status.executor_id is not None and status.executor_id.value != call.executor_id.value:
            raise CallError(400, "ExecutorID in Call and TaskStatus do not match")
    return call
