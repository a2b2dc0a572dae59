"""The one thread that owns the scheduler state: drain events, tick, publish a read-only view."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from dl2_mesos.framework import events as ev
from dl2_mesos.framework.core import SchedulerCore
from dl2_mesos.framework.kv import StaleVersion, StoreUnavailable
from dl2_mesos.framework.retention import expire_ended_jobs

logger = logging.getLogger(__name__)

TICK_SECONDS = 0.2
PUBLISH_SECONDS = 0.25  # the view lags the state by at most this while events arrive
IDLE_PUBLISH_SECONDS = 1.0  # and by at most this when none did (clocks, ticks' timeouts)
# A full view is O(jobs + agents): ~0.1 s at 1000 jobs, ~0.5 s at 5000, where four a second
# would take the whole loop (submissions then waited 1.6 s at p50). Full views take at most this
# share of the loop's time; between them the published view is patched with the jobs that
# changed (what the API shows of them stays current; time-based fields and totals catch up at
# the next full view).
VIEW_TIME_SHARE = 0.1
BATCH_SECONDS = 0.1  # the most time spent on queued events before the view is published again
RETENTION_SECONDS = 60.0  # how often ended jobs are checked against the retention rule


class SchedulingLoop:
    """Runs ``core`` on its own thread.

    Args:
        core: the scheduler core (restored already).
        events: the queue every producer puts events on.
        on_fatal: called (from the loop thread) when leading must stop: the store was written by
            another leader (``StaleVersion``) or cannot be reached. Gets the reason.

    Any other exception (from one event, a tick, publishing the view, answering the API) is
    logged, counted in ``dl2_loop_errors_total{stage}`` and survived: one bad event must not
    stop the scheduler.
    """

    def __init__(self, core: SchedulerCore, events: queue.Queue,
                 on_fatal: Callable[[str], None] | None = None) -> None:
        self.core = core
        self.events = events
        self.on_fatal = on_fatal
        self._view: dict[str, Any] = core.view()
        self._view_seconds = 0.0  # what the last full view took to build
        core.defer_replies = True  # answered after the view that shows them is published
        core.defer_flush = True  # one write per changed job per batch (acks follow the write)
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self.slow_callback_seconds = 1.0
        self._retention_at = 0.0

    @property
    def view(self) -> dict[str, Any]:
        """The latest published snapshot (replaced atomically; never mutated after publishing)."""
        return self._view

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dl2-loop", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self.events.put(ev.Stop("stop requested"))
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _handle(self, event: object) -> None:
        t0 = time.perf_counter()
        self.core.handle(event)
        spent = time.perf_counter() - t0
        if spent > self.slow_callback_seconds:
            logger.warning("handling %s took %.2fs", type(event).__name__, spent)

    def _survived(self, stage: str, what: object) -> None:
        """Log and count an exception the loop goes on after (call from an ``except`` block)."""
        logger.exception("scheduling loop: error in %s (%s); going on", stage, type(what).__name__)
        try:
            self.core.metrics.loop_errors.labels(stage).inc()
        except Exception:  # noqa: BLE001 - counting must never be what stops the loop
            logger.debug("loop error metric", exc_info=True)

    def _publish(self, patch: bool = False) -> None:
        try:
            if patch:
                self._view = self.core.view_patch(self._view)
            else:
                t0 = time.perf_counter()
                self._view = self.core.view()
                self._view_seconds = time.perf_counter() - t0
        except (StaleVersion, StoreUnavailable):
            raise
        except Exception:  # the previous view stays published
            self._survived("publish", self.core)

    def _retention(self) -> None:
        now = time.monotonic()
        if now < self._retention_at:
            return
        self._retention_at = now + RETENTION_SECONDS
        expire_ended_jobs(self.core, self.core.clock())

    def _run(self) -> None:
        try:
            self._loop()
        except (StaleVersion, StoreUnavailable) as exc:
            logger.error("state store conflict, giving up leadership: %s", exc)
            if self.on_fatal:
                self.on_fatal(f"state store: {exc}")
        finally:
            self._publish_final()

    def _publish_final(self) -> None:
        try:
            self._view = self.core.view()
        except Exception:  # noqa: BLE001
            self._survived("publish", self.core)
        for fut, _, _ in self.core.replies:
            if not fut.done():
                fut.set_exception(TimeoutError("the scheduling loop stopped"))
        self.core.replies = []
        self._stopped.set()

    def _loop(self) -> None:
        last_publish = last_patch = 0.0
        handled = False  # events handled since the last full view
        while True:
            try:
                event = self.events.get(timeout=TICK_SECONDS)
            except queue.Empty:
                event = None
            if isinstance(event, ev.Stop):
                logger.info("loop stopping: %s", event.reason)
                break
            stop: ev.Stop | None = None
            try:
                if event is not None:
                    handled = True
                    self._handle(event)
                    # handle what is already queued before publishing: one view per batch, not one
                    # per event (with 1000 jobs a view costs tens of ms; a burst of submissions
                    # paid it once each)
                    batch_end = time.perf_counter() + BATCH_SECONDS
                    while time.perf_counter() < batch_end:
                        try:
                            nxt = self.events.get_nowait()
                        except queue.Empty:
                            break
                        if isinstance(nxt, ev.Stop):
                            stop = nxt
                            break
                        try:
                            self._handle(nxt)
                        except (StaleVersion, StoreUnavailable):
                            raise
                        except Exception:  # one bad event must not kill the scheduler
                            self._survived("event", nxt)
            except (StaleVersion, StoreUnavailable):
                raise
            except Exception:  # one bad event must not kill the scheduler
                self._survived("event", event)
            try:
                # what the batch changed is stored, then its status updates are acknowledged and
                # its API commands answered
                self.core.flush()
            except (StaleVersion, StoreUnavailable):
                raise
            except Exception as exc:
                self._survived("flush", self.core)
                # nothing the batch's commands did is known to be stored: none of them gets a 2xx
                self.core.replies = [(fut, None, exc) for fut, _, _ in self.core.replies]
            try:
                self.core.tick()
                self._retention()
            except (StaleVersion, StoreUnavailable):
                raise
            except Exception:
                self._survived("tick", self.core)
            now = time.monotonic()
            # A view costs O(jobs + agents) (tens of ms at 1000 jobs): publish one per
            # PUBLISH_SECONDS while events arrive, not one per drained batch (a steady trickle of
            # status updates drains the queue after every event, and a burst of submissions has a
            # reply in every batch: views then took most of the loop's time, delaying the updates'
            # acknowledgements). API commands are answered after a view that shows them: between
            # full views, the last one patched with the jobs the batch changed. A costly full
            # view comes less often (VIEW_TIME_SHARE), patches keep the jobs in it current.
            since = now - last_publish
            full_every = max(PUBLISH_SECONDS, self._view_seconds / VIEW_TIME_SHARE)
            if since >= max(IDLE_PUBLISH_SECONDS, full_every) or (handled and since >= full_every):
                self._publish()
                last_publish = now
                handled = False
            elif self.core.replies or now - max(last_patch, last_publish) >= PUBLISH_SECONDS:
                self._publish(patch=True)  # ~1 ms at 1000 jobs, ~10 ms at 5000
                last_patch = now
            try:
                self.core.resolve_replies()
            except Exception:  # an API caller that went away must not stop the loop
                self.core.replies = []
                self._survived("reply", self.core)
            if stop is not None:
                logger.info("loop stopping: %s", stop.reason)
                break
