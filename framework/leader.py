"""Leader election among framework replicas (kazoo's Election recipe) and a local stand-in.

Each replica contends under ``<zk path>/leader`` with its API URL as identifier, so any
replica can tell clients who leads (the first contender). The kazoo connection listener only
calls ``on_change`` (which enqueues); it never blocks or calls ZooKeeper itself.

Fencing: kazoo learns that its session expired only when it reaches a server again, so a leader
cut off from ZooKeeper would otherwise go on leading while the server has already expired its
session and elected someone else. While SUSPENDED the leader makes no decisions (the core stops
deciding) but keeps its Mesos connection; once a full session timeout has passed since the
suspension (the server has surely expired the session by then, see :meth:`ZkLeadership.must_fence`)
or on LOST, the replica fences itself (see :mod:`dl2_mesos.framework.runner`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

RELEASE_TIMEOUT_S = 5.0


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

    def must_fence(self, now: float | None = None) -> bool:
        """Never: there is no session to lose."""
        return False


class ZkLeadership:
    """kazoo Election wrapper.

    Args:
        client: a started KazooClient.
        path: election znode, e.g. ``/dl2/leader``.
        url: this replica's API URL (its contender identifier).
        on_change: called with ``"suspended"``, ``"resumed"`` or ``"lost"`` from kazoo's thread.
        session_timeout: seconds after a suspension at which the session counts as expired
            (default: the timeout the client asked for; a server may negotiate a different one
            within its min/max session timeout, so keep ``zk_timeout`` inside those bounds).
    """

    def __init__(self, client, path: str, url: str, on_change: Callable[[str], None],  # noqa: ANN001
                 session_timeout: float | None = None) -> None:
        from kazoo.client import KazooState

        self.client = client
        self.path = path
        self.url = url
        self.is_leader = False
        self._on_change = on_change
        self._election = client.Election(path, identifier=url)
        self._states = KazooState
        self._last = None
        if session_timeout is None:
            session_timeout = getattr(client, "_session_timeout", 10000) / 1000.0
        self.session_timeout = float(session_timeout)
        self.suspended_since: float | None = None  # monotonic time of the suspension (None: connected)
        # the session this term was won with ended (LOST): sticky until the next election, because a
        # client that reconnects afterwards does so with a new session that holds no election node
        self.session_lost = False
        self._last_leader_url: str | None = None
        client.add_listener(self._listener)

    def _listener(self, state) -> None:  # noqa: ANN001
        # kazoo: listeners must not block and must not call ZooKeeper; only hand the change on
        if state == self._states.SUSPENDED:
            if self.suspended_since is None:
                self.suspended_since = time.monotonic()
            self._on_change("suspended")
        elif state == self._states.LOST:
            self.suspended_since = None
            self.session_lost = True
            self._on_change("lost")
        elif state == self._states.CONNECTED:
            self.suspended_since = None
            if self._last == self._states.SUSPENDED:
                self._on_change("resumed")
        self._last = state

    def must_fence(self, now: float | None = None) -> bool:
        """True when this replica leads and has been cut off from ZooKeeper for a full session
        timeout: the server expires a session ``session_timeout`` after it last heard from the
        client, which is no later than the suspension, so by now another replica may have been
        elected. Also true, at once, when the session ended (LOST) while leading, however briefly it
        had been suspended. The leader must stop acting (the runner stops its driver and exits 75)."""
        if not self.is_leader:
            return False
        if self.session_lost:
            return True
        since = self.suspended_since
        if since is None:
            return False
        return (time.monotonic() if now is None else now) - since >= self.session_timeout

    def run(self, lead: Callable[[], None]) -> None:
        """Block until elected, then run ``lead``; leadership is held exactly while it runs."""

        from kazoo.exceptions import CancelledError

        lock = self._election.lock
        self.session_lost = False  # a LOST while waiting below still fences the term it wins
        try:
            lock.acquire()
        except CancelledError:
            return
        self.is_leader = True
        logger.info("elected leader (%s)", self.url)
        try:
            lead()
        finally:
            self.is_leader = False
            self._release(lock)

    def _release(self, lock) -> None:  # noqa: ANN001 - kazoo Lock
        """Give the election node back without hanging: kazoo retries a release for as long as the
        connection is down, which would keep a fenced replica from exiting (and from being
        restarted as a standby). Cut off, the node goes with the session (expired on the server,
        or closed by ``client.stop()`` when the replica exits)."""
        if self.suspended_since is not None or not getattr(self.client, "connected", True):
            logger.info("not releasing the election node while ZooKeeper is unreachable; it goes with the session")
            return

        def release() -> None:
            try:
                lock.release()
            except Exception:  # connection lost meanwhile: the node goes with the session
                logger.debug("election release", exc_info=True)

        t = threading.Thread(target=release, name="election-release", daemon=True)
        t.start()
        t.join(RELEASE_TIMEOUT_S)

    def cancel(self) -> None:
        """Leave the contest (a waiting ``run`` returns)."""
        try:
            self._election.cancel()
        except Exception:  # already cancelled or disconnected
            logger.debug("election cancel", exc_info=True)

    def leader_url(self) -> str | None:
        """The first contender's URL; the last one seen while ZooKeeper is unreachable (a call
        would wait for the connection, and the health endpoint must answer during an outage)."""
        if not getattr(self.client, "connected", True):
            return self._last_leader_url
        try:
            contenders = self._election.contenders()
        except Exception:
            return self._last_leader_url
        self._last_leader_url = contenders[0] if contenders else None
        return self._last_leader_url


def wait_forever(stop: threading.Event) -> None:  # pragma: no cover - trivial
    stop.wait()
