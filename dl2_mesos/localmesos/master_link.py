"""What an agent calls on its master, as a small protocol.

In Mesos the master and the agents talk through messages (``RunTaskMessage``,
``StatusUpdateMessage``, ...); here they are objects on one event loop that call each other's
methods. Each side depends only on a protocol of the other, so neither module imports the
other: the master's registry stores :class:`~.state.AgentLink` s, an agent holds a
:class:`MasterLink`.
"""

from __future__ import annotations

from typing import Any, Protocol

from .state import AgentLink


class MasterLink(Protocol):
    """The master as an agent sees it (the messages a Mesos agent sends to its master)."""

    running: bool

    def is_registered(self, agent_id: str) -> bool:
        """Whether ``agent_id`` is currently registered (a removed agent's updates are dropped)."""
        ...

    def register_agent(self, agent: AgentLink) -> str: ...

    def reregister_agent(self, agent: AgentLink) -> None: ...

    def status_update(self, agent_id: str, framework_id: str, status: dict[str, Any], latest_state: str) -> None: ...

    def executor_message(self, agent_id: str, framework_id: str, executor_id: str, data: str) -> None: ...

    def executor_exited(self, agent_id: str, framework_id: str, executor_id: str, status: int,
                        command: bool) -> None: ...
