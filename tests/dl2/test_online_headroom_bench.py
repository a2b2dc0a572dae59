"""``bench/online_headroom.py``: the drift it is given is the drift it simulates, the measure is
the drifted half's, and bad input is a usage error."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from dl2_mesos.policy.registry import make_policy, make_teacher
from dl2_rigs.online_drift import DRIFT, drift_trace

from .conftest import load_bench


@pytest.fixture(scope="module")
def bench():
    yield from load_bench("online_headroom")


def test_the_drift_options_reach_the_trace():
    plain = drift_trace(12, 101)
    strong = drift_trace(12, 101, drift={"job_types": ("dssm",), "epochs_factor": 6.0})
    late = [j for j in strong if j.job_id.startswith("late-")]
    assert len(late) == 6 and {j.spec.job_type for j in late} == {"dssm"}
    assert {j.spec.job_type for j in plain if j.job_id.startswith("late-")} <= set(DRIFT["job_types"])
    early = lambda tr: [(j.job_id, j.spec.job_type, j.spec.epochs) for j in tr if not j.job_id.startswith("late-")]  # noqa: E731
    assert early(plain) == early(strong)  # only the second half drifts


def test_the_measure_is_the_drifted_half(bench):
    trace = drift_trace(12, 102)
    teacher = bench.drifted_half_avg_jct(make_teacher("srpt-elastic-min"), trace, 3)
    drf = bench.drifted_half_avg_jct(make_policy("drf"), trace, 3)
    assert 0 < teacher < drf  # on 3 nodes the elastic SRPT teacher is far ahead of DRF
    only_late = [j for j in trace if j.job_id.startswith("late-")]
    # the first half delays the second; without it the drifted jobs finish sooner
    assert bench.drifted_half_avg_jct(make_policy("drf"), only_late, 3) < drf


def test_bad_input_is_a_usage_error(bench):
    r = CliRunner().invoke(bench.main, ["--types", "no-such-type", "--seeds", "101"])
    assert r.exit_code == 2 and "unknown job type 'no-such-type'" in r.output
    r = CliRunner().invoke(bench.main, ["--seeds", "x"])
    assert r.exit_code == 2 and "--seeds" in r.output
