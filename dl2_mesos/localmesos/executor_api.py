"""``POST /api/v1/executor``: the v1 Executor HTTP API endpoint of a local agent.

Follows the "Executor HTTP API" document and Mesos's ``Slave::Http::executor``: SUBSCRIBE answers
200 with a chunked RecordIO stream; UPDATE and MESSAGE answer 202; malformed calls 400; unknown
framework/executor 400; calls from an executor that has not subscribed 403.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response

from .agent import Agent
from .http_common import check_accept, error_response, read_json_call
from .protocol import CallError, parse_executor_call
from .recordio import RecordIOResponse

logger = logging.getLogger(__name__)


def make_executor_endpoint(agent: Agent):
    async def executor_endpoint(request: Request) -> Response:
        if agent.removed:
            return Response("Agent is shutting down", status_code=503)
        try:
            body = await read_json_call(request)
            call = parse_executor_call(body)
            fw, ex = agent.find_executor(call.framework_id.value, call.executor_id.value)
            if fw is None:
                raise CallError(400, "Framework cannot be found")
            if ex is None or ex.command_task:
                raise CallError(400, "Executor cannot be found")
            if call.type == "SUBSCRIBE":
                check_accept(request)
                return RecordIOResponse(agent.executor_subscribe(ex, call))
            if ex.state == "REGISTERING" or ex.stream is None and ex.state != "RUNNING":
                raise CallError(403, "Executor is not subscribed")
            if call.type == "UPDATE":
                agent.executor_update(ex, body["update"]["status"])
            elif call.type == "MESSAGE":
                agent.executor_message(ex, call.message.data)  # type: ignore[union-attr]
            return Response(status_code=202)
        except CallError as exc:
            logger.info("executor call refused (%d): %s", exc.status, exc.reason)
            return error_response(exc)

    return executor_endpoint
