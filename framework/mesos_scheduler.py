"""The pymesos ``Scheduler``: every callback only translates its arguments into an event and
puts it on the loop's queue (the pymesos I/O thread must never block on our state)."""

from __future__ import annotations

import logging
import queue
from typing import Any

from pymesos import Scheduler

from dl2_mesos.framework import events as ev

logger = logging.getLogger(__name__)


def _value(d: Any) -> str:
    return d["value"] if isinstance(d, dict) else str(d)


class Dl2MesosScheduler(Scheduler):
    """pymesos callbacks -> events on ``events``."""

    def __init__(self, events: queue.Queue) -> None:
        self.events = events

    # Mesos' camelCase callback names are pymesos' contract.
    def registered(self, driver, frameworkId, masterInfo):  # noqa: N802, N803, ANN001, ANN201
        master = f"{masterInfo.get('hostname')}:{masterInfo.get('port')}"
        self.events.put(ev.Registered(driver, _value(frameworkId), master, reregistered=False))

    def reregistered(self, driver, masterInfo):  # noqa: N802, N803, ANN001, ANN201
        master = f"{masterInfo.get('hostname')}:{masterInfo.get('port')}"
        self.events.put(ev.Registered(driver, driver.framework_id, master, reregistered=True))

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
