"""The elastic SRPT teachers of the supervised warm-up (``srpt-elastic``, ``srpt-elastic-a1``,
``srpt-elastic-min``)."""

from __future__ import annotations

import pytest

from dl2_mesos.allocation import validate_allocation
from dl2_mesos.policy.dl2.teacher import ElasticSRPTTeacher
from dl2_mesos.policy.registry import make_teacher
from dl2_mesos.policy.registry import UnknownPolicy
from dl2_mesos.policy.sim.settings import preset
from dl2_mesos.policy.sim.simulator import run
from dl2_mesos.policy.sim.trace import generate_trace

from .conftest import make_state


def test_teachers_by_name():
    a2, a1 = make_teacher("srpt-elastic"), make_teacher("srpt-elastic-a1")
    assert isinstance(a2, ElasticSRPTTeacher) and isinstance(a1, ElasticSRPTTeacher)
    assert (a2.alpha, a1.alpha) == (2.0, 1.0)
    assert (a2.name, a1.name) == ("srpt-elastic", "srpt-elastic-a1")
    low = make_teacher("srpt-elastic-min")
    assert isinstance(low, ElasticSRPTTeacher) and (low.name, low.alpha, low.keep_running) == (
        "srpt-elastic-min", 1.0, False)
    assert a1.keep_running and a2.keep_running
    assert make_teacher("drf").name == "drf"
    with pytest.raises(UnknownPolicy):
        make_teacher("srpt-elastic-a3")


@pytest.mark.parametrize("name", ["srpt-elastic", "srpt-elastic-a1", "srpt-elastic-min"])
def test_allocations_are_valid_and_shortest_first_on_a_full_cluster(name):
    teacher = make_teacher(name)
    # 24 jobs on 2 nodes, none running: not all of them fit even at their minimum
    state = make_state(24, 2)
    alloc = teacher.decide(state)
    validate_allocation(alloc, state)
    admitted = {jid for jid, a in alloc.items() if a.num_workers > 0}
    assert admitted, "a full cluster still runs some jobs"
    assert len(admitted) < len(state.jobs), "the state is meant to be contended"
    # jobs of one type need the same minimum; the state gives a later one of a type more
    # remaining epochs, so it is admitted only if every earlier one of its type is
    by_type: dict[str, list[str]] = {}
    for job in state.jobs:
        by_type.setdefault(job.spec.job_type, []).append(job.job_id)
    for ids in by_type.values():
        flags = [jid in admitted for jid in ids]
        assert flags == sorted(flags, reverse=True), (ids, flags)


@pytest.mark.parametrize("name", ["srpt-elastic", "srpt-elastic-a1", "srpt-elastic-min"])
def test_a_contended_run_ends_with_every_job_finished(name):
    cfg, tc = preset("testbed-rho2")
    trace = generate_trace(tc, 1001)
    metrics = run(make_teacher(name), cfg, trace, seed=1001)
    assert metrics.num_finished == metrics.num_jobs == len(trace), "no stall: every job finishes"
    assert metrics.avg_jct > 0


def test_admission_at_the_minimum_shrinks_a_running_job_to_start_a_waiting_one():
    """One node: the shorter job runs 1 PS + 2 workers and fills it, the other waits. Keeping
    running jobs at their size (``srpt-elastic-a1``) leaves the second waiting; admitting every
    job at its minimum first (``srpt-elastic-min``) shrinks the first to 1 + 1 and starts both."""
    state = make_state(2, 1, running={"j0000": (1, 2)})
    counts = {name: {jid: (a.num_ps, a.num_workers) for jid, a in make_teacher(name).decide(state).items()
                     if a.num_workers > 0}
              for name in ("srpt-elastic-a1", "srpt-elastic-min")}
    assert counts["srpt-elastic-a1"] == {"j0000": (1, 2)}
    assert counts["srpt-elastic-min"] == {"j0000": (1, 1), "j0001": (1, 1)}
    validate_allocation(make_teacher("srpt-elastic-min").decide(state), state)


@pytest.mark.parametrize("name", ["srpt-elastic-a1", "srpt-elastic-min"])
def test_next_action_labels_rebuild_the_teachers_allocation(name):
    """Followed from the slot start, the teacher's next-action labels rebuild its allocation
    (all but the slots where per-agent placement parts from the teacher's aggregate plan), on
    states of two contended presets; every label is valid where it is given."""
    from dl2_mesos.allocation import Allocation
    from dl2_mesos.policy.dl2.model_config import DL2Config
    from dl2_mesos.policy.dl2.rollout import make_sim
    from dl2_mesos.policy.dl2.supervised import teacher_steps

    cfg = DL2Config(window=6, hidden=16, actions="elastic")
    teacher = make_teacher(name)
    compared = rebuilt = 0
    for point, seed in (("tiny", 3), ("small", 4)):
        sim = make_sim(point, seed, 25)
        state = sim.reset()
        while not sim.done:
            alloc = Allocation()
            if state.jobs:
                alloc, steps = teacher_steps(state, cfg, teacher)
                assert steps and all(s.mask[s.action] for s in steps)
                rebuilt += alloc == teacher.decide(state)
                compared += 1
            sim.step(alloc)
            state = sim.state()
    assert compared > 20 and rebuilt >= 0.85 * compared, (rebuilt, compared)


def test_within_slot_dagger_labels_the_students_own_states():
    """The student acts (a net that has learnt nothing), the teacher labels every state it
    reaches: the allocation is the student's, each label is valid where it was given, and the
    labels are not the student's own choices."""
    import numpy as np
    import torch

    from dl2_mesos.allocation import Allocation
    from dl2_mesos.policy.dl2.decision_loop import NetChooser, run_slot
    from dl2_mesos.policy.dl2.model_config import DL2Config
    from dl2_mesos.policy.dl2.network import ActorCritic, NumpyActor
    from dl2_mesos.policy.dl2.rollout import make_sim
    from dl2_mesos.policy.dl2.supervised import collect_teacher_episode, student_steps

    torch.manual_seed(0)
    cfg = DL2Config(window=6, hidden=16, actions="elastic")
    net = ActorCritic(cfg).eval()
    fast = NumpyActor(net.actor)
    teacher = make_teacher("srpt-elastic-a1")
    sim = make_sim("small", 2, 10)
    state = sim.reset()
    while not state.jobs:
        sim.step(Allocation())
        state = sim.state()
    alloc, steps = student_steps(state, cfg, teacher, fast)
    own, own_steps = run_slot(state, cfg, NetChooser.greedy(fast))
    assert alloc == own and len(steps) == len(own_steps)
    assert all(s.mask[s.action] for s in steps)
    assert [s.action for s in steps] != [s.action for s in own_steps]
    assert all(np.array_equal(a.features, b.features) for a, b in zip(steps, own_steps))
    slots = collect_teacher_episode(make_sim("tiny", 1, 15), cfg, teacher, within_slot=fast)
    assert sum(len(s) for s in slots) > 0
