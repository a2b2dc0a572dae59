"""An API command the loop did not reach in time is withdrawn: the caller's 503 "retry" is then
true (nothing was stored), and a retry cannot double the job. A command the loop already started
is waited for instead."""

from __future__ import annotations

import queue
import threading
import time
from types import SimpleNamespace

import pytest

from dl2_mesos.framework import events as ev
from dl2_mesos.framework import runner
from dl2_mesos.framework.loop import SchedulingLoop
from dl2_mesos.jobs import JobSpec

from .conftest import Harness


def _asker(q: queue.Queue) -> SimpleNamespace:
    """What ``Replica._ask`` reads from its replica: the event queue and the leadership flag."""
    return SimpleNamespace(events=q, is_leader=lambda: True)


def test_a_submission_the_loop_did_not_reach_in_time_is_not_stored(monkeypatch):
    monkeypatch.setattr(runner, "REPLY_TIMEOUT", 0.05)
    h = Harness()
    q: queue.Queue = queue.Queue()
    late = ev.SubmitJob(JobSpec(job_type="vgg-16", epochs=3, name="late"))
    with pytest.raises(TimeoutError):
        runner.Replica._ask(_asker(q), late)  # no loop runs yet: the wait times out
    assert late.reply.cancelled()
    loop = SchedulingLoop(h.core, q)
    loop.start()
    try:
        after = ev.SubmitJob(JobSpec(job_type="vgg-16", epochs=3, name="after"))
        q.put(after)
        assert after.reply.result(timeout=30)["name"] == "after"  # the loop went on
        assert [j.spec.name for j in h.store.load_jobs().values()] == ["after"]
        assert [j["name"] for j in loop.view["jobs"].values()] == ["after"]
    finally:
        loop.stop()


def test_a_withdrawn_cancel_does_nothing():
    h = Harness()
    job = h.submit()
    cancel = ev.CancelJob(job.job_id)
    assert cancel.reply.cancel()
    h.core.handle(cancel)
    assert h.store.load_jobs()[job.job_id].phase.value == "pending"


def test_a_command_the_loop_started_is_waited_for_past_the_timeout(monkeypatch):
    monkeypatch.setattr(runner, "REPLY_TIMEOUT", 0.2)
    q: queue.Queue = queue.Queue()
    cmd = ev.SubmitJob(JobSpec(job_type="vgg-16", epochs=3, name="slow"))

    def slow_loop() -> None:  # takes the command at once, answers after the first wait ran out
        got = q.get(timeout=5)
        assert got.reply.set_running_or_notify_cancel()
        time.sleep(0.3)
        got.reply.set_result({"id": "slow-1", "name": "slow"})

    t = threading.Thread(target=slow_loop)
    t.start()
    try:
        assert runner.Replica._ask(_asker(q), cmd)["id"] == "slow-1"
    finally:
        t.join(5)
