"""The loop handles what is already queued before it rebuilds the API view (one view per batch),
still answers every command only after a view that shows it, and stops at a Stop in a batch."""

from __future__ import annotations

import queue
import time

import pytest

from dl2_mesos.jobs import JobSpec
from dl2_mesos.framework import events as ev
from dl2_mesos.framework.loop import SchedulingLoop

from .conftest import Harness


class CountingViews:
    """Wraps the core's view() to count how often the loop rebuilds it."""

    def __init__(self, core) -> None:  # noqa: ANN001
        self.n = 0
        self._view = core.view
        core.view = self

    def __call__(self):  # noqa: ANN204
        self.n += 1
        return self._view()


def test_a_burst_of_submissions_gets_one_view_per_batch_and_every_reply_sees_its_job():
    h = Harness()
    q: queue.Queue = queue.Queue()
    loop = SchedulingLoop(h.core, q)
    views = CountingViews(h.core)
    cmds = [ev.SubmitJob(JobSpec(job_type="vgg-16", epochs=3, name=f"b{i}")) for i in range(200)]
    for c in cmds:  # all queued before the loop starts: they arrive as one burst
        q.put(c)
    loop.start()
    try:
        ids = [c.reply.result(timeout=30)["id"] for c in cmds]
        assert all(i in loop.view["jobs"] for i in ids)
        # one view per event would be 200; batches of up to 0.1 s make it a handful
        assert views.n < 100, views.n
    finally:
        loop.stop()
    assert not loop.running


def test_a_stop_inside_a_batch_ends_the_loop_after_the_events_before_it():
    h = Harness()
    q: queue.Queue = queue.Queue()
    loop = SchedulingLoop(h.core, q)
    first = ev.SubmitJob(JobSpec(job_type="vgg-16", epochs=3, name="before"))
    after = ev.SubmitJob(JobSpec(job_type="vgg-16", epochs=3, name="after"))
    for e in (first, ev.Stop("test"), after):
        q.put(e)
    loop.start()
    loop._thread.join(10)
    assert not loop.running
    assert first.reply.result(timeout=1)["name"] == "before"
    assert not after.reply.done()  # never taken from the queue
    assert [j["name"] for j in loop.view["jobs"].values()] == ["before"]


def test_a_batch_of_status_updates_writes_each_job_once_and_acks_only_after_the_write():
    from dl2_mesos.jobs import JobPhase

    from .conftest import make_offer, status

    h = Harness()
    h.register()
    jobs = [h.submit(name=f"w{i}") for i in range(3)]
    h.offer(make_offer("a1"), make_offer("a2"), make_offer("a3"))
    h.tick()
    tasks = [t for j in jobs for t in j.tasks.values()]
    assert len(tasks) == 6
    writes: list[str] = []
    put_job = h.core.store.put_job

    def counting_put(job) -> None:  # noqa: ANN001
        writes.append(job.job_id)
        put_job(job)

    h.core.store.put_job = counting_put
    q: queue.Queue = queue.Queue()
    loop = SchedulingLoop(h.core, q)
    for i, t in enumerate(tasks):  # PS and worker of each job: one burst, one batch
        q.put(status(t.task_id, "TASK_RUNNING", t.agent_id, uuid=f"u{i}"))
    loop.start()
    try:
        deadline = time.monotonic() + 30
        while len(h.driver.named("acknowledgeStatusUpdate")) < 6 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        loop.stop()
    assert h.driver.acked_persisted == [True] * 6  # every ack after its update was stored
    assert sorted(writes) == sorted(j.job_id for j in jobs)  # one write per job, not one per update
    assert all(j.phase == JobPhase.RUNNING for j in h.store.load_jobs().values())


def test_a_burst_of_submissions_is_stored_in_few_group_commits_before_any_answer(tmp_path):
    from dl2_mesos.framework.kv import FileKV
    from dl2_mesos.framework.state_store import StateStore

    h = Harness(kv=FileKV(tmp_path / "state"))
    rounds: list[int] = []
    put_many = h.kv.put_many

    def counting(items, guard=None):  # noqa: ANN001, ANN202
        rounds.append(len(items))
        return put_many(items, guard)

    h.kv.put_many = counting
    seen_stored: list[bool] = []
    q: queue.Queue = queue.Queue()
    loop = SchedulingLoop(h.core, q)
    cmds = [ev.SubmitJob(JobSpec(job_type="vgg-16", epochs=3, name=f"g{i}")) for i in range(60)]
    for c in cmds:
        c.reply.add_done_callback(  # runs when the answer is set: the job must be on disk by then
            lambda f: seen_stored.append(f.result()["id"] in StateStore(FileKV(tmp_path / "state")).load_jobs()))
        q.put(c)
    loop.start()
    try:
        ids = [c.reply.result(timeout=30)["id"] for c in cmds]
    finally:
        loop.stop()
    assert len(set(ids)) == 60 and seen_stored == [True] * 60
    assert sum(rounds) >= 55 and len(rounds) < 30, rounds  # batches, not one commit per job


def test_when_storing_a_batch_fails_none_of_its_commands_is_answered_as_done():
    h = Harness()
    q: queue.Queue = queue.Queue()
    loop = SchedulingLoop(h.core, q)

    def broken(jobs):  # noqa: ANN001, ANN202
        raise OSError("disk full")

    h.core.store.put_jobs = broken
    cmds = [ev.SubmitJob(JobSpec(job_type="vgg-16", epochs=3, name=f"f{i}")) for i in range(3)]
    for c in cmds:
        q.put(c)
    loop.start()
    try:
        for c in cmds:
            with pytest.raises(OSError):
                c.reply.result(timeout=30)
    finally:
        loop.stop()


def test_an_unchanged_running_job_is_not_rewritten_every_slot():
    """At 1000-5000 jobs and the benches' 5-s slots, one write per job per slot was most of the
    loop's time: a job whose counts stay is written when something of it changes, not per slot."""
    from .conftest import make_offer

    h = Harness()  # 10-s slots
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    h.next_slot()
    h.core.flush()
    writes: list[str] = []
    put_job = h.core.store.put_job

    def counting_put(j) -> None:  # noqa: ANN001
        if j.job_id == job.job_id:
            writes.append(j.phase.value)
        put_job(j)

    h.core.store.put_job = counting_put
    for _ in range(12):  # 120 s of slots with the same counts
        h.next_slot()
        h.core.flush()
    assert len(writes) <= 4, writes
