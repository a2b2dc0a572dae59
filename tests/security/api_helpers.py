"""A job API over a real SchedulerCore on fakes (the test thread plays the loop thread), shared by
the API attack tests."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from dl2_mesos.framework import events as ev
from dl2_mesos.framework.api import create_app

from ..framework.conftest import Harness

TOKEN = "write-s3cret"
READ_TOKEN = "read-s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
READ = {"Authorization": f"Bearer {READ_TOKEN}"}
SPEC = {"job_type": "resnet-50", "epochs": 3}


class CoreBackend:
    """The API's Backend over a Harness's core (idempotency keys included)."""

    def __init__(self, h: Harness) -> None:
        self.h = h

    def view(self) -> dict[str, Any]:
        return self.h.core.view()

    def is_leader(self) -> bool:
        return True

    def leader_url(self) -> str | None:
        return None

    def submit(self, spec: Any, idempotency_key: str = "") -> dict[str, Any]:
        return self.h.core.submit(spec, idempotency_key).public()

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self.h.core.cancel(job_id).public()

    def metrics(self) -> bytes:
        self.h.core.view()
        return self.h.core.metrics.render()

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "role": "leader"}


def api(h: Harness | None = None, **kwargs: Any) -> tuple[TestClient, Harness]:
    """(client, harness); ``kwargs`` go to :func:`create_app` (e.g. api_token, read_token)."""
    h = h or Harness()
    return TestClient(create_app(CoreBackend(h), **kwargs)), h


def stored_jobs(h: Harness) -> dict[str, Any]:
    """The jobs as a new leader would read them from the store."""
    from dl2_mesos.framework.state_store import StateStore

    return StateStore(h.kv).load_jobs()


class LoopBackend:
    """The API's backend over a real SchedulingLoop thread (as a leader serves it)."""

    def __init__(self, loop: Any) -> None:  # a SchedulingLoop
        self.loop = loop

    def view(self) -> dict[str, Any]:
        return self.loop.view

    def is_leader(self) -> bool:
        return self.loop.running

    def leader_url(self) -> str | None:
        return None

    def submit(self, spec: Any, idempotency_key: str = "") -> dict[str, Any]:
        e = ev.SubmitJob(spec, idempotency_key)
        self.loop.events.put(e)
        return e.reply.result(timeout=10)

    def cancel(self, job_id: str) -> dict[str, Any]:
        e = ev.CancelJob(job_id)
        self.loop.events.put(e)
        return e.reply.result(timeout=10)

    def metrics(self) -> bytes:
        return self.loop.core.metrics.render()

    def health(self) -> dict[str, Any]:
        return {"status": "ok"}
