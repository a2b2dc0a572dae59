"""Messages between the framework and the executor: versioned JSON.

Transport (see README "Framework <-> executor"):

* :class:`LaunchSpec` travels in ``TaskInfo.data`` with the launch (reliable).
* Lifecycle goes through Mesos status updates (reliable, acknowledged); the reason is in
  the update's ``message``.
* :class:`ProgressReport`, :class:`RescaleReport` and :class:`ResourceUsage` go executor ->
  framework as framework messages (best effort): progress is cumulative, so a lost message
  costs nothing.
* :class:`RescaleRequest` goes framework -> executor as a framework message; the framework
  re-sends it until the executor's :class:`RescaleReport` for that generation arrives.

Every message is ``{"schema": <version>, "kind": "<kind>", "body": {...}}``. :func:`decode` raises
:class:`~dl2_mesos.errors.MessageSchemaError` for anything malformed, of an unknown kind or of
an unknown schema version; receivers log and drop such messages.

Versions: 1 is the original set of fields; 2 adds ``previous_stop`` to :class:`LaunchSpec` and
:class:`RescaleRequest`. :func:`encode` writes the lowest version that can carry the message (a
message whose version-2 fields hold their defaults is still a version-1 message, readable by an
older executor); :func:`decode` reads both, and a version-1 message carrying a version-2 field
is malformed.
"""

from __future__ import annotations

import base64
import json
import math
import re
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, ClassVar

from dl2_mesos.errors import MessageSchemaError

SCHEMA_VERSION = 2  # the newest version this side speaks
SCHEMA_VERSIONS = (1, 2)  # every version it reads
MAX_MESSAGE_BYTES = 1 << 20

#: How the job's previous generation ended, as the framework tells a new generation's tasks:
#: ``graceful``: it is being stopped on request (a rescale): its worker 0 writes a ``final``
#: checkpoint, so wait for it (up to the executor's ``DL2_RESTORE_WAIT_S``) before restoring;
#: ``crashed``: a task of it failed or was lost: no final checkpoint will come, restore the newest
#: committed one at once; ``none``: no earlier generation runs any more (first launch, or its
#: tasks all ended): restore the newest committed one (if any) at once.
PREVIOUS_STOPS = ("graceful", "crashed", "none")


@dataclass(frozen=True)
class Endpoint:
    """A process of a job: its task, host and port."""

    task_id: str
    host: str
    port: int


@dataclass(frozen=True)
class ClusterSpec:
    """The shape of one *generation* of a job: who the scheduler, servers and workers are.

    ``generation`` grows by one at every rescale; processes of an older generation never talk
    to processes of a newer one.
    """

    generation: int
    scheduler: Endpoint | None  # MXNet scheduler (runs beside PS rank 0); None for PyTorch
    servers: tuple[Endpoint, ...]
    workers: tuple[Endpoint, ...]


@dataclass(frozen=True)
class _Message:
    KIND: ClassVar[str] = ""


@dataclass(frozen=True)
class LaunchSpec(_Message):
    """What one task runs. ``role`` is ``ps`` or ``worker``; ``rank`` indexes its role in ``cluster``."""

    KIND: ClassVar[str] = "launch"
    job_id: str
    task_id: str
    role: str
    rank: int
    runtime: str  # mxnet | pytorch
    job_type: str
    epochs: float
    command: tuple[str, ...]  # argument vector; () -> the package's reference program
    checkpoint_uri: str  # e.g. hdfs://127.0.0.1:9000/dl2/checkpoints/<job_id>
    cluster: ClusterSpec
    restart_count: int = 0
    progress_interval_s: float = 5.0
    env: tuple[tuple[str, str], ...] = ()  # extra environment for the training process
    previous_stop: str = "graceful"  # schema 2; see PREVIOUS_STOPS (absent in schema 1: graceful)

    @property
    def waits_for_final(self) -> bool:
        """Whether a worker of a later generation waits for the previous one's final checkpoint."""
        return self.cluster.generation > 0 and self.previous_stop == "graceful"


@dataclass(frozen=True)
class RescaleRequest(_Message):
    """Framework -> executor: move the job to ``cluster`` (checkpoint, stop, relaunch, restore).

    ``assignments`` maps each of this executor's task ids that continue to (role, rank) in the
    new generation; tasks of this executor not listed are being killed by the framework.
    """

    KIND: ClassVar[str] = "rescale"
    job_id: str
    cluster: ClusterSpec
    assignments: tuple[tuple[str, str, int], ...]  # (task_id, role, rank)
    previous_stop: str = "graceful"  # schema 2; "crashed": a member of the current generation is gone


