"""The elastic SRPT teachers of the supervised warm-up (``srpt-elastic``, ``srpt-elastic-a1``)."""

from __future__ import annotations

import pytest

from dl2_mesos.allocation import validate_allocation
from dl2_mesos.policy.dl2.teacher import ElasticSRPTTeacher, make_teacher
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
    assert make_teacher("drf").name == "drf"
    with pytest.raises(UnknownPolicy):
        make_teacher("srpt-elastic-a3")


@pytest.mark.parametrize("name", ["srpt-elastic", "srpt-elastic-a1"])
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


@pytest.mark.parametrize("name", ["srpt-elastic", "srpt-elastic-a1"])
def test_a_contended_run_ends_with_every_job_finished(name):
    cfg, tc = preset("testbed-rho2")
    trace = generate_trace(tc, 1001)
    metrics = run(make_teacher(name), cfg, trace, seed=1001)
    assert metrics.num_finished == metrics.num_jobs == len(trace), "no stall: every job finishes"
    assert metrics.avg_jct > 0
