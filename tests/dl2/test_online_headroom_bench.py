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


def test_warped_speeds_scale_the_speed_ups_not_the_smallest_size(bench):
    table = bench.default_speed_model()
    flat, steep = bench.WarpedSpeeds(0.5), bench.WarpedSpeeds(1.5)
    for job_type, uses_ps in (("resnet-50", True), ("vgg-16", True)):
        one = table.epochs_per_second(job_type, 1, 1, uses_ps)
        big = table.epochs_per_second(job_type, 4, 4, uses_ps)
        assert big > one  # the table's speed-up, which the warp bends
        assert flat.epochs_per_second(job_type, 1, 1, uses_ps) == pytest.approx(one)
        assert flat.epochs_per_second(job_type, 4, 4, uses_ps) == pytest.approx(one * (big / one) ** 0.5)
        assert steep.epochs_per_second(job_type, 4, 4, uses_ps) == pytest.approx(one * (big / one) ** 1.5)
    assert bench.WarpedSpeeds(1.0).epochs_per_second("vgg-16", 3, 2) == pytest.approx(
        table.epochs_per_second("vgg-16", 3, 2))


def test_the_informed_teacher_plans_with_the_warped_speeds(bench):
    """The teacher told the drifted cluster's speeds decides differently from the one planning
    with the table on the same cluster (it would not if the speeds did not reach its plans)."""
    from dl2_mesos.policy.sim.settings import SimConfig
    from dl2_mesos.policy.sim.simulator import run

    speeds = bench.WarpedSpeeds(0.2)
    told = bench.informed_teacher("srpt-elastic-min", speeds)
    assert told is not None and told.speed_model is speeds
    assert bench.informed_teacher("drf", speeds) is None  # takes no speed model
    trace = drift_trace(12, 101)
    decisions = {}
    for name, policy in (("table", make_teacher("srpt-elastic-min")), ("told", told)):
        granted = []
        run(policy, SimConfig(num_agents=3), trace, speed_model=speeds, on_slot=lambda o: granted.append(o.granted))  # noqa: B023
        decisions[name] = granted
    assert decisions["told"] != decisions["table"]


def test_last_judges_the_latest_drifted_jobs(bench):
    trace = drift_trace(12, 104)
    drf = make_policy("drf")
    every = bench.drifted_half_avg_jct(drf, trace, 3)
    last2 = bench.drifted_half_avg_jct(make_policy("drf"), trace, 3, last=2)
    assert last2 != every  # a different set of jobs
    r = CliRunner().invoke(bench.main, ["--jobs", "12", "--last", "7", "--seeds", "101"])
    assert r.exit_code == 2 and "only 6 jobs drift" in r.output


def test_online_imitation_updates_the_model_every_slot(bench, monkeypatch):
    updates = []
    real = bench.DL2OnlineModel.update

    def counting(self):  # noqa: ANN001, ANN202
        changed = real(self)
        updates.append(changed)
        return changed

    monkeypatch.setattr(bench.DL2OnlineModel, "update", counting)
    avg = bench.online_imitation_avg_jct(None, "srpt-elastic-min", drift_trace(8, 101), 3)
    assert avg > 0 and len(updates) >= 5 and any(updates)


def test_online_imitation_can_take_its_labels_from_another_policy(bench, monkeypatch):
    labelled = []
    told = bench.informed_teacher("srpt-elastic-min", bench.WarpedSpeeds(0.5))
    real = type(told).decide

    def recording(self, state):  # noqa: ANN001, ANN202
        if self is told:
            labelled.append(state)
        return real(self, state)

    monkeypatch.setattr(type(told), "decide", recording)
    bench.online_imitation_avg_jct(None, "srpt-elastic-min", drift_trace(8, 101), 3, labeller=told)
    assert labelled  # the labels came from the told teacher
