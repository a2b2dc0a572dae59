"""The simulator's slot dynamics: arrivals, progress, fractional JCT, restart cost, determinism."""

from __future__ import annotations

import pytest

from dl2_mesos.allocation import Allocation, JobAllocation
from dl2_mesos.errors import InvalidAllocation
from dl2_mesos.policy.registry import make_policy
from dl2_mesos.policy.sim.settings import SimConfig, preset
from dl2_mesos.policy.sim.simulator import Simulator, run
from dl2_mesos.policy.sim.trace import generate_trace
from dl2_mesos.resources import Resources
from dl2_mesos.speed_model import default_speed_model

SLOT = 1200.0


def cfg(**kw) -> SimConfig:
    return SimConfig(**{"num_agents": 2, **kw})


def eps(job_type: str, ps: int, w: int) -> float:
    return default_speed_model().epochs_per_second(job_type, ps, w)


def test_reset_shows_only_arrived_jobs(make_job):
    trace = (make_job("a", "resnet-50", 1e6, 0.0), make_job("b", "dssm", 1e6, 1500.0))
    sim = Simulator(cfg(), trace)
    st = sim.reset()
    assert st.slot == 0 and st.now == 0.0 and st.slot_seconds == SLOT
    assert [j.job_id for j in st.jobs] == ["a"]
    assert len(st.agents) == 2 and st.agents[0].total == Resources(8, 2, 48 * 1024)
    sim.step(Allocation({"a": (1, 1)}))
    assert [j.job_id for j in sim.state().jobs] == ["a"]  # b arrives at 1500 s: visible at 2400 s
    sim.step(Allocation({"a": (1, 1)}))
    st = sim.state()
    assert [j.job_id for j in st.jobs] == ["a", "b"] and st.now == 2 * SLOT
    assert st.job("b").arrival_slot == 2 and st.job("b").slots_run == 0
    assert st.job("a").slots_run == 2


def test_progress_follows_speed_model_and_reward(make_job):
    sim = Simulator(cfg(), (make_job("a", "vgg-16", 1e6),))
    out = sim.step(Allocation({"a": (2, 3)}))
    e = eps("vgg-16", 2, 3) * SLOT
    assert out.epochs["a"] == pytest.approx(e)
    assert out.reward == pytest.approx(e / 1e6)
    j = sim.state().job("a")
    assert j.epochs_done == pytest.approx(e) and (j.num_ps, j.num_workers) == (2, 3)
    assert len(sim.state().tasks) == 5


def test_job_ending_in_its_arrival_slot_has_fractional_jct_below_one_slot(make_job):
    sim = Simulator(cfg(), (make_job("a", "resnext-110", 100.0),))
    out = sim.step(Allocation({"a": (1, 1)}))
    assert out.finished == ("a",) and out.done
    m = sim.metrics()
    assert m.jobs[0].finished
    assert m.avg_jct == pytest.approx(100.0 / eps("resnext-110", 1, 1))
    assert m.avg_jct < SLOT
    assert m.makespan == pytest.approx(m.avg_jct)


def test_jct_counts_from_mid_slot_arrival(make_job):
    sim = Simulator(cfg(), (make_job("a", "resnext-110", 100.0, arrival=300.0),))
    sim.step(Allocation())  # slot 0: not arrived yet
    sim.step(Allocation({"a": (1, 1)}))
    m = sim.metrics()
    assert m.jobs[0].jct == pytest.approx(SLOT - 300.0 + 100.0 / eps("resnext-110", 1, 1))


def test_restart_cost_charged_when_counts_change(make_job):
    sim = Simulator(cfg(), (make_job("a", "vgg-16", 1e6),))
    out0 = sim.step(Allocation({"a": (1, 1)}))  # first launch: free
    assert out0.rescaled == ()
    assert sim.state().job("a").restart_cost_seconds == 360.0
    out1 = sim.step(Allocation({"a": (2, 2)}))  # grow: restart cost
    assert out1.rescaled == ("a",)
    assert out1.epochs["a"] == pytest.approx(eps("vgg-16", 2, 2) * (SLOT - 360.0))
    out2 = sim.step(Allocation({"a": (2, 2)}))  # unchanged: full slot
    assert out2.rescaled == () and out2.epochs["a"] == pytest.approx(eps("vgg-16", 2, 2) * SLOT)
    out3 = sim.step(Allocation())  # preempted: nothing trained, not a rescale
    assert out3.epochs == {} and out3.rescaled == ()
    out4 = sim.step(Allocation({"a": (2, 2)}))  # resume from checkpoint: charged
    assert out4.rescaled == ("a",)
    j = sim.state().job("a")
    assert j.rescales == 2 and j.slots_since_rescale == 1
    assert sim.metrics().rescales == 2


