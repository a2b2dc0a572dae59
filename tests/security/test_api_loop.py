"""No exception from one event, or from publishing the API's view, may kill the scheduling loop:
it is logged, counted (dl2_loop_errors_total) and the loop goes on (issue 14, item 2)."""

from __future__ import annotations

import copy
import queue
import time

from fastapi.testclient import TestClient

from dl2_mesos.framework import events as ev
from dl2_mesos.framework.api import create_app
from dl2_mesos.framework.loop import SchedulingLoop
from dl2_mesos.jobs import JobSpec

from ..framework.conftest import Harness
from .api_helpers import LoopBackend


def _deep(depth: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(depth):
        value = {"a": value}
    return value


def _wait(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _errors(h: Harness, stage: str) -> float:
    value = h.core.metrics.registry.get_sample_value("dl2_loop_errors_total", {"stage": stage})
    return value or 0.0


def test_the_loop_survives_events_that_raise_and_a_view_that_cannot_be_built():
    h = Harness()
    fatal: list[str] = []
    loop = SchedulingLoop(h.core, queue.Queue(), on_fatal=fatal.append)
    loop.start()
    try:
        client = TestClient(create_app(LoopBackend(loop)))
        # an event whose handler raises (a malformed status update)
        loop.events.put(ev.StatusUpdate({"state": "TASK_RUNNING"}))
        assert _wait(lambda: _errors(h, "event") >= 1)
        # a record 700 deep (as an older version stored one): building the view raised
        # RecursionError on the loop thread, which ended it, and every replica after it
        job = h.core.submit(JobSpec(job_type="resnet-50", epochs=1))
        # a new spec object, swapped in at once: the record converts each spec once, so mutating
        # the one a view had already converted (the loop thread may build one in between) would
        # never be seen (a CI run waited 10 s for an error that could not come)
        good, bad = job.spec, copy.copy(job.spec)
        object.__setattr__(bad, "extra", _deep(700))
        job.spec = bad
        assert _wait(lambda: _errors(h, "publish") >= 1)
        assert loop.running and not fatal
        # the loop still serves: a new submission is stored and answered
        r = client.post("/api/v1/jobs", json={"job_type": "vgg-16", "epochs": 1})
        assert r.status_code == 201, r.text
        assert loop.running
        # once the bad record is gone, the view is published again
        job.spec = good
        assert _wait(lambda: r.json()["id"] in loop.view["jobs"])
        metrics = h.core.metrics.render().decode()
        assert 'dl2_loop_errors_total{stage="publish"}' in metrics
    finally:
        loop.stop()
    assert not loop.running


def test_a_700_deep_extra_never_reaches_the_loop():
    h = Harness()
    loop = SchedulingLoop(h.core, queue.Queue())
    loop.start()
    try:
        client = TestClient(create_app(LoopBackend(loop)))
        body = '{"job_type": "resnet-50", "epochs": 1, "extra": ' + '{"a": ' * 700 + "1" + "}" * 700 + "}"
        r = client.post("/api/v1/jobs", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "nested" in r.json()["error"]
        assert not h.core.jobs and loop.running and _errors(h, "event") == 0 and _errors(h, "publish") == 0
    finally:
        loop.stop()
