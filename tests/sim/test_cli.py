"""``dl2 simulate`` and ``dl2 trace``: output, JSON, plot, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from dl2_mesos.policy.simulate_cli import mean_ci, parse_seeds, simulate, trace
from dl2_mesos.policy.sim.settings import preset
from dl2_mesos.policy.sim.load import offered_load
from dl2_mesos.policy.sim.trace import generate_trace, read_trace


def test_parse_seeds():
    assert parse_seeds("1-5") == [1, 2, 3, 4, 5]
    assert parse_seeds("3") == [3]
    assert parse_seeds("1-2,7") == [1, 2, 7]
    for bad in ("x", "5-1", ""):
        with pytest.raises(click.BadParameter):
            parse_seeds(bad)


def test_mean_ci():
    m, h = mean_ci([1.0, 2.0, 3.0])
    assert m == 2.0 and h == pytest.approx(4.303 * 1.0 / 3**0.5, rel=1e-3)
    assert mean_ci([5.0])[0] == 5.0


def test_simulate_table_json_and_plot(tmp_path):
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    res = CliRunner().invoke(
        simulate,
        [
            "--preset",
            "tiny",
            "--policies",
            "drf,fifo",
            "--seeds",
            "1-2",
            "--json",
            str(out),
            "--plot",
            str(png),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "avg JCT (slots)" in res.output and "drf" in res.output and "fifo" in res.output
    doc = json.loads(out.read_text())
    assert set(doc["policies"]) == {"drf", "fifo"}
    drf = doc["policies"]["drf"]
    assert len(drf["runs"]) == 2 and [r["seed"] for r in drf["runs"]] == [1, 2]
    assert drf["avg_jct"] == pytest.approx(sum(r["avg_jct"] for r in drf["runs"]) / 2)
    assert drf["avg_jct"] > 600  # seconds, not slots
    assert "makespan" in drf and "rescales" in drf and drf["runs"][0]["jobs"]
    assert doc["config"]["sim"]["num_agents"] == 3 and doc["config"]["seeds"] == [1, 2]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the offered load of every seed's trace, printed and in the JSON
    sc, tc = preset("tiny")
    loads = [offered_load(sc, generate_trace(tc, s)) for s in (1, 2)]
    assert f"1: {loads[0].rho:.2f}, 2: {loads[1].rho:.2f}" in res.output and "bottleneck cpus" in res.output
    assert doc["load"]["2"]["rho"] == pytest.approx(loads[1].rho)


def test_simulate_replays_a_trace_file(tmp_path):
    runner = CliRunner()
    tfile = tmp_path / "t.csv"
    res = runner.invoke(
        trace, ["generate", "--preset", "tiny", "--set", "num_jobs=4", "--seed", "3", "-o", str(tfile)]
    )
    assert res.exit_code == 0, res.output
    assert len(read_trace(tfile)) == 4
    res = runner.invoke(simulate, ["--trace", str(tfile), "--agents", "3", "-p", "optimus", "--seeds", "1"])
    assert res.exit_code == 0, res.output
    assert "optimus" in res.output and f"trace {tfile}" in res.output
    assert "offered load rho" in res.output


def test_generate_overrides(tmp_path):
    out = tmp_path / "o.json"
    res = CliRunner().invoke(
        simulate,
        [
            "--preset",
            "tiny",
            "-p",
            "srtf",
            "--seeds",
            "4",
            "--generate",
            "num_jobs=3,arrival=poisson",
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["config"]["trace"]["num_jobs"] == 3 and doc["config"]["trace"]["arrival"] == "poisson"
    assert doc["policies"]["srtf"]["runs"][0]["num_jobs"] == 3


@pytest.mark.parametrize(
    "args, msg",
    [
        (["-p", "drf,lottery"], "unknown policy 'lottery'"),
        (["--preset", "galactic"], "unknown preset"),
        (["--seeds", "five"], "not a seed"),
        (["--generate", "num_jobs"], "expected key=value"),
        (["--generate", "colour=blue"], "unknown key 'colour'"),
        (["--generate", "num_jobs=many"], "not a valid int"),
        (["--generate", "arrival=bursty"], "arrival"),
        (["--generate", "arrival=google,max_arrivals_per_slot=7"], "known caps"),
        (["--trace", "/nonexistent.csv"], "cannot read trace"),
        (["--agents", "0"], "--agents"),
    ],
)
def test_bad_options_fail_clearly(args, msg):
    res = CliRunner().invoke(simulate, ["--preset", "tiny", "--seeds", "1", *args])
    assert res.exit_code != 0
    assert msg in res.output
    assert "Traceback" not in res.output


def test_bad_trace_file_names_line(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("arrival_time,job_type,epochs\n0,dssm,5\n0,dssm,-1\n")
    res = CliRunner().invoke(simulate, ["--trace", str(p), "--seeds", "1", "-p", "drf"])
    assert res.exit_code == 1 and f"{p}:3:" in res.output
    p.write_bytes(b"arrival_time,job_type,epochs\n0,dssm,5\n\x00\xff,dssm,1\n")
    res = CliRunner().invoke(simulate, ["--trace", str(p), "--seeds", "1", "-p", "drf"])
    assert res.exit_code == 1 and f"{p}:3: not UTF-8" in res.output
    assert isinstance(res.exception, SystemExit)  # a clean exit, not an uncaught error


def test_trace_import_philly(tmp_path):
    log = tmp_path / "philly.csv"
    log.write_text("jobid,submitted_time,duration,num_gpus\na,0,100,1\nb,60,100,0\n")
    out = tmp_path / "t.csv"
    res = CliRunner().invoke(trace, ["import-philly", str(log), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert [j.job_id for j in read_trace(out)] == ["a", "b"]
    log.write_text("jobid,submitted_time,duration,num_gpus\na,0,x,1\n")
    res = CliRunner().invoke(trace, ["import-philly", str(log), "-o", str(out)])
    assert res.exit_code == 1 and ":2:" in res.output


def test_real_dl2_script(tmp_path):
    script = Path(sys.executable).parent / "dl2"
    env = {**os.environ, "MPLBACKEND": "Agg"}
    ok = subprocess.run(
        [
            str(script),
            "simulate",
            "--preset",
            "tiny",
            "-p",
            "drf,tetris",
            "--seeds",
            "1",
            "--json",
            str(tmp_path / "o.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert ok.returncode == 0, ok.stderr
    assert (
        "tetris" in ok.stdout
        and json.loads((tmp_path / "o.json").read_text())["policies"]["drf"]["avg_jct"] > 0
    )
    bad = subprocess.run(
        [str(script), "simulate", "-p", "nope"], capture_output=True, text=True, timeout=120, env=env
    )
    assert bad.returncode == 2 and "unknown policy 'nope'" in bad.stderr