@dataclass(frozen=True)
class ProgressReport(_Message):
    """Executor -> framework: cumulative progress of one job as seen by one task (worker)."""

    KIND: ClassVar[str] = "progress"
    job_id: str
    task_id: str
    generation: int
    epoch: float  # epochs done in total (fractional)
    batch: int  # batches done in total
    samples_per_second: float
    loss: float | None = None
    timestamp: float = 0.0


@dataclass(frozen=True)
class ResourceUsage(_Message):
    """Executor -> framework: what the job's processes on this agent use (psutil)."""

    KIND: ClassVar[str] = "usage"
    job_id: str
    task_id: str
    cpu_percent: float
    rss_bytes: int
    gpu_util: float | None = None
    timestamp: float = 0.0


@dataclass(frozen=True)
class RescaleReport(_Message):
    """Executor -> framework: a rescale of ``job_id`` to ``generation`` finished here, with phase times (s)."""

    KIND: ClassVar[str] = "rescaled"
    job_id: str
    task_id: str
    generation: int
    ok: bool
    phases: tuple[tuple[str, float], ...] = ()  # e.g. ("stop", 1.2), ("save", 0.4), ("upload", 0.3)...
    reason: str = ""


@dataclass(frozen=True)
class CheckpointReport(_Message):
    """Executor -> framework: a checkpoint was written."""

    KIND: ClassVar[str] = "checkpoint"
    job_id: str
    uri: str
    epoch: float
    batch: int
    generation: int


MESSAGE_TYPES: dict[str, type[_Message]] = {
    cls.KIND: cls
    for cls in (LaunchSpec, RescaleRequest, ProgressReport, ResourceUsage, RescaleReport, CheckpointReport)
}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def to_jsonable(obj: Any) -> Any:
    """A message (or a part of one) as JSON-ready dicts and lists: dataclasses become dicts of their
    fields, tuples lists. What ``dataclasses.asdict`` then list conversion gives, without asdict's
    generic deep copy, which made encoding half of a 1000-job scheduling round."""
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if isinstance(obj, (tuple, list)):
        return [to_jsonable(x) for x in obj]
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    names = _FIELD_NAMES.get(type(obj))
    if names is None:
        if not is_dataclass(obj):
            return obj
        names = _FIELD_NAMES[type(obj)] = tuple(f.name for f in fields(obj))
    return {name: to_jsonable(getattr(obj, name)) for name in names}


#: (kind, field) -> the schema version that introduced the field.
_FIELD_SINCE: dict[tuple[str, str], int] = {("launch", "previous_stop"): 2, ("rescale", "previous_stop"): 2}


_LATER_FIELDS: dict[type, tuple[tuple[str, int, Any], ...]] = {}


def _later_fields(cls: type) -> tuple[tuple[str, int, Any], ...]:
    """(name, schema version, default) of the fields of ``cls`` added after schema 1 (computed once
    per type: looking at every field of every message made a 2000-task launch's encoding slow)."""
    got = _LATER_FIELDS.get(cls)
    if got is None:
        kind = cls.KIND  # type: ignore[attr-defined]
        got = _LATER_FIELDS[cls] = tuple((f.name, _FIELD_SINCE[(kind, f.name)], f.default) for f in fields(cls)
                                         if _FIELD_SINCE.get((kind, f.name), 1) > 1)
    return got


def schema_version_of(msg: _Message) -> int:
    """The lowest schema version that carries ``msg``: fields still at their default are left out."""
    version = 1
    for name, since, default in _later_fields(type(msg)):
        if since > version and getattr(msg, name) != default:
            version = since
    return version


def encode(msg: _Message) -> bytes:
    """Serialise a message to UTF-8 JSON bytes (in the lowest schema version that carries it)."""
    version = schema_version_of(msg)
    body = to_jsonable(msg)
    for name, since, _ in _later_fields(type(msg)):
        if since > version:
            del body[name]
    return json.dumps({"schema": version, "kind": msg.KIND, "body": body}, allow_nan=False).encode()


def encode_b64(msg: _Message) -> str:
    """Serialise for pymesos fields that carry base64 (``TaskInfo.data``, framework messages)."""
    return base64.b64encode(encode(msg)).decode()


