"""Between full API views the loop answers commands from the last view patched with the jobs the
batch changed: a patched view shows exactly what a full view would for those jobs, a stream of
single submissions does not rebuild every job's view for each reply, and a trickle of status
updates does not rebuild the view once per update."""

from __future__ import annotations

import queue
import time

from dl2_mesos.jobs import JobSpec
from dl2_mesos.framework import events as ev
from dl2_mesos.framework.loop import PUBLISH_SECONDS, VIEW_TIME_SHARE, SchedulingLoop
from dl2_mesos.framework.retention import expire_ended_jobs

from .conftest import Harness, make_offer, status


def _comparable(view: dict) -> dict:
    jobs = {k: {f: v for f, v in j.items() if f != "queue_wait_seconds"} for k, j in view["jobs"].items()}
    c = view["cluster"]
    return {"jobs": jobs, "allocations": c["allocations"], "jobs_by_phase": c["jobs_by_phase"],
            "pending_transitions": c["pending_transitions"], "suspended": c["suspended"], "slot": c["slot"],
            "policy": view["policy"]}


def test_a_patched_view_shows_what_a_full_view_shows_for_added_changed_and_removed_jobs():
    h = Harness()
    h.register()
    keep = h.submit(name="keep")
    gone = h.submit(name="gone")
    before = h.core.view()
    h.offer(make_offer("a1"))
    h.next_slot()  # keep and gone get tasks (pending transitions, then running)
    h.run_all(keep)
    h.run_all(gone)
    added = h.submit(name="added")
    h.core.handle(ev.CancelJob(gone.job_id))
    patched = h.core.view_patch(before)
    full = h.core.view()
    assert _comparable(patched) == _comparable(full)
    assert list(patched["jobs"]) == [keep.job_id, gone.job_id, added.job_id]
    assert patched["jobs"][keep.job_id]["num_workers"] == 1
    assert patched["jobs"][gone.job_id]["phase"] == "cancelled"

    # a job the retention rule removed disappears from the patch as from a full view
    h.clock.advance(h.core.cfg.retain_ended_for + 60)
    for t in list(gone.tasks.values()):
        h.core.handle(status(t.task_id, "TASK_KILLED", t.agent_id, uuid=f"k-{t.task_id}"))
    mid = h.core.view()
    assert expire_ended_jobs(h.core, h.core.clock()) == [gone.job_id]
    patched = h.core.view_patch(mid)
    full = h.core.view()
    assert list(patched["jobs"]) == list(full["jobs"]) == [keep.job_id, added.job_id]
    assert patched["cluster"]["jobs_by_phase"] == full["cluster"]["jobs_by_phase"]
    assert patched["jobs"][keep.job_id] is mid["jobs"][keep.job_id]  # untouched: not rebuilt


def test_nothing_changed_leaves_the_jobs_of_the_previous_view_as_they_were():
    h = Harness()
    h.register()
    h.submit(name="a")
    full = h.core.view()
    patched = h.core.view_patch(full)
    assert patched["jobs"] == full["jobs"]
    assert patched["cluster"]["agents"] is full["cluster"]["agents"]  # not rebuilt


class CountingViews:
    """Counts the core's full views and patches (a full view can be made to take ``cost`` seconds)."""

    def __init__(self, core, cost: float = 0.0) -> None:  # noqa: ANN001
        self.full = self.patches = 0
        self.cost = cost
        self._view, self._patch = core.view, core.view_patch
        core.view, core.view_patch = self.view, self.patch

    def view(self):  # noqa: ANN201
        if self.cost:
            time.sleep(self.cost)
        self.full += 1
        return self._view()

    def patch(self, previous):  # noqa: ANN001, ANN201
        self.patches += 1
        return self._patch(previous)


