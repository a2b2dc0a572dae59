"""The agent's status update manager: reliable, ordered delivery of task status updates.

As Mesos's agent status update manager ("Scheduler HTTP API", UPDATE/ACKNOWLEDGE; "Task State
Reasons"): updates of one task are forwarded to the master one at a time, in order, each carrying
its ``uuid``; the head update is re-sent with exponential back-off until the scheduler
acknowledges that uuid (at-least-once). Duplicate uuids from an executor are ignored.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .protocol import is_terminal

logger = logging.getLogger(__name__)

Forward = Callable[[str, dict[str, Any], str], bool]  # (framework_id, status, latest_state) -> sent


@dataclass
class TaskUpdateStream:
    framework_id: str
    task_id: str
    pending: deque = field(default_factory=deque)
    seen: set[str] = field(default_factory=set)
    latest_state: str | None = None
    timer: asyncio.TimerHandle | None = None
    interval: float = 0.0

    @property
    def terminated(self) -> bool:
        return is_terminal(self.latest_state)


class StatusUpdateManager:
    """Per-agent update streams keyed by (framework id, task id)."""

    def __init__(
        self, forward: Forward, retry_min: float, retry_max: float, on_done: Callable[[str, str], None]
    ) -> None:
        self._forward = forward
        self.retry_min = retry_min
        self.retry_max = retry_max
        self._on_done = on_done  # terminal update acknowledged: (framework_id, task_id)
        self.streams: dict[tuple[str, str], TaskUpdateStream] = {}

    def update(self, framework_id: str, status: dict[str, Any]) -> bool:
        """Accept an update (True) or ignore a duplicate / post-terminal one (False)."""
        tid = status["task_id"]["value"]
        stream = self.streams.setdefault((framework_id, tid), TaskUpdateStream(framework_id, tid))
        uid = status["uuid"]
        if uid in stream.seen:
            logger.debug("duplicate update %s for task %s ignored", uid, tid)
            return False
        if stream.terminated:
            logger.warning("update %s for task %s after a terminal update ignored", status["state"], tid)
            return False
        stream.seen.add(uid)
        stream.pending.append(status)
        stream.latest_state = status["state"]
        if len(stream.pending) == 1:
            stream.interval = self.retry_min
            self._send(stream)
        return True

    def _send(self, stream: TaskUpdateStream) -> None:
        if not stream.pending:
            return
        try:
            self._forward(stream.framework_id, dict(stream.pending[0]), stream.latest_state or "")
        except Exception:  # the master may be down; the retry timer covers it
            logger.exception("forwarding update for task %s failed", stream.task_id)
        loop = asyncio.get_running_loop()
        if stream.timer:
            stream.timer.cancel()
        stream.timer = loop.call_later(stream.interval, self._retry, stream)

    def _retry(self, stream: TaskUpdateStream) -> None:
        stream.timer = None
        if not stream.pending or self.streams.get((stream.framework_id, stream.task_id)) is not stream:
            return
        logger.info("re-sending unacknowledged %s for task %s", stream.pending[0]["state"], stream.task_id)
        stream.interval = min(stream.interval * 2, self.retry_max)
        self._send(stream)

    def acknowledge(self, framework_id: str, task_id: str, uuid_b64: str) -> bool:
        stream = self.streams.get((framework_id, task_id))
        if stream is None or not stream.pending or stream.pending[0].get("uuid") != uuid_b64:
            logger.info("unexpected acknowledgement %s for task %s ignored", uuid_b64, task_id)
            return False
        stream.pending.popleft()
        if stream.timer:
            stream.timer.cancel()
            stream.timer = None
        if stream.pending:
            stream.interval = self.retry_min
            self._send(stream)
        elif stream.terminated:
            del self.streams[(framework_id, task_id)]
            self._on_done(framework_id, task_id)
        return True

    def resend_all(self) -> None:
        """After (re-)registering with a master: send every stream's head update again at once."""
        for stream in self.streams.values():
            if stream.pending:
                stream.interval = self.retry_min
                self._send(stream)

    def head(self, framework_id: str, task_id: str) -> dict[str, Any] | None:
        stream = self.streams.get((framework_id, task_id))
        return stream.pending[0] if stream and stream.pending else None

    def drop_framework(self, framework_id: str) -> None:
        for key in [k for k in self.streams if k[0] == framework_id]:
            stream = self.streams.pop(key)
            if stream.timer:
                stream.timer.cancel()

    def close(self) -> None:
        for stream in self.streams.values():
            if stream.timer:
                stream.timer.cancel()
        self.streams.clear()
