"""The HTTP job API (FastAPI app factory).

Handlers only validate input and either hand a command to the loop thread (through the
:class:`Backend`) or read the loop's published snapshot; they never touch scheduler state.
On a standby replica every ``/api/v1`` call is redirected (307) to the leader, or answered
503 naming it.

Access (see the README's Security section):

* writes need ``Authorization: Bearer <api token>`` when a token is configured, and a JSON body
  (``Content-Type: application/json``; anything else is 415), so a web page cannot submit a job
  with a cross-site ``text/plain`` form post;
* reads (``/api/v1/*`` and the status page) need the api token or the read token as a bearer
  token, or as the password of HTTP Basic credentials (what a browser prompts for), unless
  ``open_reads`` is set; ``/health`` and ``/metrics`` stay open (no job data);
* secret-looking values in a job's ``command`` and ``extra`` are shown as ``***``; the holder of
  the api (write) token sees them with ``GET /api/v1/jobs/{id}?full=true``;
* a submission with an ``Idempotency-Key`` header is stored at most once: the same key with the
  same spec answers the job stored first, with another spec 409.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
import math
import re
from typing import Any, Protocol

from starlette.concurrency import run_in_threadpool
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from dl2_mesos.errors import Dl2Error, InvalidJobSpec
from dl2_mesos.framework.api_docs import install_docs
from dl2_mesos.framework.cluster_capacity import submission_refusal
from dl2_mesos.jobs import MAX_EXTRA_DEPTH, NAME_PATTERN, JobPhase, JobSpec
from dl2_mesos.job_types import job_type_names
from dl2_mesos.framework.records import IdempotencyConflict
from dl2_mesos.framework.redaction import redact_job
from dl2_mesos.framework.job_page import LOG_STREAMS, render_job_page, render_missing_job
from dl2_mesos.framework.sandbox_logs import LogsError, tail
from dl2_mesos.framework.status_page import render_standby_page, render_status_page

logger = logging.getLogger(__name__)


class NotLeader(Exception):
    """This replica does not lead (any more)."""


class Backend(Protocol):
    """What the API needs from the running framework."""

    def view(self) -> dict[str, Any]: ...
    def is_leader(self) -> bool: ...
    def leader_url(self) -> str | None: ...
    def submit(self, spec: JobSpec, idempotency_key: str = "") -> dict[str, Any]: ...
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
        "name": {"type": "string", "pattern": "^" + NAME_PATTERN + "\\Z"},
        "worker": _RES_SCHEMA, "ps": _RES_SCHEMA,
        "min_ps": {"type": "integer", "minimum": 0}, "max_ps": {"type": "integer", "minimum": 0},
        "min_workers": {"type": "integer", "minimum": 1}, "max_workers": {"type": "integer", "minimum": 1},
        "runtime": {"type": "string", "enum": ["mxnet", "pytorch"]},
        "command": {"type": "array", "items": {"type": "string"}},
        "priority": {"type": "integer", "minimum": -10**6, "maximum": 10**6},
        "restart_seconds": {"type": "number", "minimum": 0},
        "extra": {"type": "object"},
    },
}


#: The deepest nesting a request body may have (the job spec plus ``extra``'s own bound).
MAX_BODY_DEPTH = MAX_EXTRA_DEPTH + 2
MAX_PAGE = 1000
DEFAULT_PAGE = 500
_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,128}")


class SafeJSONResponse(JSONResponse):
    """JSON with every non-ASCII character escaped: a stored string that is not valid Unicode (an
    old record with a lone surrogate) still renders, so no GET of a stored job can answer 500."""

    def render(self, content: Any) -> bytes:
        try:
            text = json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
        except ValueError:  # a NaN or infinity somewhere (e.g. a measured speed): shown as null
            text = json.dumps(_finite(content), ensure_ascii=True, allow_nan=False, separators=(",", ":"))
        return text.encode("ascii")


def _finite(value: Any) -> Any:
    """A copy of JSON data with non-finite floats replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return SafeJSONResponse({"error": message, **extra}, status_code=status)


