"""Offered load rho: the definition, its scaling with the cluster, and the presets' targets."""

from __future__ import annotations

import pytest

from dl2_mesos.policy.sim.bounds import job_bounds
from dl2_mesos.policy.sim.settings import CONTENDED, SWEEP, SimConfig, preset
from dl2_mesos.policy.sim.load import format_loads, mean_load, offered_load
from dl2_mesos.policy.sim.trace import generate_trace
from dl2_mesos.resources import Resources


def test_one_job_alone_loads_the_cluster_by_its_share(make_job):
    # one job, arriving at 0: the bound's makespan is its fastest run time, so rho_r is its
    # fastest size's r-demand over the cluster's r
    cfg = SimConfig(num_agents=4)
    tr = (make_job("a", "resnet-50", 500.0, max_ps=2, max_workers=2),)
    b = job_bounds(cfg, tr)[0]
    load = offered_load(cfg, tr)
    use = tr[0].spec.worker.scale(b.best_workers) + tr[0].spec.ps.scale(b.best_ps)
    assert load.per_resource["cpus"] == pytest.approx(use.cpus / 32.0)
    assert load.per_resource["gpus"] == pytest.approx(use.gpus / 8.0)
    assert load.makespan_s == pytest.approx(b.run_s)
    assert load.rho == max(load.per_resource.values())
    assert load.bottleneck == max(load.per_resource, key=load.per_resource.get)


def test_two_jobs_by_hand(make_job):
    # two identical jobs, the second arriving when the first would end: each is alone at its
    # fastest size, so the cluster's r is used at the job's share for the whole makespan
    cfg = SimConfig(num_agents=2, slot_seconds=100.0)
    one = (make_job("a", "dssm", 100.0, max_ps=1, max_workers=1),)
    run_s = job_bounds(cfg, one)[0].run_s
    arrive = 100.0 * (int(run_s // 100.0) + 1)  # a slot start after the first job's end
    two = one + (make_job("b", "dssm", 100.0, arrival=arrive, max_ps=1, max_workers=1),)
    load = offered_load(cfg, two)
    assert load.makespan_s == pytest.approx(arrive + run_s)
    assert load.per_resource["cpus"] == pytest.approx(2 * 4.0 * run_s / (16.0 * (arrive + run_s)))
    assert load.per_resource["gpus"] == 0.0  # dssm runs on CPUs only
    assert load.bottleneck == "cpus"


def test_rho_scales_as_one_over_nodes():
    _, tc = preset("reference")
    tr = generate_trace(tc, 101)
    full = offered_load(SimConfig(num_agents=500), tr)
    quarter = offered_load(SimConfig(num_agents=125), tr)
    assert quarter.rho == pytest.approx(4 * full.rho)
    assert quarter.bottleneck == full.bottleneck == "cpus"


def test_unrunnable_job_is_left_out(make_job):
    cfg = SimConfig(num_agents=1)
    huge = Resources(cpus=64.0, gpus=0.0, mem=1024.0)
    tr = (
        make_job("a", "dssm", 100.0, max_ps=1, max_workers=1),
        make_job("b", "dssm", 100.0, worker=huge, ps=huge, max_ps=1, max_workers=1),
    )
    load = offered_load(cfg, tr)
    assert load.unrunnable == 1
    assert load.rho == pytest.approx(offered_load(cfg, tr[:1]).rho)
    assert "left out" in format_loads([1], [load])


def test_empty_trace():
    load = offered_load(SimConfig(num_agents=1), ())
    assert load.rho == 0.0 and load.makespan_s == 0.0
    assert mean_load([]) == (0.0, "cpus")


# the presets' targets, on held-out seeds (the mean over 101-105 within 20% of the name)
_TARGETS = {name: float(name.split("rho")[1]) for name, _ in SWEEP} | {
    "paper-rho1": 1.0,
    "paper-rho2": 2.0,
    "testbed-rho2": 2.0,
}


@pytest.mark.parametrize("name", [n for n, _ in SWEEP] + list(CONTENDED))
def test_presets_hit_their_load(name):
    sc, tc = preset(name)
    loads = [offered_load(sc, generate_trace(tc, s)) for s in range(101, 106)]
    rho, bottleneck = mean_load(loads)
    assert rho == pytest.approx(_TARGETS[name], rel=0.2)
    assert bottleneck == "cpus"


def test_reference_is_idle_and_paper_presets_are_paper_scale():
    sc, tc = preset("reference")
    assert offered_load(sc, generate_trace(tc, 101)).rho < 0.35
    for name in ("paper-rho1", "paper-rho2"):
        assert preset(name)[0].num_agents == 500
    assert preset("testbed-rho2")[0].num_agents == 13
