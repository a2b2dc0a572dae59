"""``/docs`` that renders offline, and an OpenAPI document with typed answers and the bearer scheme.

FastAPI's default ``/docs`` page loads Swagger UI from a CDN, so on a cluster without internet it
stays blank. Here the Swagger UI 5 assets that the ``fastapi-offline`` package ships are served
from ``/docs-assets/`` and the page points at them. The OpenAPI document declares the HTTP bearer
scheme (every ``/api/v1`` operation takes it; reads also accept the token as a Basic password) and
JSON Schemas of what the endpoints answer (they build their responses by hand, so FastAPI cannot
infer them).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

logger = logging.getLogger(__name__)

ASSETS_PATH = "/docs-assets"

_NUMBER = {"type": "number"}
_RESOURCES = {"type": "object", "properties": {"cpus": _NUMBER, "gpus": _NUMBER, "mem": _NUMBER}}
_TASK = {
    "type": "object",
    "properties": {
        "task_id": {"type": "string"},
        "role": {"type": "string", "enum": ["ps", "worker"]},
        "rank": {"type": "integer"},
        "agent_id": {"type": "string"},
        "hostname": {"type": "string"},
        "ports": {"type": "array", "items": {"type": "integer"}},
        "state": {"type": "string"},
        "killing": {"type": "boolean"},
    },
}
_PHASE = {"type": "string", "enum": ["pending", "running", "rescaling", "finished", "failed", "cancelled"]}
SCHEMAS: dict[str, dict[str, Any]] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "string"}},
        "additionalProperties": True,
    },
    "JobBrief": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "name": {"type": "string"},
            "job_type": {"type": "string"},
            "phase": _PHASE,
            "epochs": _NUMBER,
            "epochs_done": _NUMBER,
            "progress": {"type": "number", "minimum": 0, "maximum": 1},
            "num_ps": {"type": "integer"},
            "num_workers": {"type": "integer"},
            "rescales": {"type": "integer"},
            "submitted_at": {"type": "number", "description": "Unix time"},
            "phase_times": {
                "type": "object",
                "additionalProperties": _NUMBER,
                "description": "phase -> Unix time it was last entered",
            },
            "started_at": {"type": ["number", "null"], "description": "Unix time it first ran"},
            "finished_at": {"type": ["number", "null"], "description": "Unix time it ended"},
            "queue_wait_seconds": {"type": ["number", "null"], "description": "submission to first run"},
            "jct_seconds": {"type": ["number", "null"], "description": "submission to end"},
            "pending_reason": {
                "type": ["object", "null"],
                "description": "why a pending job waits (null unless pending)",
                "properties": {"code": {"type": "string"}, "short": {"type": "string"},
                               "message": {"type": "string"}},
            },
        },
    },
    "Job": {
        "allOf": [
            {"$ref": "#/components/schemas/JobBrief"},
            {
                "type": "object",
                "properties": {
                    "generation": {"type": "integer"},
                    "restart_count": {"type": "integer"},
                    "measured_epochs_per_second": {"type": ["number", "null"]},
                    "message": {"type": "string"},
                    "checkpoint_uri": {"type": ["string", "null"]},
                    "tasks": {"type": "array", "items": _TASK},
                    "spec": {"type": "object", "additionalProperties": True},
                },
            },
        ]
    },
    "JobList": {
        "type": "object",
        "required": ["jobs"],
        "properties": {
            "jobs": {"type": "array", "items": {"$ref": "#/components/schemas/JobBrief"}},
            "next_cursor": {"type": ["string", "null"]},
        },
    },
    "Cluster": {
        "type": "object",
        "additionalProperties": True,
        "properties": {
            "framework_id": {"type": ["string", "null"]},
            "registered": {"type": "boolean"},
            "agents": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "agent_id": {"type": "string"},
                        "hostname": {"type": "string"},
                        "total": _RESOURCES,
                        "free": _RESOURCES,
                    },
                    "additionalProperties": True,
                },
            },
        },
    },
    "Policy": {
        "type": "object",
        "additionalProperties": True,
        "properties": {"policy": {"type": "string"}, "recent_rewards": {"type": "array", "items": _NUMBER}},
    },
    "History": {"type": "object", "additionalProperties": True},
    "Health": {
        "type": "object",
        "properties": {
            "status": {"type": "string"},
            "role": {"type": "string", "enum": ["leader", "standby"]},
            "url": {"type": "string"},
            "leader": {"type": ["string", "null"]},
            "registered": {"type": "boolean"},
            "framework_id": {"type": ["string", "null"]},
        },
    },
}
# (path, method) -> (success status, schema name)
ANSWERS: dict[tuple[str, str], tuple[str, str]] = {
    ("/api/v1/jobs", "post"): ("201", "Job"),
    ("/api/v1/jobs", "get"): ("200", "JobList"),
    ("/api/v1/jobs/{job_id}", "get"): ("200", "Job"),
    ("/api/v1/jobs/{job_id}", "delete"): ("200", "Job"),
    ("/api/v1/cluster", "get"): ("200", "Cluster"),
    ("/api/v1/policy", "get"): ("200", "Policy"),
    ("/api/v1/history", "get"): ("200", "History"),
    ("/health", "get"): ("200", "Health"),
}
ERRORS = {
    "401": "a token is required",
    "404": "no such job",
    "409": "the job already ended",
    "503": "not the leader and no leader known, or the scheduler did not answer in time",
}


def swagger_assets() -> Path:
    """The folder of Swagger UI's JavaScript and CSS inside the ``fastapi-offline`` package."""
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