def test_single_submissions_one_after_another_are_answered_from_patches_not_full_views():
    h = Harness()
    q: queue.Queue = queue.Queue()
    loop = SchedulingLoop(h.core, q)
    views = CountingViews(h.core)
    loop.start()
    try:
        t0 = time.monotonic()
        for i in range(60):  # each waits for its reply: one command per batch
            cmd = ev.SubmitJob(JobSpec(job_type="vgg-16", epochs=3, name=f"s{i}"))
            q.put(cmd)
            job_id = cmd.reply.result(timeout=30)["id"]
            assert job_id in loop.view["jobs"]  # the reply came after a view showing the job
            assert loop.view["cluster"]["allocations"][job_id] == {"num_ps": 0, "num_workers": 0}
        elapsed = time.monotonic() - t0
    finally:
        loop.stop()
    # one full view per PUBLISH_SECONDS at most (plus the start and the stop), patches otherwise
    assert views.full <= elapsed / PUBLISH_SECONDS + 3, (views.full, elapsed)
    assert views.patches >= 60 - views.full


def _jobs_with_tasks(n: int) -> tuple[Harness, list, list]:
    """A harness with ``n`` jobs placed on two agents: (harness, jobs, their tasks)."""
    h = Harness()
    h.register()
    jobs = [h.submit(name=f"j{i}") for i in range(n)]
    h.offer(make_offer("a1"), make_offer("a2"))
    h.next_slot()
    return h, jobs, [t for j in jobs for t in j.tasks.values()]


def test_a_trickle_of_status_updates_does_not_rebuild_the_view_per_update():
    h, jobs, tasks = _jobs_with_tasks(4)
    assert tasks
    q: queue.Queue = queue.Queue()
    loop = SchedulingLoop(h.core, q)
    views = CountingViews(h.core)
    loop.start()
    try:
        t0 = time.monotonic()
        n = 0
        for round_ in range(8):
            for t in tasks:  # spaced so that the loop drains its queue after every update
                q.put(status(t.task_id, "TASK_RUNNING", t.agent_id, uuid=f"u{round_}-{t.task_id}"))
                n += 1
                time.sleep(0.01)
        deadline = time.monotonic() + 10
        while not all(j["phase"] == "running" for j in loop.view["jobs"].values()):
            assert time.monotonic() < deadline, "the view never showed the jobs running"
            time.sleep(0.05)
        elapsed = time.monotonic() - t0
    finally:
        loop.stop()
    assert views.full <= elapsed / PUBLISH_SECONDS + 3, (views.full, n, elapsed)
    assert views.full < n


def test_a_costly_view_is_rebuilt_less_often_and_patches_keep_the_jobs_current():
    h, jobs, tasks = _jobs_with_tasks(3)
    q: queue.Queue = queue.Queue()
    loop = SchedulingLoop(h.core, q)
    cost = 0.3  # as a view of a few thousand jobs: a full one per cost / VIEW_TIME_SHARE = 3 s at most
    views = CountingViews(h.core, cost=cost)
    loop.start()
    try:
        t0 = time.monotonic()
        # submissions are answered after a view that shows them, without a full view each
        while time.monotonic() - t0 < 4.0:
            cmd = ev.SubmitJob(JobSpec(job_type="vgg-16", epochs=3, name=f"s{views.patches}"))
            q.put(cmd)
            assert cmd.reply.result(timeout=30)["id"] in loop.view["jobs"]
        elapsed = time.monotonic() - t0
        assert views.full <= elapsed * VIEW_TIME_SHARE / cost + 2, (views.full, elapsed)
        # status updates show in the view without waiting for the next full view
        full_before = views.full
        while views.full == full_before:  # just after a full view: the next is >= 3 s away
            time.sleep(0.01)
        full_after = views.full
        for t in tasks:
            q.put(status(t.task_id, "TASK_RUNNING", t.agent_id, uuid=f"r-{t.task_id}"))
        while not all(loop.view["jobs"][j.job_id]["phase"] == "running" for j in jobs):
            time.sleep(0.01)
        assert views.full == full_after, "shown only by a full view, not by a patch"
    finally:
        loop.stop()
