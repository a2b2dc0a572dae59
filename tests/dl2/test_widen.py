"""Widening a trained model to the ``gains`` features: same decisions at first, then free to learn."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from dl2_mesos.cli import main
from dl2_mesos.errors import ConfigError
from dl2_mesos.policy.dl2.checkpoint import load_checkpoint, save_checkpoint
from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
from dl2_mesos.policy.dl2.features import FEATURE_SETS, NUM_GLOBAL_FEATURES
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.network import ActorCritic
from dl2_mesos.policy.dl2.widen import widen_features

from .golden_states import seeded_state

BASE, GAINS = FEATURE_SETS["base"], FEATURE_SETS["gains"]


def _inputs(batch: int, window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random base inputs, and the same with random values in the added gain columns."""
    jobs = torch.randn(batch, window, GAINS)
    jobs[:, :, 8] = (torch.rand(batch, window) > 0.3).float()  # the valid flag
    g = torch.randn(batch, NUM_GLOBAL_FEATURES)
    narrow = torch.cat([jobs[:, :, :BASE].reshape(batch, -1), g], dim=1)
    wide = torch.cat([jobs.reshape(batch, -1), g], dim=1)
    return narrow, wide


@pytest.mark.parametrize("arch", ["shared", "flat"])
def test_a_widened_model_computes_the_same_logits_and_values(arch):
    torch.manual_seed(3)
    net = ActorCritic(DL2Config(window=5, hidden=16, arch=arch, actions="elastic"))
    wide = widen_features(net, "gains")
    assert wide.cfg.features == "gains" and net.cfg.features == "base"
    narrow_x, wide_x = _inputs(7, 5)
    with torch.no_grad():
        torch.testing.assert_close(wide.actor(wide_x), net.actor(narrow_x), rtol=0, atol=1e-6)
        torch.testing.assert_close(wide.critic(wide_x), net.critic(narrow_x), rtol=0, atol=1e-6)
    # the new inputs' weights get gradients: training can use them
    wide.actor(wide_x).sum().backward()
    first = wide.actor.shared.enc[0] if arch == "shared" else wide.actor.trunk[0]
    assert first.weight.grad.abs().sum() > 0
    assert first.weight.grad[:, BASE:GAINS].abs().sum() > 0  # the first job's gain columns either way


def test_the_widened_policy_decides_exactly_as_the_original(tmp_path):
    torch.manual_seed(5)
    net = ActorCritic(DL2Config(window=8, hidden=32, actions="elastic"))
    with torch.no_grad():
        net.actor.job_head.bias += 1.5  # grow and shrink rather than stop at once
    a = save_checkpoint(tmp_path / "base.pt", net)
    b = save_checkpoint(tmp_path / "wide.pt", widen_features(net, "gains"))
    for seed in (1, 2, 3):
        state = seeded_state(20, 6, seed=seed, varied=True)
        assert DL2Policy(model_path=a).decide(state) == DL2Policy(model_path=b).decide(state)


def test_widening_refuses_to_drop_inputs_and_keeps_a_model_already_wide():
    wide = ActorCritic(DL2Config(window=3, hidden=8, features="gains"))
    assert widen_features(wide, "gains") is wide
    with pytest.raises(ConfigError, match="cannot be moved to 'base'"):
        widen_features(wide, "base")
    with pytest.raises(ConfigError, match="features must be one of"):
        widen_features(ActorCritic(DL2Config(window=3, hidden=8)), "speed")


def test_cli_rl_and_sl_widen_a_base_checkpoint_and_refuse_to_narrow(tmp_path):
    r = CliRunner()
    sl = tmp_path / "sl.pt"
    res = r.invoke(main, ["train", "sl", "--teacher", "drf", "--preset", "tiny", "--seeds", "1", "--epochs", "1",
                          "--window", "6", "--hidden", "16", "--out", str(sl)])
    assert res.exit_code == 0, res.output
    assert load_checkpoint(sl).config.features == "base"
    rl = tmp_path / "rl"
    args = ["train", "rl", "--preset", "tiny", "--iterations", "1", "--workers", "0",
            "--updates", "1", "--batch-size", "16", "--val-seeds", "1001", "--reward", "jct", "--baseline", "input"]
    res = r.invoke(main, [*args, "--init", str(sl), "--out", str(rl), "--features", "gains"])
    assert res.exit_code == 0, res.output
    best = load_checkpoint(rl / "best.pt")
    assert best.config.features == "gains" and best.net.actor.shared.enc[0].weight.shape[1] == GAINS
    # no --features with --init: the checkpoint's set
    res = r.invoke(main, [*args, "--init", str(sl), "--out", str(tmp_path / "same")])
    assert res.exit_code == 0, res.output
    assert load_checkpoint(tmp_path / "same" / "best.pt").config.features == "base"
    # narrowing is refused with a clear message, and nothing is written
    res = r.invoke(main, [*args, "--init", str(rl / "best.pt"), "--out", str(tmp_path / "narrow"),
                          "--features", "base"])
    assert res.exit_code != 0 and "cannot be moved to 'base'" in res.output
    assert not (tmp_path / "narrow" / "best.pt").exists()
    # the warm-up can be widened too (e.g. more DAgger rounds with the gains)
    wide_sl = tmp_path / "wide_sl.pt"
    res = r.invoke(main, ["train", "sl", "--teacher", "drf", "--preset", "tiny", "--seeds", "1", "--epochs", "1",
                          "--init", str(sl), "--features", "gains", "--out", str(wide_sl)])
    assert res.exit_code == 0, res.output
    assert load_checkpoint(wide_sl).config.features == "gains"
