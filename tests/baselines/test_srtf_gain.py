"""SRTF-gain: the add-only, restart-aware teacher baseline."""

from __future__ import annotations

from dl2_mesos.allocation import validate_allocation
from dl2_mesos.policy.baselines.srtf_gain import SRTFGainPolicy
from dl2_mesos.policy.sim.settings import preset
from dl2_mesos.policy.sim.simulator import Simulator
from dl2_mesos.policy.sim.trace import generate_trace
from dl2_mesos.resources import Resources

WIDE = Resources(cpus=64.0, gpus=16.0, mem=512 * 1024.0)
NARROW = Resources(cpus=8.0, gpus=2.0, mem=48 * 1024.0)


def counts(alloc):
    return {j: (a.num_ps, a.num_workers) for j, a in alloc.items()}


def test_never_shrinks_a_running_job_and_stays_valid():
    sc, tc = preset("small")
    sim = Simulator(sc, generate_trace(tc, 3), seed=3)
    policy = SRTFGainPolicy()
    state = sim.state()
    grown = 0
    while not sim.done:
        alloc = policy.decide(state)
        validate_allocation(alloc, state)
        for job in state.jobs:
            c = alloc.get_counts(job.job_id)
            assert c.num_ps >= job.num_ps and c.num_workers >= job.num_workers
            if job.num_workers and (c.num_ps, c.num_workers) != (job.num_ps, job.num_workers):
                grown += 1
        sim.step(alloc)
        state = sim.state()
    assert grown > 0  # it does enlarge running jobs when that pays
    assert sim.metrics().num_finished == len(generate_trace(tc, 3))


def test_alone_on_a_big_node_a_new_job_gets_a_fast_size(make_state):
    st = make_state([WIDE], [("a", "resnet-50", {"epochs": 5000.0}, {})])
    p, w = counts(SRTFGainPolicy().decide(st))["a"]
    assert p + w > 2  # more than the starter bundle


def test_prefers_the_shorter_job_when_capacity_is_short(make_state):
    # Two identical jobs except for their remaining epochs, both running a starter bundle;
    # only a little room is left: the short one is grown first.
    jobs = [
        ("long", "vgg-16", {"epochs": 20000.0}, {}),
        ("short", "vgg-16", {"epochs": 2000.0}, {}),
    ]
    st = make_state([NARROW, NARROW], jobs)
    c = counts(SRTFGainPolicy(reserve=0.0).decide(st))
    assert sum(c["short"]) > sum(c["long"])
    # without the remaining-time weight (Optimus-like gain per share) the long job gets more
    c0 = counts(SRTFGainPolicy(alpha=0.0, reserve=0.0).decide(st))
    assert sum(c0["short"]) < sum(c0["long"])


def test_restart_cost_keeps_a_nearly_done_job_as_it_is(make_state):
    # Running (1, 1) with 30 s of work left: growing it would cost a 360 s restart.
    st = make_state([WIDE], [("a", "vgg-16", {"epochs": 1000.0},
                              {"epochs_done": 999.99, "num_ps": 1, "num_workers": 1})])
    assert counts(SRTFGainPolicy().decide(st)).get("a", (0, 0)) == (1, 1)
