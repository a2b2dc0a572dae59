"""Everything the scheduler tells Mesos goes through one outbox over the driver.

A failed driver call is logged and never stops the loop: Mesos re-sends unacknowledged status
updates, reconciliation finds tasks whose launch was lost, and kills are re-sent until the
task ends (:meth:`MesosOutbox.resend_kills`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from dl2_mesos.framework.driver_commands import Command, KillTask, LaunchTasks, SendMessage, SchedulerDriver
from dl2_mesos.framework.metrics import FrameworkMetrics
from dl2_mesos.framework.offer_book import decline_filters
from dl2_mesos.framework.records import TERMINAL_TASK_STATES, FrameworkJob

logger = logging.getLogger("dl2_mesos.framework.core")


class MesosOutbox:
    """Sends driver commands, declines, acknowledgements, reconciliation and offer interest.

    Args:
        metrics: offer counters.
        clock: when kills are sent (for re-sending).
        kill_grace: seconds a killed task may take to end; a kill is re-sent after twice that.
    """

    def __init__(self, metrics: FrameworkMetrics, clock: Callable[[], float], kill_grace: float) -> None:
        self.metrics = metrics
        self.clock = clock
        self.kill_grace = kill_grace
        self.driver: SchedulerDriver | None = None
        self.offer_interest: bool | None = None  # True revived, False suppressed, None unknown
        # task id -> when the last kill was sent (memory only: after a failover every task
        # still marked killing gets its kill again, in case the old leader's was lost)
        self._kills_sent: dict[str, float] = {}
        self._kill_scan_at = 0.0

    @property
    def connected(self) -> bool:
        return self.driver is not None

    def send(self, commands: Iterable[Command]) -> None:
        """Carry out driver commands (a :class:`~.driver_commands.Replan` is not one: the core's)."""
        if self.driver is None:
            return
        for c in commands:
            if isinstance(c, KillTask):
                self.kill(c.task_id)
                self._kills_sent[c.task_id] = self.clock()
            elif isinstance(c, LaunchTasks):
                try:
                    self.driver.launchTasks([{"value": o} for o in c.offer_ids], list(c.task_infos),
                                            decline_filters("leftover"))
                    self.metrics.offers.labels("accepted").inc(len(c.offer_ids))
                except Exception:
                    # the tasks stay LAUNCHING; reconciliation reports them lost and they get re-placed
                    logger.exception("launch on %s failed", c.agent_id)
            elif isinstance(c, SendMessage):
                try:
                    self.driver.sendFrameworkMessage({"value": c.executor_id}, {"value": c.agent_id}, c.data)
                except Exception:
                    logger.warning("message to %s failed; will re-send", c.executor_id, exc_info=True)

    def kill(self, task_id: str) -> None:
        if self.driver is None:
            return
        try:
            self.driver.killTask({"value": task_id})
        except Exception:
            logger.warning("kill %s failed", task_id, exc_info=True)

    def decline(self, offer_ids: list[str], reason: str) -> None:
        """Decline offers with a refuse filter sized to ``reason``."""
        if not offer_ids or self.driver is None:
            return
        self.metrics.offers.labels("declined").inc(len(offer_ids))
        try:
            self.driver.declineOffer([{"value": o} for o in offer_ids], decline_filters(reason))
        except Exception:
            logger.warning("decline failed", exc_info=True)

    def acknowledge(self, statuses: Iterable[dict[str, Any]]) -> None:
        for status in statuses:
            if self.driver is None:
                return
            try:
                self.driver.acknowledgeStatusUpdate(status)
            except Exception:  # the master may be gone; it re-sends unacknowledged updates
                logger.warning("acknowledge failed", exc_info=True)

    def reconcile(self, tasks: list[dict[str, Any]]) -> None:
        """Explicit reconciliation of ``tasks``, then implicit (finds orphans)."""
        if self.driver is None:
            return
        try:
            if tasks:
                self.driver.reconcileTasks(tasks)
            self.driver.reconcileTasks([])
        except Exception:
            logger.warning("reconcile failed", exc_info=True)

    def want_offers(self, want: bool) -> None:
        """REVIVE or SUPPRESS, when that changes."""
        if want == self.offer_interest or self.driver is None:
            return
        try:
            if want:
                self.driver.reviveOffers()
            else:
                self.driver.suppressOffers()
            self.offer_interest = want
        except Exception:
            logger.warning("revive/suppress failed", exc_info=True)

    def resend_kills(self, jobs: Iterable[FrameworkJob], now: float) -> None:
        """Kill again every task we killed that still is not terminal after a generous wait.

        A kill can be lost (agent restarting, executor not yet registered, master failover); a
        parameter server of a finished job that survives it would hold its port and resources
        forever, since nothing else ever stops a PS.
        """
        if self.driver is None or now < self._kill_scan_at:
            return
        self._kill_scan_at = now + 1.0  # a scan over every task record: not on every tick
        every = 2 * self.kill_grace + 5.0
        for job in jobs:
            for t in job.tasks.values():
                if not t.killing or t.state in TERMINAL_TASK_STATES:
                    self._kills_sent.pop(t.task_id, None)
                    continue
                sent = self._kills_sent.get(t.task_id)
                if sent is None or now - sent >= every:
                    if sent is not None:
                        logger.warning("task %s still %s %.0fs after its kill; killing again",
                                       t.task_id, t.state, now - sent)
                    self.kill(t.task_id)
                    self._kills_sent[t.task_id] = now
