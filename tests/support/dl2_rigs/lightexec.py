"""A light fake executor for load tests only: thousands of executors without thousands of Pythons.

Each executor the agent starts is a tiny ``bash`` process (:func:`executor_command`) that hands its
``MESOS_*`` identity to one *hub* process over a TCP socket and then just waits; the hub speaks the
real v1 Executor HTTP API to the agent on its behalf (SUBSCRIBE stream, UPDATE, MESSAGE): tasks go
TASK_RUNNING, worker rank 0 sends a ``ProgressReport`` every ``interval`` seconds (no training),
a ``RescaleRequest`` is answered with a ``RescaleReport``, KILL gives TASK_KILLED, and once the
job's epochs are reached its tasks end TASK_FINISHED. When an executor has no task left the hub
closes its socket and the bash process exits, as an executor would.

Run the hub as ``python -m dl2_rigs.lightexec --port P [--eps 0.05]`` (with ``tests/support`` on
``PYTHONPATH``), or with :func:`start_hub`, which lets it bind a free port and returns that. With ``--pace SCALE`` the
executors train instead as the simulator does, at the speed table's speed of each job's counts,
time-compressed, with a restart pause at each new generation (:mod:`dl2_rigs.paced`).

The hub talks HTTP/1.1 to the agents with a few lines of asyncio streams (:class:`_AgentHttp`)
rather than httpx: with 1000 executor streams in one httpx client, its connection pool scanned
every connection for each request, and the hub, not the system under test, was the bottleneck.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from typing import Any

from dl2_mesos.messages import LaunchSpec, ProgressReport, RescaleReport, RescaleRequest, decode_b64, encode_b64
from dl2_rigs.paced import Pacer

logger = logging.getLogger(__name__)


def executor_command(port: int) -> str:
    """The ``executor_command`` for the framework: a bash process registering with the hub."""
    return ("exec bash -c 'exec 3<>/dev/tcp/127.0.0.1/" + str(port) + "; "
            "echo \"$MESOS_AGENT_ENDPOINT $MESOS_FRAMEWORK_ID $MESOS_EXECUTOR_ID\" >&3; read -r _ <&3; exit 0'")


CALL_TIMEOUT = 60.0  # an agent that does not answer a call within this is given up on


class HttpError(OSError):
    """A call to an agent failed (connection, protocol or status)."""


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    line = await reader.readline()
    if not line:
        raise HttpError("connection closed before a response")
    parts = line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise HttpError(f"bad status line {line[:80]!r}")
    headers: dict[str, str] = {}
    while True:
        h = await reader.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        k, _, v = h.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(parts[1]), headers


async def _body_chunks(reader: asyncio.StreamReader, headers: dict[str, str]):  # noqa: ANN202
    """Yield the body as it arrives (chunked, Content-Length or until EOF)."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                return
            data = await reader.readexactly(size)
            await reader.readline()
            yield data
    elif "content-length" in headers:
        n = int(headers["content-length"])
        if n:
            yield await reader.readexactly(n)
    else:
        while data := await reader.read(65536):
            yield data


