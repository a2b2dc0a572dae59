"""The fast greedy loop against full forward passes on many random states and random networks.

The fast loop computes the network in a rearranged form (see :mod:`dl2_mesos.policy.dl2.greedy`),
equal to a full forward pass up to float rounding; a decision can differ only where two logits
are within ~1e-7 of each other (see :mod:`.greedy_check`). These sweeps check every step
(action, job, recorded input and mask) and the final allocation and placement against the numpy
and the torch forward passes, over seeded random networks of several sizes (independent of the
shipped model's weights), random cluster states (loaded and empty clusters, many windows, both
slot starts) and random head biases so that slots run from one step to hundreds.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dl2_mesos.policy.dl2.decision_loop import NetChooser, run_slot, run_slot_chosen, run_slot_greedy
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.network import ActorCritic, NumpyActor

from .golden_states import seeded_state
from .greedy_check import assert_same_steps, torch_greedy, torch_logits



def _random_case(seed: int, big: bool = False):
    rng = np.random.default_rng(seed)
    if big:
        cfg = DL2Config(window=40, hidden=256, layers=2)
    else:
        cfg = DL2Config(window=int(rng.choice([2, 5, 8, 16])), hidden=int(rng.choice([16, 32, 64])),
                        layers=int(rng.integers(1, 4)), start=str(rng.choice(["current", "zero"])),
                        features="gains" if seed % 3 == 0 else "base")  # a third see the growth gains
    torch.manual_seed(seed)
    net = ActorCritic(cfg)
    with torch.no_grad():  # from "void at once" to "add until full"
        net.actor.job_head.bias += float(rng.normal(2.0, 2.0))
        net.actor.void_head[2].bias += float(rng.normal(0.0, 1.0))
        net.actor.shared.enc[-1].weight.mul_(1.0 + 0.2 * torch.randn_like(net.actor.shared.enc[-1].weight))
        net.actor.shared.enc[-1].bias.add_(0.1 * torch.randn_like(net.actor.shared.enc[-1].bias))
    n_jobs = int(rng.integers(1, 90)) if not big else int(rng.integers(30, 60))
    n_agents = int(rng.integers(1, 60)) if not big else int(rng.integers(40, 150))
    # the elastic action space (grow, shrink, pause) and varied jobs (PyTorch, min_workers 2-3)
    # in every other case
    elastic = seed % 2 == 1
    if elastic:
        cfg = DL2Config(**{**cfg.to_dict(), "actions": "elastic"})
        torch.manual_seed(seed)
        net = ActorCritic(cfg)
        with torch.no_grad():
            net.actor.job_head.bias += torch.from_numpy(rng.normal(1.0, 2.0, cfg.per_job).astype(np.float32))
            net.actor.void_head[2].bias += float(rng.normal(0.0, 1.0))
    state = seeded_state(n_jobs, n_agents, seed=seed, run_frac=float(rng.random()), varied=elastic)
    # half the cases see the jobs in the priority order (windows from both ends of the ranking)
    net.cfg = DL2Config(**{**net.cfg.to_dict(), "order": "priority" if seed % 4 >= 2 else "arrival"})
    # and half of them prune growth that cannot make a job faster (the shipped model's rule)
    net.cfg = DL2Config(**{**net.cfg.to_dict(), "prune_growth": seed % 8 >= 4})
    return net, state


@pytest.mark.parametrize("block", range(10))
def test_same_steps_as_numpy_forward_passes_on_random_states(block):
    steps = parted = 0
    for seed in range(1000 + 10 * block, 1010 + 10 * block):
        net, state = _random_case(seed)
        fast_actor = NumpyActor(net.actor)
        ref = run_slot(state, net.cfg, NetChooser(net.actor, sample=False))
        fast = run_slot_greedy(state, net.cfg, fast_actor, record=True)
        if assert_same_steps(ref, fast, state, fast_actor.logits):
            assert all(np.array_equal(x.features, y.features) and np.array_equal(x.mask, y.mask)
                       for x, y in zip(ref[1], fast[1])), seed
        else:
            parted += 1
        steps += len(ref[1])
    assert steps > 100, "the random cases make decisions"
    assert parted <= 1, "near-ties are rare (about one step in 40,000)"


@pytest.mark.parametrize("block", range(2))
def test_same_steps_as_torch_forward_passes_on_random_states(block):
    torch.set_num_threads(1)
    parted = 0
    for seed in range(2000 + 8 * block, 2008 + 8 * block):
        net, state = _random_case(seed)
        ref = run_slot(state, net.cfg, torch_greedy(net.actor))
        fast = run_slot_greedy(state, net.cfg, NumpyActor(net.actor))
        parted += not assert_same_steps(ref, fast, state, torch_logits(net.actor))
    assert parted <= 1, "near-ties are rare"


@pytest.mark.parametrize("seed", [3000, 3001, 3002])
def test_same_steps_with_the_default_network_size(seed):
    """J = 40, 2 x 256 (the shipped architecture), random weights."""
    net, state = _random_case(seed, big=True)
    fast_actor = NumpyActor(net.actor)
    ref = run_slot(state, net.cfg, NetChooser(net.actor, sample=False))
    fast = run_slot_greedy(state, net.cfg, fast_actor)
    assert_same_steps(ref, fast, state, fast_actor.logits)
    assert len(ref[1]) > 5


def _same_record(ref, fast) -> bool:
    """Whether two (allocation, steps) results took the same steps with the same recorded
    inputs and masks and ended at the same allocation."""
    (a1, s1), (a2, s2) = ref, fast
    return a1 == a2 and len(s1) == len(s2) and all(
        x.action == y.action and x.job_id == y.job_id and np.array_equal(x.features, y.features)
        and np.array_equal(x.mask, y.mask) for x, y in zip(s1, s2))


@pytest.mark.parametrize("block", range(4))
def test_sampled_fast_loop_draws_what_the_sampling_chooser_draws(block, monkeypatch):
    """The incremental loop with a generator (training rollouts) takes the steps of ``run_slot``
    with a sampling chooser seeded alike: same draws, same exploration fixes (every other case
    explores with probability 0.4, and its network favours +worker, so that jobs become
    unbalanced and the fixes happen), same recorded inputs and masks, same allocation."""
    from dl2_mesos.policy.dl2 import decision_loop

    fixes = []
    rule = decision_loop.bad_state_action

    def counted(ctx, window, mask):  # the reference loop's rule, counting the fixes it makes
        a = rule(ctx, window, mask)
        fixes.append(a is not None)
        return a

    monkeypatch.setattr(decision_loop, "bad_state_action", counted)
    steps = parted = 0
    for seed in range(4000 + 25 * block, 4025 + 25 * block):
        net, state = _random_case(seed)
        eps = 0.4 if seed % 2 else 0.0
        if eps:
            with torch.no_grad():
                net.actor.job_head.bias[0] += 4.0  # +worker
        chooser = NetChooser(net.actor, sample=True, epsilon=eps, seed=seed)
        ref = run_slot(state, net.cfg, chooser)
        fast = run_slot_chosen(state, net.cfg, NetChooser(net.actor, sample=True, epsilon=eps, seed=seed))
        parted += not _same_record(ref, fast)
        steps += len(ref[1])
    assert steps > 200 and sum(fixes) >= 3, "the random cases make decisions, some of them fixes"
    assert parted <= 1, "a draw parts only within float rounding of a probability boundary"


def test_sampled_fast_loop_changes_with_the_seed():
    """The draws come from the generator: another seed takes other steps somewhere (so the
    comparison above can fail)."""
    differ = 0
    for seed in range(4100, 4110):
        net, state = _random_case(seed)
        a = run_slot_chosen(state, net.cfg, NetChooser(net.actor, sample=True, seed=1))
        b = run_slot_chosen(state, net.cfg, NetChooser(net.actor, sample=True, seed=2))
        differ += not _same_record(a, b)
    assert differ >= 3
