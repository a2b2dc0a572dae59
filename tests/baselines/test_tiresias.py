"""The tiresias baseline: discretised 2D-LAS at a fixed size, with demotion and starvation promotion."""

from __future__ import annotations

import pytest

from dl2_mesos.allocation import validate_allocation
from dl2_mesos.cluster import AgentView, ClusterState, JobView
from dl2_mesos.jobs import JobSpec
from dl2_mesos.policy.baselines.tiresias import TiresiasPolicy, requested_size, service_units
from dl2_mesos.policy.sim.settings import preset
from dl2_mesos.policy.sim.simulator import run
from dl2_mesos.policy.sim.trace import generate_trace
from dl2_mesos.resources import Resources
from dl2_mesos.speed_model import default_speed_model

NODE = Resources(cpus=8.0, gpus=2.0, mem=48 * 1024.0)
# two-worker jobs (1 PS + 2 workers of resnet-50: 6 CPUs, 2 GPUs): one node holds exactly one
SPEC = JobSpec(job_type="resnet-50", epochs=1000.0, min_workers=2, max_workers=2, min_ps=2, max_ps=2)


class Clock:
    """Builds the successive slot states one policy sees (60-second slots)."""

    def __init__(self, n_agents: int = 1) -> None:
        self.slot = -1
        self.agents = tuple(AgentView(f"n{i}", f"n{i}", NODE, NODE) for i in range(n_agents))

    def state(self, jobs: list[tuple[str, JobSpec, float, object]]) -> ClusterState:
        """jobs: (job_id, spec, arrival_time, counts it runs now or None)."""
        self.slot += 1
        views = []
        for jid, spec, arrival, counts in jobs:
            p, w = (counts.num_ps, counts.num_workers) if counts else (0, 0)
            views.append(JobView(job_id=jid, spec=spec, arrival_slot=int(arrival // 60), arrival_time=arrival,
                                 epochs_done=0.0, num_ps=p, num_workers=w))
        return ClusterState(slot=self.slot, slot_seconds=60.0, now=60.0 * self.slot, jobs=tuple(views),
                            agents=self.agents)


def test_requested_size_minimum_is_the_jobs_minimum():
    assert requested_size(JobSpec(job_type="dssm", epochs=10.0), NODE) == (1, 1)
    assert requested_size(JobSpec(job_type="dssm", epochs=10.0, min_workers=3, min_ps=2), NODE) == (2, 3)
    assert requested_size(JobSpec(job_type="dssm", epochs=10.0, runtime="pytorch", min_workers=2), NODE) == (0, 2)
    with pytest.raises(ValueError):
        TiresiasPolicy(size="huge")


def test_requested_size_fastest_is_the_fastest_size_with_at_most_one_ps_per_worker():
    sm = default_speed_model()
    spec = JobSpec(job_type="dssm", epochs=10.0, max_workers=8, max_ps=8)
    p, w = requested_size(spec, NODE.scale(100), "fastest")
    speeds = {}
    for ww in range(1, 9):
        speeds[ww] = max(sm.epochs_per_second("dssm", q, ww) for q in range(1, ww + 1))
    assert w == max(speeds, key=speeds.get) and 1 <= p <= w
    assert sm.epochs_per_second("dssm", p, w) == speeds[w]
    # capped to what the cluster can hold at all
    p1, w1 = requested_size(spec, NODE, "fastest")
    assert w1 < w
    assert (spec.worker.scale(w1) + spec.ps.scale(p1)).fits_in(NODE)
    assert requested_size(SPEC, NODE.scale(10), "fastest") == (2, 2)


def test_service_units_are_gpus_or_workers():
    assert service_units(SPEC, 2, 2) == 2.0
    assert service_units(JobSpec(job_type="dssm", epochs=1.0), 3, 5) == 5.0


def test_demotion_by_attained_service_lets_a_new_job_preempt():
    pol = TiresiasPolicy(thresholds=(100.0, 1000.0), starve_limit=0)
    clock = Clock()
    a = ("a", SPEC, 0.0)
    # slot 0: a alone, runs at its fixed size
    alloc = pol.decide(clock.state([(*a, None)]))
    assert dict(alloc) == {"a": alloc["a"]} and (alloc["a"].num_ps, alloc["a"].num_workers) == (2, 2)
    run_a = alloc["a"]
    # slot 1: a ran 60 s on 2 GPUs = 120 GPU-s >= 100 -> Q1; b arrives in Q0 and takes the node
    alloc = pol.decide(clock.state([(*a, run_a), ("b", SPEC, 70.0, None)]))
    assert pol.queue_of("a") == 1 and pol.queue_of("b") == 0
    assert set(alloc) == {"b"}  # a is preempted: non-elastic, the node holds one job
    # slot 2: b ran 120 GPU-s -> Q1 too, behind a (FIFO within the queue)
    run_b = alloc["b"]
    alloc = pol.decide(clock.state([(*a, None), ("b", SPEC, 70.0, run_b)]))
    assert pol.queue_of("b") == 1 and set(alloc) == {"a"}
    # a accumulates 120 + 8 x 120 >= 1000 GPU-s -> Q2, below b
    for _ in range(8):
        alloc = pol.decide(clock.state([(*a, run_a), ("b", SPEC, 70.0, None)]))
    assert pol.queue_of("a") == 2 and set(alloc) == {"b"}


def test_starvation_promotes_a_waiting_job_back_to_the_top_queue():
    pol = TiresiasPolicy(thresholds=(100.0, 1000.0), starve_limit=2.0)
    clock = Clock()
    a, b = ("a", SPEC, 0.0), ("b", SPEC, 70.0)
    run = pol.decide(clock.state([(*a, None)]))["a"]
    pol.decide(clock.state([(*a, run), (*b, None)]))  # a ran 60 s -> Q1; b takes the node
    assert pol.queue_of("a") == 1
    pol.thresholds = (10_000.0, 100_000.0)  # from now on b stays in Q0 while it runs
    alloc = pol.decide(clock.state([(*a, None), (*b, run)]))  # a waited 60 s < 2 x 60 s
    assert pol.queue_of("a") == 1 and set(alloc) == {"b"}
    alloc = pol.decide(clock.state([(*a, None), (*b, run)]))  # a waited 120 s = 2 x its last run
    assert pol.queue_of("a") == 0  # promoted, its attained service counted afresh
    assert set(alloc) == {"a"}  # and first in Q0 by arrival: it preempts b
    assert pol.tracks["a"].service == 0.0


def test_no_promotion_when_starve_limit_is_off():
    pol = TiresiasPolicy(thresholds=(100.0,), starve_limit=0)
    clock = Clock()
    a, b = ("a", SPEC, 0.0), ("b", SPEC, 70.0)
    run = pol.decide(clock.state([(*a, None)]))["a"]
    pol.decide(clock.state([(*a, run), (*b, None)]))
    pol.thresholds = (10_000.0,)
    for _ in range(10):
        alloc = pol.decide(clock.state([(*a, None), (*b, run)]))
    assert pol.queue_of("a") == 1 and set(alloc) == {"b"}


def test_jobs_that_do_not_fit_are_skipped_and_later_ones_served():
    pol = TiresiasPolicy()
    clock = Clock(n_agents=1)
    big = JobSpec(job_type="resnet-50", epochs=10.0, min_workers=3, max_workers=3, max_ps=3)  # 3 GPUs > 2
    alloc = pol.decide(clock.state([("big", big, 0.0, None), ("small", SPEC, 1.0, None)]))
    assert set(alloc) == {"small"}


def test_a_new_run_starts_afresh():
    pol = TiresiasPolicy(thresholds=(100.0,), starve_limit=0)
    clock = Clock()
    run = pol.decide(clock.state([("a", SPEC, 0.0, None)]))["a"]
    pol.decide(clock.state([("a", SPEC, 0.0, run)]))
    assert pol.queue_of("a") == 1
    pol.decide(Clock().state([("a", SPEC, 0.0, None)]))  # slot 0 again
    assert pol.queue_of("a") == 0


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError):
        TiresiasPolicy(thresholds=(100.0, 10.0))
    with pytest.raises(ValueError):
        TiresiasPolicy(thresholds=(0.0,))
    with pytest.raises(ValueError):
        TiresiasPolicy(starve_limit=-1)


def test_simulated_runs_are_non_elastic_and_valid():
    sc, tc = preset("tiny")
    trace = generate_trace(tc, 3)
    pol = TiresiasPolicy()
    sizes: dict[str, set] = {}

    class Checked:
        name = "tiresias"

        def decide(self, state):
            alloc = pol.decide(state)
            validate_allocation(alloc, state)
            for jid, ja in alloc.items():
                sizes.setdefault(jid, set()).add((ja.num_ps, ja.num_workers))
            return alloc

    m = run(Checked(), sc, trace, seed=3)
    assert m.num_finished == len(trace)
    assert sizes and all(len(s) == 1 for s in sizes.values())  # every job always at one size


def test_the_framework_selects_it_by_name():
    from dl2_mesos.config import load_config
    from dl2_mesos.framework.runner import make_policy as framework_policy

    cfg = load_config(env={}, overrides={"policy": "tiresias", "policy_args": '{"starve_limit": 4}'})
    p = framework_policy(cfg)
    assert isinstance(p, TiresiasPolicy) and p.starve_limit == 4.0
