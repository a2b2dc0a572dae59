"""Self-imitation of the elite rollout (`dl2 train rl --elite`)."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from dl2_mesos.errors import ConfigError
from dl2_mesos.policy.dl2.features import input_size
from dl2_mesos.policy.dl2.learner import Learner, LearnerConfig, SlotData
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.network import ActorCritic, masked_log_probs
from dl2_mesos.policy.dl2.trainer import RLConfig

CFG = DL2Config(window=4, hidden=16)


def _rollout(net: ActorCritic, rewards: list[float], seed: int, per_slot: int = 4) -> list[SlotData]:
    rng = np.random.default_rng(seed)
    a = net.cfg.num_actions
    d = input_size(net.cfg.window, net.cfg.arch)
    out = []
    for r in rewards:
        masks = rng.random((per_slot, a)) < 0.6
        masks[:, -1] = True  # void is always valid
        acts = np.array([rng.choice(np.flatnonzero(m)) for m in masks], dtype=np.int64)
        out.append(SlotData(rng.normal(size=(per_slot, d)).astype(np.float32), masks, acts,
                            tuple(None for _ in acts), float(r)))
    return out


def _stored(learner: Learner):
    return learner.replay.sample(len(learner.replay), np.random.default_rng(0))


def test_only_the_best_rollout_is_stored_with_target_one():
    net = ActorCritic(CFG)
    learner = Learner(net, LearnerConfig(elite=True))
    worse, best, middle = (_rollout(net, [-5, -5, -5], 1), _rollout(net, [-1, -2, -1, -1], 2),
                           _rollout(net, [-3, -3], 3))
    n = learner.add_trajectories([(worse, True), (best, True), (middle, True)])
    assert n == len(learner.replay) == 16, "the 4 slots x 4 inferences of the best rollout, nothing else"
    b = _stored(learner)
    want = {(tuple(f.round(5)), int(x)) for s in best for f, x in zip(s.features, s.actions)}
    assert {(tuple(f.round(5)), int(x)) for f, x in zip(b.features, b.actions)} == want
    assert np.all(b.returns == 1.0)


def test_a_best_rollout_within_the_margin_is_not_stored():
    net = ActorCritic(CFG)
    learner = Learner(net, LearnerConfig(elite=True, elite_margin=0.05))
    # totals -100 (best), -102, -104: the best is 3% better than the others' mean (-103)
    near = [(_rollout(net, [-50, -50], 1), True), (_rollout(net, [-51, -51], 2), True),
            (_rollout(net, [-52, -52], 3), True)]
    assert learner.add_trajectories(near) == 0 and len(learner.replay) == 0
    # -80 against -103: 22% better
    far = [(_rollout(net, [-40, -40], 4), True)] + near[1:]
    assert learner.add_trajectories(far) == 8
    # ties: nothing stands out even with margin 0
    tied = Learner(net, LearnerConfig(elite=True))
    assert tied.add_trajectories([(_rollout(net, [-1, -1], 5), True), (_rollout(net, [-2], 6), True)]) == 0


def test_without_replay_the_buffer_holds_the_latest_elite_alone():
    net = ActorCritic(CFG)
    learner = Learner(net, LearnerConfig(elite=True, replay=False))
    learner.add_trajectories([(_rollout(net, [-1, -1], 1), True), (_rollout(net, [-9, -9], 2), True)])
    learner.add_trajectories([(_rollout(net, [-1, -1, -1], 3), True), (_rollout(net, [-9], 4), True)])
    assert len(learner.replay) == 12
    kept = Learner(net, LearnerConfig(elite=True))
    kept.add_trajectories([(_rollout(net, [-1, -1], 1), True), (_rollout(net, [-9, -9], 2), True)])
    kept.add_trajectories([(_rollout(net, [-1, -1, -1], 3), True), (_rollout(net, [-9], 4), True)])
    assert len(kept.replay) == 20


def test_updates_raise_the_elites_action_probabilities_and_leave_the_critic_alone():
    torch.manual_seed(0)
    net = ActorCritic(CFG)
    learner = Learner(net, LearnerConfig(elite=True, lr_actor=1e-2, batch_size=32, entropy_start=0.0, entropy_end=0.0))
    best = _rollout(net, [-1, -1, -1], 7)
    learner.add_trajectories([(best, True), (_rollout(net, [-5, -5, -5], 8), True)])
    x = torch.from_numpy(np.concatenate([s.features for s in best]))
    m = torch.from_numpy(np.concatenate([s.masks for s in best]))
    a = torch.from_numpy(np.concatenate([s.actions for s in best]))

    def chosen() -> torch.Tensor:
        with torch.no_grad():
            return masked_log_probs(net.actor(x), m).gather(1, a.unsqueeze(1)).squeeze(1).exp()

    critic = {k: v.clone() for k, v in net.critic.state_dict().items()}
    before = chosen()
    stats = learner.update(30)
    after = chosen()
    assert float(after.mean()) > float(before.mean()) + 0.2, (before, after)
    assert all(torch.equal(critic[k], v) for k, v in net.critic.state_dict().items())
    assert stats["value_loss"] == 0.0


def test_elite_settings_that_cannot_work_are_refused():
    with pytest.raises(ConfigError, match="elite_margin"):
        LearnerConfig(elite=True, elite_margin=-0.1)
    with pytest.raises(ConfigError, match="per_job_reward"):
        LearnerConfig(elite=True, per_job_reward=True)
    with pytest.raises(ConfigError, match="same_trace"):
        RLConfig(learner=LearnerConfig(elite=True), episodes_per_iteration=8)
    with pytest.raises(ConfigError, match="2 episodes"):
        RLConfig(learner=LearnerConfig(elite=True), same_trace=True, episodes_per_iteration=1)
    net = ActorCritic(CFG)
    with pytest.raises(ValueError, match="several rollouts"):
        Learner(net, LearnerConfig(elite=True)).add_trajectories([(_rollout(net, [-1], 1), True)])
    from dl2_mesos.cli import main

    res = CliRunner().invoke(main, ["train", "rl", "--elite", "--elite-margin", "-1", "--iterations", "1"])
    assert res.exit_code == 2 and "--elite-margin" in res.output


def test_train_rl_elite_on_tiny(tmp_path):
    from dl2_mesos.cli import main

    r = CliRunner()
    sl, rl = tmp_path / "sl.pt", tmp_path / "rl"
    res = r.invoke(main, ["train", "sl", "--teacher", "optimus", "--preset", "tiny", "--seeds", "1-2", "--epochs", "1",
                          "--window", "6", "--hidden", "16", "--out", str(sl)])
    assert res.exit_code == 0, res.output
    res = r.invoke(main, ["train", "rl", "--init", str(sl), "--out", str(rl), "--preset", "tiny", "--iterations", "3",
                          "--workers", "0", "--episodes-per-iteration", "4", "--updates", "2", "--batch-size", "16",
                          "--val-seeds", "1001", "--reward", "jct", "--elite"])
    assert res.exit_code == 0, res.output
    rows = [r for r in csv.DictReader(open(rl / "log.csv")) if r["iteration"] != "0"]
    assert len(rows) == 3
    # one rollout of an iteration's 4 at most is stored: fewer samples than the 4 rollouts' decisions
    assert all(int(row["samples"]) < int(row["steps"]) for row in rows), rows
    assert any(int(row["samples"]) > 0 for row in rows), rows
