"""Records an agent keeps: its configuration, executors, their tasks, and frameworks on it."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .executor_process import ExecutorProcess
from .recordio import EventStream
from .resources import ResourceBag


@dataclass(frozen=True)
class AgentConfig:
    """Resources and behaviour of one agent (Mesos agent flags ``--resources``, ``--attributes`` ...)."""

    cpus: float = 8.0
    mem: float = 16384.0  # MiB
    disk: float = 65536.0  # MiB
    gpus: int = 0
    ports: tuple[int, int] = (31000, 31999)
    attributes: tuple[tuple[str, str | float], ...] = ()
    hostname: str = "127.0.0.1"
    executor_shutdown_grace_period: float = 5.0  # --executor_shutdown_grace_period
    executor_registration_timeout: float = 60.0  # --executor_registration_timeout
    status_update_retry_min: float = 10.0  # STATUS_UPDATE_RETRY_INTERVAL_MIN
    status_update_retry_max: float = 600.0  # STATUS_UPDATE_RETRY_INTERVAL_MAX
    heartbeat_interval: float = 30.0
    mesos_local: bool = True  # set MESOS_LOCAL=1 for executors (see executor_process.py)
    switch_user: bool = True  # --switch_user: run executors as FrameworkInfo/CommandInfo.user (see executor_process.py)

    def resources(self) -> ResourceBag:
        return ResourceBag.of(
            cpus=self.cpus,
            mem=self.mem,
            disk=self.disk,
            gpus=self.gpus,
            ports=[self.ports] if self.ports else [],
        )


@dataclass
class AgentTask:
    info: dict[str, Any]
    resources: ResourceBag
    gpus: list[int] = field(default_factory=list)
    state: str = "TASK_STAGING"
    kill_requested: bool = False

    @property
    def task_id(self) -> str:
        return self.info["task_id"]["value"]


@dataclass
class Executor:
    framework_id: str
    executor_id: str
    info: dict[str, Any]
    command_task: bool
    container_id: str
    directory: Path
    resources: ResourceBag
    gpus: list[int] = field(default_factory=list)
    state: str = "REGISTERING"  # REGISTERING -> RUNNING -> TERMINATING -> TERMINATED
    stream: EventStream | None = None
    queued: dict[str, AgentTask] = field(default_factory=dict)
    launched: dict[str, AgentTask] = field(default_factory=dict)
    process: ExecutorProcess | None = None
    shutdown_reason: str | None = None
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
    exit_status: int | None = None

    def tasks(self) -> list[AgentTask]:
        return list(self.queued.values()) + list(self.launched.values())

    def find(self, task_id: str) -> AgentTask | None:
        return self.queued.get(task_id) or self.launched.get(task_id)


@dataclass
class AgentFramework:
    info: dict[str, Any]
    executors: dict[str, Executor] = field(default_factory=dict)
    completed_executors: deque = field(default_factory=lambda: deque(maxlen=100))
    removed: bool = False


def kill_grace(task_info: dict[str, Any]) -> float:
    """KillPolicy.grace_period of a command task; Mesos's command executor defaults to 3 s."""
    gp = ((task_info.get("kill_policy") or {}).get("grace_period") or {}).get("nanoseconds")
    return gp / 1e9 if isinstance(gp, int) and gp >= 0 else 3.0
