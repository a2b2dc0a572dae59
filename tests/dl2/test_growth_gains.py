"""The ``gains`` feature set: what growing a job would give it, by the speed table."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from dl2_mesos.errors import ConfigError
from dl2_mesos.policy.dl2.checkpoint import load_checkpoint, save_checkpoint
from dl2_mesos.policy.dl2.decision_loop import NetChooser, run_slot, run_slot_greedy
from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
from dl2_mesos.policy.dl2.features import F_GAIN_B, F_GAIN_PS, F_GAIN_W, F_HEADROOM, input_size
from dl2_mesos.policy.dl2.growth import growth_gains, speed_and_best_lists
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.network import ActorCritic, NumpyActor
from dl2_mesos.policy.dl2.online_learner import SlotExperience
from dl2_mesos.policy.dl2.slot import SlotContext
from dl2_mesos.speed_model import default_speed_model

from .golden_states import seeded_state
from .greedy_check import assert_same_steps
from .test_growth import _state

GAINS = DL2Config(window=4, hidden=16, actions="elastic", features="gains")


def _log2_ratio(job_type: str, to: tuple[int, int], frm: tuple[int, int], uses_ps: bool = True) -> float:
    sm = default_speed_model()
    return math.log2(sm.samples_per_second(job_type, *to, uses_ps) / sm.samples_per_second(job_type, *frm, uses_ps))


def test_gains_are_the_log_speed_ups_of_each_step_by_the_table():
    speed, best = speed_and_best_lists("resnet-50", 16, 16, True)
    gw, gp, gb, head = growth_gains(speed, best, 2, 3, 1, 1)
    assert gw == pytest.approx(max(-1.0, min(1.0, _log2_ratio("resnet-50", (2, 4), (2, 3)))))
    assert gp == pytest.approx(max(-1.0, min(1.0, _log2_ratio("resnet-50", (3, 3), (2, 3)))))
    assert gb == pytest.approx(max(-1.0, min(1.0, _log2_ratio("resnet-50", (3, 4), (2, 3)))))
    fastest = max(speed[p][w] for p in range(2, 17) for w in range(3, 17))
    assert head == pytest.approx(min(math.log2(fastest / speed[2][3]), 3.0) / 3.0)
    assert head > 0 and gw < 0 < gp, "2 PS hold back a 4th worker; a 3rd PS speeds it up"


def test_a_waiting_job_is_measured_from_its_start_size_and_caps_give_zero():
    speed, best = speed_and_best_lists("vgg-16", 2, 3, True)
    assert growth_gains(speed, best, 0, 0, 1, 2) == growth_gains(speed, best, 1, 2, 1, 2)
    gw, gp, gb, _ = growth_gains(speed, best, 2, 3, 1, 1)  # at both caps
    assert (gw, gp, gb) == (0.0, 0.0, 0.0)
    # PyTorch (no PS): one row, so no PS or bundle step
    speed, best = speed_and_best_lists("resnet-50", 0, 8, False)
    gw, gp, gb, head = growth_gains(speed, best, 0, 2, 0, 1)
    assert gp == gb == 0.0 and gw == pytest.approx(_log2_ratio("resnet-50", (0, 3), (0, 2), False))


def test_slot_rows_carry_the_gains_at_the_in_slot_counts():
    state = _state("resnet-50", 1, 2)
    ctx = SlotContext(state, GAINS)
    rows = ctx.job_rows(np.array([0]))
    assert rows.shape == (1, 27)
    speed, best = speed_and_best_lists("resnet-50", 16, 16, True)
    assert tuple(rows[0, F_GAIN_W : F_HEADROOM + 1]) == pytest.approx(growth_gains(speed, best, 1, 2, 1, 1))
    assert rows[0, F_GAIN_PS] != 0 or rows[0, F_GAIN_B] != 0
    base = SlotContext(state, dataclasses.replace(GAINS, features="base"))
    assert base.job_rows(np.array([0])).shape == (1, 23)
    np.testing.assert_array_equal(base.job_rows(np.array([0]))[0], rows[0, :23])


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_fast_greedy_loop_keeps_the_gains_up_to_date(seed):
    """Each action re-computes its job's gains in the fast loop as in a full forward pass."""
    torch.manual_seed(seed)
    net = ActorCritic(DL2Config(window=8, hidden=32, actions="elastic", features="gains"))
    with torch.no_grad():
        net.actor.job_head.bias += 2.0
        net.actor.shared.enc[0].weight[:, F_GAIN_W : F_HEADROOM + 1] *= 20.0  # decisions follow the gains
    state = seeded_state(30, 12, seed=seed, varied=True)
    fast = NumpyActor(net.actor)
    ref = run_slot(state, net.cfg, NetChooser(net.actor, sample=False))
    got = run_slot_greedy(state, net.cfg, fast, record=True)
    assert len(ref[1]) > 5
    if assert_same_steps(ref, got, state, fast.logits):
        assert all(np.array_equal(x.features, y.features) for x, y in zip(ref[1], got[1]))


def test_config_and_checkpoint_keep_the_feature_set(tmp_path):
    with pytest.raises(ConfigError, match="features"):
        DL2Config(features="speed")
    assert DL2Config.from_dict({"window": 4}).features == "base"  # checkpoints before the field
    assert GAINS.job_features == 27 and input_size(4, "shared", "gains") == 4 * 27 + 5
    net = ActorCritic(GAINS)
    path = save_checkpoint(tmp_path / "g.pt", net)
    loaded = load_checkpoint(path)
    assert loaded.config.features == "gains"
    assert loaded.net.actor.shared.enc[0].weight.shape[1] == 27
    DL2Policy(model_path=path).decide(seeded_state(6, 3, seed=1))


def test_live_experience_of_either_width_is_accepted_and_others_refused():
    def exp(width: int) -> SlotExperience:
        return SlotExperience(slot=0, model_version=0, window=2, features=((0.0,) * width,), masks=((12,),),
                              actions=(12,), job_ids=(None,), reward=1.0, per_job=6)

    assert exp(2 * 27 + 5).to_slot_data().features.shape == (1, 59)
    assert exp(2 * 23 + 5).to_slot_data().features.shape == (1, 51)
    with pytest.raises(ValueError, match="input values"):
        exp(50).to_slot_data()
