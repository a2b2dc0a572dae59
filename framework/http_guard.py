"""Keeping the API server's file descriptors bounded against idle or slow clients (slowloris).

uvicorn closes idle keep-alive connections (``timeout_keep_alive``) but waits forever for a request's
headers, and accepts every connection: ~1000 clients that never finish their headers use up the
process's descriptors, and then the ZooKeeper client cannot reconnect and the replica loses its
leadership. :func:`guarded_h11` returns uvicorn's h11 protocol with two limits added:

* a connection over ``max_connections`` open ones is closed as soon as it is accepted;
* a connection waiting for a request's headers (new, or between keep-alive requests) longer than
  ``header_timeout`` seconds is closed. A request whose headers arrived is the app's business
  (its body is bounded by ``max_body_bytes``).

:func:`raise_nofile_limit` lifts the soft ``RLIMIT_NOFILE`` to the hard one at start.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)

#: the most bytes of a request head (request line + headers) the server buffers
MAX_HEAD_BYTES = 16 * 1024


class _Tally:
    """Counts closed connections and logs a summary at most once per ``every`` seconds (an attack
    must not turn into a flood of log lines, or block the loop on a full log pipe)."""

    def __init__(self, what: str, every: float = 30.0) -> None:
        self.what, self.every = what, every
        self.count, self._last = 0, float("-inf")

    def add(self, loop: asyncio.AbstractEventLoop) -> None:
        self.count += 1
        now = loop.time()
        if now - self._last >= self.every:
            logger.warning("API: %d connection(s) closed: %s", self.count, self.what)
            self.count, self._last = 0, now


def guarded_h11(max_connections: int, header_timeout: float) -> type[H11Protocol]:
    """uvicorn's H11Protocol with a connection cap and a header deadline (for ``uvicorn.Config(http=...)``)."""
    over_cap = _Tally(f"over the cap of {max_connections} open connections")
    too_slow = _Tally(f"no complete request head within {header_timeout:g}s")

    class GuardedH11Protocol(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._header_timer: asyncio.TimerHandle | None = None
            if len(self.connections) > max_connections:
                over_cap.add(self.loop)
                transport.abort()
                return
            self._arm_header_timer()

        def _waiting_for_headers(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm_header_timer(self) -> None:
            cycle = self.cycle
            self._header_timer = self.loop.call_later(header_timeout, self._header_deadline, cycle)

        def _header_deadline(self, cycle: Any) -> None:
            self._header_timer = None
            if self.cycle is cycle and self._waiting_for_headers() and not self.transport.is_closing():
                too_slow.add(self.loop)
                self.transport.abort()

        def data_received(self, data: bytes) -> None:
            if self._header_timer is None and self._waiting_for_headers():
                self._arm_header_timer()  # a new request after a keep-alive pause: headers get a deadline too
            super().data_received(data)

        def connection_lost(self, exc: Exception | None) -> None:
            timer = getattr(self, "_header_timer", None)
            if timer is not None:
                timer.cancel()
                self._header_timer = None
            super().connection_lost(exc)

    return GuardedH11Protocol


#: descriptors kept free for everything but API clients (ZooKeeper, the Mesos driver, state files, logs)
RESERVED_FDS = 256


def connection_cap(configured: int) -> int:
    """The API connection cap: ``configured``, lowered so that API clients can never take the
    descriptors the rest of the replica needs (the ZooKeeper client above all: losing it costs the
    leadership)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    cap = max(8, soft - RESERVED_FDS)
    if cap < configured:
        logger.warning("API connection cap lowered from %d to %d: the open-files limit is %d", configured, cap, soft)
    return min(configured, cap)


def raise_nofile_limit() -> tuple[int, int]:
    """Lift the soft RLIMIT_NOFILE to the hard limit; returns the (soft, hard) now in force."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            logger.warning("could not raise the open-files limit from %d to %d: %s", soft, target, exc)
    return soft, hard
