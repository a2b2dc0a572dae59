"""``dl2 train sl|rl|pi --trace FILE...``: training on a cluster's own history (CSV or Philly-style)."""

from __future__ import annotations

import click
import pytest
import torch
from click.testing import CliRunner

from dl2_mesos.cli import main
from dl2_mesos.policy.simulate_cli import trace_source_preset
from dl2_mesos.policy.sim.settings import TraceConfig, preset
from dl2_mesos.policy.sim.trace import generate_trace, read_trace, write_trace

PHILLY = """jobid,submitted_time,duration,num_gpus
app-1,2017-10-03 14:00:00,3600,2
app-2,2017-10-03 14:20:00,600,0
app-3,2017-10-03 14:05:30,1200,1
"""


def test_no_trace_keeps_the_preset_and_flags_need_a_trace():
    assert trace_source_preset("small", {"trace_files": ()}) == "small"
    with pytest.raises(click.UsageError, match="--augment-rate needs --trace"):
        trace_source_preset("small", {"trace_files": (), "augment_rate": 2.0})
    with pytest.raises(click.UsageError, match="--augment-window needs --trace"):
        trace_source_preset("small", {"trace_files": (), "augment_window": 100.0})


def test_philly_logs_are_converted_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    log = tmp_path / "philly.csv"
    log.write_text(PHILLY)
    opts = {"trace_files": (str(log),), "trace_format": "philly", "trace_agents": 4, "augment_rate": 2.0}
    name = trace_source_preset("small", opts)
    sim, tc = preset(name)
    assert sim.num_agents == 4 and tc.augment.rate == 2.0
    (converted,) = tc.files
    assert converted.startswith(str(tmp_path / "runs" / "traces"))
    assert [j.job_id for j in read_trace(converted)] == ["app-1", "app-3", "app-2"]
    assert [j.arrival_time for j in generate_trace(tc, 0)] == [0.0, 165.0, 600.0]


def test_unreadable_trace_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_time,job_type,epochs\n0,nope,10\n")
    with pytest.raises(click.ClickException, match="bad.csv"):
        trace_source_preset("small", {"trace_files": (str(bad),)})
    bad.write_bytes(b"arrival_time,job_type,epochs\n0,dssm,\xff10\n")
    with pytest.raises(click.ClickException, match="bad.csv:2: not UTF-8"):
        trace_source_preset("small", {"trace_files": (str(bad),)})


def _history(tmp_path, num_jobs: int, seed: int):
    """A small generated trace written as a cluster's history CSV."""
    hist = tmp_path / "history.csv"
    write_trace(generate_trace(TraceConfig(num_jobs=num_jobs, arrival="uniform", max_arrivals_per_slot=2,
                                           max_epochs=3000.0), seed), hist)
    return hist


def test_train_sl_on_a_trace_file(tmp_path):
    hist = _history(tmp_path, 8, 1)
    out = tmp_path / "sl.pt"
    res = CliRunner().invoke(main, [
        "train", "sl", "--trace", str(hist), "--trace-base", "tiny", "--augment-window", "2500",
        "--augment-resample", "--augment-length-jitter", "0.2", "--epochs", "1", "--seeds", "1-2",
        "--hidden", "16", "--out", str(out),
    ])
    assert res.exit_code == 0, res.output
    assert out.exists() and "samples" in res.output
    meta = torch.load(out, map_location="cpu", weights_only=False)["meta"]
    # the model records what it was trained on: the trace preset with the augmentation
    assert meta["preset"] == f"trace:{hist};base=tiny;window=2500.0;resample=1;length_jitter=0.2"


def test_train_pi_on_a_trace_file(tmp_path):
    """Policy iteration on the cluster's own history (a warm-up first, as an operator would)."""
    hist = _history(tmp_path, 8, 1)
    runner = CliRunner()
    trace = ["--trace", str(hist), "--trace-base", "tiny", "--augment-window", "2500"]
    res = runner.invoke(main, ["train", "sl", *trace, "--epochs", "1", "--seeds", "1-2", "--hidden", "16",
                               "--window", "6", "--out", str(tmp_path / "sl.pt")])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["train", "pi", "--init", str(tmp_path / "sl.pt"), *trace, "--iterations", "1",
                               "--traces-per-preset", "1", "--candidates", "3", "--horizon", "4",
                               "--val-seeds", "1001", "--workers", "0", "--references", "",
                               "--out", str(tmp_path / "pi")])
    assert res.exit_code == 0, res.output
    meta = torch.load(tmp_path / "pi" / "last.pt", map_location="cpu", weights_only=False)["meta"]
    assert list(meta["pi_config"]["presets"]) == [f"trace:{hist};base=tiny;window=2500.0"]


def test_train_rejects_a_missing_trace(tmp_path):
    for command in ("rl", "pi"):
        args = ["train", command, "--trace", str(tmp_path / "none.csv"), "--out", str(tmp_path)]
        if command == "pi":
            args += ["--init", str(tmp_path / "none.pt")]
        res = CliRunner().invoke(main, args)
        assert res.exit_code != 0 and "does not exist" in res.output


def test_train_sl_mixes_a_trace_preset_and_a_longer_job_preset_with_also(tmp_path):
    # --also PRESET=SEEDS splits at the last "=": a trace preset carries "key=value" options
    hist = _history(tmp_path, 6, 3)
    out = tmp_path / "sl.pt"
    res = CliRunner().invoke(main, [
        "train", "sl", "--teacher", "optimus", "--preset", "tiny", "--seeds", "1", "--epochs", "1",
        "--also", f"trace:{hist};base=tiny;agents=2=1", "--also", "tiny*0.5=2",
        "--hidden", "16", "--window", "6", "--out", str(out),
    ])
    assert res.exit_code == 0, res.output
    meta = torch.load(out, map_location="cpu", weights_only=False)["meta"]
    assert meta["extra"] == [[f"trace:{hist};base=tiny;agents=2", [1]], ["tiny*0.5", [2]]]
