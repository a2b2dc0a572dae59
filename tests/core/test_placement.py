"""The shared placement: least-loaded fit, tie-break, bundles, shrink/grow, fallback."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from dl2_mesos.allocation import Allocation, JobAllocation
from dl2_mesos.cluster import AgentView, ClusterState, JobView, TaskView
from dl2_mesos.jobs import JobSpec
from dl2_mesos.placement import PlacementBoard, place
from dl2_mesos.resources import Resources

NODE = Resources(8, 2, 49152)
GPU_W = Resources(2, 1, 8192)  # a GPU worker
PS = Resources(2, 0, 4096)


def agents(*caps):
    return tuple(AgentView(f"n{i}", f"n{i}", c, c) for i, c in enumerate(caps))


def job(jid, t="vgg-16", ps=0, w=0, arrival=0.0, **kw):
    return JobView(jid, JobSpec(job_type=t, epochs=100.0, **kw), 0, arrival, 0.0, num_ps=ps, num_workers=w)


def state(ags, jobs, tasks=()):
    return ClusterState(0, 1200.0, 0.0, tuple(jobs), ags, tuple(tasks))


def test_least_loaded_and_tie_break_to_first_agent():
    b = PlacementBoard(agents(NODE, NODE, NODE))
    assert [b.place(GPU_W) for _ in range(3)] == ["n0", "n1", "n2"]  # all tie: first, then next
    b.charge("n1", PS)  # n1 now most loaded
    assert b.place(GPU_W) == "n0"  # n0 and n2 tie at 0.75: first wins
    assert b.place(GPU_W) == "n2"
    assert b.load("n0") == b.load("n2") == 0.5 + 1.0
    assert b.free("n0") == Resources(4, 0, 49152 - 2 * 8192)


def test_fit_skips_agents_that_are_less_loaded_but_too_small():
    b = PlacementBoard(agents(Resources(2, 0, 4096), NODE))
    assert b.place(GPU_W) == "n1"  # n0 has no GPU
    assert b.place(PS) == "n0"  # n0 (empty) is least loaded and fits a PS
    assert b.place(PS) == "n1"
    assert b.least_loaded_fit(Resources(100, 0, 0)) is None
    assert not b.fits_anywhere(Resources(0, 3, 0))


def test_release_makes_room_again():
    b = PlacementBoard(agents(Resources(4, 1, 8192)))
    assert b.place(GPU_W) == "n0"
    assert b.place(GPU_W) is None
    b.release("n0", GPU_W)
    assert b.place(GPU_W) == "n0"


def test_bundle_is_colocated():
    b = PlacementBoard(agents(NODE, NODE))
    assert b.place_bundle(PS, GPU_W) == "n0"
    assert b.free("n0") == NODE - PS - GPU_W and b.free("n1") == NODE


def test_place_grows_with_bundles_on_least_loaded_agents():
    st_ = state(agents(NODE, NODE), [job("a")])
    plan = place(Allocation({"a": (2, 2)}), st_)
    assert plan.granted == Allocation({"a": (2, 2)})
    assert plan.keep == () and plan.stop == ()
    by_agent = sorted((p.agent_id, p.role) for p in plan.start)
    assert by_agent == [("n0", "ps"), ("n0", "worker"), ("n1", "ps"), ("n1", "worker")]


def test_shrink_stops_tasks_on_most_loaded_agents_and_keeps_the_rest():
    tasks = [
        TaskView("a-w0", "a", "worker", "n0", GPU_W),
        TaskView("a-w1", "a", "worker", "n1", GPU_W),
        TaskView("a-p0", "a", "ps", "n0", PS),
        TaskView("b-w0", "b", "worker", "n1", GPU_W),
        TaskView("b-p0", "b", "ps", "n1", PS),
    ]
    st_ = state(agents(NODE, NODE), [job("a", ps=1, w=2), job("b", ps=1, w=1, arrival=1.0)], tasks)
    plan = place(Allocation({"a": (1, 1), "b": (1, 1)}), st_)
    assert [t.task_id for t in plan.stop] == ["a-w1"]  # n1 is the more loaded agent
    assert {t.task_id for t in plan.keep} == {"a-w0", "a-p0", "b-w0", "b-p0"}
    assert plan.start == ()
    assert plan.changed_jobs() == {"a"}


def test_grow_keeps_running_tasks():
    tasks = [TaskView("a-w0", "a", "worker", "n1", GPU_W), TaskView("a-p0", "a", "ps", "n1", PS)]
    st_ = state(agents(NODE, NODE), [job("a", ps=1, w=1)], tasks)
    plan = place(Allocation({"a": (1, 3)}), st_)
    assert {t.task_id for t in plan.keep} == {"a-w0", "a-p0"} and plan.stop == ()
    assert sorted(p.agent_id for p in plan.start) == ["n0", "n0"]  # n0 is emptier, stays so after one
    assert plan.granted == Allocation({"a": (1, 3)})


def test_jobs_absent_from_target_lose_all_tasks():
    tasks = [TaskView("a-w0", "a", "worker", "n0", GPU_W), TaskView("a-p0", "a", "ps", "n0", PS)]
    st_ = state(agents(NODE), [job("a", ps=1, w=1)], tasks)
    plan = place(Allocation(), st_)
    assert len(plan.stop) == 2 and plan.granted == Allocation()


def test_partial_grant_when_not_all_tasks_fit():
    st_ = state(agents(NODE), [job("a")])
    plan = place(Allocation({"a": (1, 4)}), st_)
    assert plan.granted == Allocation({"a": (1, 2)})  # 2 GPUs only


def test_fallback_to_previous_tasks_when_below_minimum():
    # b runs 1 PS + 1 worker on n0 but its spec now needs 2 workers; a (earlier) takes the last
    # GPU first, so b cannot reach its minimum: it keeps its previous tasks instead of stopping
    tasks = [TaskView("b-w0", "b", "worker", "n0", GPU_W), TaskView("b-p0", "b", "ps", "n0", PS)]
    jobs = [job("a", arrival=0.0), job("b", ps=1, w=1, arrival=1.0, min_workers=2)]
    st_ = state(agents(NODE), jobs, tasks)
    plan = place(Allocation({"a": (1, 1), "b": (1, 2)}), st_)
    assert plan.granted.get_counts("a") == JobAllocation(1, 1)
    assert plan.granted.get_counts("b") == JobAllocation(1, 1)
    assert {t.task_id for t in plan.keep} == {"b-w0", "b-p0"} and plan.stop == ()
    assert all(p.job_id == "a" for p in plan.start)
    # a new job whose minimum does not fit gets nothing and leaves no tasks behind
    st2 = state(agents(NODE), [job("a"), job("c", arrival=1.0, min_workers=2)])
    plan2 = place(Allocation({"a": (1, 2), "c": (1, 2)}), st2)
    assert plan2.granted == Allocation({"a": (1, 2)})
    assert all(p.job_id == "a" for p in plan2.start)


def _reference_find(caps, used, demand):
    """Brute force: least load (cpus+gpus fractions), ties to the lowest index, must fit."""
    best = None
    for i, (c, u) in enumerate(zip(caps, used)):
        free = c - u
        if not demand.fits_in(free):
            continue
        load = u.load_of(c)
        if best is None or load < best[0]:
            best = (load, i)
    return None if best is None else best[1]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000))
def test_board_matches_brute_force(seed):
    rnd = random.Random(seed)
    caps = [
        rnd.choice([NODE, Resources(16, 0, 65536), Resources(4, 1, 16384)]) for _ in range(rnd.randint(1, 12))
    ]
    ags = agents(*caps)
    board = PlacementBoard(ags)
    used = [Resources() for _ in caps]
    placed = []
    demands = [GPU_W, PS, PS + GPU_W, Resources(1, 0, 1024), Resources(2, 2, 100)]
    for _ in range(60):
        if placed and rnd.random() < 0.25:
            i, d = placed.pop(rnd.randrange(len(placed)))
            board.release(ags[i].agent_id, d)
            used[i] = used[i] - d
            continue
        d = rnd.choice(demands)
        want = _reference_find(caps, used, d)
        got = board.place(d)
        assert got == (None if want is None else ags[want].agent_id)
        if want is not None:
            used[want] = used[want] + d
            placed.append((want, d))
