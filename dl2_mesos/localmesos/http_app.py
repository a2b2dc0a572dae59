"""HTTP servers of the local cluster: the master's app, one app per agent, and a uvicorn wrapper.

The master answers the Mesos endpoints this project and the Mesos UI's tools use
(``/api/v1/scheduler``, ``/version``, ``/master/state`` + ``/state``, ``/master/frameworks``,
``/master/slaves``, ``/master/tasks``, ``/metrics/snapshot``, ``/master/redirect``, ``/flags``,
``/health``), a small server-rendered web UI at ``/`` (frameworks, agents, tasks and their
sandboxes) plus control endpoints under ``/local/`` that are
*not* Mesos API: fault injection for tests and demos. Agents answer ``/api/v1/executor`` on their
own port, since pymesos's executor driver posts to ``MESOS_AGENT_ENDPOINT`` + ``/api/v1/executor``,
and serve their sandboxes through Mesos's files API (``/files/browse|read|download``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import uvicorn
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from .agent import Agent
from .agent_records import AgentConfig
from .executor_api import make_executor_endpoint
from .master import Master
from .sandbox_files import make_files_endpoints
from .scheduler_api import make_scheduler_endpoint
from .master_ui import render_file_page, render_master_page
from .state_json import (
    TASK_ORDER,
    flags_json,
    frameworks_json,
    master_state_json,
    metrics_json,
    slaves_json,
    tasks_json,
    version_json,
)

logger = logging.getLogger(__name__)


class ClusterControl(Protocol):
    """What the master's HTTP app needs from the cluster around it (the current master and the
    ``/local/*`` fault-injection controls); :class:`~.runtime.LocalMesos` provides it."""

    @property
    def master(self) -> Master | None: ...

    @property
    def agents(self) -> Mapping[str, Agent]: ...

    def info(self) -> dict[str, Any]: ...

    def agent_config_from(self, spec: dict[str, Any]) -> AgentConfig: ...

    async def add_agent(self, config: AgentConfig) -> str: ...

    async def remove_agent(self, agent_id: str, unreachable: bool = False) -> bool: ...

    async def restart_master(self, downtime: float = 0.0) -> None: ...

    def disconnect_framework(self, framework_id: str) -> bool: ...


def master_app(runtime: ClusterControl, zk: str | None = None) -> FastAPI:
    """The master's HTTP app; ``zk`` is the ZooKeeper URL the master registers at (shown in its state)."""
    app = FastAPI(
        title="dl2 local Mesos-compatible master (test stand-in)",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    get_master: Callable[[], Master | None] = lambda: runtime.master  # noqa: E731
    app.add_route("/api/v1/scheduler", make_scheduler_endpoint(get_master), methods=["POST"])

    async def version(request: Request) -> Response:
        return JSONResponse(version_json())

    async def state(request: Request) -> Response:
        master = runtime.master
        if master is None:
            return PlainTextResponse("Master is not running", status_code=503)
        return JSONResponse(master_state_json(master, zk))

    async def health(request: Request) -> Response:
        return Response(status_code=200 if runtime.master is not None else 503)

    app.add_route("/version", version, methods=["GET"])
    for path in ("/master/state", "/master/state.json", "/state", "/state.json"):
        app.add_route(path, state, methods=["GET"])
    app.add_route("/health", health, methods=["GET"])
    app.add_route("/master/health", health, methods=["GET"])

    def master_json(render: Callable[[Master], Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            master = runtime.master
            if master is None:
                return PlainTextResponse("Master is not running", status_code=503)
            return JSONResponse(render(master))

        return endpoint

    app.add_route("/master/frameworks", master_json(frameworks_json), methods=["GET"])
    app.add_route("/master/slaves", master_json(lambda m: {"slaves": slaves_json(m), "recovered_slaves": []}),
                  methods=["GET"])
    app.add_route("/metrics/snapshot", master_json(metrics_json), methods=["GET"])
    for path in ("/flags", "/master/flags"):
        app.add_route(path, master_json(lambda m: {"flags": flags_json(m, zk)}), methods=["GET"])

    async def tasks(request: Request) -> Response:
        master = runtime.master
        if master is None:
            return PlainTextResponse("Master is not running", status_code=503)
        q = request.query_params
        try:
            limit, offset = int(q.get("limit", "100")), int(q.get("offset", "0"))
        except ValueError:
            return PlainTextResponse("Failed to parse 'limit' or 'offset': not a number", status_code=400)
        order = q.get("order", "des")
        if limit < 0 or offset < 0 or order not in TASK_ORDER:
            return PlainTextResponse("Expecting non-negative 'limit' and 'offset' and 'order' asc or des",
                                     status_code=400)
        return JSONResponse(tasks_json(master, limit=limit, offset=offset, order=order,
                                       framework_id=q.get("framework_id"), task_id=q.get("task_id")))

    async def redirect(request: Request) -> Response:
        # Mesos answers 307 with a scheme-relative Location naming the leading master (always
        # this one here: the stand-in has a single master).
        master = runtime.master
        if master is None:
            return PlainTextResponse("No leader elected", status_code=503)
        info = master.master_info()
        return Response(status_code=307, headers={"Location": f"//{info['hostname']}:{info['port']}"})

    async def ui(request: Request) -> Response:
        master = runtime.master
        if master is None:
            return PlainTextResponse("Master is not running", status_code=503)
        return HTMLResponse(render_master_page(master, runtime.agents))

    async def ui_file(request: Request) -> Response:
        status, body = render_file_page(runtime.agents, request.query_params.get("agent", ""),
                                        request.query_params.get("path"))
        return HTMLResponse(body, status_code=status)

    app.add_route("/master/tasks", tasks, methods=["GET"])
    app.add_route("/master/redirect", redirect, methods=["GET"])
    app.add_route("/", ui, methods=["GET"])
    app.add_route("/ui/sandbox", ui_file, methods=["GET"])

    # ---- /local/*: control endpoints of this stand-in (not part of the Mesos API) ----------------
    async def cluster_info(request: Request) -> Response:
        return JSONResponse(runtime.info())

    async def remove_agent(request: Request) -> Response:
        aid = request.path_params["agent_id"]
        unreachable = request.query_params.get("unreachable", "false").lower() in ("1", "true", "yes")
        ok = await runtime.remove_agent(aid, unreachable=unreachable)
        return JSONResponse({"removed": ok}, status_code=200 if ok else 404)

    async def add_agent(request: Request) -> Response:
        try:
            spec = await request.json()
            aid = await runtime.add_agent(runtime.agent_config_from(spec if isinstance(spec, dict) else {}))
        except (ValueError, TypeError) as exc:
            return PlainTextResponse(f"Invalid agent spec: {exc}", status_code=400)
        return JSONResponse({"agent_id": aid, "endpoint": runtime.agents[aid].endpoint})

    async def restart_master(request: Request) -> Response:
        try:
            downtime = float(request.query_params.get("downtime", "0"))
        except ValueError:
            return PlainTextResponse("downtime must be a number of seconds", status_code=400)
        # Answer first: this very server goes down during the restart.
        asyncio.get_running_loop().create_task(runtime.restart_master(downtime))
        return JSONResponse({"restarting": True}, status_code=202)

    async def disconnect(request: Request) -> Response:
        ok = runtime.disconnect_framework(request.path_params["framework_id"])
        return JSONResponse({"disconnected": ok}, status_code=200 if ok else 404)

    app.add_route("/local/cluster", cluster_info, methods=["GET"])
    app.add_route("/local/agents", add_agent, methods=["POST"])
    app.add_route("/local/agents/{agent_id}/remove", remove_agent, methods=["POST"])
    app.add_route("/local/master/restart", restart_master, methods=["POST"])
    app.add_route("/local/frameworks/{framework_id}/disconnect", disconnect, methods=["POST"])
    return app


def agent_app(agent: Agent) -> FastAPI:
    app = FastAPI(
        title=f"dl2 local Mesos-compatible agent {agent.index}",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.add_route("/api/v1/executor", make_executor_endpoint(agent), methods=["POST"])

    async def state(request: Request) -> Response:
        return JSONResponse(agent.state_json())

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def version(request: Request) -> Response:
        return JSONResponse(version_json())

    for path in ("/state", "/state.json", "/slave(1)/state"):
        app.add_route(path, state, methods=["GET"])
    app.add_route("/health", health, methods=["GET"])
    app.add_route("/version", version, methods=["GET"])
    for path, endpoint in make_files_endpoints(agent.sandbox_root).items():
        app.add_route(path, endpoint, methods=["GET"])
    return app


#: how often an idle server wakes up (its Date header is refreshed then; a stop wakes it at once)
SERVER_TICK_SECONDS = 1.0


class _Server(uvicorn.Server):
    """uvicorn's server without its ten wake-ups a second: with 2000 agents in one process those
    idle ticks (20,000 a second) took the CPU that the master and the agents needed."""

    _wake: asyncio.Future | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The cluster (CLI or LocalCluster) owns signal handling, not each server.
        yield

    async def main_loop(self) -> None:
        loop = asyncio.get_running_loop()
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000  # on_tick refreshes the Date header when counter % 10 == 0
            self._wake = wake = loop.create_future()
            timer = loop.call_later(SERVER_TICK_SECONDS, _resolve, wake)
            try:
                await wake
            finally:
                timer.cancel()

    def wake(self) -> None:
        """End the current tick now (after ``should_exit`` was set)."""
        if self._wake is not None:
            _resolve(self._wake)


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def bind_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


class HttpServer:
    """A uvicorn server on a pre-bound socket, run as a task of the current event loop."""

    def __init__(self, app: FastAPI, host: str, port: int = 0) -> None:
        self.app = app
        self.host = host
        self.sock = bind_socket(host, port)
        self.port: int = self.sock.getsockname()[1]
        # Mesos keeps HTTP connections open; pymesos reuses one connection for all its calls and
        # fails a call if the server silently dropped it, so idle connections are kept for long.
        # httptools: uvicorn's C parser (its pure-Python h11 parser cost a fifth of this
        # process's CPU under load); named, not "auto", so a missing install fails loudly
        config = uvicorn.Config(
            app,
            http="httptools",
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_keep_alive=24 * 3600,
            timeout_graceful_shutdown=1,
        )
        self.server = _Server(config)
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.server.serve(sockets=[self.sock]))
        for _ in range(500):
            if self.server.started or self._task.done():
                break
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()
            raise RuntimeError(f"HTTP server on {self.host}:{self.port} did not start")

    async def stop(self) -> None:
        if self._task is None:
            return
        self.server.should_exit = True
        self.server.wake()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), 3.0)
        except asyncio.TimeoutError:
            self.server.force_exit = True
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
        with contextlib.suppress(OSError):
            self.sock.close()
