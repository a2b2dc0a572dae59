"""The decision-loop rules as checkpoint settings: validated, off in old checkpoints, and switched on
by `dl2 train set-rules` without touching the weights or the other rules."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from click.testing import CliRunner

from dl2_mesos.cli import main as cli_main
from dl2_mesos.errors import ConfigError
from dl2_mesos.policy.dl2.checkpoint import load_checkpoint, save_checkpoint
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.network import ActorCritic

BASE = DL2Config(window=4, hidden=16, actions="elastic")

# (setting, set-rules flag, a value that is not a bool, the rules the source checkpoint already has)
RULES = [
    ("idle_fastest", "--idle-fastest", "yes", {"prune_growth": True}),
    ("restart_payback", "--restart-payback", "yes", {"prune_growth": True, "idle_fastest": True}),
    ("restore_idle_shrinks", "--restore-idle-shrinks", 1, {"restart_payback": True}),
]


@pytest.mark.parametrize(("field", "flag", "bad", "others"), RULES)
def test_the_setting_is_validated_and_old_checkpoints_load_with_it_off(field, flag, bad, others):
    with pytest.raises(ConfigError, match=field):
        DL2Config(**{field: bad})
    old = dataclasses.replace(BASE, **{field: True}).to_dict()
    del old[field]
    assert getattr(DL2Config.from_dict(old), field) is False


@pytest.mark.parametrize(("field", "flag", "bad", "others"), RULES)
def test_set_rules_switches_the_rule_on_and_keeps_the_weights_and_the_other_rules(
    tmp_path, field, flag, bad, others
):
    torch.manual_seed(0)
    src, out = tmp_path / "m.pt", tmp_path / "r.pt"
    save_checkpoint(src, ActorCritic(dataclasses.replace(BASE, **others)))
    res = CliRunner().invoke(cli_main, ["train", "set-rules", str(src), flag, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert f"{field} false -> true, weights unchanged" in res.output
    cfg = load_checkpoint(out).config
    assert getattr(cfg, field) is True
    assert all(getattr(cfg, name) == value for name, value in others.items())
    wa, wb = load_checkpoint(src).net.state_dict(), load_checkpoint(out).net.state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_set_rules_with_no_rule_named_exits_2_and_writes_nothing(tmp_path):
    src, out = tmp_path / "m.pt", tmp_path / "x.pt"
    save_checkpoint(src, ActorCritic(BASE))
    res = CliRunner().invoke(cli_main, ["train", "set-rules", str(src), "--out", str(out)])
    assert res.exit_code == 2 and "--restart-payback" in res.output
    assert not out.exists()
