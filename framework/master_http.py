"""Scheduler calls to the Mesos master over persistent HTTP connections, several at once.

pymesos's ``MesosSchedulerDriver`` makes every call on ONE ``HTTPConnection`` under its process
lock, so calls from several threads still go one round trip at a time (and the lock is the one
its event thread takes too). :class:`MasterHttp` builds the same v1 Scheduler API ``Call`` bodies
("Scheduler HTTP API": ACCEPT, DECLINE, ACKNOWLEDGE, KILL, RECONCILE, MESSAGE, REVIVE, SUPPRESS)
and POSTs them to ``/api/v1/scheduler`` on a keep-alive connection per calling thread, with the
``Mesos-Stream-Id`` of the driver's current subscription. The subscription itself (SUBSCRIBE and
the event stream) stays with pymesos; the driver is only read for its master, stream id,
framework id and credential, so a re-subscription or a new leading master is followed at once.

As pymesos, a call made while the driver is not subscribed is not sent; unlike pymesos it raises
:class:`NotSubscribed` so that the caller can count it.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
from typing import Any

logger = logging.getLogger(__name__)


class NotSubscribed(RuntimeError):
    """The driver has no subscription with a master right now (no stream id)."""


class MasterCallFailed(RuntimeError):
    """The master answered a call with a status other than 2xx."""

    def __init__(self, status: int, body: bytes, call_type: str) -> None:
        super().__init__(f"{call_type} refused by the master: {status} {body[:300]!r}")
        self.status = status


def _ids(ids: Any) -> list[Any]:
    return [ids] if isinstance(ids, dict) else list(ids)


def call_body(name: str, framework_id: str, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The v1 ``Call`` for the driver method ``name(*args, **kwargs)``; None when nothing is sent.

    Mirrors pymesos's driver methods: launchTasks/acceptOffers without tasks/operations become a
    DECLINE, an acknowledgement of a status without ``uuid`` is not sent.

    Raises:
        ValueError: ``name`` is not a call this module knows.
    """
    def arg(i: int, key: str, default: Any = None) -> Any:
        return args[i] if len(args) > i else kwargs.get(key, default)

    fid = {"value": framework_id}
    if name in ("launchTasks", "acceptOffers"):
        offer_ids, filters = arg(0, "offer_ids"), arg(2, "filters")
        if name == "launchTasks":
            tasks = arg(1, "tasks")
            ops = [{"type": "LAUNCH", "launch": {"task_infos": tasks}}] if tasks else []
        else:
            ops = arg(1, "operations") or []
        if not ops:
            return call_body("declineOffer", framework_id, (offer_ids, filters), {})
        accept: dict[str, Any] = {"offer_ids": _ids(offer_ids), "operations": ops}
        if filters is not None:
            accept["filters"] = filters
        return {"type": "ACCEPT", "framework_id": fid, "accept": accept}
    if name == "declineOffer":
        decline: dict[str, Any] = {"offer_ids": _ids(arg(0, "offer_ids"))}
        if arg(1, "filters") is not None:
            decline["filters"] = arg(1, "filters")
        return {"type": "DECLINE", "framework_id": fid, "decline": decline}
    if name == "acknowledgeStatusUpdate":
        status = arg(0, "status")
        if "uuid" not in status:
            return None
        ack = {"agent_id": status["agent_id"], "task_id": status["task_id"], "uuid": status["uuid"]}
        return {"type": "ACKNOWLEDGE", "framework_id": fid, "acknowledge": ack}
    if name == "killTask":
        return {"type": "KILL", "framework_id": fid, "kill": {"task_id": arg(0, "task_id")}}
    if name == "reconcileTasks":
        tasks = [{"task_id": t["task_id"]} for t in arg(0, "tasks")]
        return {"type": "RECONCILE", "framework_id": fid, "reconcile": {"tasks": tasks}}
    if name == "sendFrameworkMessage":
        message = {"agent_id": arg(1, "agent_id"), "executor_id": arg(0, "executor_id"), "data": arg(2, "data")}
        return {"type": "MESSAGE", "framework_id": fid, "message": message}
    if name in ("reviveOffers", "suppressOffers"):
        kind = "REVIVE" if name == "reviveOffers" else "SUPPRESS"
        body: dict[str, Any] = {"type": kind, "framework_id": fid}
        roles = arg(0, "roles", ())
        if roles:
            body[kind.lower()] = {"roles": list(roles)}
        return body
    raise ValueError(f"unknown scheduler call {name!r}")


class MasterHttp:
    """Makes the driver's scheduler calls itself: one keep-alive connection per calling thread.

    Args:
        driver: a subscribed pymesos ``MesosSchedulerDriver`` (read: ``master``, ``stream_id``,
            ``framework_id`` and the Basic credential pymesos built from principal/secret).
        timeout: socket timeout of one call, seconds (pymesos uses 10).
    """

    def __init__(self, driver: Any, timeout: float = 10.0) -> None:
        self.driver = driver
        self.timeout = timeout
        self._local = threading.local()
        self._all: set[http.client.HTTPConnection] = set()
        self._lock = threading.Lock()

    def _conn(self, master: str) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection to ``master`` and whether it was used before."""
        have = getattr(self._local, "conn", None)
        if have is not None and have[0] == master:
            return have[1], True
        self._drop_conn()  # the leading master changed
        host, _, port = master.rpartition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=self.timeout)
        self._local.conn = (master, conn)
        with self._lock:
            self._all.add(conn)
        return conn, False

    def _drop_conn(self) -> None:
        have = getattr(self._local, "conn", None)
        if have is not None:
            have[1].close()
            self._local.conn = None
            with self._lock:
                self._all.discard(have[1])

    def call(self, name: str, args: tuple = (), kwargs: dict[str, Any] | None = None) -> bool:
        """Make one call; False when there was nothing to send (e.g. an ack without uuid).

        Raises:
            NotSubscribed: no subscription (no master or stream id) right now.
            MasterCallFailed: the master answered with a non-2xx status.
            OSError / http.client.HTTPException: the connection failed (after one retry on a
                fresh connection when a reused one turned out to be closed by the master).
        """
        d = self.driver
        master, stream_id, framework_id = d.master, d.stream_id, d.framework_id
        if not master or not stream_id or not framework_id:
            raise NotSubscribed(f"{name}: not subscribed with a master")
        body = call_body(name, framework_id, args, kwargs or {})
        if body is None:
            return False
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Mesos-Stream-Id": stream_id}
        credential = getattr(d, "_basic_credential", None)  # pymesos: "Basic ..." from principal/secret
        if credential:
            headers["Authorization"] = credential
        for attempt in (0, 1):
            conn, reused = self._conn(master)
            try:
                conn.request("POST", "/api/v1/scheduler", body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # a keep-alive connection the master closed while idle: once more on a new one
                self._drop_conn()
                if reused and attempt == 0:
                    continue
                raise
            except BaseException:
                self._drop_conn()
                raise
            if resp.will_close:
                self._drop_conn()
            if not 200 <= resp.status < 300:
                raise MasterCallFailed(resp.status, payload, body["type"])
            return True
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close every connection this client opened (from any thread)."""
        with self._lock:
            conns, self._all = self._all, set()
        for c in conns:
            c.close()
