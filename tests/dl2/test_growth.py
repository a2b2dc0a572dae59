"""Growth pruning: grow actions that cannot make a job faster are masked (DL2Config.prune_growth)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dl2_mesos.allocation import JobAllocation
from dl2_mesos.cluster import AgentView, ClusterState, JobView, TaskView
from dl2_mesos.errors import ConfigError
from dl2_mesos.job_types import job_type_names
from dl2_mesos.jobs import JobSpec
from dl2_mesos.policy.dl2.decision_loop import run_slot
from dl2_mesos.policy.dl2.growth import speed_and_best_beyond, useful_growth
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.slot import BUNDLE, PS, WORKER, SlotContext
from dl2_mesos.resources import Resources
from dl2_mesos.speed_model import default_speed_model

BIG = Resources(cpus=256.0, gpus=64.0, mem=2048 * 1024.0)
PRUNE = DL2Config(window=4, hidden=16, actions="elastic", prune_growth=True)
PLAIN = dataclasses.replace(PRUNE, prune_growth=False)


def _state(job_type: str, ps: int, workers: int, max_tasks: int = 16, pytorch: bool = False) -> ClusterState:
    """One job of ``job_type`` running ``ps`` PS and ``workers`` workers on one huge agent."""
    agent = AgentView("a0", "h0", BIG, BIG)
    spec = JobSpec(job_type=job_type, epochs=1000.0, max_ps=0 if pytorch else max_tasks, min_ps=0 if pytorch else 1,
                   max_workers=max_tasks)
    tasks = [TaskView(f"p{k}", "j0", "ps", "a0", spec.ps) for k in range(ps)]
    tasks += [TaskView(f"w{k}", "j0", "worker", "a0", spec.worker) for k in range(workers)]
    job = JobView("j0", spec, arrival_slot=0, arrival_time=0.0, epochs_done=1.0, num_ps=ps, num_workers=workers,
                  slots_run=1, slots_since_rescale=1)
    return ClusterState(slot=1, slot_seconds=1200.0, now=1200.0, jobs=(job,), agents=(agent,), tasks=tuple(tasks))


def test_best_beyond_is_the_fastest_size_at_or_beyond_each_size():
    speed, best = speed_and_best_beyond("vgg-16", 16, 16, True)
    sm = default_speed_model()
    assert speed[14, 1] == sm.samples_per_second("vgg-16", 14, 1)
    for p, w in [(1, 1), (5, 3), (14, 1), (16, 16)]:
        assert best[p, w] == speed[p:, w:].max()
    assert not speed.flags.writeable and not best.flags.writeable


def test_vgg16_one_worker_stops_at_its_fastest_size():
    # measured: 14 PS + 1 worker is vgg-16's fastest size; 15 PS is slower (the table is not monotone)
    speed, best = speed_and_best_beyond("vgg-16", 16, 16, True)
    assert speed[15, 1] < speed[14, 1] == speed.max()
    assert useful_growth(speed, best, 14, 1) == (False, False, False)
    # a dip on the way does not block: 4 -> 5 PS is slower, but faster sizes lie beyond 5 PS
    assert speed[5, 1] < speed[4, 1]
    assert useful_growth(speed, best, 4, 1)[1]


@pytest.mark.parametrize("job_type", job_type_names())
def test_pruning_never_cuts_a_path_to_a_faster_size(job_type):
    """From every size, the step toward every faster size at or beyond it stays allowed."""
    for uses_ps in (True, False):
        speed, best = speed_and_best_beyond(job_type, 12, 12, uses_ps)
        rows, cols = speed.shape
        for p in range(1 if uses_ps else 0, rows):
            for w in range(1, cols):
                uw, up, ub = useful_growth(speed, best, p, w)
                faster = np.argwhere(speed[p:, w:] > speed[p, w])
                for dp, dw in faster:
                    if dp and dw:
                        assert ub, (job_type, p, w, dp, dw)
                    elif dp:
                        assert up, (job_type, p, w, dp)
                    else:
                        assert uw, (job_type, p, w, dw)
                if not len(faster):
                    assert (uw, up, ub) == (False, False, False), (job_type, p, w)


def test_mask_hides_futile_growth_and_apply_refuses_it():
    state = _state("vgg-16", 14, 1)
    ctx = SlotContext(state, PRUNE)
    win = ctx.windows[0]
    m = ctx.mask(win)
    assert not (m[WORKER] or m[PS] or m[BUNDLE]), "nothing beyond 14 PS + 1 worker is faster"
    row = np.zeros(PRUNE.per_job, dtype=bool)
    ctx.mask_row(int(win[0]), row)
    assert np.array_equal(row, m[: PRUNE.per_job])
    with pytest.raises(ValueError, match="cannot make job j0 faster"):
        ctx.apply_to(int(win[0]), PS)
    assert ctx.allocation()["j0"] == JobAllocation(14, 1)
    # without pruning the same steps are offered
    plain = SlotContext(state, PLAIN)
    pm = plain.mask(plain.windows[0])
    assert pm[WORKER] and pm[PS] and pm[BUNDLE]


def test_pytorch_jobs_are_pruned_on_their_worker_axis():
    speed, best = speed_and_best_beyond("resnet-50", 0, 16, False)
    assert speed.shape == (1, 17)
    top = int(speed[0].argmax())
    state = _state("resnet-50", 0, top, pytorch=True)
    ctx = SlotContext(state, PRUNE)
    m = ctx.mask(ctx.windows[0])
    assert not m[WORKER] and not m[PS] and not m[BUNDLE]


def _grow_first(x, mask, ctx, window):
    """Always the first valid grow action (worker, PS or bundle of any job), else void."""
    K = ctx.K
    for a in np.flatnonzero(mask[:-1]):
        if a % K in (WORKER, PS, BUNDLE):
            return int(a)
    return len(mask) - 1


@pytest.mark.parametrize("job_type", job_type_names())
def test_a_job_grown_as_far_as_allowed_ends_where_nothing_beyond_is_faster(job_type):
    """A policy that grows whatever it may stops each job at a size no larger size beats (the mask
    is a necessary condition: a naive grower may still wander through slower sizes on the way;
    the plain loop grows it to its caps)."""
    state = _state(job_type, 1, 1)
    alloc, _ = run_slot(state, PRUNE, _grow_first)
    ja = alloc["j0"]
    speed, best = speed_and_best_beyond(job_type, 16, 16, True)
    assert speed[ja.num_ps, ja.num_workers] == best[ja.num_ps, ja.num_workers]
    plain, _ = run_slot(state, PLAIN, _grow_first)
    assert (plain["j0"].num_ps, plain["j0"].num_workers) == (16, 16)


def test_prune_growth_is_checked_and_old_checkpoints_load_without_it():
    with pytest.raises(ConfigError, match="prune_growth"):
        DL2Config(prune_growth="yes")  # type: ignore[arg-type]
    old = PRUNE.to_dict()
    del old["prune_growth"]
    assert DL2Config.from_dict(old).prune_growth is False


def test_the_shipped_model_prunes_growth_and_leaves_a_job_at_its_fastest_size():
    from dl2_mesos.policy.dl2.dl2_policy import DL2Policy

    pol = DL2Policy()
    assert pol.config.prune_growth is True
    alloc = pol.decide(_state("vgg-16", 14, 1))
    ja = alloc["j0"]
    assert ja.num_ps <= 14 and ja.num_workers <= 1, "nothing beyond 14 PS + 1 worker is faster"

