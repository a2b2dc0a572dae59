"""``POST /api/v1/scheduler``: the v1 Scheduler HTTP API endpoint of the local master.

Status codes follow the "Scheduler HTTP API" document and Mesos's ``Master::Http::scheduler``:
SUBSCRIBE answers 200 with a chunked RecordIO stream and a ``Mesos-Stream-Id`` header; every
other call answers 202 Accepted; malformed calls 400 with the reason; calls for a framework that
is known but not subscribed 403; unknown framework or wrong/missing stream id 400.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response

from .http_common import check_accept, error_response, read_json_call
from .master import Master
from .protocol import CallError, parse_scheduler_call
from .recordio import RecordIOResponse

logger = logging.getLogger(__name__)


def make_scheduler_endpoint(get_master: Callable[[], Master | None]):
    """The endpoint bound to whatever master instance is current (it changes on restarts)."""

    async def scheduler_endpoint(request: Request) -> Response:
        master = get_master()
        if master is None or not master.running:
            return Response("Master is not running", status_code=503)
        try:
            body = await read_json_call(request)
            call = parse_scheduler_call(body)
            if call.type == "SUBSCRIBE":
                check_accept(request)
                if "mesos-stream-id" in request.headers:
                    raise CallError(400, "Subscribe calls should not include the 'Mesos-Stream-Id' header")
                stream = master.subscribe(call, body["subscribe"]["framework_info"])
                return RecordIOResponse(stream, headers={"Mesos-Stream-Id": stream.id})
            fid = call.framework_id.value  # type: ignore[union-attr]
            fw = master.frameworks.get(fid)
            if fw is None:
                raise CallError(400, "Framework cannot be found")
            if not fw.connected:
                raise CallError(403, "Framework is not subscribed")
            stream_id = request.headers.get("mesos-stream-id")
            if stream_id is None:
                raise CallError(400, "All non-subscribe calls should include the 'Mesos-Stream-Id' header")
            if stream_id != fw.stream.id:  # type: ignore[union-attr]
                raise CallError(
                    400,
                    f"The stream ID '{stream_id}' included in this request didn't match the "
                    f"stream ID currently associated with framework ID {fid}",
                )
            master.handle(fw, call, body)
            return Response(status_code=202)
        except CallError as exc:
            logger.info("scheduler call refused (%d): %s", exc.status, exc.reason)
            return error_response(exc)

    return scheduler_endpoint
