"""The restart-payback mask: growth of a running job must repay its restart on the job's remaining
work (DL2Config.restart_payback)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from dl2_mesos.allocation import JobAllocation
from dl2_mesos.cluster import AgentView, ClusterState, JobView, TaskView
from dl2_mesos.job_types import job_type_names
from dl2_mesos.jobs import JobSpec
from dl2_mesos.policy.dl2.decision_loop import run_slot
from dl2_mesos.policy.dl2.growth import payback_speed, speed_and_best_beyond
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.slot import BUNDLE, PAUSE, PS, WORKER, SlotContext
from dl2_mesos.resources import Resources
from dl2_mesos.speed_model import default_speed_model

BIG = Resources(cpus=256.0, gpus=64.0, mem=2048 * 1024.0)
PRUNE = DL2Config(window=4, hidden=16, actions="elastic", prune_growth=True)
PAYBACK = dataclasses.replace(PRUNE, restart_payback=True)


def _state(job_type: str, ps: int, workers: int, epochs_done: float, epochs: float = 1000.0,
           pytorch: bool = False) -> ClusterState:
    """One job of ``job_type`` with ``epochs_done`` of ``epochs`` done, running ``ps`` PS and
    ``workers`` workers on one huge agent, its last change long ago (not held)."""
    agent = AgentView("a0", "h0", BIG, BIG)
    spec = JobSpec(job_type=job_type, epochs=epochs, max_ps=0 if pytorch else 16, min_ps=0 if pytorch else 1,
                   max_workers=16)
    tasks = [TaskView(f"p{k}", "j0", "ps", "a0", spec.ps) for k in range(ps)]
    tasks += [TaskView(f"w{k}", "j0", "worker", "a0", spec.worker) for k in range(workers)]
    job = JobView("j0", spec, arrival_slot=0, arrival_time=0.0, epochs_done=epochs_done, num_ps=ps,
                  num_workers=workers, slots_run=10, slots_since_rescale=10)
    return ClusterState(slot=10, slot_seconds=1200.0, now=12000.0, jobs=(job,), agents=(agent,), tasks=tuple(tasks))


def _remaining_seconds_saved(speed_now: float, speed_new: float, remaining: float) -> float:
    return remaining / speed_now - remaining / speed_new


def test_the_payback_speed_saves_exactly_the_restart():
    need = payback_speed(100.0, 1e6, 360.0)
    assert need > 100.0
    assert _remaining_seconds_saved(100.0, need, 1e6) == pytest.approx(360.0)
    # a little slower saves less than the restart, a little faster more
    assert _remaining_seconds_saved(100.0, need * 0.99, 1e6) < 360.0 < _remaining_seconds_saved(100.0, need * 1.01, 1e6)


def test_near_its_end_no_speed_repays_a_restart_and_free_restarts_need_nothing():
    # 100 samples/s with 30,000 samples left: 300 s to go, less than the 360 s restart
    assert payback_speed(100.0, 30_000.0, 360.0) == math.inf
    assert payback_speed(100.0, 0.0, 360.0) == math.inf
    assert payback_speed(100.0, 30_000.0, 0.0) == 0.0
    assert payback_speed(0.0, 30_000.0, 360.0) == 0.0  # a job making no progress needs nothing


def _grow_mask(state: ClusterState, cfg: DL2Config) -> np.ndarray:
    ctx = SlotContext(state, cfg)
    return ctx.mask(ctx.windows[0])


def test_a_job_with_much_work_left_may_grow_and_one_near_its_end_may_not():
    far = _state("resnet-50", 1, 1, epochs_done=1.0)
    m = _grow_mask(far, PAYBACK)
    assert m[WORKER] and m[BUNDLE], "a long job's speed-up repays a restart"
    # the same job with a fraction of an epoch left: pruning alone offers growth, payback does not
    sm = default_speed_model()
    left = 0.2 * sm.epochs_per_second("resnet-50", 1, 1) * 1000.0  # 200 s of work at its speed now
    near = _state("resnet-50", 1, 1, epochs_done=1000.0 - left)
    plain = _grow_mask(near, PRUNE)
    assert plain[WORKER] and plain[BUNDLE]
    m = _grow_mask(near, PAYBACK)
    assert not (m[WORKER] or m[PS] or m[BUNDLE])
    # taking capacity back stays open: the mask is on growth only
    assert m[PAUSE]


def test_every_offered_growth_reaches_the_payback_speed():
    """For sizes and remaining work across the range, a grow kind is offered exactly when the
    fastest size at or beyond its target both beats the job's speed now and repays the restart."""
    sm = default_speed_model()
    speed, best = speed_and_best_beyond("vgg-16", 16, 16, True)
    restart = JobSpec(job_type="vgg-16", epochs=1000.0).restart_cost_seconds
    rng = np.random.default_rng(3)
    offered = refused = 0
    for _ in range(60):
        p, w = int(rng.integers(1, 10)), int(rng.integers(1, 10))
        left = float(rng.uniform(1.0, 400.0))  # epochs of 8-12 s each at these sizes
        state = _state("vgg-16", p, w, epochs_done=1000.0 - left)
        m = _grow_mask(state, PAYBACK)
        need = payback_speed(speed[p, w], left * sm.epoch_size("vgg-16"), restart)
        for kind, (tp, tw) in ((WORKER, (p, w + 1)), (PS, (p + 1, w)), (BUNDLE, (p + 1, w + 1))):
            expect = best[tp, tw] > speed[p, w] and best[tp, tw] >= need
            assert bool(m[kind]) == expect, (p, w, left, kind)
            offered += expect
            refused += not expect
    assert offered and refused  # the sample covers both sides


