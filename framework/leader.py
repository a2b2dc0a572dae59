"""Leader election among framework replicas (kazoo's Election recipe) and a local stand-in.

Each replica contends under ``<zk path>/leader`` with its API URL as identifier, so any
replica can tell clients who leads (the first contender). The kazoo connection listener only
calls ``on_change`` (which enqueues); it never blocks or calls ZooKeeper itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)


class LocalLeadership:
    """Single replica without ZooKeeper: always the leader."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.is_leader = False

    def run(self, lead: Callable[[], None]) -> None:
        self.is_leader = True
        try:
            lead()
        finally:
            self.is_leader = False

    def leader_url(self) -> str | None:
        return self.url if self.is_leader else None

    def cancel(self) -> None:
        pass


class ZkLeadership:
    """kazoo Election wrapper.

    Args:
        client: a started KazooClient.
        path: election znode, e.g. ``/dl2/leader``.
        url: this replica's API URL (its contender identifier).
        on_change: called with ``"suspended"``, ``"resumed"`` or ``"lost"`` from kazoo's thread.
    """

    def __init__(self, client, path: str, url: str, on_change: Callable[[str], None]) -> None:  # noqa: ANN001
        from kazoo.client import KazooState

        self.client = client
        self.path = path
        self.url = url
        self.is_leader = False
        self._on_change = on_change
        self._election = client.Election(path, identifier=url)
        self._states = KazooState
        self._last = None
        client.add_listener(self._listener)

    def _listener(self, state) -> None:  # noqa: ANN001
        # kazoo: listeners must not block and must not call ZooKeeper; only hand the change on
        if state == self._states.SUSPENDED:
            self._on_change("suspended")
        elif state == self._states.LOST:
            self._on_change("lost")
        elif state == self._states.CONNECTED and self._last == self._states.SUSPENDED:
            self._on_change("resumed")
        self._last = state

    def run(self, lead: Callable[[], None]) -> None:
        """Block until elected, then run ``lead``; leadership is held exactly while it runs."""

        def wrapped() -> None:
            self.is_leader = True
            logger.info("elected leader (%s)", self.url)
            try:
                lead()
            finally:
                self.is_leader = False

        self._election.run(wrapped)

    def cancel(self) -> None:
        """Leave the contest (a waiting ``run`` returns)."""
        try:
            self._election.cancel()
        except Exception:  # already cancelled or disconnected
            logger.debug("election cancel", exc_info=True)

    def leader_url(self) -> str | None:
        try:
            contenders = self._election.contenders()
        except Exception:
            return None
        return contenders[0] if contenders else None


def wait_forever(stop: threading.Event) -> None:  # pragma: no cover - trivial
    stop.wait()
