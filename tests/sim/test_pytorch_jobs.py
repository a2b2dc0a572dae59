"""PyTorch (all-reduce, workers only) jobs in traces, the simulator, the bound and the load."""

from __future__ import annotations

import pytest

from dl2_mesos.allocation import Allocation, JobAllocation
from dl2_mesos.errors import InvalidAllocation
from dl2_mesos.policy.sim.bounds import job_bounds
from dl2_mesos.policy.sim.settings import SimConfig
from dl2_mesos.policy.sim.load import offered_load
from dl2_mesos.policy.sim.simulator import Simulator
from dl2_mesos.policy.sim.trace import parse_trace, trace_to_csv
from dl2_mesos.speed_model import default_speed_model

CSV = """job_id,arrival_time,job_type,epochs,runtime,min_ps,max_ps,min_workers,max_workers
pt,0,resnet-50,200,pytorch,0,0,2,4
pt-defaults,0,dssm,200,pytorch,,,,
mx,1200,dssm,200,mxnet,1,2,1,2
"""


def test_csv_pytorch_rows_parse_and_round_trip():
    tr = parse_trace(CSV, "t.csv")
    by_id = {j.job_id: j.spec for j in tr}
    assert by_id["pt"].max_ps == by_id["pt"].min_ps == 0 and not by_id["pt"].uses_ps
    assert by_id["pt"].min_workers == 2
    assert by_id["pt-defaults"].max_ps == 0  # a PyTorch job has no PS whatever the defaults say
    assert by_id["mx"].uses_ps
    assert parse_trace(trace_to_csv(tr)) == tr


def test_simulator_runs_pytorch_jobs_with_restart_cost():
    tr = parse_trace(CSV)
    sim = Simulator(SimConfig(num_agents=2, restart_seconds={"resnet-50": 100.0}), tr)
    state = sim.state()
    views = {j.job_id: j for j in state.jobs}
    assert not views["pt"].spec.uses_ps and views["pt"].restart_cost_seconds == 100.0
    out = sim.step(Allocation({"pt": JobAllocation(0, 2), "pt-defaults": JobAllocation(0, 1)}))
    eps = default_speed_model().epochs_per_second("resnet-50", 0, 2, False)
    assert eps > 0
    assert out.epochs["pt"] == pytest.approx(min(200.0, eps * 1200.0))
    assert out.granted.get_counts("pt") == JobAllocation(0, 2)
    # grow: charged the restart cost (when still running)
    if "pt" not in out.finished:
        out2 = sim.step(Allocation({"pt": JobAllocation(0, 3)}))
        assert "pt" in out2.rescaled


def test_simulator_rejects_ps_for_a_pytorch_job_and_below_min_workers():
    tr = parse_trace(CSV)
    sim = Simulator(SimConfig(num_agents=2), tr)
    with pytest.raises(InvalidAllocation):
        sim.step(Allocation({"pt": JobAllocation(1, 2)}))
    with pytest.raises(InvalidAllocation):
        sim.step(Allocation({"pt": JobAllocation(0, 1)}))  # below min_workers 2


def test_bound_and_load_size_pytorch_jobs_without_ps():
    tr = parse_trace(CSV)
    cfg = SimConfig(num_agents=2)
    b = {x.job_id: x for x in job_bounds(cfg, tr)}
    assert b["pt"].best_ps == 0 and 2 <= b["pt"].best_workers <= 4 and b["pt"].run_s > 0
    load = offered_load(cfg, tr)
    assert load.rho > 0 and load.unrunnable == 0
