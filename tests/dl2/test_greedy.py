"""The fast greedy loop decides like full forward passes, and its shortcuts equal what they replace."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dl2_mesos.policy.dl2.decision_loop import NetChooser, run_slot, run_slot_greedy
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
from dl2_mesos.policy.dl2.features import F_VALID, NUM_GLOBAL_FEATURES, NUM_JOB_FEATURES
from dl2_mesos.policy.dl2.greedy import kernel_of
from dl2_mesos.policy.dl2.network import ActorCritic, NumpyActor
from dl2_mesos.policy.dl2.slot import BUNDLE, PS, WORKER, SlotContext

from .conftest import make_state
from .golden_states import CASES, golden_states, seeded_state
from .greedy_check import assert_same_steps, torch_greedy, torch_logits


@pytest.fixture(scope="module")
def shipped() -> DL2Policy:
    return DL2Policy()


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_shipped_model_decides_like_full_forward_passes(shipped, name):
    """Whatever the shipped weights are: the fast loop takes the reference's steps (parting only
    at a float near-tie, see greedy_check)."""
    state = golden_states()[name]
    cfg = shipped.config
    a1, s1 = run_slot(state, cfg, NetChooser(shipped.net.actor, sample=False))  # numpy, full pass
    a2, s2 = run_slot_greedy(state, cfg, shipped._fast, record=True)
    if assert_same_steps((a1, s1), (a2, s2), state, shipped._fast.logits):
        assert shipped.decide(state) == a2
        assert all(np.array_equal(x.mask, y.mask) for x, y in zip(s1, s2)), "recorded masks"
        assert all(np.array_equal(x.features, y.features) for x, y in zip(s1, s2)), "recorded inputs"
    if name in ("loaded-30-on-13", "full-50-on-8"):
        torch_ref = run_slot(state, cfg, torch_greedy(shipped.net.actor))
        assert_same_steps(torch_ref, (a2, s2), state, torch_logits(shipped.net.actor))


def test_the_step_check_catches_a_different_network():
    """assert_same_steps fails when the fast loop runs a (slightly) different network."""
    torch.manual_seed(8)
    net = ActorCritic(DL2Config(window=8, hidden=32))
    with torch.no_grad():
        net.actor.job_head.bias += 3.0
    state = seeded_state(20, 40, seed=3)
    ref = run_slot(state, net.cfg, NetChooser(net.actor, sample=False))
    assert len(ref[1]) > 50
    fast = NumpyActor(net.actor)
    assert_same_steps(ref, run_slot_greedy(state, net.cfg, fast), state, fast.logits)
    with torch.no_grad():
        net.actor.job_head.bias[1] += 0.05  # +PS a little more attractive
    with pytest.raises(AssertionError):
        assert_same_steps(ref, run_slot_greedy(state, net.cfg, NumpyActor(net.actor)), state,
                          NumpyActor(net.actor).logits)


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_projection_algebra_gives_the_network_logits(layers):
    """The folded form (LayerNorm into the projection, pooled mean as a sum of per-job parts,
    biases in the global row) is the network, up to float rounding."""
    torch.manual_seed(layers)
    cfg = DL2Config(window=6, hidden=48, layers=layers)
    net = ActorCritic(cfg)
    with torch.no_grad():  # non-trivial LayerNorm and head biases
        for p in net.actor.parameters():
            p.add_(0.3 * torch.randn_like(p))
    fast = NumpyActor(net.actor)
    kernel = kernel_of(fast)
    rng = np.random.default_rng(layers)
    for k in range(1, 7):
        rows = rng.random((k, NUM_JOB_FEATURES), dtype=np.float32)
        rows[:, F_VALID] = 1.0
        g = rng.random(NUM_GLOBAL_FEATURES, dtype=np.float32)
        x = np.zeros((6, NUM_JOB_FEATURES), dtype=np.float32)
        x[:k] = rows
        want = fast.logits(np.concatenate([x.ravel(), g]))
        want = np.append(want[: 3 * k], want[-1])
        got = kernel.logits_of(rows, g)
        assert np.allclose(got, want, rtol=1e-5, atol=1e-5), (k, np.abs(got - want).max())
        with torch.no_grad():
            ref = net.actor(torch.from_numpy(np.concatenate([x.ravel(), g]))[None])[0].numpy()
        assert np.allclose(got, np.append(ref[: 3 * k], ref[-1]), rtol=1e-5, atol=1e-5)


def test_equal_rows_give_exactly_equal_logits():
    """Jobs with identical features tie exactly, so the first column wins as in the reference."""
    torch.manual_seed(4)
    kernel = kernel_of(NumpyActor(ActorCritic(DL2Config(window=8, hidden=64)).actor))
    row = np.random.default_rng(0).random(NUM_JOB_FEATURES, dtype=np.float32)
    row[F_VALID] = 1.0
    logits = kernel.logits_of(np.stack([row] * 5), np.zeros(NUM_GLOBAL_FEATURES, dtype=np.float32))
    assert (logits[:-1].reshape(5, 3) == logits[:3]).all()


def test_unsupported_layer_stacks_are_refused():
    fast = NumpyActor(ActorCritic(DL2Config(window=4, hidden=8)).actor)
    fast.void_head = fast.void_head[:1]
    with pytest.raises(ValueError, match="head"):
        kernel_of(fast)


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