def test_restart_cost_overrides(make_job):
    trace = (make_job("a", "vgg-16", 1e6), make_job("b", "vgg-16", 1e6, restart_seconds=10.0))
    sim = Simulator(cfg(restart_seconds={"vgg-16": 600.0}), trace)
    assert sim.state().job("a").restart_cost_seconds == 600.0
    assert sim.state().job("b").restart_cost_seconds == 10.0  # the job's own value wins
    sim.step(Allocation({"a": (1, 1), "b": (1, 1)}))
    out = sim.step(Allocation({"a": (1, 2), "b": (1, 2)}))
    assert out.epochs["a"] == pytest.approx(eps("vgg-16", 1, 2) * (SLOT - 600.0))
    assert out.epochs["b"] == pytest.approx(eps("vgg-16", 1, 2) * (SLOT - 10.0))
    free = Simulator(cfg(charge_restart_cost=False), trace[:1])
    assert free.state().job("a").restart_cost_seconds == 0.0
    free.step(Allocation({"a": (1, 1)}))
    out = free.step(Allocation({"a": (1, 2)}))
    assert out.epochs["a"] == pytest.approx(eps("vgg-16", 1, 2) * SLOT)
    assert out.rescaled == ("a",)  # still a rescale, just free


def test_restart_charge_scale_charges_less_and_shows_the_nominal_cost(make_job):
    """The training curriculum: a rescale costs a quarter, the policy still sees 360 s."""
    sim = Simulator(cfg(restart_charge_scale=0.25), (make_job("a", "vgg-16", 1e6),))
    assert sim.state().job("a").restart_cost_seconds == 360.0
    sim.step(Allocation({"a": (1, 1)}))
    out = sim.step(Allocation({"a": (1, 2)}))
    assert out.rescaled == ("a",)
    assert out.epochs["a"] == pytest.approx(eps("vgg-16", 1, 2) * (SLOT - 90.0))
    assert cfg(restart_charge_scale=0.25).to_dict()["restart_charge_scale"] == 0.25
    assert "restart_charge_scale" not in cfg().to_dict()  # unchanged record shape by default


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_restart_charge_scale_outside_0_1_is_refused(bad):
    from dl2_mesos.errors import ConfigError

    with pytest.raises(ConfigError, match="restart_charge_scale"):
        cfg(restart_charge_scale=bad)


def test_finishing_after_restart_accounts_for_restart_time(make_job):
    e11, e12 = eps("resnext-110", 1, 1), eps("resnext-110", 1, 2)
    epochs = e11 * SLOT + 50.0
    sim = Simulator(cfg(), (make_job("a", "resnext-110", epochs),))
    sim.step(Allocation({"a": (1, 1)}))
    out = sim.step(Allocation({"a": (1, 2)}))
    assert out.finished == ("a",)
    assert sim.metrics().jobs[0].end_time == pytest.approx(SLOT + 360.0 + 50.0 / e12)


def test_invalid_allocation_raises(make_job):
    sim = Simulator(cfg(), (make_job("a", "vgg-16", 100.0, max_workers=4),))
    with pytest.raises(InvalidAllocation):
        sim.step(Allocation({"a": (1, 5)}))
    with pytest.raises(InvalidAllocation):
        sim.step(Allocation({"zzz": (1, 1)}))
    with pytest.raises(InvalidAllocation):  # 10 GPU workers > the 4 GPUs of the cluster
        Simulator(cfg(), (make_job("b", "vgg-16", 100.0),)).step(Allocation({"b": (1, 10)}))


