"""Per-job results by job size (`dl2 evaluate --by-size`)."""

from __future__ import annotations

import math

import pytest

from dl2_mesos.policy.sim.bounds import job_bounds
from dl2_mesos.policy.sim.settings import preset
from dl2_mesos.policy.sim.size_classes import class_edges, format_size_classes, size_classes


def _job(job_id, jct, start=0.0, arrival=0.0, rescales=0):
    return {"job_id": job_id, "jct": jct, "arrival_time": arrival, "start_time": start, "rescales": rescales}


def test_classes_split_the_gap_between_two_policies():
    run_s = {(1, "a"): 100.0, (1, "b"): 200.0, (1, "c"): 1000.0, (1, "d"): 2000.0}
    runs = {
        "fast": [{"jobs": [_job("a", 100), _job("b", 200), _job("c", 1000), _job("d", 2000)]}],
        # "slow" waits 50 s before "a" and runs "d" at half speed
        "slow": [{"jobs": [_job("a", 150, start=50), _job("b", 200), _job("c", 1000),
                           _job("d", 4000, rescales=3)]}],
    }
    rows = size_classes(runs, [1], run_s, classes=2)
    by = {(r.policy, r.index): r for r in rows}
    assert {r.jobs for r in rows} == {2}, "the same jobs in each class under both policies"
    # the shares add up to the avg JCT
    for name, jobs in runs.items():
        avg = sum(j["jct"] for j in jobs[0]["jobs"]) / 4
        assert sum(r.share for r in rows if r.policy == name) == pytest.approx(avg)
    assert by["fast", 0].stretch == pytest.approx(1.0) and by["fast", 1].stretch == pytest.approx(1.0)
    assert by["slow", 0].mean_wait == pytest.approx(25.0) and by["slow", 0].stretch == pytest.approx(1.0)
    assert by["slow", 1].stretch == pytest.approx(1.5) and by["slow", 1].rescales == pytest.approx(1.5)
    assert by["slow", 1].share - by["fast", 1].share == pytest.approx(500.0), "the big jobs make the gap"
    text = format_size_classes(rows)
    assert "stretch" in text and len(text.splitlines()) == 2 + 4


def test_a_job_that_never_ran_waits_its_whole_jct_and_an_unrunnable_one_has_no_stretch():
    run_s = {(7, "a"): 100.0, (7, "c"): 300.0, (7, "b"): math.inf}
    runs = {"p": [{"jobs": [_job("a", 300, start=None), _job("c", 300), _job("b", 500, start=None)]}]}
    rows = size_classes(runs, [7], run_s, classes=2)
    assert [r.jobs for r in rows] == [1, 2], "a job that can never run goes with the longest"
    assert [r.mean_wait for r in rows] == [300.0, 250.0]
    assert rows[0].stretch == 0.0
    assert rows[1].stretch == pytest.approx(1.0), "only jobs with a finite run time have a stretch"


def test_bad_input_is_refused_with_a_reason():
    run_s = {(1, "a"): 10.0}
    with pytest.raises(ValueError, match="classes"):
        class_edges([1.0], 0)
    with pytest.raises(ValueError, match="finite"):
        class_edges([math.inf], 2)
    with pytest.raises(ValueError, match="per-job records"):
        size_classes({"p": [{"avg_jct": 1.0}]}, [1], run_s)
    with pytest.raises(ValueError, match="no run time for job"):
        size_classes({"p": [{"jobs": [_job("zz", 5)]}]}, [1], run_s)
    with pytest.raises(ValueError, match="2 runs for 1 seeds"):
        size_classes({"p": [{"jobs": []}, {"jobs": []}]}, [1], run_s)


def test_on_real_runs_every_job_lands_in_a_class():
    from dl2_mesos.policy.sim.matrix import run_one
    from dl2_mesos.policy.sim.trace import generate_trace

    sc, tc = preset("tiny")
    seeds = [3, 4]
    run_s = {(s, b.job_id): b.run_s for s in seeds for b in job_bounds(sc, generate_trace(tc, s))}
    runs = {name: [run_one((name, None, "tiny", s, None, True))[3] for s in seeds] for name in ("drf", "fifo")}
    rows = size_classes(runs, seeds, run_s, classes=3)
    for name in runs:
        mine = [r for r in rows if r.policy == name]
        assert sum(r.jobs for r in mine) == len(run_s)
        avg = sum(d["avg_jct"] * d["num_jobs"] for d in runs[name]) / len(run_s)
        assert sum(r.share for r in mine) == pytest.approx(avg, rel=1e-9)
        assert all(r.stretch >= 1.0 - 1e-6 for r in mine), "no job runs faster than its fastest size"


def test_a_class_survives_json_and_a_missing_stretch_is_null():
    import json

    from dl2_mesos.policy.sim.size_classes import SizeClass

    row = SizeClass("p", 0, 0.0, 0.0, 1, 5.0, 5.0, math.nan, 0.0, 5.0)
    d = json.loads(json.dumps(row.to_dict(), allow_nan=False))
    assert d["stretch"] is None
    back = SizeClass.from_dict(d)
    assert math.isnan(back.stretch) and back.mean_jct == 5.0
    full = SizeClass("p", 1, 1.0, 2.0, 3, 4.0, 0.5, 1.25, 2.0, 1.0)
    assert SizeClass.from_dict(json.loads(json.dumps(full.to_dict()))) == full
