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

logger = logging.getLogger(__name__)

TICK_SECONDS = 0.2
PUBLISH_SECONDS = 0.25
BATCH_SECONDS = 0.1  # the most time spent on queued events before the view is published again


class SchedulingLoop:
    """Runs ``core`` on its own thread.

    Args:
        core: the scheduler core (restored already).
        events: the queue every producer puts events on.
        on_fatal: called (from the loop thread) when leading must stop: the store was written by
            another leader (``StaleVersion``) or cannot be reached. Gets the reason.
    """

    def __init__(self, core: SchedulerCore, events: queue.Queue,
                 on_fatal: Callable[[str], None] | None = None) -> None:
        self.core = core
        self.events = events
        self.on_fatal = on_fatal
        self._view: dict[str, Any] = core.view()
        core.defer_replies = True  # answered after the view that shows them is published
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self.slow_callback_seconds = 1.0

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

    def _run(self) -> None:
        last_publish = 0.0
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
                            logger.exception("error handling %r", nxt)
                self.core.tick()
            except (StaleVersion, StoreUnavailable) as exc:
                logger.error("state store conflict, giving up leadership: %s", exc)
                if self.on_fatal:
                    self.on_fatal(f"state store: {exc}")
                break
            except Exception:  # one bad event must not kill the scheduler
                logger.exception("error handling %r", event)
            now = time.monotonic()
            if (now - last_publish >= PUBLISH_SECONDS or self.core.replies
                    or (event is not None and self.events.empty())):
                self._view = self.core.view()
                last_publish = now
            self.core.resolve_replies()
            if stop is not None:
                logger.info("loop stopping: %s", stop.reason)
                break
        self._view = self.core.view()
        for fut, _, _ in self.core.replies:
            fut.set_exception(TimeoutError("the scheduling loop stopped"))
        self.core.replies = []
        self._stopped.set()
