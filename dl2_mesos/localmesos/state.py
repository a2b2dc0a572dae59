"""The master's in-memory registry: frameworks, agents, tasks and offers.

Like a Mesos master run with ``--registry=in_memory`` (no replicated log) this state lives only
in the master process: a restarted master starts empty and rebuilds it from agents that
re-register (with their executors and tasks) and frameworks that re-subscribe.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from .agent_records import AgentConfig
from .protocol import is_terminal, now
from .recordio import EventStream
from .resources import ResourceBag

COMPLETED_TASKS_KEPT = 1000
COMPLETED_FRAMEWORKS_KEPT = 50


@dataclass
class Task:
    """The master's view of one task (mesos.proto ``Task``)."""

    task_id: str
    framework_id: str
    agent_id: str
    executor_id: str  # "" for command tasks, as in Mesos's state JSON
    name: str
    resources: ResourceBag
    state: str = "TASK_STAGING"  # latest state known to the master
    status_update_state: str | None = None  # state of the latest update forwarded to the framework
    status_update_uuid: str | None = None
    statuses: list[dict[str, Any]] = field(default_factory=list)
    last_status: dict[str, Any] | None = None
    role: str = "*"

    @property
    def uses_resources(self) -> bool:
        return not is_terminal(self.state)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.task_id,
            "name": self.name,
            "framework_id": self.framework_id,
            "executor_id": self.executor_id,
            "slave_id": self.agent_id,
            "agent_id": self.agent_id,
            "state": self.state,
            "resources": self.resources.summary(),
            "role": self.role,
            "statuses": list(self.statuses),
        }


#: what a re-registering agent reports per framework: (framework id, FrameworkInfo,
#: executor id -> (ExecutorInfo, resources), tasks)
AgentSnapshot = tuple[str, dict[str, Any], dict[str, tuple[dict[str, Any], ResourceBag]], list[Task]]


@dataclass
class Offer:
    """mesos.proto ``Offer`` outstanding at a framework."""

    offer_id: str
    framework_id: str
    agent_id: str
    resources: ResourceBag
    created: float = field(default_factory=now)


@dataclass
class RefuseFilter:
    """Mesos allocator's RefusedOfferFilter: no offers of resources ⊆ ``resources`` until expiry."""

    resources: ResourceBag
    expires: float


@dataclass
class Framework:
    """The master's record of a framework (FrameworkInfo plus connection and bookkeeping)."""

    id: str
    info: dict[str, Any]
    stream: EventStream | None = None
    registered_time: float = field(default_factory=now)
    reregistered_time: float | None = None
    unregistered_time: float | None = None
    suppressed: bool = False
    recovered: bool = False  # known only from re-registering agents (after a master restart)
    tasks: dict[str, Task] = field(default_factory=dict)
    completed_tasks: deque = field(default_factory=lambda: deque(maxlen=COMPLETED_TASKS_KEPT))
    offers: set[str] = field(default_factory=set)
    # agent_id -> executor_id -> (ExecutorInfo JSON, resources)
    executors: dict[str, dict[str, tuple[dict[str, Any], ResourceBag]]] = field(default_factory=dict)
    filters: dict[str, list[RefuseFilter]] = field(default_factory=dict)
    failover_handle: asyncio.TimerHandle | None = None

    @property
    def connected(self) -> bool:
        return self.stream is not None and not self.stream.closed

    @property
    def role(self) -> str:
        roles = self.info.get("roles") or []
        return roles[0] if roles else (self.info.get("role") or "*")

    @property
    def partition_aware(self) -> bool:
        return self.has_capability("PARTITION_AWARE")

    def has_capability(self, name: str) -> bool:
        return any(isinstance(c, dict) and c.get("type") == name for c in self.info.get("capabilities") or [])

    @property
    def failover_timeout(self) -> float:
        value = self.info.get("failover_timeout")
        return float(value) if isinstance(value, (int, float)) and value > 0 else 0.0

    def send(self, event: dict[str, Any]) -> bool:
        return self.stream.send(event) if self.connected else False  # type: ignore[union-attr]

    def filtered(self, agent_id: str, available: ResourceBag, at: float) -> bool:
        kept = [f for f in self.filters.get(agent_id, []) if f.expires > at]
        self.filters[agent_id] = kept
        return any(f.resources.contains(available) for f in kept)


class AgentLink(Protocol):
    """The agent as the master sees it (the messages a Mesos master sends to an agent)."""

    agent_id: str | None
    host: str
    port: int
    total: ResourceBag
    config: AgentConfig
    gpu_free: list[int]

    @property
    def hostname(self) -> str: ...

    def attributes_json(self) -> list[dict[str, Any]]: ...

    def snapshot(self) -> list[AgentSnapshot]:
        """Frameworks, executors and tasks, for a re-registration."""
        ...

    def update_framework(self, fid: str, info: dict[str, Any]) -> None: ...

    def run_task(self, framework_info: dict[str, Any], task: dict[str, Any]) -> None: ...

    def kill_task(self, fid: str, task_id: str) -> None: ...

    def framework_message(self, fid: str, executor_id: str, data: str) -> None: ...

    def acknowledge(self, fid: str, task_id: str, uuid_b64: str) -> None: ...

    def shutdown_framework(self, fid: str) -> None: ...

    def shutdown_executor(self, fid: str, executor_id: str) -> None: ...


@dataclass
class AgentRecord:
    """The master's record of a registered agent; ``agent`` is the live agent object."""

    agent_id: str
    agent: AgentLink
    total: ResourceBag
    registered_time: float = field(default_factory=now)
    reregistered_time: float | None = None
    offers: set[str] = field(default_factory=set)

    @property
    def hostname(self) -> str:
        return self.agent.hostname

    @property
    def has_gpus(self) -> bool:
        return self.total.scalar("gpus") > 0


@dataclass
class MasterRegistry:
    """What one master instance knows: frameworks, agents and outstanding offers.

    The master, its task calls and the allocator share this object (composition: none of them
    holds the others).
    """

    master_id: str
    frameworks: dict[str, Framework] = field(default_factory=dict)
    agents: dict[str, AgentRecord] = field(default_factory=dict)
    offers: dict[str, Offer] = field(default_factory=dict)
    removed_agent_ids: set[str] = field(default_factory=set)
