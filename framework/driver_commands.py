"""What the scheduler asks of Mesos, as values, and the driver that carries it out.

The job lifecycle rules and the launcher do not call the driver: they return these commands
and :class:`~dl2_mesos.framework.core.SchedulerCore` sends them (after persisting what they
changed, so Mesos never hears of a task the store does not know). :class:`Replan` is the one
command that stays inside the framework: re-place some jobs against the offers held now.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class SchedulerDriver(Protocol):
    """The part of a pymesos ``MesosSchedulerDriver`` the core uses (tests pass a recording fake)."""

    def launchTasks(self, offer_ids: list[dict[str, str]], tasks: list[dict[str, Any]],  # noqa: N802
                    filters: dict[str, float] | None = None) -> Any: ...

    def declineOffer(self, offer_ids: list[dict[str, str]], filters: dict[str, float] | None = None) -> Any: ...  # noqa: N802

    def killTask(self, task_id: dict[str, str]) -> Any: ...  # noqa: N802

    def acknowledgeStatusUpdate(self, status: dict[str, Any]) -> Any: ...  # noqa: N802

    def reconcileTasks(self, tasks: list[dict[str, Any]]) -> Any: ...  # noqa: N802

    def reviveOffers(self) -> Any: ...  # noqa: N802

    def suppressOffers(self) -> Any: ...  # noqa: N802

    def sendFrameworkMessage(self, executor_id: dict[str, str], agent_id: dict[str, str],  # noqa: N802
                             data: str) -> Any: ...


@dataclass(frozen=True)
class KillTask:
    """Kill one task (re-sent by the core while it stays alive)."""

    task_id: str
    agent_id: str | None = None


@dataclass(frozen=True)
class LaunchTasks:
    """Accept every held offer of one agent with these TaskInfos."""

    agent_id: str
    offer_ids: tuple[str, ...]
    task_infos: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class SendMessage:
    """A framework message (best effort) to one executor."""

    executor_id: str
    agent_id: str
    data: str


@dataclass(frozen=True)
class Replan:
    """Re-place the intended counts of ``job_ids`` against the offers held now."""

    job_ids: tuple[str, ...]
    reason: str


Command = KillTask | LaunchTasks | SendMessage | Replan
