"""Calls to the Mesos master, off the loop thread.

pymesos's driver methods (``launchTasks``, ``declineOffer``, ``acknowledgeStatusUpdate`` ...) are
synchronous HTTP POSTs to the master. Made on the loop thread, every slow answer stalls the one
thread that owns the scheduler state, and events queue up behind it (at 500 agents the local
master took long enough that single status updates waited 16 s). :class:`OutboundDriver` has the
same call methods, but each one only puts the call on a FIFO queue; ONE sender thread makes the
calls in order. One thread and one queue keep the order the loop decided on: a launch reaches
the master before a later kill of the same task, an acknowledgement after the write it follows.
An acknowledgement already waiting in the queue is not queued again when the agent re-sends the
same update meanwhile (same task and uuid): the queued one answers both.

The calls are fire-and-forget, as the loop already treated them: a failed call is logged and
counted, and the framework's own mechanisms repair it (the master re-sends unacknowledged updates,
held offers expire, kills and rescale requests are re-sent, reconciliation reports a task whose
launch was lost). The queue is bounded: when it is full the loop waits (backpressure, timed) up to
``put_timeout`` seconds, then drops the call with an error rather than stall scheduling for good.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

# the driver methods the framework calls; all are fire-and-forget
CALLS = (
    "acceptOffers", "launchTasks", "declineOffer", "acknowledgeStatusUpdate", "killTask",
    "reconcileTasks", "sendFrameworkMessage", "reviveOffers", "suppressOffers",
)


@dataclass(frozen=True)
class OutboundStats:
    """Counters since start (read from any thread; a consistent copy)."""

    queued: int  # calls waiting now
    peak_queued: int
    sent: int
    failed: int
    dropped: int  # refused because the queue stayed full for ``put_timeout``
    blocked_seconds: float  # time callers spent waiting for room (backpressure)
    max_lag_seconds: float  # longest time a call waited in the queue before it was made
    coalesced: int = 0  # acknowledgements not queued twice (same update re-sent while one waited)
    call_seconds: float = 0.0  # time spent in the driver's calls (HTTP round trips), all together


def _ack_key(name: str, args: tuple) -> tuple[str, str] | None:
    """(task id, uuid) of an acknowledgeStatusUpdate call, else None."""
    if name != "acknowledgeStatusUpdate" or not args or not isinstance(args[0], dict):
        return None
    status = args[0]
    return (str((status.get("task_id") or {}).get("value")), str(status.get("uuid")))


@dataclass(frozen=True)
class _Call:
    name: str
    args: tuple
    kwargs: dict
    queued_at: float


class OutboundDriver:
    """A driver proxy whose call methods enqueue; one sender thread makes the calls in order.

    Args:
        driver: the real driver (pymesos ``MesosSchedulerDriver``); may be set later with
            :meth:`set_driver`.
        maxsize: the most calls waiting at once.
        put_timeout: how long a caller waits for room before the call is dropped.
        name: the sender thread's name.

    Each call goes to the driver current when it is *made*, so calls queued before a
    re-registration with a new driver object go to the new one (the old one is stopped).
    Attributes other than the call methods (``framework_id`` ...) are read from the current
    driver directly.
    """

    def __init__(self, driver: Any = None, *, maxsize: int = 100_000, put_timeout: float = 5.0,
                 name: str = "dl2-outbound") -> None:
        self._driver = driver
        self._maxsize = maxsize
        self._put_timeout = put_timeout
        self._queue: deque[_Call] = deque()
        self._cond = threading.Condition()
        self._in_flight = 0
        self._stopping = False
        self._metrics: Any = None
        self._sent = self._failed = self._dropped = self._peak = 0
        self._blocked = 0.0
        self._dropped_after_stop = 0
        self._pending_acks: set[tuple[str, str]] = set()  # (task id, uuid) of queued acknowledgements
        self._coalesced = 0
        self._call_seconds = 0.0
        self._max_lag = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- configuration -----------------------------------------------------------------------
    @property
    def driver(self) -> Any:
        """The driver calls currently go to."""
        return self._driver

    def set_driver(self, driver: Any) -> None:
        """Send every call made from now on (queued ones included) to ``driver``."""
        with self._cond:
            if driver is not self._driver and self._driver is not None:
                logger.info("outbound calls now go to a new driver (%d queued)", len(self._queue))
            self._driver = driver

    def bind_metrics(self, metrics: Any) -> None:
        """Report into a :class:`~dl2_mesos.framework.metrics.FrameworkMetrics` (optional)."""
        self._metrics = metrics

    # -- the driver's call methods -----------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name in CALLS:
            def enqueue(*args: Any, **kwargs: Any) -> None:
                self.submit(name, *args, **kwargs)
            enqueue.__name__ = name
            return enqueue
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._driver, name)

    def submit(self, name: str, *args: Any, **kwargs: Any) -> bool:
        """Queue ``driver.<name>(*args, **kwargs)``; False when it was dropped (queue full or stopped)."""
        call = _Call(name, args, kwargs, time.monotonic())
        with self._cond:
            if self._stopping:
                # the term is over (driver stopped); the next leader reconciles
                if not self._dropped_after_stop:
                    logger.info("outbound calls after stop are dropped (first: %s)", name)
                self._dropped_after_stop += 1
                self._dropped += 1
                return False
            if len(self._queue) >= self._maxsize:
                t0 = time.monotonic()
                room = self._cond.wait_for(lambda: len(self._queue) < self._maxsize or self._stopping,
                                           self._put_timeout)
                self._blocked += time.monotonic() - t0
                if not room or self._stopping:
                    self._dropped += 1
                    self._count(name, "dropped")
                    logger.error("outbound queue full (%d calls) for %.1fs: %s dropped",
                                 len(self._queue), self._put_timeout, name)
                    return False
            ack = _ack_key(name, args)
            if ack is not None:
                if ack in self._pending_acks:
                    # the agent re-sent an update whose acknowledgement is still queued: one is enough
                    self._coalesced += 1
                    return True
                self._pending_acks.add(ack)
            self._queue.append(call)
            self._peak = max(self._peak, len(self._queue))
            self._cond.notify_all()
        self._gauge()
        return True

    # -- lifecycle -----------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued call has been made; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._in_flight, timeout)

    def stop(self, timeout: float = 5.0, drain: bool = True) -> None:
        """Stop the sender: with ``drain`` the calls already queued are made first (for at most
        ``timeout`` seconds), otherwise they are discarded. Later calls are dropped."""
        with self._cond:
            self._stopping = True
            if not drain:
                self._dropped += len(self._queue)
                self._queue.clear()
                self._pending_acks.clear()
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
            if self._thread.is_alive():
                logger.warning("outbound sender still busy %.0fs after stop; leaving it", timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stats(self) -> OutboundStats:
        with self._cond:
            return OutboundStats(len(self._queue), self._peak, self._sent, self._failed, self._dropped,
                                 self._blocked, self._max_lag, self._coalesced, self._call_seconds)

    # -- the sender thread -----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    if self._stopping:
                        return
                    self._cond.wait(1.0)
                    if not self._queue and self._driver_stopped():
                        # the term ended (pymesos driver stopped) without an explicit stop()
                        logger.debug("outbound sender: driver stopped, exiting")
                        self._stopping = True
                        self._cond.notify_all()
                        return
                if self._driver_stopped():
                    # the term ended with calls still queued: the master has closed this
                    # framework's subscription, so they could only fail; the next leader reconciles
                    logger.info("driver stopped: %d queued calls to the master dropped", len(self._queue))
                    self._dropped += len(self._queue)
                    self._queue.clear()
                    self._pending_acks.clear()
                    self._stopping = True
                    self._cond.notify_all()
                    return
                call = self._queue.popleft()
                self._pending_acks.discard(_ack_key(call.name, call.args))
                self._in_flight += 1
                driver = self._driver
                self._cond.notify_all()  # room for a blocked caller
            self._send(driver, call)
            with self._cond:
                self._in_flight -= 1
                self._cond.notify_all()
            self._gauge()

    def _driver_stopped(self) -> bool:
        # pymesos's Process.aborted: True once stop() was called (False while it runs)
        try:
            return bool(self._driver is not None and getattr(self._driver, "aborted", False) is True)
        except Exception:  # a driver property failing must not kill the sender
            return False

    def _send(self, driver: Any, call: _Call) -> None:
        lag = time.monotonic() - call.queued_at
        self._max_lag = max(self._max_lag, lag)
        t0 = time.perf_counter()
        if driver is None:
            self._failed += 1
            self._count(call.name, "failed")
            logger.warning("outbound %s: no driver yet; dropped", call.name)
            return
        try:
            getattr(driver, call.name)(*call.args, **call.kwargs)
        except Exception as exc:  # logged, counted; the framework's retries repair it
            self._failed += 1
            self._count(call.name, "failed")
            # pymesos puts the whole request body in its error: keep the log line short
            logger.warning("outbound %s failed: %.300s", call.name, str(exc).replace("\n", " "),
                           exc_info=logger.isEnabledFor(logging.DEBUG))
        else:
            self._sent += 1
            self._count(call.name, "ok")
        spent = time.perf_counter() - t0
        self._call_seconds += spent
        m = self._metrics
        if m is not None:
            m.outbound_lag.observe(lag)
            m.outbound_call_latency.observe(spent)

    def _count(self, name: str, result: str) -> None:
        m = self._metrics
        if m is not None:
            m.outbound_calls.labels(name, result).inc()

    def _gauge(self) -> None:
        m = self._metrics
        if m is not None:
            m.outbound_queue.set(len(self._queue))
