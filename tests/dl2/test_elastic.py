"""The elastic action space (grow, shrink, pause) and the start rule: masks, caps, minimums, no
booking for jobs that cannot start, no stall; PyTorch (no PS) jobs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dl2_mesos.allocation import validate_allocation
from dl2_mesos.cluster import AgentView, ClusterState, JobView, TaskView
from dl2_mesos.jobs import JobSpec
from dl2_mesos.policy.dl2.decision_loop import random_chooser, run_slot, run_slot_greedy
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
from dl2_mesos.policy.dl2.network import ActorCritic, NumpyActor
from dl2_mesos.policy.dl2.slot import BUNDLE, PAUSE, PS, SHRINK_PS, SHRINK_WORKER, WORKER, SlotContext
from dl2_mesos.policy.sim.settings import SimConfig
from dl2_mesos.policy.sim.simulator import Simulator
from dl2_mesos.policy.sim.trace import TraceJob
from dl2_mesos.resources import Resources

from .conftest import NODE, make_state

EL = DL2Config(window=4, actions="elastic")
K = EL.per_job


def _state(specs, running=None, n_agents=2, node=NODE):
    """Jobs with the given specs; ``running`` maps job index -> (PS, workers) placed greedily."""
    running = running or {}
    agents = tuple(AgentView(f"a{i}", f"h{i}", node, node) for i in range(n_agents))
    free = [node for _ in agents]
    jobs, tasks = [], []
    for i, spec in enumerate(specs):
        p, w = running.get(i, (0, 0))
        for role, n, res in (("ps", p, spec.ps), ("worker", w, spec.worker)):
            for _ in range(n):
                a = next(k for k in range(len(agents)) if res.fits_in(free[k]))
                free[a] = free[a] - res
                tasks.append(TaskView(f"t{len(tasks)}", f"j{i}", role, agents[a].agent_id, res))
        jobs.append(JobView(f"j{i}", spec, 0, 0.0, 10.0, num_ps=p, num_workers=w, slots_run=2,
                            slots_since_rescale=1))
    return ClusterState(slot=2, slot_seconds=1200.0, now=2400.0, jobs=tuple(jobs), agents=agents, tasks=tuple(tasks))


def _void(cfg):
    return lambda x, m, c, w: cfg.void


def test_action_count_and_void():
    assert EL.num_actions == 6 * 4 + 1 and DL2Config(window=4).num_actions == 13
    ctx = SlotContext(make_state(2, 4, running={"j0000": (2, 2)}), EL)
    m = ctx.mask(ctx.windows[0])
    assert m.shape == (EL.num_actions,) and m[-1]


def test_shrink_masks_respect_minimums_and_direction():
    spec = JobSpec(job_type="resnet-50", epochs=1000.0, min_workers=2, max_workers=6, max_ps=4)
    ctx = SlotContext(_state([spec], running={0: (2, 3)}, n_agents=4), EL)
    win = ctx.windows[0]
    m = ctx.mask(win)[:K]
    assert m[SHRINK_WORKER] and m[SHRINK_PS] and m[PAUSE]
    assert ctx.apply(win, SHRINK_WORKER)  # 3 -> 2 workers: the minimum
    m = ctx.mask(win)[:K]
    assert not m[SHRINK_WORKER], "never below min_workers"
    assert m[SHRINK_PS] and m[PAUSE]
    assert not (m[WORKER] or m[PS] or m[BUNDLE]), "a job shrunk in this slot does not grow again"
    ctx.apply(win, SHRINK_PS)
    assert not ctx.mask(win)[SHRINK_PS], "never below 1 PS"
    alloc = ctx.allocation()
    assert (alloc["j0"].num_ps, alloc["j0"].num_workers) == (1, 2)
    with pytest.raises(ValueError):
        ctx.apply(win, SHRINK_WORKER)


def test_grown_job_cannot_shrink_in_the_same_slot():
    spec = JobSpec(job_type="resnet-50", epochs=1000.0)
    ctx = SlotContext(_state([spec], running={0: (1, 1)}, n_agents=4), EL)
    win = ctx.windows[0]
    assert ctx.apply(win, WORKER)
    m = ctx.mask(win)[:K]
    assert not (m[SHRINK_WORKER] or m[SHRINK_PS] or m[PAUSE])


def test_pause_frees_capacity_for_a_waiting_job_in_the_same_slot():
    # one node: job 0 fills it; job 1 waits (its start does not fit)
    big = JobSpec(job_type="resnet-50", epochs=1000.0)
    ctx = SlotContext(_state([big, big], running={0: (2, 2)}, n_agents=1), EL)
    win = ctx.windows[0]
    assert (ctx.ps[1], ctx.w[1]) == (0, 0)
    assert not ctx.mask(win)[K + BUNDLE], "no room to start job 1"
    assert ctx.apply(win, PAUSE)
    assert ctx.mask(win)[K + BUNDLE], "the pause made room: job 1 can start"
    assert not ctx.mask(win)[BUNDLE], "a job paused in this slot is not restarted in it"
    assert ctx.apply(win, K + BUNDLE)
    alloc = ctx.allocation()
    assert "j0" not in alloc and (alloc["j1"].num_ps, alloc["j1"].num_workers) == (1, 1)


def test_min_workers_2_job_starts():
    """Defect: the 1+1 starter bundle was below min_workers 2 and dropped, every slot."""
    spec = JobSpec(job_type="resnet-50", epochs=1000.0, min_workers=2)
    for cfg in (DL2Config(window=4), EL):
        alloc, _ = run_slot(_state([spec], n_agents=2), cfg, _void(cfg))
        assert (alloc["j0"].num_ps, alloc["j0"].num_workers) == (1, 2)
        # and with a trained-looking network in the full simulator
        torch.manual_seed(0)
        net = ActorCritic(DL2Config(window=8, hidden=16, layers=1, actions=cfg.actions))
        trace = [TraceJob(f"m{i}", 1200.0 * i, JobSpec(job_type="resnext-110", epochs=2000.0, min_workers=2))
                 for i in range(3)]
        sim = Simulator(SimConfig(num_agents=2, max_slots=200), trace)
        pol = DL2Policy(net=net)
        state = sim.state()
        while not sim.done:
            alloc = pol.decide(state)
            for ja in alloc.values():
                assert ja.num_workers >= 2
            sim.step(alloc)
            state = sim.state()
        m = sim.metrics()
        assert not m.summary().get("truncated") and all(j.finished for j in m.jobs)


def test_nothing_booked_for_a_job_that_cannot_start():
    """A job whose minimum does not fit gets no task at all (it used to keep the part of its
    starter that fitted, booked but unusable)."""
    # node of 8 CPUs: a worker of 6 CPUs fits, with its PS of 4 CPUs it does not (bundle 10)
    node = Resources(cpus=8.0, gpus=2.0, mem=48 * 1024.0)
    odd = JobSpec(job_type="resnet-50", epochs=1000.0, worker=Resources(6.0, 1.0, 1024.0),
                  ps=Resources(4.0, 0.0, 1024.0), min_workers=2)
    small = JobSpec(job_type="resnet-50", epochs=1000.0)
    state = _state([odd, small], n_agents=2, node=node)
    for cfg in (DL2Config(window=4), EL):
        ctx = SlotContext(state, cfg)
        # 2 workers (6 CPU) + 1 PS (4 CPU) need 16 CPUs in pieces that do not fit 2 nodes of 8
        assert (ctx.ps[0], ctx.w[0]) == (0, 0), "nothing booked for the job that cannot start"
        assert (ctx.ps[1], ctx.w[1]) == (1, 1)
        assert ctx.free[0] == pytest.approx(16.0 - small.ps.cpus - small.worker.cpus)
        alloc, _ = run_slot(state, cfg, random_chooser(3))
        validate_allocation(alloc, state)
        assert "j0" not in alloc


def test_unusual_demands_do_not_stall_the_cluster():
    """Defect: jobs DL2 could not start kept starter tasks booked; the cluster stalled."""
    node = Resources(cpus=8.0, gpus=2.0, mem=48 * 1024.0)
    specs = [
        JobSpec(job_type="resnet-50", epochs=3000.0, worker=Resources(6.0, 1.0, 1024.0),
                ps=Resources(4.0, 0.0, 1024.0)),  # bundle 10 CPUs: never co-located
        JobSpec(job_type="dssm", epochs=8000.0, worker=Resources(5.0, 0.0, 1024.0),
                ps=Resources(3.0, 0.0, 1024.0), min_workers=2),
        JobSpec(job_type="resnet-50", epochs=3000.0, worker=Resources(1.0, 2.0, 1024.0),
                ps=Resources(7.0, 0.0, 1024.0)),  # fills a node alone
    ]
    trace = [TraceJob(f"u{i}", 0.0 if i < 4 else 1200.0 * i, specs[i % 3]) for i in range(8)]
    for actions in ("grow", "elastic"):
        torch.manual_seed(1)
        net = ActorCritic(DL2Config(window=8, hidden=16, layers=1, actions=actions))
        sim = Simulator(SimConfig(agents=(node, node, node), max_slots=400), trace)
        pol = DL2Policy(net=net)
        state = sim.state()
        while not sim.done:
            alloc = pol.decide(state)
            sim.step(alloc)
            state = sim.state()
        m = sim.metrics()
        assert not m.summary().get("truncated"), actions
        assert all(j.finished for j in m.jobs), actions


def test_pytorch_jobs_have_only_worker_actions():
    torch_job = JobSpec(job_type="resnet-50", epochs=1000.0, runtime="pytorch", min_workers=2, max_workers=5)
    state = _state([torch_job], n_agents=4)
    ctx = SlotContext(state, EL)
    win = ctx.windows[0]
    assert (ctx.ps[0], ctx.w[0]) == (0, 2), "started at its minimum, no PS"
    m = ctx.mask(win)[:K]
    assert m[WORKER] and not m[PS] and not m[BUNDLE] and not m[SHRINK_PS]
    assert not m[SHRINK_WORKER], "at its minimum"
    for _ in range(3):
        assert ctx.apply(win, WORKER)
    assert not ctx.mask(win)[WORKER], "max_workers reached"
    alloc = ctx.allocation()
    assert (alloc["j0"].num_ps, alloc["j0"].num_workers) == (0, 5)
    validate_allocation(alloc, state)


def test_all_paused_is_restarted_no_stall():
    spec = JobSpec(job_type="resnet-50", epochs=1000.0)
    state = _state([spec, spec], running={0: (1, 1), 1: (1, 1)}, n_agents=2)

    def pause_all(x, mask, ctx, window):
        for col in range(len(window)):
            if mask[K * col + PAUSE]:
                return K * col + PAUSE
        return EL.void

    alloc, steps = run_slot(state, EL, pause_all)
    assert any(s.action % K == PAUSE for s in steps)
    assert len(alloc) >= 1, "a slot that would leave every job without tasks starts them again"


def test_elastic_greedy_loop_matches_forward_passes_with_shrinks():
    rng = np.random.default_rng(0)
    for seed in range(6):
        torch.manual_seed(seed)
        cfg = DL2Config(window=6, hidden=16, layers=1, actions="elastic")
        net = ActorCritic(cfg)
        with torch.no_grad():  # favour shrink and pause actions
            net.actor.job_head.bias += torch.tensor([0.0, 0.0, 0.0, 2.0, 2.0, 1.0])
        state = make_state(int(rng.integers(3, 12)), int(rng.integers(2, 6)),
                           running={f"j{i:04d}": (2, 2) for i in range(3)})
        from dl2_mesos.policy.dl2.decision_loop import NetChooser

        ref = run_slot(state, cfg, NetChooser(net.actor))
        fast = run_slot_greedy(state, cfg, NumpyActor(net.actor), record=True)
        assert [s.action for s in ref[1]] == [s.action for s in fast[1]]
        assert ref[0] == fast[0]
        assert any(s.action % K in (SHRINK_WORKER, SHRINK_PS, PAUSE) for s in ref[1] if s.job_id)