def test_a_waiting_job_still_starts_and_a_pytorch_job_is_judged_on_workers():
    agent = AgentView("a0", "h0", BIG, BIG)
    spec = JobSpec(job_type="resnet-50", epochs=0.01)  # nearly nothing to do: a start costs no restart
    job = JobView("j0", spec, arrival_slot=0, arrival_time=0.0, epochs_done=0.0)
    state = ClusterState(slot=0, slot_seconds=1200.0, now=0.0, jobs=(job,), agents=(agent,), tasks=())
    ctx = SlotContext(state, PAYBACK)
    assert ctx.allocation()["j0"] == JobAllocation(spec.min_ps or 1, max(spec.min_workers, 1))
    near = _state("resnet-50", 0, 2, epochs_done=999.999, pytorch=True)
    assert not _grow_mask(near, PAYBACK)[WORKER]
    assert _grow_mask(_state("resnet-50", 0, 2, epochs_done=1.0, pytorch=True), PAYBACK)[WORKER]


def _grow_first(x, mask, ctx, window):
    """Always the first valid grow action, else void."""
    for a in np.flatnonzero(mask[:-1]):
        if a % ctx.K in (WORKER, PS, BUNDLE):
            return int(a)
    return len(mask) - 1


def test_a_policy_that_grows_whatever_it_may_leaves_a_finishing_job_alone():
    sm = default_speed_model()
    left = 0.2 * sm.epochs_per_second("inception-bn", 2, 2) * 1000.0
    near = _state("inception-bn", 2, 2, epochs_done=1000.0 - left)
    alloc, _ = run_slot(near, PAYBACK, _grow_first)
    assert alloc["j0"] == JobAllocation(2, 2)
    grown, _ = run_slot(near, PRUNE, _grow_first)
    assert grown["j0"] != JobAllocation(2, 2)


def test_growth_that_stops_short_of_repaying_is_given_back_at_the_end_of_the_slot():
    """The mask lets a job take a step when a size beyond it would repay the restart; a decision
    that stops after that step leaves the job where it ran, its new task given back."""
    sm = default_speed_model()
    # a job type and size where one more worker is faster and a size beyond faster still
    jt, p = next((jt, p) for jt in job_type_names() for p in range(1, 8)
                 if speed_and_best_beyond(jt, 16, 16, True)[0][p, 1]
                 < speed_and_best_beyond(jt, 16, 16, True)[0][p, 2]
                 < speed_and_best_beyond(jt, 16, 16, True)[1][p, 2])
    speed, best = speed_and_best_beyond(jt, 16, 16, True)
    s0, s1, top = speed[p, 1], speed[p, 2], best[p, 2]
    need = (s1 + top) / 2  # one more worker does not repay, the fastest size beyond does
    restart = JobSpec(job_type=jt, epochs=1000.0).restart_cost_seconds
    left = restart / (1 / s0 - 1 / need) / sm.epoch_size(jt)
    state = _state(jt, p, 1, epochs_done=1000.0 - left)
    steps = []

    def one_worker(x, mask, ctx, window):
        if not steps:
            assert mask[WORKER], "the step towards a size that repays is offered"
            steps.append(WORKER)
            return WORKER
        return len(mask) - 1

    alloc, _ = run_slot(state, PAYBACK, one_worker)
    assert alloc["j0"] == JobAllocation(p, 1)
    steps.clear()
    alloc, _ = run_slot(state, PRUNE, one_worker)
    assert alloc["j0"] == JobAllocation(p, 2)
