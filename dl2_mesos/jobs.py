"""Job specifications (what a user submits) and job phases."""

from __future__ import annotations

import copy
import enum
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from dl2_mesos.errors import InvalidJobSpec
from dl2_mesos.job_types import get_job_type, job_type_names
from dl2_mesos.resources import Resources

RUNTIMES = ("mxnet", "pytorch")
MAX_TASKS_PER_ROLE = 1000
#: Job names: one safe path component (always matched with ``fullmatch``: ``$`` would let a
#: trailing newline through).
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"
_NAME_RE = re.compile(NAME_PATTERN)
# Bounds on every number a user gives: a 400-digit integer is valid JSON but no sane amount,
# and converting it to a float overflows far from where it was given.
MAX_EPOCHS = 1e6
MAX_PRIORITY = 10**6
MAX_RESTART_SECONDS = 7 * 86400.0
MAX_RESOURCE = {"cpus": 1e5, "gpus": 1e4, "mem": 1e9}  # cores, GPUs, MiB per task
# ``command`` and ``extra`` are stored with every job record and shown by the API.
MAX_COMMAND_ARGS = 1000
MAX_COMMAND_CHARS = 32 * 1024
MAX_EXTRA_DEPTH = 32
MAX_EXTRA_BYTES = 16 * 1024
MAX_EXTRA_INT = 2**63


class JobPhase(str, enum.Enum):
    """Lifecycle of a job in the framework."""

    PENDING = "pending"
    RUNNING = "running"
    RESCALING = "rescaling"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (JobPhase.FINISHED, JobPhase.FAILED, JobPhase.CANCELLED)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _bounded_number(field_name: str, v: Any, lo: float, hi: float, *, lo_open: bool = False) -> None:
    """``v`` is a finite number in [lo, hi] (or (lo, hi] with ``lo_open``); huge ints included."""
    if not _is_number(v):
        raise InvalidJobSpec(field_name, f"must be a number, got {_short(v)}")
    try:
        ok = math.isfinite(v) and (v > lo if lo_open else v >= lo) and v <= hi
    except OverflowError:  # an int too large for a float
        ok = False
    if not ok:
        rule = f"> {lo:g}" if lo_open else f">= {lo:g}"
        raise InvalidJobSpec(field_name, f"must be a finite number {rule} and <= {hi:g}, got {_short(v)}")


