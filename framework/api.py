"""The HTTP job API (FastAPI app factory).

Handlers only validate input and either hand a command to the loop thread (through the
:class:`Backend`) or read the loop's published snapshot; they never touch scheduler state.
Writes need ``Authorization: Bearer <token>`` when a token is configured. On a standby
replica every ``/api/v1`` call is redirected (307) to the leader, or answered 503 naming it.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any, Protocol

from starlette.concurrency import run_in_threadpool
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from dl2_mesos.errors import Dl2Error, InvalidJobSpec
from dl2_mesos.jobs import JobPhase, JobSpec
from dl2_mesos.job_types import job_type_names
from dl2_mesos.framework.status_page import render_standby_page, render_status_page

logger = logging.getLogger(__name__)


class NotLeader(Exception):
    """This replica does not lead (any more)."""


class Backend(Protocol):
    """What the API needs from the running framework."""

    def view(self) -> dict[str, Any]: ...
    def is_leader(self) -> bool: ...
    def leader_url(self) -> str | None: ...
    def submit(self, spec: JobSpec) -> dict[str, Any]: ...
    def cancel(self, job_id: str) -> dict[str, Any]: ...
    def metrics(self) -> bytes: ...
    def health(self) -> dict[str, Any]: ...


_RES_SCHEMA = {"type": "object", "properties": {"cpus": {"type": "number", "minimum": 0},
                                                 "gpus": {"type": "integer", "minimum": 0},
                                                 "mem": {"type": "number", "minimum": 0}},
               "additionalProperties": False}
JOB_SPEC_SCHEMA = {
    "type": "object",
    "required": ["job_type", "epochs"],
    "additionalProperties": False,
    "properties": {
        "job_type": {"type": "string", "enum": list(job_type_names())},
        "epochs": {"type": "number", "exclusiveMinimum": 0},
        "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"},
        "worker": _RES_SCHEMA, "ps": _RES_SCHEMA,
        "min_ps": {"type": "integer", "minimum": 0}, "max_ps": {"type": "integer", "minimum": 1},
        "min_workers": {"type": "integer", "minimum": 1}, "max_workers": {"type": "integer", "minimum": 1},
        "runtime": {"type": "string", "enum": ["mxnet", "pytorch"]},
        "command": {"type": "array", "items": {"type": "string"}},
        "priority": {"type": "integer"},
        "restart_seconds": {"type": "number", "minimum": 0},
        "extra": {"type": "object"},
    },
}


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def create_app(backend: Backend, *, api_token: str = "", max_body_bytes: int = 64 * 1024,
               title: str = "dl2 framework") -> FastAPI:
    """Build the app.

    Args:
        backend: the framework (or a test double).
        api_token: bearer token required for writes ("" = none).
        max_body_bytes: larger request bodies get 413.
    """
    app = FastAPI(title=title, version="1", description="Submit and watch elastic training jobs scheduled by DL2.")

    def authorized(request: Request) -> bool:
        if not api_token:
            return True
        got = request.headers.get("authorization", "")
        scheme, _, token = got.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), api_token.encode())

    def not_leader(request: Request) -> Response | None:
        if backend.is_leader():
            return None
        url = backend.leader_url()
        if url:
            target = url.rstrip("/") + request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(target, status_code=307, headers={"X-DL2-Leader": url})
        return _error(503, "this replica is not the leader and no leader is known", leader=None)

    @app.middleware("http")
    async def leader_and_size(request: Request, call_next):  # noqa: ANN001, ANN202
        if request.url.path.startswith("/api/v1/"):
            redirect = not_leader(request)
            if redirect is not None:
                return redirect
        length = request.headers.get("content-length")
        if length is not None:
            try:
                if int(length) > max_body_bytes:
                    return _error(413, f"request body over {max_body_bytes} bytes")
            except ValueError:
                return _error(400, "bad Content-Length")
        return await call_next(request)

    async def read_body(request: Request) -> bytes | Response:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_body_bytes:
                return _error(413, f"request body over {max_body_bytes} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    @app.post("/api/v1/jobs", status_code=201, summary="Submit a job", openapi_extra={
        "requestBody": {"required": True, "content": {"application/json": {"schema": JOB_SPEC_SCHEMA}}},
        "responses": {"400": {"description": "malformed JSON"}, "401": {"description": "token required"},
                      "413": {"description": "body too large"}, "422": {"description": "invalid job spec"}},
    })
    async def submit_job(request: Request) -> Response:
        if not authorized(request):
            return _error(401, "a bearer token is required for writes", )
        body = await read_body(request)
        if isinstance(body, Response):
            return body
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            return _error(400, f"malformed JSON: {exc}")
        try:
            spec = JobSpec.from_dict(data)
        except InvalidJobSpec as exc:
            return _error(422, str(exc), field=exc.field, rule=exc.rule)
        except (TypeError, ValueError) as exc:
            return _error(422, f"invalid job spec: {exc}")
        try:
            # submit blocks until the loop thread has taken the job: keep it off the event loop,
            # or one slow submission would stall every request (health checks included)
            job = await run_in_threadpool(backend.submit, spec)
        except NotLeader:
            return not_leader(request) or _error(503, "leadership changed; retry")
        except TimeoutError:
            return _error(503, "the scheduler did not accept the job in time; retry")
        except Dl2Error as exc:
            return _error(503, f"the scheduler could not store the job: {exc}")
        return JSONResponse(job, status_code=201, headers={"Location": f"/api/v1/jobs/{job['id']}"})

    @app.get("/api/v1/jobs", summary="List jobs")
    def list_jobs(phase: str | None = None) -> Response:
        if phase is not None and phase not in {p.value for p in JobPhase}:
            return _error(422, f"unknown phase {phase!r}; known: {', '.join(p.value for p in JobPhase)}")
        jobs = [_brief(j) for j in backend.view()["jobs"].values() if phase is None or j["phase"] == phase]
        jobs.sort(key=lambda j: j["submitted_at"])
        return JSONResponse({"jobs": jobs})

    @app.get("/api/v1/jobs/{job_id}", summary="One job")
    def get_job(job_id: str) -> Response:
        job = backend.view()["jobs"].get(job_id)
        if job is None:
            return _error(404, f"no job {job_id!r}")
        return JSONResponse(job)

    @app.delete("/api/v1/jobs/{job_id}", summary="Cancel a job")
    def cancel_job(job_id: str, request: Request) -> Response:
        if not authorized(request):
            return _error(401, "a bearer token is required for writes")
        try:  # the loop decides whether the job exists (the snapshot may lag a fresh submission)
            return JSONResponse(backend.cancel(job_id))
        except KeyError:
            return _error(404, f"no job {job_id!r}")
        except NotLeader:
            return not_leader(request) or _error(503, "leadership changed; retry")
        except TimeoutError:
            return _error(503, "the scheduler did not answer in time; retry")

    @app.get("/api/v1/cluster", summary="Agents, allocations, current slot, policy")
    def cluster() -> Response:
        return JSONResponse(backend.view()["cluster"])

    @app.get("/api/v1/policy", summary="Policy, model version and recent rewards")
    def policy() -> Response:
        return JSONResponse(backend.view()["policy"])

    @app.get("/api/v1/history", summary="Recent slots (allocations, utilisation, decisions) and rescale reports")
    def history() -> Response:
        return JSONResponse(backend.view().get("history") or {"slots": [], "rescales": []})

    @app.get("/health", summary="Liveness and role")
    def health() -> Response:
        return JSONResponse(backend.health())

    @app.get("/metrics", summary="Prometheus metrics")
    def metrics() -> Response:
        return Response(backend.metrics(), media_type="text/plain; version=0.0.4")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def status_page() -> Response:
        return HTMLResponse(_render_status(backend))

    return app


def _brief(job: dict[str, Any]) -> dict[str, Any]:
    return {k: job[k] for k in ("id", "name", "job_type", "phase", "epochs", "epochs_done", "progress",
                                "num_ps", "num_workers", "rescales", "submitted_at")}


def _render_status(backend: Backend) -> str:
    """The server-rendered status page (Mesos' webui_url points here); see :mod:`.status_page`."""
    if not backend.is_leader():
        return render_standby_page(backend.leader_url())
    return render_status_page(backend.view(), backend.health())
