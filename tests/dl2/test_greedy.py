"""The optimised greedy loop decides exactly as before, and its shortcuts equal what they replace."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dl2_mesos.policy.dl2.agent import NetChooser, run_slot, run_slot_greedy
from dl2_mesos.policy.dl2.config import DL2Config
from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
from dl2_mesos.policy.dl2.greedy import kernel_of, run_ops
from dl2_mesos.policy.dl2.network import ActorCritic, NumpyActor
from dl2_mesos.policy.dl2.slot import BUNDLE, PS, WORKER, SlotContext

from .conftest import make_state
from .golden_states import GOLDEN, as_counts, golden_states, seeded_state


@pytest.fixture(scope="module")
def shipped() -> DL2Policy:
    return DL2Policy()


def test_shipped_model_reproduces_the_pre_optimisation_decisions(shipped):
    expected = json.loads(GOLDEN.read_text())
    states = golden_states()
    assert set(states) == set(expected)
    for name, state in states.items():
        assert as_counts(shipped.decide(state)) == expected[name], name


@pytest.mark.parametrize("name", ["loaded-30-on-13", "full-50-on-8", "windows-130-on-80"])
def test_fast_loop_matches_full_forward_passes_step_by_step(shipped, name):
    state = golden_states()[name]
    cfg = shipped.config
    a1, s1 = run_slot(state, cfg, NetChooser(shipped.net.actor, sample=False))
    a2, s2 = run_slot_greedy(state, cfg, shipped._fast, record=True)
    assert a1 == a2
    assert [s.action for s in s1] == [s.action for s in s2]
    assert [s.job_id for s in s1] == [s.job_id for s in s2]
    assert all(np.array_equal(x.mask, y.mask) for x, y in zip(s1, s2)), "recorded masks"
    assert all(np.array_equal(x.features, y.features) for x, y in zip(s1, s2)), "recorded inputs"


def test_run_ops_is_bit_identical_to_the_reference_layers(shipped):
    fast = shipped._fast
    rng = np.random.default_rng(0)
    rows = rng.random((7, 23), dtype=np.float32)
    for k in range(1, 8):
        assert np.array_equal(run_ops(fast.enc, rows[:k]), fast._run(fast.enc, rows[:k]))
    kernel = kernel_of(fast)
    many = rng.random((300, 23), dtype=np.float32)
    many[:, 8] = 1.0
    for r in many:
        assert np.array_equal(kernel.encode_one(r), fast._run(fast.enc, r[None, :])[0])
    z = rng.random(256 + 5, dtype=np.float32)
    c, v = kernel_of(fast).heads(z)
    pooled, g = z[:256], z[256:]
    assert np.array_equal(c, fast.context_part(pooled, g))
    assert v == fast.void_logit(pooled, g)[0]


def test_fit_counters_agree_with_the_board_after_every_placement():
    cfg = DL2Config(window=40)
    state = seeded_state(12, 40, seed=9, run_frac=0.3)
    ctx = SlotContext(state, cfg)
    rng = np.random.default_rng(1)
    placed = 0
    for _ in range(400):
        want = [ctx.board.fits_anywhere(d) for d in ctx._demands]
        assert ctx.fits().tolist() == want
        i, kind = int(rng.integers(ctx.n)), int(rng.choice([WORKER, PS, BUNDLE]))
        placed += ctx._place(i, kind)
        if not any(want):
            break
    assert placed > 10 and not ctx.fits().all(), "the cluster filled up during the test"


def test_greedy_loop_on_untrained_nets_of_other_sizes():
    torch.manual_seed(3)
    net = ActorCritic(DL2Config(window=5, hidden=24, layers=3))
    with torch.no_grad():
        net.actor.job_head.bias += 6.0  # make it add tasks
    state = make_state(23, 30, running={"j0000": (2, 2), "j0007": (1, 3)})
    a1, s1 = run_slot(state, net.cfg, NetChooser(net.actor, sample=False))
    a2, s2 = run_slot_greedy(state, net.cfg, NumpyActor(net.actor))
    assert a1 == a2 and [s.action for s in s1] == [s.action for s in s2] and len(s1) > 10