class BadJSON(ValueError):
    """The request body is not acceptable JSON (the message says why)."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise BadJSON(f"duplicate key {k[:40]!r}")
        out[k] = v
    return out


def _no_constants(name: str) -> Any:
    raise BadJSON(f"{name} is not a JSON number")


def parse_json_body(body: bytes) -> Any:
    """Strict JSON: UTF-8, no duplicate keys, no NaN/Infinity, nested at most ``MAX_BODY_DEPTH``.

    Raises:
        BadJSON: with a message for the 400 answer.
    """
    try:
        text = body.decode("utf-8")
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants)
    except BadJSON:
        raise
    except RecursionError:
        raise BadJSON(f"nested deeper than {MAX_BODY_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadJSON(str(exc)[:200]) from None
    if _depth_over(data, MAX_BODY_DEPTH):  # the values themselves are checked by JobSpec (422)
        raise BadJSON(f"nested deeper than {MAX_BODY_DEPTH} levels")
    return data


def _depth_over(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth > limit:
                return True
            stack.extend((item, depth + 1) for item in (v.values() if isinstance(v, dict) else v))
    return False


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _page_params(limit: str | None, cursor: str | None) -> tuple[int, tuple[float, str] | None] | str:
    """(limit, position after which to list) or an error message."""
    n = DEFAULT_PAGE
    if limit is not None:
        if not re.fullmatch(r"[0-9]{1,4}", limit) or not 1 <= int(limit) <= MAX_PAGE:
            return f"limit must be an integer between 1 and {MAX_PAGE}"
        n = int(limit)
    if not cursor:
        return n, None
    try:
        at, job_id = json.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
        if not isinstance(at, (int, float)) or isinstance(at, bool) or not isinstance(job_id, str):
            raise ValueError(cursor)
    except (ValueError, TypeError, UnicodeEncodeError, binascii.Error):
        return "cursor is not one this API handed out (use next_cursor of the previous page)"
    return n, (float(at), job_id)


def _cursor(job: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps([job["submitted_at"], job["id"]]).encode()).decode("ascii")


def create_app(backend: Backend, *, api_token: str = "", read_token: str = "", open_reads: bool = False,
               max_body_bytes: int = 64 * 1024, title: str = "dl2 framework") -> FastAPI:
    """Build the app.

    Args:
        backend: the framework (or a test double).
        api_token: bearer token required for writes ("" = none).
        read_token: another token that allows reads only ("" = none).
        open_reads: serve reads without a token even when one is configured.
        max_body_bytes: larger request bodies get 413.
    """
    app = FastAPI(title=title, version="1", description="Submit and watch elastic training jobs scheduled by DL2.",
                  default_response_class=SafeJSONResponse, docs_url=None, redoc_url=None)
    install_docs(app)  # /docs from local Swagger UI assets; typed answers and the bearer scheme

    def _token_of(request: Request, *, basic: bool) -> bytes | None:
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            return value.strip().encode()
        if basic and scheme.lower() == "basic":  # a browser's prompt: any user name, the token as password
            try:
                return base64.b64decode(value.strip(), validate=True).partition(b":")[2]
            except (binascii.Error, ValueError):
                return None
        return None

    def _matches(token: bytes | None, *accepted: str) -> bool:
        found = False
        for want in accepted:  # compare with every configured token (constant time each)
            if want and token is not None and hmac.compare_digest(token, want.encode()):
                found = True
        return found

    def authorized(request: Request) -> bool:
        """May write (and see unredacted jobs)."""
        return not api_token or _matches(_token_of(request, basic=False), api_token)

    def may_read(request: Request) -> bool:
        if open_reads or not (api_token or read_token):
            return True
        return _matches(_token_of(request, basic=True), api_token, read_token)

    def read_refused() -> Response:
        r = _error(401, "a token is required to read (bearer token, or the token as the Basic password)")
        r.headers["WWW-Authenticate"] = 'Basic realm="dl2", charset="UTF-8"'
        return r

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

    def not_json(request: Request, *, body_expected: bool) -> Response | None:
        content_type = request.headers.get("content-type")
        if content_type is None and not body_expected:
            return None
        if content_type is None or not _is_json(content_type):
            return _error(415, "write requests take a JSON body: send Content-Type: application/json")
        return None

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
        "parameters": [{"name": "Idempotency-Key", "in": "header", "required": False,
                        "schema": {"type": "string", "pattern": "^[\\x21-\\x7e]{1,128}\\Z"},
                        "description": "Retry-safe submission: a repeated key answers the job stored first."}],
        "responses": {"400": {"description": "malformed JSON"}, "401": {"description": "token required"},
                      "409": {"description": "Idempotency-Key reused with another spec"},
                      "413": {"description": "body too large"}, "415": {"description": "not JSON"},
                      "422": {"description": "invalid job spec, or one task of it fits no known agent"}},
    })
    async def submit_job(request: Request) -> Response:
        if not authorized(request):
            return _error(401, "a bearer token is required for writes", )
        body = await read_body(request)
        if isinstance(body, Response):
            return body
        refused = not_json(request, body_expected=True)
        if refused is not None:
            return refused
        key = request.headers.get("idempotency-key", "")
        if "idempotency-key" in request.headers and not _IDEMPOTENCY_KEY.fullmatch(key):
            return _error(400, "Idempotency-Key must be 1-128 printable ASCII characters without spaces")
        try:
            data = parse_json_body(body)
        except BadJSON as exc:
            return _error(400, f"malformed JSON: {exc}")
        # everything is validated here, before the loop stores anything: a stored job never
        # answers 500 afterwards (bounded numbers, valid Unicode, bounded nesting)
        try:
            spec = JobSpec.from_dict(data)
        except InvalidJobSpec as exc:
            return _error(422, str(exc), field=exc.field, rule=exc.rule)
        except (TypeError, ValueError, OverflowError) as exc:
            return _error(422, f"invalid job spec: {str(exc)[:200]}")
        refusal = submission_refusal(spec, backend.view().get("cluster") or {})
        if refusal is not None:  # no known agent could ever run one of its tasks
            return _error(422, refusal.pop("error"), **refusal)
        try:
            # submit blocks until the loop thread has taken the job: keep it off the event loop,
            # or one slow submission would stall every request (health checks included)
            args = (spec, key) if key else (spec,)  # backends without idempotency keep working
            job = await run_in_threadpool(backend.submit, *args)
        except IdempotencyConflict as exc:
            return _error(409, str(exc), job_id=exc.job_id)
        except NotLeader:
            return not_leader(request) or _error(503, "leadership changed; retry")
        except TimeoutError:
            return _error(503, "the scheduler did not accept the job in time; retry")
        except Dl2Error as exc:
            return _error(503, f"the scheduler could not store the job: {exc}")
        return SafeJSONResponse(redact_job(job), status_code=201,
                                headers={"Location": f"/api/v1/jobs/{job['id']}"})

    @app.get("/api/v1/jobs", summary="List jobs, oldest first, a page at a time")
    def list_jobs(request: Request, phase: str | None = None, limit: str | None = None,
                  cursor: str | None = None) -> Response:
        """``limit`` jobs (default 500, at most 1000) in submission order; ``next_cursor`` (null on
        the last page) goes in ``cursor`` to get the next page. The order is stable: jobs are
        sorted by (submitted_at, id), and a cursor names the last job shown."""
        if not may_read(request):
            return read_refused()
        if phase is not None and phase not in {p.value for p in JobPhase}:
            return _error(422, f"unknown phase {phase[:40]!r}; known: {', '.join(p.value for p in JobPhase)}")
        page = _page_params(limit, cursor)
        if isinstance(page, str):
            return _error(422, page)
        n, after = page
        jobs = [_brief(j) for j in backend.view()["jobs"].values() if phase is None or j["phase"] == phase]
        jobs.sort(key=lambda j: (j["submitted_at"], j["id"]))
        if after is not None:
            jobs = [j for j in jobs if (j["submitted_at"], j["id"]) > after]
        shown = jobs[:n]
        more = len(jobs) > n
        return SafeJSONResponse({"jobs": shown, "next_cursor": _cursor(shown[-1]) if more else None})

    @app.get("/api/v1/jobs/{job_id}", summary="One job (secrets redacted; ?full=true with the api token)")
    def get_job(job_id: str, request: Request, full: bool = False) -> Response:
        if not may_read(request):
            return read_refused()
        job = backend.view()["jobs"].get(job_id)
        if job is None:
            return _error(404, f"no job {job_id[:80]!r}")
        if full:
            if not (api_token and authorized(request)):
                return _error(403, "full=true needs the api (write) token")
            return SafeJSONResponse(job)
        return SafeJSONResponse(redact_job(job))

    @app.delete("/api/v1/jobs/{job_id}", summary="Cancel a job")
    def cancel_job(job_id: str, request: Request) -> Response:
        if not authorized(request):
            return _error(401, "a bearer token is required for writes")
        refused = not_json(request, body_expected=False)
        if refused is not None:
            return refused
        seen = backend.view()["jobs"].get(job_id)  # an ended job stays ended: the snapshot suffices
        if seen is not None and JobPhase(seen["phase"]).terminal:
            return _error(409, f"job {job_id} already {seen['phase']}: nothing to cancel", phase=seen["phase"])
        try:  # the loop decides whether the job exists (the snapshot may lag a fresh submission)
            return SafeJSONResponse(redact_job(backend.cancel(job_id)))
        except KeyError:
            return _error(404, f"no job {job_id!r}")
        except NotLeader:
            return not_leader(request) or _error(503, "leadership changed; retry")
        except TimeoutError:
            return _error(503, "the scheduler did not answer in time; retry")

    @app.get("/api/v1/cluster", summary="Agents, allocations, current slot, policy")
    def cluster(request: Request) -> Response:
        if not may_read(request):
            return read_refused()
        return SafeJSONResponse(backend.view()["cluster"])

    @app.get("/api/v1/policy", summary="Policy, model version and recent rewards")
    def policy(request: Request) -> Response:
        if not may_read(request):
            return read_refused()
        return SafeJSONResponse(backend.view()["policy"])

    @app.get("/api/v1/history", summary="Recent slots (allocations, utilisation, decisions) and rescale reports")
    def history(request: Request) -> Response:
        if not may_read(request):
            return read_refused()
        return SafeJSONResponse(backend.view().get("history") or {"slots": [], "rescales": []})

    @app.get("/health", summary="Liveness and role")
    def health() -> Response:
        return SafeJSONResponse(backend.health())

    @app.get("/metrics", summary="Prometheus metrics")
    def metrics() -> Response:
        return Response(backend.metrics(), media_type="text/plain; version=0.0.4")

    @app.get("/jobs/{job_id}", response_class=HTMLResponse, include_in_schema=False)
    def job_page(job_id: str, request: Request) -> Response:
        """One job's page: times, why it waits, tasks with log links, progress, rescales."""
        if not may_read(request):
            return read_refused()
        if not backend.is_leader():
            return HTMLResponse(render_standby_page(backend.leader_url()))
        view = backend.view()
        job = view["jobs"].get(job_id)
        if job is None:
            return HTMLResponse(render_missing_job(job_id), status_code=404)
        return HTMLResponse(render_job_page(redact_job(job), view))

    @app.get("/jobs/{job_id}/tasks/{task_id}/{stream}", include_in_schema=False)
    def task_log(job_id: str, task_id: str, stream: str, request: Request) -> Response:
        """The end of a task's stdout or stderr, read from its Mesos sandbox (the agent's files API)."""
        if not may_read(request):
            return read_refused()
        if stream not in LOG_STREAMS:
            return _error(404, f"no log {stream[:20]!r}; logs: {', '.join(LOG_STREAMS)}")
        view = backend.view()
        if job_id not in view["jobs"] or not task_id.startswith(job_id + "."):
            return _error(404, f"no task {task_id[:120]!r} of job {job_id[:80]!r}")
        cluster = view.get("cluster") or {}
        master = (cluster.get("capacity") or {}).get("master")
        if not master:
            return _error(503, "the Mesos master's HTTP address is not known yet; use `dl2 logs`")
        try:
            task, data, size = tail(master, cluster.get("framework_id"), job_id, task_id, stream)
        except LogsError as exc:
            return _error(502, str(exc))
        head = f"==> {task.task_id} {stream} ({task.state}; last {len(data)} of {size} bytes)\n".encode()
        return Response(head + data, media_type="text/plain; charset=utf-8",
                        headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"})

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def status_page(request: Request) -> Response:
        if not may_read(request):
            return read_refused()
        return HTMLResponse(_render_status(backend))

    return app


def _brief(job: dict[str, Any]) -> dict[str, Any]:
    out = {k: job[k] for k in ("id", "name", "job_type", "phase", "epochs", "epochs_done", "progress",
                               "num_ps", "num_workers", "rescales", "submitted_at", "phase_times")}
    for k in ("started_at", "finished_at", "queue_wait_seconds", "jct_seconds", "pending_reason"):
        out[k] = job.get(k)  # from the loop's view (a test double's jobs may lack them)
    return out


def _render_status(backend: Backend) -> str:
    """The server-rendered status page (Mesos' webui_url points here); see :mod:`.status_page`."""
    if not backend.is_leader():
        return render_standby_page(backend.leader_url())
    return render_status_page(backend.view(), backend.health())
