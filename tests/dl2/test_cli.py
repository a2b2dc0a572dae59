"""`dl2 train sl|rl` and `dl2 evaluate` through click."""

from __future__ import annotations

import json
import os

import torch
from click.testing import CliRunner

from dl2_mesos.cli import main
from dl2_mesos.policy.dl2.checkpoint import load_checkpoint


def test_train_sl_rl_and_evaluate_on_tiny(tmp_path):
    r = CliRunner()
    sl = tmp_path / "sl.pt"
    res = r.invoke(main, ["train", "sl", "--teacher", "optimus", "--preset", "tiny", "--seeds", "1-2", "--epochs", "2",
                          "--window", "6", "--hidden", "16", "--out", str(sl)])
    assert res.exit_code == 0, res.output
    assert sl.is_file()
    rl = tmp_path / "rl"
    res = r.invoke(main, ["train", "rl", "--init", str(sl), "--out", str(rl), "--preset", "tiny", "--iterations", "2",
                          "--workers", "0", "--updates", "2", "--batch-size", "16", "--val-seeds", "1001"])
    assert res.exit_code == 0, res.output
    assert (rl / "best.pt").is_file() and (rl / "curve.png").is_file()
    best = load_checkpoint(rl / "best.pt").meta
    # one preset: the validation score is an avg JCT in seconds, and the line names its iteration
    assert f"best validation avg JCT {best['val_avg_jct']:.0f} s (iteration {best['iteration']});" in res.output
    out = tmp_path / "eval.json"
    res = r.invoke(main, ["evaluate", "--policies", "dl2,drf,optimus", "--seeds", "101-102", "--preset", "tiny",
                          "--model", str(rl / "best.pt"), "--workers", "1", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert set(doc["policies"]) == {"dl2", "drf", "optimus"}
    assert len(doc["policies"]["dl2"]["runs"]) == 2 and doc["policies"]["drf"]["avg_jct"] > 0
    assert doc["config"]["seeds"] == [101, 102]
    assert "vs_drf" in doc["ratios"]["dl2"]
    assert "vs DRF" in res.output


def test_train_rl_on_a_mix_prints_its_validation_score_as_a_ratio_to_the_start(tmp_path):
    """For a preset mix the score is the mean of avg JCT / the start's over the presets (1.0 at
    the start), not seconds: printing it as "avg JCT 1 s" misread it."""
    r = CliRunner()
    rl = tmp_path / "rl"
    res = r.invoke(main, ["train", "rl", "--out", str(rl), "--preset", "tiny,small", "--iterations", "1",
                          "--workers", "0", "--updates", "1", "--batch-size", "16", "--val-seeds", "1001",
                          "--eval-every", "1", "--max-slots", "40", "--window", "6", "--hidden", "16",
                          "--references", ""])
    assert res.exit_code == 0, res.output
    best = load_checkpoint(rl / "best.pt").meta
    assert 0 < best["val_avg_jct"] <= 1.0  # a ratio; iteration 0 scores exactly 1
    assert f"best validation {best['val_avg_jct']:.4f} of the start (iteration {best['iteration']});" in res.output
    assert "avg JCT" not in res.output.splitlines()[-1]


def test_cli_errors_are_clear(tmp_path):
    r = CliRunner()
    bad = tmp_path / "bad.pt"
    bad.write_text("nope")
    res = r.invoke(main, ["evaluate", "--policies", "dl2", "--preset", "tiny", "--model", str(bad)])
    assert res.exit_code != 0 and "not a readable DL2 checkpoint" in res.output
    bad.write_text("root:x:0:0:root:/root:/bin/bash\n")  # a text file: torch says only "list index out of range"
    res = r.invoke(main, ["evaluate", "--policies", "dl2", "--preset", "tiny", "--model", str(bad)])
    assert res.exit_code != 0 and "not a file written by torch.save" in res.output
    bad.write_bytes(b"")
    res = r.invoke(main, ["evaluate", "--policies", "dl2", "--preset", "tiny", "--model", str(bad)])
    assert res.exit_code != 0 and "the file is empty" in res.output
    # a pickle that would run code when loaded: refused, and no advice to load it unsafely
    torch.save({"format": "dl2-checkpoint", "hook": os.getcwd}, bad)
    res = r.invoke(main, ["evaluate", "--policies", "dl2", "--preset", "tiny", "--model", str(bad)])
    assert res.exit_code != 0 and "not a readable DL2 checkpoint" in res.output
    assert "getcwd" in res.output and "weights_only" not in res.output
    bad.write_bytes(bytes(range(256)) * 8)
    res = r.invoke(main, ["evaluate", "--policies", "dl2", "--preset", "tiny", "--model", str(bad)])
    assert res.exit_code != 0 and "not a readable DL2 checkpoint" in res.output
    assert "weights_only" not in res.output and len(res.output.splitlines()) <= 3
    res = r.invoke(main, ["evaluate", "--policies", "dl2,nope"])
    assert res.exit_code != 0 and "unknown policy" in res.output
    res = r.invoke(main, ["train", "sl", "--teacher", "nope"])
    assert res.exit_code != 0 and "unknown teacher" in res.output
    res = r.invoke(main, ["train", "rl", "--train-seeds", "1-5", "--val-seeds", "5"])
    assert res.exit_code != 0 and "overlap" in res.output


def test_evaluate_prints_the_lower_bound_per_seed(tmp_path):
    r = CliRunner()
    out = tmp_path / "eval.json"
    res = r.invoke(main, ["evaluate", "--policies", "drf,srtf-gain", "--seeds", "101-102", "--preset", "tiny",
                          "--workers", "1", "--per-seed", "--by-size", "3", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    b = doc["bound"]
    assert set(b["per_seed"]) == {"101", "102"} and b["avg_jct"] > 0
    for name in ("drf", "srtf-gain"):
        assert doc["ratios"][name]["vs_bound"] >= 1.0 - 1e-9  # nothing beats the lower bound
    assert "no-queueing lower bound" in res.output
    assert any(line.split()[:1] == ["101"] for line in res.output.splitlines())
    # --by-size: each policy's class shares add up to its avg JCT
    assert "jobs by size" in res.output
    for name in ("drf", "srtf-gain"):
        shares = [c["share"] for c in doc["size_classes"] if c["policy"] == name]
        assert len(shares) >= 2 and abs(sum(shares) - doc["policies"][name]["avg_jct"]) < 1e-6 * sum(shares)
    res = r.invoke(main, ["evaluate", "--policies", "drf", "--preset", "tiny", "--by-size", "1"])
    assert res.exit_code != 0 and "--by-size" in res.output


def test_mixed_preset_options_reject_unknown_presets():
    r = CliRunner()
    res = r.invoke(main, ["train", "sl", "--teacher", "drf", "--also", "nowhere=1-2"])
    assert res.exit_code != 0 and "unknown preset" in res.output
    res = r.invoke(main, ["train", "sl", "--teacher", "drf", "--also", "small"])
    assert res.exit_code != 0 and "PRESET=SEEDS" in res.output
    res = r.invoke(main, ["train", "rl", "--preset", "reference,nowhere"])
    assert res.exit_code != 0 and "unknown preset" in res.output


def test_train_sl_prune_growth_flag_sets_and_keeps_the_models_rule(tmp_path):
    from dl2_mesos.policy.dl2.checkpoint import load_checkpoint

    r = CliRunner()
    base = ["train", "sl", "--teacher", "optimus", "--preset", "tiny", "--seeds", "1", "--epochs", "1"]
    plain, pruned, kept, off = (tmp_path / f"{n}.pt" for n in ("plain", "pruned", "kept", "off"))
    res = r.invoke(main, [*base, "--window", "6", "--hidden", "16", "--out", str(plain)])
    assert res.exit_code == 0, res.output
    assert load_checkpoint(plain).config.prune_growth is False, "off for a new model unless asked"
    res = r.invoke(main, [*base, "--init", str(plain), "--prune-growth", "--out", str(pruned)])
    assert res.exit_code == 0, res.output
    assert load_checkpoint(pruned).config.prune_growth is True
    res = r.invoke(main, [*base, "--init", str(pruned), "--out", str(kept)])
    assert res.exit_code == 0, res.output
    assert load_checkpoint(kept).config.prune_growth is True, "with --init: the checkpoint's"
    res = r.invoke(main, [*base, "--init", str(kept), "--no-prune-growth", "--out", str(off)])
    assert res.exit_code == 0, res.output
    assert load_checkpoint(off).config.prune_growth is False


def test_set_rules_switches_pruning_on_and_keeps_the_weights(tmp_path):
    from dl2_mesos.policy.dl2.checkpoint import load_checkpoint, save_checkpoint
    from dl2_mesos.policy.dl2.model_config import DL2Config
    from dl2_mesos.policy.dl2.network import ActorCritic

    torch.manual_seed(0)
    src, out = tmp_path / "m.pt", tmp_path / "p.pt"
    save_checkpoint(src, ActorCritic(DL2Config(window=6, hidden=16, actions="elastic")), version=3,
                    meta={"teacher": "drf"})
    r = CliRunner()
    res = r.invoke(main, ["train", "set-rules", str(src), "--prune-growth", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "prune_growth false -> true, weights unchanged" in res.output
    a, b = load_checkpoint(src), load_checkpoint(out)
    assert b.config.prune_growth is True and b.config.window == 6 and b.version == 3
    assert b.meta["teacher"] == "drf" and b.meta["rules"]["prune_growth"] is True
    wa, wb = a.net.state_dict(), b.net.state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # bad input: a file that is no checkpoint, a missing flag; nothing is written
    bad = tmp_path / "bad.pt"
    bad.write_text("nope")
    res = r.invoke(main, ["train", "set-rules", str(bad), "--prune-growth", "--out", str(tmp_path / "x.pt")])
    assert res.exit_code != 0 and "not a readable DL2 checkpoint" in res.output
    res = r.invoke(main, ["train", "set-rules", str(src), "--out", str(tmp_path / "y.pt")])
    assert res.exit_code != 0 and "prune-growth" in res.output
    assert not (tmp_path / "x.pt").exists() and not (tmp_path / "y.pt").exists()


def test_train_with_the_gains_feature_set_and_evaluate(tmp_path):
    """`--features gains` through the CLI: warm-up, RL from it, evaluation; the set is kept."""
    from dl2_mesos.policy.dl2.checkpoint import load_checkpoint

    r = CliRunner()
    sl, rl = tmp_path / "sl.pt", tmp_path / "rl"
    res = r.invoke(main, ["train", "sl", "--teacher", "drf", "--preset", "tiny", "--seeds", "1", "--epochs", "1",
                          "--window", "6", "--hidden", "16", "--features", "gains", "--out", str(sl)])
    assert res.exit_code == 0, res.output
    model = load_checkpoint(sl)
    assert model.config.features == "gains" and model.net.actor.shared.enc[0].weight.shape[1] == 27
    res = r.invoke(main, ["train", "rl", "--init", str(sl), "--out", str(rl), "--preset", "tiny", "--iterations", "2",
                          "--workers", "0", "--updates", "2", "--batch-size", "16", "--val-seeds", "1001",
                          "--reward", "jct", "--baseline", "input"])
    assert res.exit_code == 0, res.output
    assert load_checkpoint(rl / "best.pt").config.features == "gains"
    res = r.invoke(main, ["evaluate", "--policies", "dl2", "--seeds", "101", "--preset", "tiny",
                          "--model", str(rl / "best.pt"), "--workers", "1"])
    assert res.exit_code == 0, res.output
    res = r.invoke(main, ["train", "sl", "--teacher", "drf", "--features", "speed"])
    assert res.exit_code != 0 and "speed" in res.output
