"""Every baseline with PyTorch jobs, minimums above one and demands that fit on no single node.

Parametrised over the registry's ``BASELINES``, so a baseline added later is held to the same.
"""

from __future__ import annotations

import pytest

from dl2_mesos.jobs import JobSpec
from dl2_mesos.policy.registry import BASELINES, make_policy
from dl2_mesos.policy.sim.settings import SimConfig
from dl2_mesos.policy.sim.simulator import Simulator, run
from dl2_mesos.policy.sim.trace import TraceJob
from dl2_mesos.resources import Resources

NODE = Resources(cpus=8.0, gpus=2.0, mem=48 * 1024.0)


def _job(job_id, job_type, arrival=0.0, epochs=300.0, **kw):
    return TraceJob(job_id, arrival, JobSpec(job_type=job_type, epochs=epochs, **kw))


def _first_decision(name, trace, nodes=2):
    sim = Simulator(SimConfig(num_agents=nodes, agent=NODE), trace)
    return make_policy(name).decide(sim.state())


@pytest.mark.parametrize("name", BASELINES)
@pytest.mark.parametrize("runtime", ["mxnet", "pytorch"])
def test_a_min_workers_2_job_starts(name, runtime):
    tr = (_job("a", "resnet-50", min_workers=2, max_workers=4, max_ps=4, runtime=runtime),)
    alloc = _first_decision(name, tr)
    got = alloc.get_counts("a")
    assert got.num_workers >= 2
    assert got.num_ps == 0 if runtime == "pytorch" else got.num_ps >= 1
    m = run(make_policy(name), SimConfig(num_agents=2, agent=NODE, max_slots=50), tr)
    assert m.num_finished == 1


@pytest.mark.parametrize("name", BASELINES)
def test_a_min_ps_2_job_starts(name):
    tr = (_job("a", "resnet-50", min_ps=2, max_ps=3, min_workers=2, max_workers=4),)
    got = _first_decision(name, tr).get_counts("a")
    assert got.num_ps >= 2 and got.num_workers >= 2


@pytest.mark.parametrize("name", BASELINES)
def test_pytorch_jobs_finish_without_ps(name):
    tr = (
        _job("pt", "resnet-50", runtime="pytorch", max_workers=4),
        _job("mx", "dssm", max_ps=2, max_workers=2),
        _job("pt2", "vgg-16", arrival=1200.0, runtime="pytorch", min_ps=0, max_ps=0, max_workers=3),
    )
    sim = Simulator(SimConfig(num_agents=2, agent=NODE, max_slots=100), tr)
    policy = make_policy(name)
    while not sim.done:
        state = sim.state()
        out = sim.step(policy.decide(state))
        for jid in ("pt", "pt2"):
            assert out.granted.get_counts(jid).num_ps == 0
    m = sim.metrics(name)
    assert m.num_finished == 3 and not m.truncated


@pytest.mark.parametrize("name", BASELINES)
def test_a_job_that_cannot_start_books_nothing(name):
    # "big" needs 5 workers + 1 PS of 2 CPUs = 12 CPUs; the one node has 8
    big = _job("big", "dssm", min_workers=5, max_workers=5, max_ps=1)
    small = _job("small", "dssm", arrival=0.0, max_ps=2, max_workers=2)
    alone = _first_decision(name, (small,), nodes=1)
    both = _first_decision(name, (big, small), nodes=1)
    assert both.get_counts("big").is_zero
    assert both.get_counts("small") == alone.get_counts("small") and not alone.get_counts("small").is_zero
    m = run(make_policy(name), SimConfig(num_agents=1, agent=NODE, max_slots=20), (big, small))
    assert [j.job_id for j in m.jobs if j.finished] == ["small"]


@pytest.mark.parametrize("name", BASELINES)
def test_demands_that_fit_on_no_single_node_do_not_stall(name):
    wide = Resources(cpus=6.0, gpus=0.0, mem=1024.0)  # a PS + worker bundle (10 CPUs) fits no node
    tr = (
        _job("wide", "dssm", worker=wide, ps=Resources(4.0, 0.0, 1024.0), max_ps=4, max_workers=4),
        # 3 GPU workers: its minimum needs more GPUs than one node has
        _job("spread", "resnet-50", min_workers=3, max_workers=4, max_ps=4),
        _job("plain", "dssm", max_ps=2, max_workers=2),
    )
    m = run(make_policy(name), SimConfig(num_agents=2, agent=NODE, max_slots=100), tr)
    assert m.num_finished == 3 and not m.truncated
