"""The pymesos ``Scheduler``: every callback only translates its arguments into an event and
puts it on the loop's queue (the pymesos I/O thread must never block on our state).

The driver handed to the loop (in :class:`~dl2_mesos.framework.events.Registered`) is an
:class:`~dl2_mesos.framework.outbound.OutboundDriver` around pymesos's: the loop's calls to the
master are queued and made by ``senders`` sender threads, never on the loop thread."""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable
from typing import Any

from pymesos import Scheduler

from dl2_mesos.framework import events as ev
from dl2_mesos.framework.outbound import DEFAULT_SENDERS, OutboundDriver

logger = logging.getLogger(__name__)


def _value(d: Any) -> str:
    return d["value"] if isinstance(d, dict) else str(d)


class Dl2MesosScheduler(Scheduler):
    """pymesos callbacks -> events on ``events``."""

    def __init__(self, events: queue.Queue, outbound: bool = True,
                 on_failed_over: Callable[[str], None] | None = None, senders: int = DEFAULT_SENDERS) -> None:
        self.events = events
        self._on_failed_over = on_failed_over
        self._use_outbound = outbound
        self._senders = senders
        self.outbound: OutboundDriver | None = None

    def _proxy(self, driver: Any) -> Any:
        """The driver the loop gets: one OutboundDriver per scheduler, following the current driver.
        It stops by itself once the pymesos driver is stopped (the end of a leadership term)."""
        if not self._use_outbound:
            return driver
        if self.outbound is None or not self.outbound.running:
            self.outbound = OutboundDriver(driver, senders=self._senders)
        else:
            self.outbound.set_driver(driver)
        return self.outbound

    def close(self, timeout: float = 5.0) -> None:
        """Stop the sender thread after the calls already queued (idempotent)."""
        if self.outbound is not None:
            self.outbound.stop(timeout)

    # Mesos' camelCase callback names are pymesos' contract.
    def registered(self, driver, frameworkId, masterInfo):  # noqa: N802, N803, ANN001, ANN201
        master = f"{masterInfo.get('hostname')}:{masterInfo.get('port')}"
        self.events.put(ev.Registered(self._proxy(driver), _value(frameworkId), master, reregistered=False))

    def reregistered(self, driver, masterInfo):  # noqa: N802, N803, ANN001, ANN201
        master = f"{masterInfo.get('hostname')}:{masterInfo.get('port')}"
        self.events.put(ev.Registered(self._proxy(driver), driver.framework_id, master, reregistered=True))

    def disconnected(self, driver):  # noqa: ANN001, ANN201
        self.events.put(ev.Disconnected())

    def resourceOffers(self, driver, offers):  # noqa: N802, ANN001, ANN201
        self.events.put(ev.Offers(tuple(offers)))

    def offerRescinded(self, driver, offerId):  # noqa: N802, N803, ANN001, ANN201
        self.events.put(ev.OfferRescinded(_value(offerId)))

    def statusUpdate(self, driver, status):  # noqa: N802, ANN001, ANN201
        self.events.put(ev.StatusUpdate(status))

    def frameworkMessage(self, driver, executorId, slaveId, message):  # noqa: N802, N803, ANN001, ANN201
        self.events.put(ev.FrameworkMessage(_value(executorId), _value(slaveId), message))

    def slaveLost(self, driver, slaveId):  # noqa: N802, N803, ANN001, ANN201
        self.events.put(ev.AgentLost(_value(slaveId)))

    def executorLost(self, driver, executorId, slaveId, status):  # noqa: N802, N803, ANN001, ANN201
        self.events.put(ev.ExecutorLost(_value(executorId), _value(slaveId), int(status or 0)))

    def error(self, driver, message):  # noqa: ANN001, ANN201
        self.events.put(ev.MesosError(str(message)))
        # Mesos sends ERROR "Framework failed over" to a scheduler whose framework id another one took:
        # this one must stop (flags only, see Replica._failed_over), or the two keep taking it back
        if self._on_failed_over is not None and "failed over" in str(message).lower():
            # The one exception to "callbacks only enqueue": pymesos's IO thread (this thread)
            # re-subscribes with the same framework id as soon as the master closes the stream,
            # before the loop thread can stop the driver; on a busy machine that re-subscription
            # took the id back from the new scheduler, which then stopped too. Stopping here
            # (failover=True: no teardown, tasks keep running) wins that race: pymesos checks
            # the stop before it writes anything on a new connection.
            try:
                driver.stop(failover=True)
            except Exception:  # noqa: BLE001 - the flags below still stop the replica
                logger.debug("driver stop on failover", exc_info=True)
            self._on_failed_over(str(message))
