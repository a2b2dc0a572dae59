"""The idle-cluster rule: every job at its fastest size when all fit at once, the network otherwise."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from dl2_mesos.allocation import Allocation, validate_allocation
from dl2_mesos.jobs import JobSpec
from dl2_mesos.policy.dl2.checkpoint import load_checkpoint, save_checkpoint
from dl2_mesos.policy.dl2.decision_loop import NetChooser, run_slot
from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
from dl2_mesos.policy.dl2.greedy import run_slot_greedy_fast
from dl2_mesos.policy.dl2.idle import fastest_size, idle_allocation
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.network import ActorCritic, NumpyActor
from dl2_mesos.policy.dl2.rollout import make_sim
from dl2_mesos.policy.sim.bounds import avg_jct_lower_bound, job_bounds
from dl2_mesos.policy.sim.simulator import run

CFG = DL2Config(window=8, hidden=32, actions="elastic", order="priority")


def _light_sim(seed: int = 1001):
    return make_sim("sweep-rho0.25", seed)


def test_on_an_idle_cluster_every_job_gets_the_bound_s_size():
    sim = _light_sim()
    for _ in range(6):
        sim.step(Allocation())  # let jobs arrive, none started
    state = sim.state()
    assert len(state.jobs) >= 2
    alloc = idle_allocation(state)
    assert alloc is not None
    validate_allocation(alloc, state)
    bounds = {b.job_id: b for b in job_bounds(sim.config, sim.trace)}
    for job in state.jobs:
        size = alloc.get_counts(job.job_id)
        assert (size.num_ps, size.num_workers) == (bounds[job.job_id].best_ps, bounds[job.job_id].best_workers)
        assert size == fastest_size(job, state.capacity)


def test_under_contention_or_with_no_job_the_rule_stays_out():
    sim = make_sim("tiny", 1)  # 3 nodes: the jobs present cannot all run at their fastest size
    contended = 0
    while not sim.done and sim.slot < 30:
        state = sim.state()
        if not state.jobs:
            assert idle_allocation(state) is None
        elif idle_allocation(state) is None:
            contended += 1
        sim.step(Allocation({j.job_id: (1, 1) for j in state.jobs[:1]}))
    assert contended > 0
    empty = replace(sim.state(), jobs=(), tasks=())
    assert idle_allocation(empty) is None


def test_an_all_reduce_job_gets_workers_only():
    sim = _light_sim()
    while not sim.state().jobs:
        sim.step(Allocation())
    state = sim.state()
    job = state.jobs[0]
    spec = JobSpec(job_type=job.spec.job_type, epochs=10.0, worker=job.spec.worker, ps=job.spec.ps, min_ps=0,
                   max_ps=0, min_workers=2, max_workers=8, runtime="pytorch")
    torch_job = replace(job, job_id="pt", spec=spec)
    size = fastest_size(torch_job, state.capacity)
    assert size.num_ps == 0 and 2 <= size.num_workers <= 8
    alloc = idle_allocation(replace(state, jobs=(torch_job,), tasks=()))
    assert alloc is not None and alloc.get_counts("pt") == size


@pytest.mark.parametrize("loop", ["greedy", "sampled"])
def test_both_decision_loops_apply_the_rule_and_record_no_step(loop):
    torch.manual_seed(0)
    net = ActorCritic(replace(CFG, idle_fastest=True))
    sim = _light_sim()
    for _ in range(6):
        sim.step(Allocation())
    state = sim.state()
    if loop == "greedy":
        alloc, steps = run_slot_greedy_fast(state, net.cfg, NumpyActor(net.actor))
    else:
        alloc, steps = run_slot(state, net.cfg, NetChooser(net.actor, sample=True, seed=1))
    assert alloc == idle_allocation(state) and steps == []
    # with the rule off the network decides (and leaves the bound's sizes)
    off, steps_off = run_slot(state, CFG, NetChooser(net.actor, sample=True, seed=1))
    assert steps_off and off != alloc


def test_an_untrained_network_with_the_rule_sits_on_the_bound_at_light_load(tmp_path):
    """On a light-load trace where the jobs present always fit at their fastest sizes, the rule
    decides every slot and the run's avg JCT is the no-queueing bound; the same random network
    without the rule is far above it (so the test can fail). The trace's first 40 jobs: the random
    network alone takes minutes on all 200."""
    torch.manual_seed(0)
    on, off = tmp_path / "on.pt", tmp_path / "off.pt"
    save_checkpoint(off, ActorCritic(CFG))
    net = load_checkpoint(off).net
    net.cfg = replace(net.cfg, idle_fastest=True)
    save_checkpoint(on, net)
    sim = _light_sim(1002)
    trace = sorted(sim.trace, key=lambda t: (t.arrival_time, t.job_id))[:40]
    bound = avg_jct_lower_bound(sim.config, trace)
    with_rule = run(DL2Policy(model_path=on), sim.config, trace, 1002).avg_jct
    without = run(DL2Policy(model_path=off), sim.config, trace, 1002).avg_jct
    assert with_rule == pytest.approx(bound, rel=1e-9)
    assert without > 1.05 * bound
