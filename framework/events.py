"""Events the loop thread consumes. Producers (pymesos callbacks, the kazoo listener, HTTP
handlers) only build one of these and put it on the queue."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from dl2_mesos.jobs import JobSpec


@dataclass(frozen=True)
class Registered:
    driver: Any
    framework_id: str
    master: str
    reregistered: bool


@dataclass(frozen=True)
class Disconnected:
    pass


@dataclass(frozen=True)
class Offers:
    offers: tuple[dict, ...]


@dataclass(frozen=True)
class OfferRescinded:
    offer_id: str


@dataclass(frozen=True)
class StatusUpdate:
    status: dict


@dataclass(frozen=True)
class FrameworkMessage:
    executor_id: str
    agent_id: str
    data: str


@dataclass(frozen=True)
class AgentLost:
    agent_id: str


@dataclass(frozen=True)
class AgentInventory:
    """The master's agent list (``agents`` None: it could not be read, ``error`` says why)."""

    master: str
    agents: tuple[Any, ...] | None
    error: str = ""


@dataclass(frozen=True)
class ExecutorLost:
    executor_id: str
    agent_id: str
    status: int


@dataclass(frozen=True)
class MesosError:
    message: str


@dataclass(frozen=True)
class SubmitJob:
    spec: JobSpec
    idempotency_key: str = ""  # the request's Idempotency-Key ("" = none)
    reply: Future = field(default_factory=Future, compare=False)


@dataclass(frozen=True)
class CancelJob:
    job_id: str
    reply: Future = field(default_factory=Future, compare=False)


@dataclass(frozen=True)
class Leadership:
    """ZooKeeper connection state change: ``suspended``, ``resumed`` or ``lost``."""

    change: str


@dataclass(frozen=True)
class Stop:
    reason: str = ""
