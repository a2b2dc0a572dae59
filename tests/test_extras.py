"""Optional parts behind extras (pyproject.toml): without them the rest works and says what to install."""

from __future__ import annotations

import logging
import sys

from click.testing import CliRunner


def test_learning_curve_is_skipped_without_matplotlib(monkeypatch, tmp_path, caplog):
    from dl2_mesos.policy.dl2.trainer import plot_curve

    log = tmp_path / "log.csv"
    log.write_text("iteration,train_avg_jct,val_avg_jct\n1,10.0,11.0\n")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ModuleNotFoundError
    with caplog.at_level(logging.WARNING):
        plot_curve(log, tmp_path / "curve.png")
    assert not (tmp_path / "curve.png").exists()
    assert "dl2-mesos[plot]" in caplog.text


def test_simulate_plot_without_matplotlib_is_refused_before_running(monkeypatch, tmp_path):
    import importlib.util

    from dl2_mesos.policy.simulate_cli import simulate

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real_find_spec(name, *a))
    result = CliRunner().invoke(simulate, ["--preset", "tiny", "--seeds", "1", "--plot", str(tmp_path / "p.png")])
    assert result.exit_code == 2
    assert "dl2-mesos[plot]" in result.output
    assert "avg JCT" not in result.output  # refused before simulating