class _AgentHttp:
    """POSTs to one agent over a few kept-alive connections."""

    def __init__(self, host: str, port: int, path: str) -> None:
        self.host, self.port, self.path = host, port, path
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    def _request(self, body: dict[str, Any]) -> bytes:
        data = json.dumps(body, separators=(",", ":")).encode()
        return (f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/json\r\nAccept: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n").encode() + data

    async def post(self, body: dict[str, Any]) -> int:
        """One call; returns the status. A kept-alive connection the agent closed meanwhile is
        replaced once (nothing was answered on it, so the call was not taken)."""
        request = self._request(body)
        for attempt in (0, 1):
            reused = bool(self._idle) and attempt == 0
            reader, writer = self._idle.pop() if reused else await asyncio.open_connection(self.host, self.port)
            try:
                writer.write(request)
                await writer.drain()
                status, headers = await _read_head(reader)
                async for _ in _body_chunks(reader, headers):
                    pass
            except asyncio.CancelledError:  # timed out by the caller: the connection is in an unknown state
                writer.close()
                raise
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                writer.close()
                if reused:
                    continue
                raise HttpError(str(exc)) from exc
            if headers.get("connection", "").lower() == "close" or len(self._idle) >= 4:
                writer.close()
            else:
                self._idle.append((reader, writer))
            return status
        raise HttpError("unreachable")

    async def stream(self, body: dict[str, Any]):  # noqa: ANN201
        """POST on a connection of its own and yield the streamed response body."""
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(self._request(body))
            await writer.drain()
            status, headers = await _read_head(reader)
            if status != 200:
                raise HttpError(f"SUBSCRIBE answered {status}")
            async for chunk in _body_chunks(reader, headers):
                yield chunk
        finally:
            writer.close()


class _Executor:
    def __init__(self, hub: Hub, endpoint: str, fid: str, eid: str, writer: asyncio.StreamWriter) -> None:
        self.hub, self.http = hub, hub.agent(endpoint)
        self.fid, self.eid, self.writer = fid, eid, writer
        self.tasks: dict[str, LaunchSpec] = {}
        self.done = asyncio.Event()

    def _ids(self) -> dict[str, Any]:
        return {"framework_id": {"value": self.fid}, "executor_id": {"value": self.eid}}

    async def call(self, body: dict[str, Any]) -> None:
        try:
            status = await asyncio.wait_for(self.http.post({**body, **self._ids()}), CALL_TIMEOUT)
            if status >= 300:
                logger.debug("%s: call answered %d", self.eid, status)
        except (HttpError, OSError, asyncio.TimeoutError) as exc:
            self.hub.failed_calls += 1
            logger.debug("%s: call failed: %s", self.eid, exc)

    async def status(self, task_id: str, state: str, message: str = "") -> None:
        st = {"task_id": {"value": task_id}, "state": state, "source": "SOURCE_EXECUTOR", "message": message,
              "uuid": base64.b64encode(uuid.uuid4().bytes).decode(), "timestamp": time.time()}
        self.hub.updates += 1
        await self.call({"type": "UPDATE", "update": {"status": st}})

    async def send(self, msg: Any) -> None:
        await self.call({"type": "MESSAGE", "message": {"data": encode_b64(msg)}})

    async def run(self) -> None:
        body = {"type": "SUBSCRIBE", "subscribe": {"unacknowledged_tasks": [], "unacknowledged_updates": []},
                **self._ids()}
        try:
            buf = b""
            async with contextlib.aclosing(self.http.stream(body)) as chunks:  # closes the connection
                async for chunk in chunks:
                    buf += chunk
                    while b"\n" in buf:
                        size, _, rest = buf.partition(b"\n")
                        n = int(size)
                        if len(rest) < n:
                            break
                        event, buf = json.loads(rest[:n]), rest[n:]
                        await self.on_event(event)
                    if self.done.is_set():
                        break
        except (HttpError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
            # not a close of ours: the bash stand-in exits 0 and the agent fails what it had
            # ("Executor terminated (wait status 0)"); say why, for a failed test's log
            logger.warning("%s: stream ended (%d tasks): %r", self.eid, len(self.tasks), exc)
        finally:
            self.done.set()
            self.writer.close()

    async def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "LAUNCH":
            task = event["launch"]["task"]
            spec = decode_b64(task["data"])
            self.tasks[spec.task_id] = spec
            await self.status(spec.task_id, "TASK_RUNNING")
            if self.hub.pacer is not None:
                self.hub.pacer.launched(self, spec)
            elif spec.role == "worker" and spec.rank == 0:
                self.hub.spawn(self.progress(spec))
        elif kind == "KILL":
            tid = event["kill"]["task_id"]["value"]
            gone = self.tasks.pop(tid, None)
            if gone is not None and self.hub.pacer is not None:
                self.hub.pacer.ended(gone.job_id, tid)
            await self.status(tid, "TASK_KILLED")
            if not self.tasks:
                self.done.set()
        elif kind == "MESSAGE":
            msg = decode_b64(event["message"]["data"])
            if isinstance(msg, RescaleRequest):
                for tid, _role, _rank in msg.assignments:
                    if tid in self.tasks:
                        self.tasks[tid] = dataclasses.replace(self.tasks[tid], cluster=msg.cluster)
                if self.hub.pacer is not None:
                    self.hub.pacer.rescaled(msg.job_id, msg.cluster)
                first = next((t for t, _, _ in msg.assignments), "")
                await self.send(RescaleReport(msg.job_id, first, msg.cluster.generation, True, (("restart", 0.0),)))
        elif kind == "SHUTDOWN":
            self.done.set()

    async def progress(self, spec: LaunchSpec) -> None:
        t0, epoch = time.monotonic(), 0.0
        interval = self.hub.interval or spec.progress_interval_s  # 0: as the framework asks
        while spec.task_id in self.tasks and not self.done.is_set():
            await asyncio.sleep(interval)
            epoch = min(spec.epochs, self.hub.eps * (time.monotonic() - t0))
            self.hub.reports += 1
            await self.send(ProgressReport(spec.job_id, spec.task_id, spec.cluster.generation, epoch,
                                           int(epoch * 100), 100.0, timestamp=time.time()))
            if epoch >= spec.epochs:
                for tid in list(self.tasks):
                    await self.status(tid, "TASK_FINISHED", "light executor: epochs reached")
                self.tasks.clear()
                self.done.set()


class Hub:
    """Serves the bash stand-ins; one :class:`_Executor` per connection."""

    def __init__(self, eps: float = 0.05, interval: float = 0.0, pace: float = 0.0,
                 restart_seconds: float = 0.0, pace_events: str = "") -> None:
        self.eps, self.interval = eps, interval
        #: paced training (the speed table, ``pace`` simulated seconds per second), or None
        self.pacer = Pacer(pace, restart_seconds, interval or 0.1, self.spawn, pace_events) if pace > 0 else None
        self._agents: dict[str, _AgentHttp] = {}
        self._tasks: set[asyncio.Task] = set()  # the loop keeps only weak references to tasks
        self.failed_calls = 0
        self.executors = 0
        self.updates = 0
        self.reports = 0

    def spawn(self, coro: Any) -> asyncio.Task:
        """Run ``coro`` as a task held until it ends (an unreferenced task can be collected)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def agent(self, endpoint: str) -> _AgentHttp:
        """The HTTP client of the agent at ``endpoint`` (host:port), shared by its executors."""
        http = self._agents.get(endpoint)
        if http is None:
            host, _, port = endpoint.rpartition(":")
            http = self._agents[endpoint] = _AgentHttp(host, int(port), "/api/v1/executor")
        return http

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = (await reader.readline()).decode().split()
        if len(line) != 3:
            writer.close()
            return
        self.executors += 1
        await _Executor(self, *line, writer).run()

    async def serve(self, port: int, port_file: str = "") -> None:
        server = await asyncio.start_server(self.handle, "127.0.0.1", port, backlog=4096)
        if port_file:  # the port actually bound (``port`` 0: the kernel's pick), written once listening
            bound = server.sockets[0].getsockname()[1]
            tmp = f"{port_file}.tmp"
            with open(tmp, "w") as f:
                f.write(str(bound))
            os.replace(tmp, port_file)
        async with server:
            await server.serve_forever()


def start_hub(args: list[str], env: dict[str, str], workdir: str, timeout: float = 60.0) -> tuple[subprocess.Popen, int]:
    """Start a hub process (``args``: its options other than ``--port``) on a port the kernel picks;
    returns it and its port once it listens.

    The hub binds the port itself rather than being handed one found free beforehand: between
    "found free" and a late bind (a hub's Python start takes seconds on a loaded machine) another
    server could take that port, and every bash stand-in would then talk to it, read its reply
    and exit 0, failing every task with "Executor terminated".
    """
    port_file = os.path.join(workdir, f"lightexec-{uuid.uuid4().hex[:8]}.port")
    hub = subprocess.Popen([sys.executable, "-m", "dl2_rigs.lightexec", "--port", "0", "--port-file", port_file,
                            *args], env=env, start_new_session=True)
    deadline = time.monotonic() + timeout
    while not os.path.exists(port_file):
        if hub.poll() is not None:
            raise RuntimeError(f"the light-executor hub exited with {hub.returncode} before listening")
        if time.monotonic() > deadline:
            hub.kill()
            raise RuntimeError(f"the light-executor hub did not listen within {timeout:.0f} s")
        time.sleep(0.05)
    with open(port_file) as f:
        return hub, int(f.read())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, required=True, help="0: a free port the kernel picks (see --port-file)")
    p.add_argument("--port-file", default="", help="write the bound port here once listening")
    p.add_argument("--eps", type=float, default=0.05, help="epochs per second each job 'trains'")
    p.add_argument("--interval", type=float, default=0.0,
                   help="seconds between progress reports (0: the LaunchSpec's progress_interval_s; 0.1 paced)")
    p.add_argument("--pace", type=float, default=0.0,
                   help="train at the speed table's speed, this many simulated seconds per second (0: --eps)")
    p.add_argument("--restart-seconds", type=float, default=0.0,
                   help="paced: seconds a job pauses at each new generation after its first")
    p.add_argument("--pace-events", default="", help="paced: append generation starts and finishes here (JSON lines)")
    a = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(Hub(a.eps, a.interval, a.pace, a.restart_seconds, a.pace_events).serve(a.port, a.port_file))


if __name__ == "__main__":
    main()
