"""Calls to the Mesos master, off the loop thread, several at once, in the order Mesos needs.

pymesos's driver methods (``launchTasks``, ``declineOffer``, ``acknowledgeStatusUpdate`` ...) are
synchronous HTTP POSTs to the master. Made on the loop thread, every slow answer stalls the one
thread that owns the scheduler state. :class:`OutboundDriver` has the same call methods, but each
one only queues the call; ``senders`` sender threads make the calls, each on its own keep-alive
connection (:class:`~dl2_mesos.framework.master_http.MasterHttp`, for a pymesos driver).

One round trip at a time was the limit before: at 1000 jobs on 500 agents a launch wave of 2000
tasks meant 2000 acknowledgements in a row, and the agents re-sent every TASK_RUNNING whose
acknowledgement was still queued. Several senders overlap the round trips, but only where the
order does not matter:

* every call names what it must stay ordered with: its tasks, its agent, its offers, its
  executor (:func:`call_keys`). A call is made only after every earlier call sharing one of those
  keys has *finished* (the master answered). So a launch reaches the master before the
  acknowledgements and the kill of the same task, a framework message after the launch of its
  executor, and calls for one agent keep the order the loop made them in. A kill names its task's
  agent as well when a launch or an update told us where the task runs.
* REVIVE, SUPPRESS, an implicit reconciliation and calls of unknown kind are barriers: made after
  every earlier call finished, and every later call waits for them (a REVIVE must not overtake
  the DECLINE whose filter it is meant to clear).

An acknowledgement still queued is not queued again when the agent re-sends the same update
meanwhile (same task and uuid): the queued one answers both. Among the calls ready to go,
acknowledgements go first: ready calls never share a key (a later call sharing one waits for the
earlier), so their order is free, and an acknowledgement that waited behind a launch wave's
hundreds of ready launches made the agent re-send its update (and hold the task's next one).

The calls are fire-and-forget, as the loop already treated them: a failed call is logged and
counted, and the framework's own mechanisms repair it (the master re-sends unacknowledged updates,
held offers expire, kills and rescale requests are re-sent, reconciliation reports a task whose
launch was lost). The queue is bounded: when it is full the loop waits (backpressure, timed) up to
``put_timeout`` seconds, then drops the call with an error rather than stall scheduling for good.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from dl2_mesos.framework.records import TERMINAL_TASK_STATES

logger = logging.getLogger(__name__)

# the driver methods the framework calls; all are fire-and-forget
CALLS = (
    "acceptOffers", "launchTasks", "declineOffer", "acknowledgeStatusUpdate", "killTask",
    "reconcileTasks", "sendFrameworkMessage", "reviveOffers", "suppressOffers",
)
DEFAULT_SENDERS = 8


@dataclass(frozen=True)
class OutboundStats:
    """Counters since start (read from any thread; a consistent copy)."""

    queued: int  # calls waiting now (not yet being made)
    peak_queued: int
    sent: int
    failed: int
    dropped: int  # refused because the queue stayed full for ``put_timeout``
    blocked_seconds: float  # time callers spent waiting for room (backpressure)
    max_lag_seconds: float  # longest time a call waited in the queue before it was made
    coalesced: int = 0  # acknowledgements not queued twice (same update re-sent while one waited)
    call_seconds: float = 0.0  # time spent in the calls (HTTP round trips), all senders together
    peak_in_flight: int = 0  # calls being made at the same time, at most


@dataclass(frozen=True)
class CallRecord:
    """One call as it happened, for an observer (benchmarks): monotonic times."""

    name: str
    args: tuple
    kwargs: dict
    queued_at: float
    started_at: float
    finished_at: float
    ok: bool


def _value(x: Any) -> str | None:
    if isinstance(x, dict):
        v = x.get("value")
        return None if v is None else str(v)
    return None if x is None else str(x)


def _arg(args: tuple, kwargs: dict, i: int, key: str) -> Any:
    return args[i] if len(args) > i else kwargs.get(key)


def _offer_keys(offer_ids: Any) -> set[str]:
    ids = [offer_ids] if isinstance(offer_ids, dict) else (offer_ids or [])
    return {f"offer:{_value(o)}" for o in ids}


def _task_keys(infos: Iterable[Any] | None) -> set[str]:
    keys = set()
    for t in infos or ():
        if isinstance(t, dict):
            if _value(t.get("task_id")):
                keys.add(f"task:{_value(t.get('task_id'))}")
            if _value(t.get("agent_id")):
                keys.add(f"agent:{_value(t.get('agent_id'))}")
    return keys


def call_keys(name: str, args: tuple, kwargs: dict, task_agent: dict[str, str] | None = None) -> frozenset[str] | None:
    """What the call ``name(*args, **kwargs)`` must stay ordered with; None: with everything.

    Keys are ``task:<id>``, ``agent:<id>``, ``offer:<id>`` and ``executor:<id>``. ``task_agent``
    (task id -> agent id, learned from launches and updates) gives a kill its agent.
    """
    keys: set[str] = set()
    if name in ("launchTasks", "acceptOffers"):
        keys |= _offer_keys(_arg(args, kwargs, 0, "offer_ids"))
        if name == "launchTasks":
            keys |= _task_keys(_arg(args, kwargs, 1, "tasks"))
        else:
            for op in _arg(args, kwargs, 1, "operations") or ():
                launch = (op or {}).get("launch") or {}
                keys |= _task_keys(launch.get("task_infos"))
                group = ((op or {}).get("launch_group") or {}).get("task_group") or {}
                keys |= _task_keys(group.get("tasks"))
    elif name == "declineOffer":
        keys |= _offer_keys(_arg(args, kwargs, 0, "offer_ids"))
    elif name == "acknowledgeStatusUpdate":
        keys |= _task_keys([_arg(args, kwargs, 0, "status")])
    elif name == "killTask":
        tid = _value(_arg(args, kwargs, 0, "task_id"))
        if tid is None:
            return None
        keys.add(f"task:{tid}")
        agent = (task_agent or {}).get(tid)
        if agent:
            keys.add(f"agent:{agent}")
    elif name == "reconcileTasks":
        tasks = _arg(args, kwargs, 0, "tasks") or []
        if not tasks:
            return None  # implicit reconciliation: about every task
        keys |= _task_keys(tasks)
    elif name == "sendFrameworkMessage":
        ex, agent = _value(_arg(args, kwargs, 0, "executor_id")), _value(_arg(args, kwargs, 1, "agent_id"))
        keys |= {f"executor:{ex}"} if ex else set()
        keys |= {f"agent:{agent}"} if agent else set()
    else:
        return None  # revive, suppress, anything unknown: a barrier
    return frozenset(keys) if keys else None


def _ack_key(name: str, args: tuple) -> tuple[str, str] | None:
    """(task id, uuid) of an acknowledgeStatusUpdate call, else None."""
    if name != "acknowledgeStatusUpdate" or not args or not isinstance(args[0], dict):
        return None
    status = args[0]
    return (str((status.get("task_id") or {}).get("value")), str(status.get("uuid")))


class _Call:
    """A queued call and its place in the ordering graph (guarded by the driver's condition)."""

    __slots__ = ("seq", "name", "args", "kwargs", "queued_at", "keys", "waits", "then", "started")

    def __init__(self, seq: int, name: str, args: tuple, kwargs: dict, keys: frozenset[str] | None) -> None:
        self.seq = seq
        self.name = name
        self.args = args
        self.kwargs = kwargs
        self.queued_at = time.monotonic()
        self.keys = keys  # None: a barrier
        self.waits = 0  # earlier calls still unfinished that this one must follow
        self.then: list[_Call] = []  # later calls waiting for this one
        self.started = False


class OutboundDriver:
    """A driver proxy whose call methods enqueue; ``senders`` threads make the calls.

    Args:
        driver: the real driver (pymesos ``MesosSchedulerDriver``); may be set later with
            :meth:`set_driver`.
        maxsize: the most calls waiting at once.
        put_timeout: how long a caller waits for room before the call is dropped.
        name: the sender threads' name prefix.
        senders: how many calls may be in flight at once (1: strictly one after the other).
        direct_http: for a pymesos driver, make the calls with pooled keep-alive connections
            (:class:`~dl2_mesos.framework.master_http.MasterHttp`) instead of the driver's own
            methods, which serialise on one connection. Other drivers are always called directly.
        observer: called after every call with its :class:`CallRecord` (on a sender thread).

    Each call goes to the driver current when it is *made*, so calls queued before a
    re-registration with a new driver object go to the new one (the old one is stopped).
    Attributes other than the call methods (``framework_id`` ...) are read from the current
    driver directly.
    """

    def __init__(self, driver: Any = None, *, maxsize: int = 100_000, put_timeout: float = 5.0,
                 name: str = "dl2-outbound", senders: int = DEFAULT_SENDERS, direct_http: bool = True,
                 observer: Callable[[CallRecord], None] | None = None) -> None:
        if senders < 1:
            raise ValueError("senders must be >= 1")
        self._driver = driver
        self._maxsize = maxsize
        self._put_timeout = put_timeout
        self._direct_http = direct_http
        self._http: Any = None  # MasterHttp of the current driver (made on first use)
        self.observer = observer
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # senders wait here for a ready call
        self._room = threading.Condition(self._lock)  # callers wait here for room, flush() for the end
        self._seq = itertools.count()
        self._ready: deque[_Call] = deque()
        self._ready_acks: deque[_Call] = deque()  # ready acknowledgements: made before _ready
        self._unfinished: dict[int, _Call] = {}  # queued or in flight, by sequence number
        self._last: dict[str, _Call] = {}  # the latest unfinished call of each key
        self._barrier: _Call | None = None  # the latest unfinished barrier
        self._task_agent: dict[str, str] = {}
        self._in_flight = 0
        self._stopping = False
        self._metrics: Any = None
        self._sent = self._failed = self._dropped = self._peak = self._peak_in_flight = 0
        self._blocked = 0.0
        self._dropped_after_stop = 0
        self._pending_acks: set[tuple[str, str]] = set()  # (task id, uuid) of queued acknowledgements
        self._coalesced = 0
        self._call_seconds = 0.0
        self._max_lag = 0.0
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}" if senders > 1 else name,
                                          daemon=True) for i in range(senders)]
        for t in self._threads:
            t.start()

    # -- configuration -----------------------------------------------------------------------
    @property
    def driver(self) -> Any:
        """The driver calls currently go to."""
        return self._driver

    def set_driver(self, driver: Any) -> None:
        """Send every call made from now on (queued ones included) to ``driver``."""
        with self._cond:
            if driver is not self._driver and self._driver is not None:
                logger.info("outbound calls now go to a new driver (%d queued)", self._queued())
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

    def _queued(self) -> int:
        return len(self._unfinished) - self._in_flight

    def submit(self, name: str, *args: Any, **kwargs: Any) -> bool:
        """Queue ``driver.<name>(*args, **kwargs)``; False when it was dropped (queue full or stopped)."""
        with self._cond:
            if self._stopping:
                # the term is over (driver stopped); the next leader reconciles
                if not self._dropped_after_stop:
                    logger.info("outbound calls after stop are dropped (first: %s)", name)
                self._dropped_after_stop += 1
                self._dropped += 1
                return False
            if self._queued() >= self._maxsize:
                t0 = time.monotonic()
                room = self._room.wait_for(lambda: self._queued() < self._maxsize or self._stopping,
                                           self._put_timeout)
                self._blocked += time.monotonic() - t0
                if not room or self._stopping:
                    self._dropped += 1
                    self._count(name, "dropped")
                    logger.error("outbound queue full (%d calls) for %.1fs: %s dropped",
                                 self._queued(), self._put_timeout, name)
                    return False
            ack = _ack_key(name, args)
            if ack is not None:
                if ack in self._pending_acks:
                    # the agent re-sent an update whose acknowledgement is still queued: one is enough
                    self._coalesced += 1
                    return True
                self._pending_acks.add(ack)
            self._learn_agents(name, args, kwargs)
            self._enqueue(_Call(next(self._seq), name, args, kwargs,
                                call_keys(name, args, kwargs, self._task_agent)))
            self._peak = max(self._peak, self._queued())
        self._gauge()
        return True

    def _learn_agents(self, name: str, args: tuple, kwargs: dict) -> None:
        """Remember where tasks run (from launches and updates) so that kills name their agent."""
        if name == "launchTasks":
            infos = _arg(args, kwargs, 1, "tasks") or ()
        elif name == "acknowledgeStatusUpdate":
            infos = [_arg(args, kwargs, 0, "status")]
        else:
            return
        for t in infos:
            if not isinstance(t, dict):
                continue
            tid, agent = _value(t.get("task_id")), _value(t.get("agent_id"))
            if tid and agent:
                if t.get("state") in TERMINAL_TASK_STATES:
                    self._task_agent.pop(tid, None)
                else:
                    self._task_agent[tid] = agent

    def _enqueue(self, call: _Call) -> None:
        """Link ``call`` after the unfinished calls it must follow (caller holds the condition)."""
        if call.keys is None:
            before = set(self._unfinished.values())
        else:
            before = {self._last[k] for k in call.keys if k in self._last}
            if self._barrier is not None:
                before.add(self._barrier)
        for b in before:
            b.then.append(call)
        call.waits = len(before)
        self._unfinished[call.seq] = call
        if call.keys is None:
            self._barrier = call
        else:
            for k in call.keys:
                self._last[k] = call
        if not call.waits:
            self._make_ready(call)
            self._cond.notify()

    def _make_ready(self, call: _Call) -> None:
        (self._ready_acks if call.name == "acknowledgeStatusUpdate" else self._ready).append(call)

    def _ready_count(self) -> int:
        return len(self._ready_acks) + len(self._ready)

    def _next_ready(self) -> _Call:
        return self._ready_acks.popleft() if self._ready_acks else self._ready.popleft()

    def _finish(self, call: _Call) -> None:
        """``call`` was made: the calls waiting for it may go (caller holds the condition)."""
        self._unfinished.pop(call.seq, None)
        for k in call.keys or ():
            if self._last.get(k) is call:
                del self._last[k]
        if self._barrier is call:
            self._barrier = None
        for nxt in call.then:
            nxt.waits -= 1
            if not nxt.waits:
                self._make_ready(nxt)
        call.then = []
        if self._stopping:
            self._cond.notify_all()  # idle senders may exit once nothing is left
        elif ready_now := self._ready_count():
            self._cond.notify(ready_now)
        self._room.notify_all()

    def _drop_queued(self) -> int:
        """Forget every call not yet being made (caller holds the condition); returns how many."""
        flying = {s: c for s, c in self._unfinished.items() if c.started}
        dropped = len(self._unfinished) - len(flying)
        for c in flying.values():
            c.then = []
        self._unfinished = flying
        self._ready.clear()
        self._ready_acks.clear()
        self._last.clear()
        self._barrier = None
        self._pending_acks.clear()
        self._dropped += dropped
        self._cond.notify_all()
        self._room.notify_all()
        return dropped

    # -- lifecycle -----------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued call has been made; False on timeout."""
        with self._cond:
            return self._room.wait_for(lambda: not self._unfinished, timeout)

    def stop(self, timeout: float = 5.0, drain: bool = True) -> None:
        """Stop the senders: with ``drain`` the calls already queued are made first (for at most
        ``timeout`` seconds), otherwise they are discarded. Later calls are dropped."""
        with self._cond:
            self._stopping = True
            if not drain:
                self._drop_queued()
            self._cond.notify_all()
            self._room.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))
        if self.running:
            logger.warning("outbound senders still busy %.0fs after stop; leaving them", timeout)
        http, self._http = self._http, None
        if http is not None:
            http.close()

    @property
    def running(self) -> bool:
        """True while any sender thread runs."""
        return any(t.is_alive() for t in self._threads)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the sender threads to exit (after :meth:`stop` or once the driver stopped)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def stats(self) -> OutboundStats:
        with self._cond:
            return OutboundStats(self._queued(), self._peak, self._sent, self._failed, self._dropped,
                                 self._blocked, self._max_lag, self._coalesced, self._call_seconds,
                                 self._peak_in_flight)

    # -- the sender threads ----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._ready_count():
                    if self._stopping and not self._queued():
                        return
                    self._cond.wait(1.0)
                    if not self._ready_count() and self._driver_stopped():
                        # the term ended (pymesos driver stopped) without an explicit stop()
                        logger.debug("outbound sender: driver stopped, exiting")
                        self._stopping = True
                        self._drop_queued()
                        return
                if self._driver_stopped():
                    # the term ended with calls still queued: the master has closed this
                    # framework's subscription, so they could only fail; the next leader reconciles
                    logger.info("driver stopped: %d queued calls to the master dropped", self._queued())
                    self._stopping = True
                    self._drop_queued()
                    return
                call = self._next_ready()
                call.started = True
                self._pending_acks.discard(_ack_key(call.name, call.args))
                self._in_flight += 1
                self._peak_in_flight = max(self._peak_in_flight, self._in_flight)
                driver = self._driver
                self._room.notify_all()  # room for a blocked caller
            try:
                self._send(driver, call)
            finally:
                with self._cond:
                    self._in_flight -= 1
                    self._finish(call)
            self._gauge()

    def _driver_stopped(self) -> bool:
        # pymesos's Process.aborted: True once stop() was called (False while it runs)
        try:
            return bool(self._driver is not None and getattr(self._driver, "aborted", False) is True)
        except Exception:  # a driver property failing must not kill the sender
            return False

    def _transport(self, driver: Any) -> Any:
        """A :class:`MasterHttp` for a pymesos driver (when ``direct_http``), else None."""
        if not self._direct_http:
            return None
        http = self._http
        if http is not None and http.driver is driver:
            return http
        from pymesos import MesosSchedulerDriver  # imported with the framework anyway

        if not isinstance(driver, MesosSchedulerDriver):
            return None
        from dl2_mesos.framework.master_http import MasterHttp

        with self._cond:
            if self._http is None or self._http.driver is not driver:
                old, self._http = self._http, MasterHttp(driver)
                if old is not None:
                    old.close()
            return self._http

    def _send(self, driver: Any, call: _Call) -> None:
        started = time.monotonic()
        lag = started - call.queued_at
        ok = False
        t0 = time.perf_counter()
        try:
            if driver is None:
                raise RuntimeError("no driver yet")
            http = self._transport(driver)
            if http is not None:
                http.call(call.name, call.args, call.kwargs)
            else:
                getattr(driver, call.name)(*call.args, **call.kwargs)
            ok = True
        except Exception as exc:  # logged, counted; the framework's retries repair it
            # pymesos puts the whole request body in its error: keep the log line short
            logger.warning("outbound %s failed: %.300s", call.name, str(exc).replace("\n", " "),
                           exc_info=logger.isEnabledFor(logging.DEBUG))
        spent = time.perf_counter() - t0
        with self._cond:
            self._max_lag = max(self._max_lag, lag)
            self._call_seconds += spent
            if ok:
                self._sent += 1
            else:
                self._failed += 1
        self._count(call.name, "ok" if ok else "failed")
        m = self._metrics
        if m is not None:
            m.outbound_lag.observe(lag)
            m.outbound_call_latency.observe(spent)
        obs = self.observer
        if obs is not None:
            try:
                obs(CallRecord(call.name, call.args, call.kwargs, call.queued_at, started, time.monotonic(), ok))
            except Exception:  # an observer's bug must not stop the sender
                logger.exception("outbound observer failed")

    def _count(self, name: str, result: str) -> None:
        m = self._metrics
        if m is not None:
            m.outbound_calls.labels(name, result).inc()

    def _gauge(self) -> None:
        m = self._metrics
        if m is not None:
            m.outbound_queue.set(self._queued())