def _bounded_int(field_name: str, v: Any, lo: int, hi: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidJobSpec(field_name, f"must be an integer, got {_short(v)}")
    if not lo <= v <= hi:
        raise InvalidJobSpec(field_name, f"must be between {lo} and {hi}, got {_short(v)}")


def _short(v: Any) -> str:
    """``repr`` cut short (error messages echo user input; a 4000-digit number must not)."""
    try:
        text = repr(v)
    except ValueError:  # an int over Python's digit limit for str()
        return f"<{type(v).__name__} too large to print>"
    return text if len(text) <= 40 else text[:37] + "..."


def _encodable(text: str) -> bool:
    """True when ``text`` is valid Unicode (no lone surrogates, which JSON escapes allow)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_json_value(field_name: str, value: Any, *, max_depth: int = MAX_EXTRA_DEPTH) -> None:
    """``value`` is plain JSON data (objects with string keys, arrays, strings, finite numbers,
    booleans, null), nested at most ``max_depth`` deep, with valid Unicode and bounded integers.

    Walks iteratively: a 5000-deep value must not raise RecursionError here (or anywhere later).

    Raises:
        InvalidJobSpec: naming ``field_name`` and the rule.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth > max_depth:
                raise InvalidJobSpec(field_name, f"is nested deeper than {max_depth} levels")
            if isinstance(v, dict):
                for k, item in v.items():
                    if not isinstance(k, str) or not _encodable(k):
                        raise InvalidJobSpec(field_name, f"keys must be valid Unicode strings, got {_short(k)}")
                    stack.append((item, depth + 1))
            else:
                stack.extend((item, depth + 1) for item in v)
        elif isinstance(v, str):
            if not _encodable(v):
                raise InvalidJobSpec(field_name, "strings must be valid Unicode (no lone surrogates)")
        elif isinstance(v, bool) or v is None:
            continue
        elif isinstance(v, int):
            if not -MAX_EXTRA_INT <= v <= MAX_EXTRA_INT:
                raise InvalidJobSpec(field_name, f"integers must be within +-2**63, got {_short(v)}")
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise InvalidJobSpec(field_name, f"numbers must be finite, got {v!r}")
        else:
            raise InvalidJobSpec(field_name, f"must be plain JSON data, got a {type(v).__name__}")


def _check_resources(name: str, r: Resources) -> None:
    for comp in ("cpus", "gpus", "mem"):
        _bounded_number(f"{name}.{comp}", getattr(r, comp), 0, MAX_RESOURCE[comp])
    if r.gpus != int(r.gpus):
        raise InvalidJobSpec(f"{name}.gpus", f"must be a whole number of GPUs, got {r.gpus!r}")


@dataclass(frozen=True)
class JobSpec:
    """What a user submits. Validated on construction.

    The user gives per-task demands and the total epochs; DL2 chooses how many parameter
    servers (PS) and workers the job gets, between the min/max given here.

    Raises:
        InvalidJobSpec: naming the field and the rule it breaks.
    """

    job_type: str
    epochs: float
    name: str = ""
    worker: Resources | None = None  # None -> the job type's default demand
    ps: Resources | None = None
    min_ps: int = 1
    max_ps: int = 16
    min_workers: int = 1
    max_workers: int = 16
    runtime: str = "mxnet"
    command: tuple[str, ...] = ()  # argument vector, never a shell string; () -> reference program
    priority: int = 0
    restart_seconds: float | None = None  # None -> the job type's default restart cost
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        # the one validation of a job: the API, the state store (reading a record back) and the
        # simulator's traces all build a JobSpec, so what one accepts the others accept too
        if not isinstance(self.job_type, str) or not self.job_type:
            raise InvalidJobSpec("job_type", "must be a non-empty string")
        if self.job_type not in job_type_names():  # names only: "3" is not a type name
            raise InvalidJobSpec(
                "job_type", f"unknown type {_short(self.job_type)}; known: {', '.join(job_type_names())}"
            )
        jt = get_job_type(self.job_type)
        _bounded_number("epochs", self.epochs, 0, MAX_EPOCHS, lo_open=True)
        if not isinstance(self.name, str) or (self.name and not _NAME_RE.fullmatch(self.name)):
            raise InvalidJobSpec(
                "name", "must be 1-63 characters of letters, digits, '.', '_' or '-', starting alphanumeric"
            )
        if self.worker is None:
            object.__setattr__(self, "worker", jt.worker)
        if self.ps is None:
            object.__setattr__(self, "ps", jt.ps)
        if not isinstance(self.worker, Resources):
            raise InvalidJobSpec("worker", "must be a Resources value")
        if not isinstance(self.ps, Resources):
            raise InvalidJobSpec("ps", "must be a Resources value")
        _check_resources("worker", self.worker)
        _check_resources("ps", self.ps)
        if self.worker.is_zero():
            raise InvalidJobSpec("worker", "a worker must ask for some resources")
        if self.worker.gpus != int(self.worker.gpus):
            raise InvalidJobSpec("worker.gpus", f"must be a whole number of GPUs, got {self.worker.gpus!r}")
        if self.ps.gpus != int(self.ps.gpus):
            raise InvalidJobSpec("ps.gpus", f"must be a whole number of GPUs, got {self.ps.gpus!r}")
        if self.runtime not in RUNTIMES:
            raise InvalidJobSpec("runtime", f"must be one of {', '.join(RUNTIMES)}, got {_short(self.runtime)}")
        for n in ("min_ps", "max_ps", "min_workers", "max_workers"):
            _bounded_int(n, getattr(self, n), 0, MAX_TASKS_PER_ROLE)
        if self.runtime == "pytorch" and (self.min_ps != 0 or self.max_ps != 0):
            # all-reduce jobs have no parameter servers
            object.__setattr__(self, "min_ps", 0)
            object.__setattr__(self, "max_ps", 0)
        # max_ps == 0 is a workers-only job (PyTorch all-reduce, or a PS-less trace job)
        if self.max_ps < self.min_ps:
            raise InvalidJobSpec("max_ps", f"must be >= min_ps ({self.min_ps}), got {self.max_ps}")
        if self.runtime == "mxnet" and self.max_ps > 0 and self.min_ps < 1:
            raise InvalidJobSpec("min_ps", "an MXNet parameter-server job needs at least one PS")
        if self.max_ps > 0 and self.ps.is_zero():
            # a PS that asks for nothing would run outside the resource accounting
            raise InvalidJobSpec("ps", "a parameter server must ask for some resources")
        if self.min_workers < 1:
            raise InvalidJobSpec("min_workers", "a job needs at least one worker")
        if self.max_workers < self.min_workers:
            raise InvalidJobSpec("max_workers", f"must be >= min_workers ({self.min_workers}), got {self.max_workers}")
        if isinstance(self.command, (str, bytes)) or not isinstance(self.command, (list, tuple)):
            raise InvalidJobSpec("command", "must be an argument vector (list of strings), never a shell string")
        cmd = tuple(self.command)
        if not all(isinstance(a, str) and "\x00" not in a and _encodable(a) for a in cmd):
            raise InvalidJobSpec("command", "every argument must be a valid Unicode string without NUL bytes")
        if len(cmd) > MAX_COMMAND_ARGS or sum(len(a) for a in cmd) > MAX_COMMAND_CHARS:
            raise InvalidJobSpec("command", f"at most {MAX_COMMAND_ARGS} arguments and {MAX_COMMAND_CHARS} characters")
        object.__setattr__(self, "command", cmd)
        _bounded_int("priority", self.priority, -MAX_PRIORITY, MAX_PRIORITY)
        if self.restart_seconds is not None:
            _bounded_number("restart_seconds", self.restart_seconds, 0, MAX_RESTART_SECONDS)
        if not isinstance(self.extra, dict):
            raise InvalidJobSpec("extra", "must be an object")
        check_json_value("extra", self.extra)
        if len(json.dumps(self.extra, separators=(",", ":"))) > MAX_EXTRA_BYTES:
            raise InvalidJobSpec("extra", f"must be at most {MAX_EXTRA_BYTES} bytes as JSON")

    @property
    def uses_ps(self) -> bool:
        return self.max_ps > 0

    @property
    def restart_cost_seconds(self) -> float:
        """Seconds one rescale of this job costs (checkpoint, stop, relaunch, restore)."""
        if self.restart_seconds is not None:
            return float(self.restart_seconds)
        return get_job_type(self.job_type).restart_seconds

    @property
    def type_id(self) -> int:
        return get_job_type(self.job_type).type_id

    def to_dict(self) -> dict[str, Any]:
        # what asdict() gives, built directly: asdict's generic deep copy made this the largest
        # cost of the framework's API view with 1000 jobs (all fields but extra are immutable)
        d = {name: getattr(self, name) for name in self.__dataclass_fields__}
        for role in ("worker", "ps"):
            if d[role] is not None:
                d[role] = d[role].to_dict()
        d["command"] = list(self.command)
        d["extra"] = copy.deepcopy(self.extra) if self.extra else {}
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobSpec:
        """Build a spec from plain JSON-like data (unknown keys are rejected).

        Raises:
            InvalidJobSpec: for a missing, unknown or invalid field.
        """
        if not isinstance(data, dict):
            raise InvalidJobSpec("<root>", "a job spec must be a JSON object")
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidJobSpec(unknown[0], f"unknown field (known: {', '.join(sorted(known))})")
        for req in ("job_type", "epochs"):
            if req not in data:
                raise InvalidJobSpec(req, "is required")
        kw = dict(data)
        for role in ("worker", "ps"):
            if kw.get(role) is not None:
                r = kw[role]
                if not isinstance(r, dict):
                    raise InvalidJobSpec(role, "must be an object with cpus, gpus, mem")
                bad = sorted(set(r) - {"cpus", "gpus", "mem"})
                if bad:
                    raise InvalidJobSpec(f"{role}.{bad[0]}", "unknown resource (known: cpus, gpus, mem)")
                vals = {}
                for k, v in r.items():
                    _bounded_number(f"{role}.{k}", v, 0, MAX_RESOURCE[k])  # before float(): no overflow
                    vals[k] = float(v)
                kw[role] = Resources(**vals)
        if "command" in kw and kw["command"] is not None:
            if isinstance(kw["command"], (str, bytes)) or not isinstance(kw["command"], (list, tuple)):
                raise InvalidJobSpec("command", "must be an argument vector (list of strings), never a shell string")
            kw["command"] = tuple(kw["command"])
        elif "command" in kw:
            kw["command"] = ()
        if "extra" in kw and not isinstance(kw["extra"], dict):
            raise InvalidJobSpec("extra", "must be an object")
        return cls(**kw)