def _endpoint(d: Any, where: str) -> Endpoint:
    if not isinstance(d, dict):
        raise MessageSchemaError(f"{where}: expected an object")
    try:
        ep = Endpoint(task_id=str(d["task_id"]), host=str(d["host"]), port=int(d["port"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise MessageSchemaError(f"{where}: {exc!r}") from None
    if not (0 <= ep.port <= 65535):
        raise MessageSchemaError(f"{where}: port {ep.port} out of range")
    return ep


def _cluster(d: Any) -> ClusterSpec:
    if not isinstance(d, dict):
        raise MessageSchemaError("cluster: expected an object")
    try:
        servers = tuple(_endpoint(x, "cluster.servers") for x in d.get("servers", []))
        workers = tuple(_endpoint(x, "cluster.workers") for x in d.get("workers", []))
        sched = d.get("scheduler")
        return ClusterSpec(
            generation=int(d["generation"]),
            scheduler=None if sched is None else _endpoint(sched, "cluster.scheduler"),
            servers=servers,
            workers=workers,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise MessageSchemaError(f"cluster: {exc!r}") from None


def _tupleize(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_tupleize(x) for x in v)
    return v


def decode(data: bytes | str) -> _Message:
    """Parse bytes (or a JSON string) into a message.

    Raises:
        MessageSchemaError: malformed JSON, wrong envelope, unknown kind or schema version,
            missing or extra fields, wrong types.
    """
    if isinstance(data, str):
        data = data.encode()
    if len(data) > MAX_MESSAGE_BYTES:
        raise MessageSchemaError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}")
    try:
        env = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MessageSchemaError(f"not JSON: {exc}") from None
    if not isinstance(env, dict) or set(env) != {"schema", "kind", "body"}:
        raise MessageSchemaError("envelope must be an object with exactly schema, kind, body")
    version = env["schema"]
    if isinstance(version, bool) or version not in SCHEMA_VERSIONS:
        raise MessageSchemaError(f"unknown schema version {version!r} (this side reads {list(SCHEMA_VERSIONS)})")
    cls = MESSAGE_TYPES.get(env["kind"]) if isinstance(env["kind"], str) else None
    if cls is None:
        raise MessageSchemaError(f"unknown message kind {env['kind']!r}")
    body = env["body"]
    if not isinstance(body, dict):
        raise MessageSchemaError("body must be an object")
    names = {f.name for f in fields(cls) if _FIELD_SINCE.get((cls.KIND, f.name), 1) <= version}
    extra = set(body) - names
    if extra:
        raise MessageSchemaError(f"{cls.KIND}: unknown fields {sorted(extra)}")
    kw: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in body:
            if f.default is field().default and f.default_factory is field().default_factory:  # type: ignore[misc]
                raise MessageSchemaError(f"{cls.KIND}: missing field {f.name!r}")
            continue
        v = body[f.name]
        if f.name == "cluster":
            v = _cluster(v)
        else:
            v = _tupleize(v)
        kw[f.name] = v
    try:
        msg = cls(**kw)
    except TypeError as exc:
        raise MessageSchemaError(f"{cls.KIND}: {exc}") from None
    _check_types(msg)
    return msg


def decode_b64(data: str | bytes) -> _Message:
    """Inverse of :func:`encode_b64`."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (ValueError, TypeError) as exc:
        raise MessageSchemaError(f"not base64: {exc}") from None
    return decode(raw)


_STR_FIELDS = {"job_id", "task_id", "role", "runtime", "job_type", "checkpoint_uri", "uri", "reason", "previous_stop"}
_NUM_FIELDS = {"epochs", "epoch", "samples_per_second", "progress_interval_s", "cpu_percent", "timestamp"}
_INT_FIELDS = {"rank", "restart_count", "batch", "generation", "rss_bytes"}


def _check_types(msg: _Message) -> None:
    for f in fields(msg):
        v = getattr(msg, f.name)
        if f.name in _STR_FIELDS and not isinstance(v, str):
            raise MessageSchemaError(f"{msg.KIND}.{f.name}: expected a string")
        if f.name in _NUM_FIELDS and (
            isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
        ):
            raise MessageSchemaError(f"{msg.KIND}.{f.name}: expected a finite number")
        if f.name in _INT_FIELDS and (isinstance(v, bool) or not isinstance(v, int)):
            raise MessageSchemaError(f"{msg.KIND}.{f.name}: expected an integer")
    if isinstance(msg, LaunchSpec):
        _check_launch(msg)
    if isinstance(msg, (RescaleRequest, ProgressReport, ResourceUsage, RescaleReport, CheckpointReport)):
        _check_id(msg.job_id, f"{msg.KIND}.job_id")
    if isinstance(msg, RescaleRequest):
        _check_cluster(msg.cluster, "rescale.cluster")
        for a in msg.assignments:
            if (not isinstance(a, tuple) or len(a) != 3 or not isinstance(a[0], str) or a[1] not in ROLES
                    or isinstance(a[2], bool) or not isinstance(a[2], int) or not 0 <= a[2] < MAX_RANK):
                raise MessageSchemaError(f"rescale.assignments: expected [task_id, ps|worker, rank], got {a!r}")
    if isinstance(msg, (LaunchSpec, RescaleRequest)) and msg.previous_stop not in PREVIOUS_STOPS:
        raise MessageSchemaError(f"{msg.KIND}.previous_stop: expected one of {list(PREVIOUS_STOPS)}, "
                                 f"got {msg.previous_stop!r}")


# -- LaunchSpec limits: the executor acts on every field (paths, processes, environment), so a
#    launch message is checked as hostile input before anything is created for it.
ROLES = ("ps", "worker")
RUNTIMES = ("mxnet", "pytorch")
MAX_RANK = 10_000
MAX_ARGS, MAX_ARG_CHARS = 1000, 16_384
MAX_ENV = 256
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_HOST_RE = re.compile(r"[A-Za-z0-9_.:\-\[\]]{1,255}")
_URI_RE = re.compile(r"(?:(?:hdfs|webhdfs|viewfs)://[^/\s]+|file://|memory://)?/[^\s\x00]*")


def _check_id(value: str, where: str) -> None:
    """One path component of ``[A-Za-z0-9._-]`` (ids name folders on the agent): no ``/``, no ``..``."""
    if not _ID_RE.fullmatch(value) or ".." in value:
        raise MessageSchemaError(f"{where}: {value[:80]!r} is not an id (1-200 of [A-Za-z0-9._-], no '..')")


def _check_endpoint(ep: Endpoint, where: str) -> None:
    if not isinstance(ep.task_id, str) or not isinstance(ep.host, str) or not _HOST_RE.fullmatch(ep.host):
        raise MessageSchemaError(f"{where}: bad endpoint {ep!r}")


def _check_cluster(c: ClusterSpec, where: str) -> None:
    if c.generation < 0:
        raise MessageSchemaError(f"{where}.generation: must be >= 0, got {c.generation}")
    if len(c.servers) > MAX_RANK or len(c.workers) > MAX_RANK:
        raise MessageSchemaError(f"{where}: too many endpoints")
    for ep in (*c.servers, *c.workers, *([c.scheduler] if c.scheduler else [])):
        _check_endpoint(ep, where)


def _check_launch(msg: LaunchSpec) -> None:
    """Every field of a LaunchSpec against what the executor will do with it."""
    _check_id(msg.job_id, "launch.job_id")
    _check_id(msg.task_id, "launch.task_id")
    if msg.role not in ROLES:
        raise MessageSchemaError(f"launch.role: expected ps or worker, got {msg.role!r}")
    if msg.runtime not in RUNTIMES:
        raise MessageSchemaError(f"launch.runtime: expected one of {list(RUNTIMES)}, got {msg.runtime!r}")
    if not 0 < len(msg.job_type) <= 100:
        raise MessageSchemaError("launch.job_type: expected 1-100 characters")
    if not 0 < msg.epochs <= 1e9:
        raise MessageSchemaError(f"launch.epochs: must be in (0, 1e9], got {msg.epochs}")
    if not 0 <= msg.rank < MAX_RANK or not 0 <= msg.restart_count < 1_000_000:
        raise MessageSchemaError("launch.rank / restart_count: out of range")
    if not 0 <= msg.progress_interval_s <= 86400:
        raise MessageSchemaError(f"launch.progress_interval_s: must be in [0, 86400], got {msg.progress_interval_s}")
    if not isinstance(msg.command, tuple) or len(msg.command) > MAX_ARGS or not all(
            isinstance(a, str) and "\x00" not in a and len(a) <= MAX_ARG_CHARS for a in msg.command):
        raise MessageSchemaError("launch.command: expected a list of at most 1000 strings without NUL")
    if not _URI_RE.fullmatch(msg.checkpoint_uri) or "/../" in msg.checkpoint_uri + "/" or \
            msg.checkpoint_uri.endswith("/.."):
        raise MessageSchemaError(f"launch.checkpoint_uri: {msg.checkpoint_uri[:200]!r} is not an hdfs://, "
                                 "webhdfs://, viewfs:// or file:// URI (or absolute path) without '..'")
    if not isinstance(msg.env, tuple) or len(msg.env) > MAX_ENV:
        raise MessageSchemaError(f"launch.env: expected at most {MAX_ENV} [name, value] pairs")
    for pair in msg.env:
        if (not isinstance(pair, tuple) or len(pair) != 2 or not isinstance(pair[0], str)
                or not isinstance(pair[1], str) or not _ENV_NAME_RE.fullmatch(pair[0])
                or "\x00" in pair[1] or len(pair[1]) > MAX_ARG_CHARS):
            raise MessageSchemaError(f"launch.env: expected [NAME, string value] pairs, got {pair!r:.200}")
    _check_cluster(msg.cluster, "launch.cluster")
    members = msg.cluster.servers if msg.role == "ps" else msg.cluster.workers
    if members and msg.rank >= len(members):
        raise MessageSchemaError(f"launch.rank: {msg.rank} but the cluster has {len(members)} {msg.role} endpoints")
