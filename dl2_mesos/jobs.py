"""Job specifications (what a user submits) and job phases."""

from __future__ import annotations

import copy
import enum
import math
import re
from dataclasses import dataclass, field
from typing import Any

from dl2_mesos.errors import InvalidJobSpec
from dl2_mesos.job_types import get_job_type, job_type_names
from dl2_mesos.resources import Resources

RUNTIMES = ("mxnet", "pytorch")
MAX_TASKS_PER_ROLE = 1000
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


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


def _check_resources(name: str, r: Resources) -> None:
    for comp in ("cpus", "gpus", "mem"):
        v = getattr(r, comp)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            raise InvalidJobSpec(f"{name}.{comp}", f"must be a finite number >= 0, got {v!r}")
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
        if not isinstance(self.job_type, str) or not self.job_type:
            raise InvalidJobSpec("job_type", "must be a non-empty string")
        try:
            jt = get_job_type(self.job_type)
        except KeyError:
            raise InvalidJobSpec(
                "job_type", f"unknown type {self.job_type!r}; known: {', '.join(job_type_names())}"
            ) from None
        if self.job_type != jt.name:
            object.__setattr__(self, "job_type", jt.name)
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, (int, float)):
            raise InvalidJobSpec("epochs", f"must be a number, got {self.epochs!r}")
        if not math.isfinite(self.epochs) or self.epochs <= 0:
            raise InvalidJobSpec("epochs", f"must be > 0, got {self.epochs!r}")
        if self.name and (not isinstance(self.name, str) or not _NAME_RE.match(self.name)):
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
        for lo_name, hi_name in (("min_ps", "max_ps"), ("min_workers", "max_workers")):
            lo, hi = getattr(self, lo_name), getattr(self, hi_name)
            for n, v in ((lo_name, lo), (hi_name, hi)):
                if isinstance(v, bool) or not isinstance(v, int):
                    raise InvalidJobSpec(n, f"must be an integer, got {v!r}")
            if lo < 0:
                raise InvalidJobSpec(lo_name, f"must be >= 0, got {lo}")
            if hi_name == "max_ps" and hi == 0 == lo:
                continue  # no parameter servers: an all-reduce (PyTorch) job
            if hi < max(lo, 1) or hi > MAX_TASKS_PER_ROLE:
                raise InvalidJobSpec(hi_name, f"must be between max({lo_name}, 1) and {MAX_TASKS_PER_ROLE}, got {hi}")
        if self.min_workers < 1:
            raise InvalidJobSpec("min_workers", "a job needs at least one worker")
        if self.runtime not in RUNTIMES:
            raise InvalidJobSpec("runtime", f"must be one of {', '.join(RUNTIMES)}, got {self.runtime!r}")
        if self.runtime == "pytorch" and (self.min_ps != 0 or self.max_ps != 0):
            # all-reduce jobs have no parameter servers
            object.__setattr__(self, "min_ps", 0)
            object.__setattr__(self, "max_ps", 0)
        if self.runtime == "mxnet" and self.min_ps < 1:
            raise InvalidJobSpec("min_ps", "an MXNet parameter-server job needs at least one PS")
        if isinstance(self.command, (str, bytes)):
            raise InvalidJobSpec("command", "must be an argument vector (list of strings), never a shell string")
        cmd = tuple(self.command)
        if not all(isinstance(a, str) and "\x00" not in a for a in cmd):
            raise InvalidJobSpec("command", "every argument must be a string without NUL bytes")
        object.__setattr__(self, "command", cmd)
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise InvalidJobSpec("priority", f"must be an integer, got {self.priority!r}")
        if self.restart_seconds is not None:
            rs = self.restart_seconds
            if isinstance(rs, bool) or not isinstance(rs, (int, float)) or not math.isfinite(rs) or rs < 0:
                raise InvalidJobSpec("restart_seconds", f"must be a number >= 0, got {rs!r}")

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
                    if isinstance(v, bool) or not isinstance(v, (int, float)):
                        raise InvalidJobSpec(f"{role}.{k}", f"must be a number, got {v!r}")
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
