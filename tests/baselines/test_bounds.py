"""The no-queueing lower bound on average JCT is a true lower bound under the simulator's rules."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from dl2_mesos.policy.registry import BASELINES, make_policy
from dl2_mesos.policy.sim.bounds import avg_jct_lower_bound, fastest_speed, job_bounds
from dl2_mesos.policy.sim.settings import SimConfig, preset
from dl2_mesos.policy.sim.simulator import run
from dl2_mesos.policy.sim.trace import generate_trace
from dl2_mesos.resources import Resources
from dl2_mesos.speed_model import default_speed_model


def test_one_job_bound_by_hand(make_job):
    sc = SimConfig(num_agents=4)
    job = make_job("a", "resnet-50", 3000.0, arrival=100.0, max_ps=4, max_workers=3)
    (b,) = job_bounds(sc, (job,))
    sm = default_speed_model()
    best = max(sm.epochs_per_second("resnet-50", p, w) for p in range(1, 5) for w in range(1, 4))
    assert b.wait_s == pytest.approx(1100.0)  # visible at the next slot start, 1200 s
    assert b.run_s == pytest.approx(3000.0 / best)
    assert sm.epochs_per_second("resnet-50", b.best_ps, b.best_workers) == pytest.approx(best)
    assert avg_jct_lower_bound(sc, (job,)) == pytest.approx(b.jct)


def test_capacity_and_noise_make_the_bound_honest(make_job):
    spec = make_job("a", "resnet-50", 3000.0).spec
    big = Resources(1e6, 1e6, 1e9)
    v_big, p, w = fastest_speed(spec, big)
    one_node = SimConfig(num_agents=1).agent
    v_small, p2, w2 = fastest_speed(spec, one_node)
    assert v_small <= v_big
    need = spec.worker.scale(w2) + spec.ps.scale(p2)
    assert need.fits_in(one_node)
    assert fastest_speed(spec, big, noise=0.1)[0] == pytest.approx(1.1 * v_big)


def test_a_single_job_alone_reaches_the_bound(make_job):
    """Tight when nothing else runs: a policy that gives the fastest size at once meets it."""
    sc = SimConfig(num_agents=20)
    job = make_job("a", "vgg-16", 2000.0, arrival=0.0)
    (b,) = job_bounds(sc, (job,))

    class Best:
        name = "best"

        def decide(self, state):
            from dl2_mesos.allocation import Allocation, JobAllocation

            return Allocation({"a": JobAllocation(b.best_ps, b.best_workers)})

    m = run(Best(), sc, (job,))
    assert m.avg_jct == pytest.approx(b.jct, rel=1e-6)


@pytest.mark.parametrize("name", BASELINES)
@pytest.mark.parametrize("preset_name,seed", [("tiny", 1), ("small", 5)])
def test_no_policy_beats_the_bound(name, preset_name, seed):
    sc, tc = preset(preset_name)
    trace = generate_trace(tc, seed)
    bounds = {b.job_id: b.jct for b in job_bounds(sc, trace)}
    m = run(make_policy(name), sc, trace, seed=seed)
    finished = [j for j in m.jobs if j.finished]
    assert finished
    for j in finished:  # a run stopped at max_slots censors the others' JCT (not a bound)
        assert j.jct >= bounds[j.job_id] - 1e-6, j.job_id
    if not m.truncated:
        assert m.avg_jct >= avg_jct_lower_bound(sc, trace) - 1e-6


def test_no_restart_charge_does_not_change_the_bound():
    sc, tc = preset("tiny")
    trace = generate_trace(tc, 0)
    a = avg_jct_lower_bound(sc, trace)
    assert a == avg_jct_lower_bound(replace(sc, charge_restart_cost=False), trace)
    assert math.isfinite(a) and a > 0
