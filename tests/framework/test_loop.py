"""The loop thread: commands answered after the view shows them; a fenced store stops leading."""

from __future__ import annotations

import queue
import threading

from dl2_mesos.jobs import JobSpec
from dl2_mesos.framework import events as ev
from dl2_mesos.framework.loop import SchedulingLoop
from dl2_mesos.framework.state_store import StateStore

from .conftest import Harness, make_offer


def test_submitted_job_is_in_the_view_when_the_reply_arrives():
    h = Harness()
    q: queue.Queue = queue.Queue()
    loop = SchedulingLoop(h.core, q)
    loop.start()
    try:
        q.put(ev.Registered(h.driver, "fw", "m:5050", False))
        for _ in range(20):  # keep the loop busy so that the periodic publish alone would lag
            q.put(ev.Offers((make_offer("a1"),)))
        cmd = ev.SubmitJob(JobSpec(job_type="vgg-16", epochs=3))
        q.put(cmd)
        job = cmd.reply.result(timeout=10)
        assert job["id"] in loop.view["jobs"]
        cancel = ev.CancelJob("nope")
        q.put(cancel)
        try:
            cancel.reply.result(timeout=10)
            raise AssertionError("unknown job accepted")
        except KeyError:
            pass
    finally:
        loop.stop()
    assert not loop.running


def test_fenced_store_stops_the_loop_and_reports():
    h = Harness()
    fatal: list[str] = []
    done = threading.Event()
    q: queue.Queue = queue.Queue()
    loop = SchedulingLoop(h.core, q, on_fatal=lambda r: (fatal.append(r), done.set()))
    loop.start()
    try:
        StateStore(h.kv).begin_term(5.0)  # another leader takes over
        cmd = ev.SubmitJob(JobSpec(job_type="vgg-16", epochs=3))
        q.put(cmd)
        assert done.wait(10)
        assert "state store" in fatal[0]
        loop._thread.join(5)
        assert not loop.running
        try:
            cmd.reply.result(timeout=5)
            raise AssertionError("a fenced leader accepted a job")
        except Exception as exc:  # StaleVersion or the loop-stopped timeout
            assert not isinstance(exc, AssertionError)
    finally:
        loop.stop(timeout=1)