def _ref(name: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}


def described_openapi(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document with the bearer scheme and typed answers (built once)."""
    if app.openapi_schema:
        return app.openapi_schema
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = doc.setdefault("components", {})
    components.setdefault("schemas", {}).update(SCHEMAS)
    components["securitySchemes"] = {
        "bearerAuth": {
            "type": "http",
            "scheme": "bearer",
            "description": "The API token (reads may also use a read-only token).",
        }
    }
    for path, ops in doc.get("paths", {}).items():
        for method, op in ops.items():
            responses = op.setdefault("responses", {})
            answer = ANSWERS.get((path, method))
            if answer is not None:
                status, name = answer
                responses.setdefault(status, {"description": "OK"})["content"] = _ref(name)
                responses.pop("200" if status != "200" else "", None)
            if path.startswith("/api/v1/"):
                op["security"] = [{"bearerAuth": []}]
                for code, text in ERRORS.items():
                    if code == "409" and method != "delete":
                        continue
                    entry = responses.setdefault(code, {"description": text})
                    entry["content"] = _ref("Error")
    app.openapi_schema = doc
    return doc


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs`` from local assets and describe the API fully (call on an app built with
    ``docs_url=None, redoc_url=None``). Without the assets package the API still runs and ``/docs``
    says what to install (``/openapi.json`` is served either way)."""
    app.openapi = lambda: described_openapi(app)  # type: ignore[method-assign]
    try:
        assets = swagger_assets()
    except ImportError:
        logger.warning("fastapi-offline is not installed: /docs cannot render (pip install fastapi-offline)")
        assets = None
    if assets is not None:
        app.mount(ASSETS_PATH, StaticFiles(directory=assets), name="docs-assets")

    async def docs(request: Request) -> HTMLResponse:
        if assets is None:
            return HTMLResponse(
                "<p>The API documentation needs the Swagger UI assets of the <code>fastapi-offline</code> "
                "package: <code>pip install fastapi-offline</code>. The OpenAPI document is at "
                "<a href='/openapi.json'>/openapi.json</a>.</p>",
                status_code=503,
            )
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title}: API",
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": True},
        )

    app.add_route("/docs", docs, methods=["GET"], include_in_schema=False)
