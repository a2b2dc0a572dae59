"""State features, action masks and the within-slot decision loop."""

from __future__ import annotations

import numpy as np
import pytest

from dl2_mesos.allocation import validate_allocation
from dl2_mesos.policy.dl2.decision_loop import random_chooser, run_slot
from dl2_mesos.policy.dl2.sampling import bad_state_action
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.features import F_PS, F_VALID, F_WORKERS, NUM_GLOBAL_FEATURES, NUM_JOB_FEATURES
from dl2_mesos.policy.dl2.slot import SlotContext

from .conftest import make_state


def test_feature_and_mask_shapes_with_padding():
    cfg = DL2Config(window=6)
    state = make_state(4, 10)
    ctx = SlotContext(state, cfg)
    assert len(ctx.windows) == 1 and len(ctx.windows[0]) == 4
    x = ctx.features(ctx.windows[0], 0)
    assert x.shape == (6 * NUM_JOB_FEATURES + NUM_GLOBAL_FEATURES,)
    assert x.dtype == np.float32
    cols = x[: 6 * NUM_JOB_FEATURES].reshape(6, NUM_JOB_FEATURES)
    assert cols[:4, F_VALID].tolist() == [1, 1, 1, 1]
    assert not cols[4:].any(), "empty columns are all zero"
    assert np.all(np.abs(x) <= 10.0), "features are normalised"
    m = ctx.mask(ctx.windows[0])
    assert m.shape == (3 * 6 + 1,) and m[-1]
    assert not m[3 * 4 : 3 * 6].any(), "actions of empty columns are masked"


def test_mask_respects_caps_and_fit():
    cfg = DL2Config(window=4)
    # job 0 at its PS cap (2), job 1 at its worker cap; one node only
    state = make_state(2, 2, running={"j0000": (2, 1), "j0001": (1, 2)}, max_tasks=2)
    ctx = SlotContext(state, cfg)
    # both jobs still below one cap, so both are in the window
    win = ctx.windows[0]
    m = ctx.mask(win)
    assert m[0] and not m[1] and not m[2], "job 0: +worker ok, +PS and bundle masked at the PS cap"
    assert not m[3] and m[4] and not m[5], "job 1: +PS ok, +worker and bundle masked at the worker cap"
    with pytest.raises(ValueError):
        ctx.apply(win, 1)  # masked: PS cap


def test_no_fit_masks_everything_but_void():
    cfg = DL2Config(window=4)
    # one node (8 cpus, 2 gpus) filled by a running job's 2 bundles
    state = make_state(2, 1, running={"j0000": (2, 2)})
    ctx = SlotContext(state, cfg)
    m = ctx.mask(ctx.windows[0])
    assert m.tolist() == [False] * 12 + [True]
    alloc, steps = run_slot(state, cfg, random_chooser(0))
    assert steps == [], "no decision is recorded when nothing can be added"
    assert alloc.get_counts("j0000").num_ps == 2 and alloc.get_counts("j0001").is_zero


def test_current_start_keeps_running_counts_and_void_changes_nothing():
    cfg = DL2Config(window=4, start="current")
    state = make_state(3, 20, running={"j0000": (3, 2), "j0001": (1, 4)})
    alloc, steps = run_slot(state, cfg, lambda x, m, c, w: 3 * cfg.window)  # always void
    assert alloc.get_counts("j0000").num_ps == 3 and alloc.get_counts("j0000").num_workers == 2
    assert alloc.get_counts("j0001").num_workers == 4
    # the waiting job got its starter bundle
    assert alloc.get_counts("j0002").num_ps == 1 and alloc.get_counts("j0002").num_workers == 1
    assert len(steps) == 1 and steps[0].job_id is None


def test_zero_start_rebuilds_from_starter_bundles():
    cfg = DL2Config(window=4, start="zero")
    state = make_state(3, 20, running={"j0000": (3, 2)})
    alloc, _ = run_slot(state, cfg, lambda x, m, c, w: 3 * cfg.window)
    assert all((alloc.get_counts(j).num_ps, alloc.get_counts(j).num_workers) == (1, 1) for j in alloc)


def test_features_track_within_slot_counts():
    cfg = DL2Config(window=4)
    state = make_state(2, 20)
    ctx = SlotContext(state, cfg)
    win = ctx.windows[0]
    before = ctx.features(win, 0).copy()
    assert ctx.apply(win, 2)  # bundle for job 0
    after = ctx.features(win, 0)
    assert after[F_PS] == pytest.approx(before[F_PS] + 1 / 16)
    assert after[F_WORKERS] == pytest.approx(before[F_WORKERS] + 1 / 16)


def test_many_jobs_use_successive_windows_and_stay_within_capacity():
    cfg = DL2Config(window=20)
    state = make_state(1000, 1000)
    ctx = SlotContext(state, cfg)
    assert len(ctx.windows) == 50
    alloc, steps = run_slot(state, cfg, random_chooser(1))
    validate_allocation(alloc, state)
    assert len(alloc) == 1000, "every job got at least its starter bundle"
    windows_seen = {round(float(s.features[-1]), 4) for s in steps}
    assert len(windows_seen) > 1, "decisions were made in more than one window"


def test_job_aware_exploration_fixes_bad_states():
    cfg = DL2Config(window=4)
    state = make_state(3, 20, running={"j0000": (1, 1)})
    ctx = SlotContext(state, cfg)
    win = ctx.windows[0]
    for _ in range(11):
        ctx.apply(win, 0)  # j0000: 12 workers, 1 PS -> ratio > 10
    m = ctx.mask(win)
    assert bad_state_action(ctx, win, m) == 1, "+PS for the worker-heavy job"
