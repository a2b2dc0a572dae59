"""The pieces SchedulerCore dispatches to, tested without a core or a driver: the pure slot
planner and the launcher, which returns commands instead of calling Mesos."""

from __future__ import annotations

from dl2_mesos.allocation import Allocation
from dl2_mesos.config import Config
from dl2_mesos.jobs import JobPhase, JobSpec
from dl2_mesos.framework import slot_planner
from dl2_mesos.framework.driver_commands import KillTask, LaunchTasks, Replan
from dl2_mesos.framework.job_book import JobBook
from dl2_mesos.framework.kv import MemoryKV
from dl2_mesos.framework.launcher import Launcher
from dl2_mesos.framework.metrics import FrameworkMetrics
from dl2_mesos.framework.offer_book import OfferBook
from dl2_mesos.framework.records import FrameworkJob
from dl2_mesos.framework.state_store import StateStore

from .conftest import make_offer

CFG = Config(slot=10.0, launch_timeout=5.0, policy="fifo", executor_command="python -m dl2_mesos.executor")


def _book_with_job(epochs: float = 10) -> tuple[JobBook, FrameworkJob]:
    book = JobBook(StateStore(MemoryKV()))
    job = FrameworkJob(job_id="j1", spec=JobSpec(job_type="resnet-50", epochs=epochs), submitted_at=0.0,
                       arrival_slot=0, arrival_time=0.0, checkpoint_uri="file:///tmp/ckpt/j1")
    book.add(job)
    return book, job


def _offers(*agents: str) -> OfferBook:
    offers = OfferBook()
    for a in agents:
        offers.add(make_offer(a), 0.0)
    return offers


def _planned(book: JobBook, offers: OfferBook, counts: dict, slot: int = 0) -> Launcher:
    """A launcher holding the transitions of one slot planned for ``counts``."""
    launcher = Launcher(CFG, FrameworkMetrics())
    state = slot_planner.snapshot(book.active(), offers, slot=slot, now=10.0 * slot, slot_seconds=10.0,
                                  framework_id="fw")
    launcher.add(slot_planner.plan_slot(Allocation(counts), state, book.jobs, now=10.0 * slot).transitions)
    return launcher


def test_planner_is_pure_and_groups_the_plan_per_job():
    book, job = _book_with_job()
    offers = _offers("a1")
    state = slot_planner.snapshot(book.active(), offers, slot=3, now=30.0, slot_seconds=10.0, framework_id="fw")
    assert [j.slots_run for j in state.jobs] == [3] and state.agents[0].agent_id == "a1"
    plan = slot_planner.plan_slot(Allocation({"j1": (1, 2)}), state, book.jobs, now=30.0)
    tr = plan.transitions["j1"]
    assert (tr.granted.num_ps, tr.granted.num_workers) == (1, 2) and len(tr.start) == 3 and not tr.stop
    assert not job.tasks and job.phase == JobPhase.PENDING  # nothing was changed by planning
    assert not plan.unchanged


def test_launcher_returns_a_launch_per_agent_and_changes_only_the_book():
    book, job = _book_with_job()
    offers = _offers("a1")
    launcher = _planned(book, offers, {"j1": (1, 1)})
    commands = launcher.launch_ready(book, offers, now=0.0)
    assert [type(c) for c in commands] == [LaunchTasks]
    launch = commands[0]
    assert launch.agent_id == "a1" and len(launch.task_infos) == 2 and len(launch.offer_ids) == 1
    assert set(book.task_index) == {t.task_id for t in job.tasks.values()} and len(job.tasks) == 2
    assert not offers and not launcher.pending  # the offers went with the launch


def test_launcher_asks_for_a_replan_instead_of_planning_itself():
    book, _ = _book_with_job()
    launcher = _planned(book, _offers("a1"), {"j1": (1, 1)})
    assert launcher.launch_ready(book, OfferBook(), now=1.0) == []  # the offer is gone: it waits
    assert launcher.expire(now=1.0) == []
    assert launcher.expire(now=5.0) == [Replan(("j1",), "launch timeout")]


def test_stopping_tasks_are_kill_commands():
    book, job = _book_with_job()
    offers = _offers("a1")
    _planned(book, offers, {"j1": (1, 1)}).launch_ready(book, offers, now=0.0)
    for t in job.tasks.values():
        t.state = "TASK_RUNNING"
    commands = _planned(book, OfferBook(), {}, slot=1).launch_ready(book, OfferBook(), now=10.0)
    assert sorted(c.task_id for c in commands if isinstance(c, KillTask)) == sorted(job.tasks)
    assert all(t.killing for t in job.tasks.values()) and job.phase == JobPhase.PENDING
