"""The evaluation matrix (``dl2 matrix``): ratios, the table, the plot, the command's errors."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dl2_mesos.errors import ConfigError
from dl2_mesos.policy.simulate_cli import matrix
from dl2_mesos.policy.sim import matrix as mx
from dl2_mesos.policy.sim.settings import preset
from dl2_mesos.policy.sim.simulator import run
from dl2_mesos.policy.registry import make_policy
from dl2_mesos.policy.sim.trace import generate_trace


def _summary(avg):
    return {"avg_jct": avg, "num_jobs": 4, "num_finished": 4, "rescales": 0}


def test_summarise_point_ratios_and_wins():
    ref = {"point": "p", "nodes": 1, "num_jobs": 4, "rho": 1.0, "bottleneck": "cpus", "rho_per_seed": {},
           "bound": {"avg_jct": 50.0, "per_seed": {}}}
    runs = {
        "drf": {1: _summary(200.0), 2: _summary(100.0)},  # mean 150
        "optimus": {1: _summary(100.0), 2: _summary(140.0)},  # mean 120: the best heuristic
        "dl2": {1: _summary(90.0), 2: _summary(150.0)},  # mean 120, below optimus on seed 1 only
    }
    pt = mx.summarise_point(ref, runs, [1, 2])
    assert pt["best_heuristic"] == "optimus"  # dl2 is not a heuristic even when it ties
    r = pt["ratios"]
    assert r["drf"]["vs_drf"] == 1.0 and r["drf"]["vs_optimus"] == pytest.approx(1.25)
    assert r["dl2"]["vs_best_heuristic"] == pytest.approx(1.0)
    assert r["dl2"]["vs_bound"] == pytest.approx(120.0 / 50.0)
    assert r["dl2"]["wins_vs_best_heuristic"] == 1
    assert r["drf"]["wins_vs_best_heuristic"] == 1  # seed 2: 100 < 140


def test_matrix_runs_every_policy_on_the_same_traces(tmp_path):
    doc = mx.evaluate_matrix(["drf", "fifo"], [1, 2], ["tiny"], workers=1)
    (pt,) = doc["points"]
    assert pt["point"] == "tiny" and pt["nodes"] == 3 and pt["rho"] > 0
    sc, tc = preset("tiny")
    for name in ("drf", "fifo"):
        direct = [run(make_policy(name), sc, generate_trace(tc, s), seed=s).avg_jct for s in (1, 2)]
        assert pt["policies"][name]["per_seed"] == {"1": direct[0], "2": direct[1]}
    best = min(("drf", "fifo"), key=lambda n: pt["policies"][n]["avg_jct"])
    assert pt["best_heuristic"] == best
    assert all(r["vs_bound"] >= 1.0 - 1e-9 for r in pt["ratios"].values())
    text = mx.format_matrix(doc)
    assert "tiny" in text and f"{best}*" in text and "(bound)" in text
    png = tmp_path / "m.png"
    mx.plot_matrix(doc, str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_matrix_in_two_processes_matches_one():
    a = mx.evaluate_matrix(["drf", "srtf"], [1], ["tiny", "sweep-rho4"], workers=1, max_slots=30)
    b = mx.evaluate_matrix(["drf", "srtf"], [1], ["tiny", "sweep-rho4"], workers=2, max_slots=30)
    for doc in (a, b):  # the decision cost is measured CPU time, never the same twice
        for pt in doc["points"]:
            for r in pt["policies"].values():
                assert r.pop("decision_cpu_ms") >= 0.0
    assert a == b


def test_matrix_unknown_point():
    with pytest.raises(ConfigError, match="unknown preset"):
        mx.evaluate_matrix(["drf"], [1], ["nope"], workers=1)


def test_default_policies_come_from_the_registry():
    names = mx.default_policies()
    assert names[0] == "dl2" and {"drf", "optimus", "srtf-gain"} <= set(names)
    assert not set(mx.NOT_BY_DEFAULT) & set(names)
    expected = {"sweep-rho0.25", "sweep-rho4", "paper-rho1", "paper-rho2", "testbed-rho2"}
    assert set(mx.DEFAULT_POINTS) >= expected


def test_matrix_command_writes_table_json_and_plot(tmp_path):
    res = CliRunner().invoke(
        matrix, ["--points", "tiny", "--policies", "drf,fifo", "--seeds", "1", "--workers", "1",
                 "--out", str(tmp_path), "--no-progress"]
    )
    assert res.exit_code == 0, res.output
    assert "vs best" in res.output and "tiny" in res.output
    doc = json.loads((tmp_path / "matrix.json").read_text())
    assert doc["config"]["seeds"] == [1] and doc["points"][0]["point"] == "tiny"
    assert (tmp_path / "matrix.png").stat().st_size > 0


def test_matrix_without_matplotlib_keeps_the_table_and_the_json(tmp_path, monkeypatch):
    import dl2_mesos.policy.simulate_cli as cli

    monkeypatch.setattr(cli, "plotting_available", lambda: False)
    res = CliRunner().invoke(
        matrix, ["--points", "tiny", "--policies", "drf", "--seeds", "1", "--workers", "1",
                 "--out", str(tmp_path), "--no-progress"]
    )
    assert res.exit_code == 0, res.output
    assert "vs best" in res.output and "no plot: needs matplotlib" in res.output
    assert json.loads((tmp_path / "matrix.json").read_text())["points"][0]["point"] == "tiny"
    assert not (tmp_path / "matrix.png").exists()


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--policies", "nope"], "unknown policy"),
        (["--policies", "drf,drf"], "named twice"),
        (["--points", "nope"], "unknown preset"),
        (["--points", "sweep-rho2*0"], "job-length scale"),
        (["--seeds", "x"], "not a seed"),
    ],
)
def test_matrix_command_errors(tmp_path, args, msg):
    res = CliRunner().invoke(matrix, ["--out", str(tmp_path), "--no-progress", *args])
    assert res.exit_code != 0 and msg in res.output
    assert not (tmp_path / "matrix.json").exists()


def test_evaluate_reports_the_offered_load():
    from dl2_mesos.policy.dl2.evaluation import evaluate, format_table
    from dl2_mesos.policy.sim.load import offered_load

    doc = evaluate(["drf"], [1, 2], "tiny", workers=1)
    sc, tc = preset("tiny")
    expect = [offered_load(sc, generate_trace(tc, s)).rho for s in (1, 2)]
    assert doc["load"]["per_seed"] == {"1": expect[0], "2": expect[1]}
    assert doc["load"]["rho"] == pytest.approx(sum(expect) / 2) and doc["load"]["bottleneck"] == "cpus"
    assert format_table(doc).startswith(f"offered load rho {sum(expect) / 2:.2f} (bottleneck cpus")


def test_matrix_command_reports_a_failing_run(tmp_path, monkeypatch):
    from dl2_mesos.errors import InvalidAllocation

    def boom(*a, **k):
        raise InvalidAllocation("job a: 1 workers outside [2, 4]")

    monkeypatch.setattr(mx, "evaluate_matrix", boom)
    args = ["--points", "tiny", "--policies", "drf", "--out", str(tmp_path), "--no-progress"]
    res = CliRunner().invoke(matrix, args)
    assert res.exit_code == 1 and "InvalidAllocation: job a" in res.output
    assert res.exception.__class__ is SystemExit  # a message, not a traceback
