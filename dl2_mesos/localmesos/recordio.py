"""RecordIO event streams, as in Mesos's "Scheduler HTTP API" / "Executor HTTP API" documents.

A subscribed client receives one long chunked HTTP response whose body is a sequence of
``<length>\\n<JSON event>`` records ("RecordIO" in the Mesos docs, section "Events").
``EventStream`` is the server side of one such subscription: the master or an agent ``send()``s
events (dicts shaped like ``scheduler.proto``/``executor.proto`` ``Event``), the HTTP layer
iterates it. HEARTBEAT events are emitted at a fixed interval, as the master does
(``SUBSCRIBED.heartbeat_interval_seconds``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

logger = logging.getLogger(__name__)


def encode_record(event: dict[str, Any]) -> bytes:
    """One RecordIO record: decimal byte length, a newline, then the JSON bytes."""
    data = json.dumps(event, separators=(",", ":")).encode("utf-8")
    return str(len(data)).encode("ascii") + b"\n" + data


class EventStream:
    """The event queue of one subscribed scheduler or executor connection.

    ``on_close`` is called exactly once, when the stream ends for any reason (client gone,
    server closed it, server shutting down); the master and agents use it to notice
    disconnections the way Mesos notices a closed HTTP connection.
    """

    def __init__(self, heartbeat_interval: float | None = None, name: str = "") -> None:
        self.id = str(uuid.uuid4())
        self.name = name
        self.heartbeat_interval = heartbeat_interval
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._closed = False
        self._close_callbacks: list[Callable[[EventStream], None]] = []
        self.events_sent = 0

    @property
    def closed(self) -> bool:
        return self._closed

    def on_close(self, callback: Callable[[EventStream], None]) -> None:
        self._close_callbacks.append(callback)

    def send(self, event: dict[str, Any]) -> bool:
        """Queue an event; False (and nothing queued) when the stream is already closed."""
        if self._closed:
            return False
        self._queue.put_nowait(encode_record(event))
        return True

    def close(self) -> None:
        """End the stream: the HTTP response finishes after the queued events (graceful close)."""
        if self._closed:
            return
        self._closed = True
        self._queue.put_nowait(None)
        self._fire_close()

    def abort(self) -> None:
        """End the stream at once, dropping queued events (a broken connection, not a graceful end)."""
        while not self._queue.empty():
            self._queue.get_nowait()
        self.close()

    def _fire_close(self) -> None:
        callbacks, self._close_callbacks = self._close_callbacks, []
        for cb in callbacks:
            try:
                cb(self)
            except Exception:  # a failing observer must not break the others
                logger.exception("close callback of stream %s failed", self.name)

    def _client_gone(self) -> None:
        if not self._closed:
            self._closed = True
            self._fire_close()

    async def records(self) -> AsyncIterator[bytes]:
        """Yield encoded records until closed; HEARTBEAT records at the fixed interval."""
        loop = asyncio.get_running_loop()
        next_beat = loop.time() + self.heartbeat_interval if self.heartbeat_interval else None
        getter: asyncio.Future | None = None
        try:
            while True:
                if getter is None:
                    getter = asyncio.ensure_future(self._queue.get())
                timeout = None if next_beat is None else max(0.0, next_beat - loop.time())
                # asyncio.wait, not wait_for: it never cancels/awaits the getter, so cancelling
                # this generator cannot hang.
                done, _ = await asyncio.wait({getter}, timeout=timeout)
                if not done:
                    if self._closed:
                        return
                    yield encode_record({"type": "HEARTBEAT"})
                    next_beat = loop.time() + self.heartbeat_interval  # type: ignore[operator]
                    continue
                item, getter = getter.result(), None
                if item is None:
                    return
                # whatever else is queued goes out in the same write (one send per burst of
                # events, not one per event: status updates and messages come in bursts)
                batch = [item]
                closing = False
                while not self._queue.empty():
                    nxt = self._queue.get_nowait()
                    if nxt is None:
                        closing = True
                        break
                    batch.append(nxt)
                self.events_sent += len(batch)
                yield b"".join(batch)
                if closing:
                    return
        finally:
            if getter is not None and not getter.done():
                getter.cancel()


class RecordIOResponse(Response):
    """A 200 chunked response streaming an ``EventStream`` until either side closes it.

    Unlike starlette's StreamingResponse it always listens for the client's disconnect so the
    master learns at once that a scheduler went away (failover timeout starts then).
    """

    media_type = "application/json"

    def __init__(self, stream: EventStream, headers: dict[str, str] | None = None) -> None:
        self.stream = stream
        self.status_code = 200
        self.background = None
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})

        async def pump() -> None:
            async for record in self.stream.records():
                await send({"type": "http.response.body", "body": record, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return

        pump_task = asyncio.ensure_future(pump())
        watch_task = asyncio.ensure_future(watch())
        try:
            done, _ = await asyncio.wait({pump_task, watch_task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (pump_task, watch_task):
                if not task.done():
                    task.cancel()
            await asyncio.gather(pump_task, watch_task, return_exceptions=True)
            self.stream._client_gone()
