"""The PPO-style clipped policy update (`dl2 train rl --clip`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from dl2_mesos.errors import ConfigError
from dl2_mesos.policy.dl2.features import input_size
from dl2_mesos.policy.dl2.learner import Learner, LearnerConfig, SlotData
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.network import ActorCritic, masked_log_probs

CFG = DL2Config(window=4, hidden=16)


def _slots(net: ActorCritic, n_slots: int = 6, per_slot: int = 5, seed: int = 0) -> list[SlotData]:
    rng = np.random.default_rng(seed)
    a = net.cfg.num_actions
    d = input_size(net.cfg.window, net.cfg.arch)
    out = []
    for _ in range(n_slots):
        masks = rng.random((per_slot, a)) < 0.6
        masks[:, -1] = True  # void is always valid
        acts = np.array([rng.choice(np.flatnonzero(m)) for m in masks], dtype=np.int64)
        out.append(SlotData(rng.normal(size=(per_slot, d)).astype(np.float32), masks, acts,
                            tuple(None for _ in acts), float(-rng.integers(1, 10))))
    return out


def test_stored_samples_carry_the_acting_policys_log_probability():
    torch.manual_seed(0)
    net = ActorCritic(CFG)
    learner = Learner(net, LearnerConfig(clip=0.2, batch_size=1000))
    learner.add_trajectory(_slots(net))
    b = learner.replay.sample(1000, np.random.default_rng(0))
    with torch.no_grad():
        logp = masked_log_probs(net.actor(torch.from_numpy(b.features)), torch.from_numpy(b.masks))
    want = logp.gather(1, torch.from_numpy(b.actions).unsqueeze(1)).squeeze(1).numpy()
    assert np.allclose(b.old_log_probs, want, atol=1e-5)
    plain = Learner(ActorCritic(CFG), LearnerConfig())
    plain.add_trajectory(_slots(net))
    assert np.isnan(plain.replay.sample(10, np.random.default_rng(0)).old_log_probs).all(), "no clip: not recorded"


def test_clipped_term_stops_pushing_beyond_the_trust_region():
    learner = Learner(ActorCritic(CFG), LearnerConfig(clip=0.2))
    old = np.log(np.array([0.5, 0.5, 0.5, 0.5, 0.5], np.float32))
    # new probabilities 0.55 (ratio 1.1, inside), 0.9 (1.8, outside), 0.3 (0.6, outside), 6 (ratio 12: dual clip)
    new = torch.log(torch.tensor([0.55, 0.9, 0.9, 0.3, 0.3 * 20], requires_grad=False)).requires_grad_(True)
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0])
    term = learner._policy_term(new, adv, old)
    term.sum().backward()
    grad = new.grad.numpy()
    assert grad[0] == pytest.approx(1.1, rel=1e-4), "inside the region: d(ratio*A)/dlogp = ratio*A"
    assert grad[1] == 0.0, "positive advantage past 1+eps: no further push"
    assert grad[2] == pytest.approx(-1.8, rel=1e-4), "a negative advantage past 1+eps is still corrected"
    assert grad[3] == 0.0, "negative advantage below 1-eps: no further push"
    assert grad[4] == 0.0 and term[4].item() == pytest.approx(-3.0), "dual clip bounds a stale sample's term at 3A"
    unknown = learner._policy_term(new.detach().requires_grad_(True), adv, np.full(5, np.nan, np.float32))
    assert torch.allclose(unknown, adv * new.detach()), "no recorded probability: the plain gradient"


def test_clipped_updates_move_the_policy_less_than_plain_ones_at_the_same_rate():
    def moved(clip: float) -> float:
        torch.manual_seed(1)
        net = ActorCritic(CFG)
        learner = Learner(net, LearnerConfig(clip=clip, lr_actor=5e-2, batch_size=30, entropy_start=0.0,
                                             entropy_end=0.0, seed=1))
        slots = _slots(net, seed=2)
        learner.add_trajectory(slots)
        x = torch.from_numpy(np.concatenate([s.features for s in slots]))
        m = torch.from_numpy(np.concatenate([s.masks for s in slots]))
        with torch.no_grad():
            before = masked_log_probs(net.actor(x), m).exp()
        learner.update(40)
        with torch.no_grad():
            after = masked_log_probs(net.actor(x), m).exp()
        return float((after - before).abs().sum(dim=1).mean())

    assert moved(0.1) < 0.8 * moved(0.0)


def test_clip_out_of_range_is_refused():
    with pytest.raises(ConfigError, match="clip"):
        LearnerConfig(clip=1.5)
    from dl2_mesos.policy.train_cli import train_rl

    res = CliRunner().invoke(train_rl, ["--clip", "1.0", "--iterations", "1"])
    assert res.exit_code == 2 and "--clip" in res.output
