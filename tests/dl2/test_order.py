"""The job order of the DL2 decision loop (``DL2Config.order``, :mod:`dl2_mesos.policy.dl2.priority`)."""

from __future__ import annotations

import dataclasses

import pytest

from dl2_mesos.cluster import AgentView, ClusterState, JobView, TaskView
from dl2_mesos.errors import ConfigError
from dl2_mesos.jobs import JobSpec
from dl2_mesos.policy.dl2.checkpoint import shipped_model_path
from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.priority import estimated_remaining_seconds, from_both_ends, job_order, ranked
from dl2_mesos.policy.dl2.slot import SlotContext
from dl2_mesos.speed_model import default_speed_model

from .conftest import NODE

PRIO = DL2Config(window=20, hidden=16, actions="elastic", order="priority")
ARRIVAL = dataclasses.replace(PRIO, order="arrival")


def _contended(n_long: int, waiting_long: int, short_epochs: float = 5.0) -> ClusterState:
    """Paper-like contention: ``n_long`` long resnet-50 jobs run 1 PS + 1 worker each, two per
    node, on full nodes plus one node with room for one more such job; then ``waiting_long``
    long jobs arrived and wait; then one short job arrived last."""
    nodes = n_long // 2 + 1
    agents = tuple(AgentView(f"a{i:03d}", f"h{i}", NODE, NODE) for i in range(nodes))
    speed = default_speed_model().epochs_per_second("resnet-50", 1, 1)
    jobs, tasks = [], []
    for i in range(n_long + 1):
        spec = JobSpec(job_type="resnet-50", epochs=6000.0)
        if i == n_long:  # the last node: one job's worth of room left
            break
        a = agents[i // 2].agent_id
        tasks += [TaskView(f"t{i}p", f"long{i:02d}", "ps", a, spec.ps),
                  TaskView(f"t{i}w", f"long{i:02d}", "worker", a, spec.worker)]
        jobs.append(JobView(f"long{i:02d}", spec, i, 1200.0 * i, 100.0, num_ps=1, num_workers=1,
                            slots_run=60 - i, slots_since_rescale=10, measured_epochs_per_second=speed))
    a = agents[-1].agent_id
    spec = JobSpec(job_type="resnet-50", epochs=6000.0)
    tasks += [TaskView("tfp", "longlast", "ps", a, spec.ps), TaskView("tfw", "longlast", "worker", a, spec.worker)]
    jobs.append(JobView("longlast", spec, n_long, 1200.0 * n_long, 100.0, num_ps=1, num_workers=1, slots_run=5,
                        slots_since_rescale=5, measured_epochs_per_second=speed))
    for i in range(waiting_long):
        jobs.append(JobView(f"wait{i:02d}", spec, 50, 60000.0, 0.0, slots_run=1))
    short = JobSpec(job_type="resnet-50", epochs=short_epochs)
    jobs.append(JobView("short", short, 51, 61200.0, 0.0, slots_run=0))
    return ClusterState(slot=51, slot_seconds=1200.0, now=61200.0, jobs=tuple(jobs), agents=agents,
                        tasks=tuple(tasks))


def _jobs(epochs_left, running=None, nodes=4, measured=None):
    """resnet-50 jobs with the given remaining epochs (arrival order = list order)."""
    running = running or {}
    measured = measured or {}
    agents = tuple(AgentView(f"a{i}", f"h{i}", NODE, NODE) for i in range(nodes))
    jobs, tasks = [], []
    free = [NODE for _ in agents]
    for i, e in enumerate(epochs_left):
        spec = JobSpec(job_type="resnet-50", epochs=1000.0)
        p, w = running.get(i, (0, 0))
        for role, n, res in (("ps", p, spec.ps), ("worker", w, spec.worker)):
            for _ in range(n):
                a = next(k for k in range(nodes) if res.fits_in(free[k]))
                free[a] = free[a] - res
                tasks.append(TaskView(f"t{len(tasks)}", f"j{i}", role, agents[a].agent_id, res))
        jobs.append(JobView(f"j{i}", spec, i, 1200.0 * i, 1000.0 - e, num_ps=p, num_workers=w, slots_run=2, slots_since_rescale=2,
                            measured_epochs_per_second=measured.get(i)))
    return ClusterState(slot=9, slot_seconds=1200.0, now=9 * 1200.0, jobs=tuple(jobs), agents=agents,
                        tasks=tuple(tasks))


def test_ranking_is_shortest_estimated_remaining_time_first():
    state = _jobs([500.0, 20.0, 900.0, 20.0, 100.0])
    assert ranked(state) == [1, 3, 4, 0, 2]  # equal estimates keep arrival order
    assert job_order(state, "arrival") == ([0, 1, 2, 3, 4], [0, 1, 2, 3, 4])


def test_measured_speed_corrects_the_estimate_within_bounds():
    # job 0 runs and measures half the table's speed at its size: its estimate doubles
    table = _jobs([100.0], running={0: (1, 1)})
    slow = _jobs([100.0], running={0: (1, 1)}, measured={0: 1e-9})
    base = estimated_remaining_seconds(table.jobs[0])
    from dl2_mesos.speed_model import default_speed_model

    eps = default_speed_model().epochs_per_second("resnet-50", 1, 1)
    half = _jobs([100.0], running={0: (1, 1)}, measured={0: eps / 2})
    assert estimated_remaining_seconds(half.jobs[0]) == pytest.approx(2 * base)
    # a wild measurement moves it at most 4x
    assert estimated_remaining_seconds(slow.jobs[0]) == pytest.approx(4 * base)
    # a job that ran out of epochs ranks first
    assert estimated_remaining_seconds(_jobs([0.0]).jobs[0]) == 0.0


def test_windows_pair_the_most_and_least_deserving_jobs():
    assert from_both_ends([5, 4, 3, 2, 1]) == [5, 1, 4, 2, 3]
    assert from_both_ends([]) == []
    state = _jobs([float(1000 - 20 * i) for i in range(45)], nodes=40)  # later arrivals are shorter
    ctx = SlotContext(state, PRIO)
    assert [len(w) for w in ctx.windows] == [20, 20, 5]
    first = ctx.windows[0].tolist()
    assert first[:2] == [44, 0], "the shortest and the longest job share the first window"
    seen = sorted(i for w in ctx.windows for i in w.tolist())
    assert seen == list(range(45)), "every job is in exactly one window"
    # with at most J jobs there is one window holding all of them, whatever the order
    few = _jobs([float(1000 - 20 * i) for i in range(20)], nodes=20)
    assert sorted(SlotContext(few, PRIO).windows[0].tolist()) == list(range(20))
    assert len(SlotContext(few, PRIO).windows) == 1


def test_starters_go_to_the_shortest_waiting_job():
    # one node; job 0 runs 1 PS + 1 worker (4 of 8 CPUs, 1 of 2 GPUs); jobs 1 (long, arrived
    # first) and 2 (short) wait, and there is room for one starter (1 PS + 1 worker)
    state = _jobs([900.0, 800.0, 10.0], running={0: (1, 1)}, nodes=1)
    by_arrival = SlotContext(state, ARRIVAL)
    by_priority = SlotContext(state, PRIO)
    assert (by_arrival.w[1], by_arrival.w[2]) == (1, 0), "arrival order starts the long job"
    assert (by_priority.w[1], by_priority.w[2]) == (0, 1), "priority order starts the short job"


def test_order_is_validated_and_old_checkpoints_read_as_arrival():
    assert DL2Config().order == "arrival"
    assert DL2Config.from_dict({"window": 20, "actions": "elastic"}).order == "arrival"
    with pytest.raises(ConfigError, match="order"):
        DL2Config(order="random")


def test_shipped_model_uses_the_priority_order():
    assert DL2Policy().config.order == "priority"


@pytest.mark.parametrize("n_long,waiting_long", [(20, 20), (40, 20), (100, 60)])
def test_short_job_behind_many_long_ones_gets_resources(n_long, waiting_long):
    """Paper-like contention: the cluster is full of long jobs but for room for one more, and
    ``waiting_long`` long jobs arrived before the short one (more than a window of J = 20 ahead
    of it). The shipped policy gives the room to the short job (SRPT: average JCT rewards
    finishing it first); the arrival order (v5) gives it to the first long job in line."""
    state = _contended(n_long, waiting_long)
    alloc = DL2Policy().decide(state)
    assert "short" in alloc and alloc["short"].num_workers >= 1
    v5 = DL2Policy(shipped_model_path().with_name("dl2-elastic-v5.pt"))
    assert v5.config.order == "arrival"
    assert "short" not in v5.decide(state)


def test_a_job_started_at_the_slot_start_cannot_be_paused_in_that_slot():
    # (a start is a grow; a job moves one way per slot) so the starter's room stays with it
    from dl2_mesos.policy.dl2.slot import PAUSE, SHRINK_WORKER

    state = _jobs([900.0, 10.0], running={0: (1, 1)}, nodes=1)
    ctx = SlotContext(state, PRIO)
    assert ctx.w[1] == 1, "the short job got the starter"
    window = ctx.windows[0]
    col = window.tolist().index(1)
    mask = ctx.mask(window)
    assert not mask[PRIO.per_job * col + PAUSE]
    assert not mask[PRIO.per_job * col + SHRINK_WORKER]
    other = window.tolist().index(0)
    assert mask[PRIO.per_job * other + PAUSE], "the job that ran before can still be paused"
