"""Request checks shared by the scheduler and executor endpoints (Mesos's ``Master::Http::scheduler``
and ``Slave::Http::executor`` preambles): POST only, JSON bodies, reasons as text/plain."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse

from .protocol import CallError


def error_response(exc: CallError) -> PlainTextResponse:
    return PlainTextResponse(exc.reason, status_code=exc.status)


async def read_json_call(request: Request) -> Any:
    """Content-Type checks and JSON decoding, raising CallError with Mesos's status and reason."""
    ctype = request.headers.get("content-type")
    if not ctype:
        raise CallError(400, "Expecting 'Content-Type' to be present")
    media = ctype.split(";")[0].strip().lower()
    if media == "application/x-protobuf":
        raise CallError(
            415,
            "Content-Type application/x-protobuf is not supported by this local Mesos "
            "stand-in; use application/json",
        )
    if media != "application/json":
        raise CallError(415, "Expecting 'Content-Type' of application/json or application/x-protobuf")
    body = await request.body()
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CallError(400, f"Failed to parse body into JSON: {exc}") from None


def check_accept(request: Request) -> None:
    """Streaming responses are JSON RecordIO: the client must accept application/json."""
    accept = request.headers.get("accept", "application/json")
    media = {a.split(";")[0].strip().lower() for a in accept.split(",")}
    if not media & {"application/json", "*/*", "application/*", "application/recordio"}:
        raise CallError(406, "Expecting 'Accept' to allow application/json")