def test_placement_grants_only_what_fits(make_job):
    # a's bundle and second worker spread over both nodes (least-loaded), leaving one GPU on
    # each: b's 2-GPU worker fits in aggregate but on no single node, so b gets nothing
    trace = (
        make_job("a", "vgg-16", 1e6),
        make_job("b", "vgg-16", 1e6, worker=Resources(1, 2, 1024)),
    )
    sim = Simulator(cfg(), trace)
    out = sim.step(Allocation({"a": (1, 2), "b": (1, 1)}))
    assert out.granted.get_counts("a") == JobAllocation(1, 2)
    assert out.granted.get_counts("b").is_zero
    assert "b" not in out.epochs


def test_same_seed_same_run_and_noise_depends_on_seed():
    sim_cfg, trace_cfg = preset("tiny")
    trace = generate_trace(trace_cfg, 3)
    noisy = SimConfig(num_agents=3, speed_noise=0.2)
    a = run(make_policy("drf"), noisy, trace, seed=5)
    b = run(make_policy("drf"), noisy, trace, seed=5)
    c = run(make_policy("drf"), noisy, trace, seed=6)
    assert a.to_dict() == b.to_dict()
    assert a.avg_jct != c.avg_jct
    assert run(make_policy("drf"), sim_cfg, trace).avg_jct == run(make_policy("drf"), sim_cfg, trace).avg_jct


def test_run_metrics_are_consistent():
    sim_cfg, trace_cfg = preset("tiny")
    m = run(make_policy("drf"), sim_cfg, generate_trace(trace_cfg, 1), seed=1)
    assert m.policy == "drf" and m.num_jobs == 6 and m.num_finished == 6 and not m.truncated
    jcts = sorted(j.jct for j in m.jobs)
    assert m.avg_jct == pytest.approx(sum(jcts) / 6)
    assert m.median_jct == pytest.approx((jcts[2] + jcts[3]) / 2)
    assert jcts[0] <= m.p95_jct <= jcts[-1]
    assert m.makespan == pytest.approx(max(j.end_time for j in m.jobs) - min(j.arrival_time for j in m.jobs))
    assert m.slots == len(m.slot_records) and m.makespan <= m.slots * SLOT
    assert 0 < m.cpu_util <= 1 and 0 < m.gpu_util <= 1
    for s in m.slot_records:
        assert 0 <= s.cpu_util <= 1 + 1e-9 and 0 <= s.gpu_util <= 1 + 1e-9
    # run utilisation = slot utilisations weighted over the makespan
    used = sum(s.cpu_util for s in m.slot_records) * SLOT
    assert m.cpu_util == pytest.approx(used / m.makespan)
    assert m.total_reward == pytest.approx(6.0)  # every job trained exactly its epochs
    assert m.rescales == sum(j.rescales for j in m.jobs)


def test_max_slots_truncates_and_censors(make_job, caplog):
    sim = Simulator(
        cfg(max_slots=2), (make_job("a", "vgg-16", 1e6), make_job("b", "vgg-16", 1e6, arrival=1e6))
    )
    sim.step(Allocation({"a": (1, 1)}))
    with caplog.at_level("WARNING", logger="dl2_mesos.policy.sim.simulator"):
        out = sim.step(Allocation({"a": (1, 1)}))
    # the job that never arrived is named as such, with the slot it would need
    assert "2 jobs unfinished, 1 of them not yet arrived" in caplog.text and "slot 834" in caplog.text
    assert out.done and sim.done
    m = sim.metrics()
    assert m.truncated and m.num_finished == 0 and m.num_unfinished == 2
    assert m.jobs[0].jct == pytest.approx(2 * SLOT)
    with pytest.raises(RuntimeError):
        sim.step(Allocation())


def test_mixed_agents(make_job):
    agents = (Resources(8, 2, 49152), Resources(16, 0, 65536))
    sim = Simulator(SimConfig(num_agents=1, agents=agents), (make_job("a", "dssm", 1e6),))
    st = sim.state()
    assert [a.total for a in st.agents] == list(agents)
    assert st.capacity == Resources(24, 2, 49152 + 65536)
    out = sim.step(Allocation({"a": (5, 5)}))  # 20 cpus of CPU-only tasks over both nodes
    assert out.granted.get_counts("a") == JobAllocation(5, 5)


def test_slot_reward_is_progress_over_total_epochs():
    from dl2_mesos.policy.sim.simulator import slot_reward

    assert slot_reward({"a": 10.0, "b": 5.0}, {"a": 100.0, "b": 50.0, "c": 1.0}) == pytest.approx(0.2)
    assert slot_reward({}, {}) == 0.0
