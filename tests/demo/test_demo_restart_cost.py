"""The restart cost the demo's jobs show the policy.

Left to their type's default (60 s + 300 s, the paper's full-size GPU jobs), the demo's jobs would
cost 36 of the demo's 10 s slots per restart. The model was trained on 1200 s slots (restart /
slot = 0.3); the policy measures time in units of at least restart / 0.3 and holds a job's counts
for two restarts after a change, so with those costs it would see the demo's minutes-long jobs
as a fraction of one unit and could rescale a job once every 72 slots. The demo's jobs declare
the reference program's real restart (about 5 s): a unit of 16.7 s, close to the slot."""

from __future__ import annotations

from click.testing import CliRunner
import pytest

import dl2_mesos.demo as demo_mod
from dl2_mesos.cluster import AgentView, ClusterState
from dl2_mesos.jobs import JobSpec
from dl2_mesos.policy.dl2.features import F_RESTART, static_job_features, time_unit_seconds
from dl2_mesos.policy.dl2.slot import HOLD_RESTARTS
from dl2_mesos.resources import Resources
from dl2_mesos.slot_accounting import RescaleLedger, job_view

DEMO_SLOT_SECONDS = 10.0
TRAINING_RESTART_PER_SLOT = 360.0 / 1200.0  # the job types' default on the simulator's default slot


def _state(bodies: list[dict]) -> ClusterState:
    views = tuple(job_view(f"j{i}", JobSpec.from_dict(b), slot=0, arrival_slot=0, arrival_time=0.0, epochs_done=0.0,
                           num_ps=0, num_workers=0, ledger=RescaleLedger(0)) for i, b in enumerate(bodies))
    cap = Resources(cpus=8, gpus=2, mem=16 * 1024)
    agents = tuple(AgentView(f"a{k}", f"h{k}", cap, cap) for k in range(2))
    return ClusterState(slot=0, slot_seconds=DEMO_SLOT_SECONDS, now=0.0, jobs=views, agents=agents, tasks=(), info={})


def test_the_demo_default_slot_is_the_one_these_figures_assume():
    assert demo_mod.DEFAULT_SLOT == "10s"


def test_demo_jobs_show_a_restart_cost_within_the_models_training_range():
    bodies = [demo_mod.job_request(jt, ep) for jt, ep, _ in demo_mod.WORKLOAD]
    state = _state(bodies)
    feature = static_job_features(state)[:, F_RESTART]
    assert feature.tolist() == pytest.approx([TRAINING_RESTART_PER_SLOT] * len(bodies))  # as in training
    # the time unit stays close to the demo's slot (5 s / 0.3), and the hold lasts one slot
    assert time_unit_seconds(state) == pytest.approx(demo_mod.DEMO_RESTART_SECONDS / TRAINING_RESTART_PER_SLOT)
    assert time_unit_seconds(state) < 2 * DEMO_SLOT_SECONDS
    assert HOLD_RESTARTS * demo_mod.DEMO_RESTART_SECONDS <= DEMO_SLOT_SECONDS


def test_without_a_declared_cost_the_demo_jobs_would_be_held_for_72_slots():
    bodies = [demo_mod.job_request(jt, ep, restart_seconds=None) for jt, ep, _ in demo_mod.WORKLOAD]
    assert all("restart_seconds" not in b for b in bodies)
    state = _state(bodies)
    assert time_unit_seconds(state) == pytest.approx(1200.0)  # 360 s / 0.3: a unit of 120 demo slots
    assert HOLD_RESTARTS * 360.0 / DEMO_SLOT_SECONDS == pytest.approx(72.0)


def test_job_request_is_a_valid_submission_body():
    body = demo_mod.job_request("dssm", 12.0)
    assert body == {"job_type": "dssm", "epochs": 12.0, "restart_seconds": demo_mod.DEMO_RESTART_SECONDS}
    assert JobSpec.from_dict(body).restart_cost_seconds == demo_mod.DEMO_RESTART_SECONDS


@pytest.mark.parametrize("args, expected", [
    ([], demo_mod.DEMO_RESTART_SECONDS),
    (["--restart-seconds", "12.5"], 12.5),
    (["--paper-restart-costs"], None),
])
def test_cli_passes_the_restart_cost_to_every_run(monkeypatch, args, expected):
    seen: list = []
    monkeypatch.setattr(demo_mod, "run_comparison", lambda *a, **kw: seen.append(kw["restart_seconds"]))
    out = CliRunner().invoke(demo_mod.demo, ["--compare", "drf", *args])
    assert out.exit_code == 0, out.output
    assert seen == [expected]


def test_cli_rejects_a_negative_restart_cost():
    out = CliRunner().invoke(demo_mod.demo, ["--restart-seconds", "-1"])
    assert out.exit_code == 2 and "--restart-seconds" in out.output


def test_table_sized_epochs_relate_like_the_speed_table():
    from dl2_mesos.speed_model import default_speed_model

    model = default_speed_model()
    table = {jt: model.epochs_per_second(jt, 1, 1, True) for jt, _, _ in demo_mod.WORKLOAD}
    batches = {jt: demo_mod.table_sized_batches(jt) for jt in table}
    # same program, same batches/s: epochs/s is 1 / batches per epoch, so the ratios must follow the table
    for a in table:
        for b in table:
            assert batches[b] / batches[a] == pytest.approx(table[a] / table[b], rel=0.06), (a, b)
    assert batches["vgg-16"] > 10 * batches["inception-bn"]  # the table's slowest vs fastest


def test_table_sized_request_runs_the_reference_program_with_its_batches():
    body = demo_mod.job_request("vgg-16", 10.0, table_sized=True)
    spec = JobSpec.from_dict(body)
    assert spec.command == ("python", "-m", "dl2_mesos.programs.mxnet_mlp", "--batches-per-epoch",
                            str(demo_mod.table_sized_batches("vgg-16")))
    assert "command" not in demo_mod.job_request("vgg-16", 10.0)  # default: the reference program as is


def test_cli_passes_table_sized(monkeypatch):
    seen: list = []
    monkeypatch.setattr(demo_mod, "run_comparison", lambda *a, **kw: seen.append(kw["table_sized"]))
    assert CliRunner().invoke(demo_mod.demo, ["--compare", "drf", "--table-sized"]).exit_code == 0
    assert CliRunner().invoke(demo_mod.demo, ["--compare", "drf", "--uniform-epochs"]).exit_code == 0
    assert CliRunner().invoke(demo_mod.demo, ["--compare", "drf"]).exit_code == 0
    assert seen == [True, False, demo_mod.DEFAULT_TABLE_SIZED] and demo_mod.DEFAULT_TABLE_SIZED
