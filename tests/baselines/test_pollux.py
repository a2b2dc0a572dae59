"""The pollux baseline: adaptdl-sched's real PolluxPolicy in .venv-pollux, behind the Policy interface.

These tests start the real worker process (scripts/install_pollux_env.sh makes .venv-pollux;
scripts/bootstrap.sh runs it).
"""

from __future__ import annotations

import importlib.util
import os
import signal
from pathlib import Path

import pytest

from dl2_mesos.allocation import validate_allocation
from dl2_mesos.cluster import AgentView, ClusterState, JobView, TaskView
from dl2_mesos.jobs import JobSpec
from dl2_mesos.placement import place
from dl2_mesos.policy.baselines.pollux import PolluxPolicy, PolluxUnavailable, ps_for_workers
from dl2_mesos.policy.registry import make_policy
from dl2_mesos.resources import Resources
from dl2_mesos.speed_model import default_speed_model

NODE = Resources(cpus=8.0, gpus=2.0, mem=48 * 1024.0)


def _state(n_agents, jobs, slot=0, tasks=(), agent=NODE):
    """jobs: (job_id, JobSpec, num_ps, num_workers)."""
    agents = tuple(AgentView(f"n{i}", f"n{i}", agent, agent) for i in range(n_agents))
    views = tuple(JobView(job_id=jid, spec=spec, arrival_slot=0, arrival_time=float(i), epochs_done=0.0,
                          num_ps=p, num_workers=w) for i, (jid, spec, p, w) in enumerate(jobs))
    return ClusterState(slot=slot, slot_seconds=1200.0, now=1200.0 * slot, jobs=views, agents=agents,
                        tasks=tuple(tasks))


@pytest.fixture(scope="module")
def pollux():
    p = PolluxPolicy(seed=3)
    yield p
    p.close()


def test_ps_rule_is_the_fastest_ps_count_up_to_one_per_worker():
    sm = default_speed_model()
    spec = JobSpec(job_type="resnet-50", epochs=10.0)
    for w in (1, 2, 4, 8, 16):
        p = ps_for_workers(spec, w)
        assert 1 <= p <= w
        best = max(sm.epochs_per_second("resnet-50", q, w) for q in range(1, w + 1))
        assert sm.epochs_per_second("resnet-50", p, w) == best
    assert ps_for_workers(JobSpec(job_type="resnet-50", epochs=1.0, runtime="pytorch"), 4) == 0
    assert ps_for_workers(JobSpec(job_type="resnet-50", epochs=1.0, min_ps=3, max_ps=4), 1) == 3


@pytest.mark.parametrize("n_agents", [1, 2, 3])
def test_allocations_are_valid_on_tiny_clusters(pollux, n_agents):
    types = ["resnet-50", "dssm", "vgg-16", "cnn-text-classification", "seq2seq"]
    jobs = [(f"j{i}", JobSpec(job_type=t, epochs=100.0, max_ps=4, max_workers=4), 0, 0) for i, t in enumerate(types)]
    state = _state(n_agents, jobs)
    alloc = pollux.decide(state)
    validate_allocation(alloc, state)
    assert len(alloc) > 0  # an idle cluster with waiting jobs runs something
    for jid, ja in alloc.items():
        spec = state.job(jid).spec
        assert ja.num_ps == ps_for_workers(spec, ja.num_workers) <= ja.num_workers
    # what Pollux decided fits the agents under the shared placement function
    assert place(alloc, state).granted == alloc
    assert pollux.cpu_seconds and pollux.cpu_seconds[-1] > 0


def test_running_jobs_are_the_base_allocation_and_a_full_cluster_stays_valid(pollux):
    jobs = [("a", JobSpec(job_type="resnet-50", epochs=100.0), 1, 1),
            ("b", JobSpec(job_type="dssm", epochs=100.0), 1, 1),
            ("c", JobSpec(job_type="vgg-16", epochs=100.0), 0, 0)]
    tasks = []
    for jid, spec, p, w in jobs:
        for k in range(p):
            tasks.append(TaskView(f"{jid}-ps{k}", jid, "ps", "n0", spec.ps))
        for k in range(w):
            tasks.append(TaskView(f"{jid}-w{k}", jid, "worker", "n0", spec.worker))
    state = _state(1, jobs, slot=5, tasks=tasks)
    req = pollux.request(state)
    assert req["base"] == {"a": ["n0"], "b": ["n0"]}
    assert req["restart_penalty"] == pytest.approx(360.0 / 1200.0)
    alloc = pollux.decide(state)
    validate_allocation(alloc, state)
    assert sum(ja.num_workers for ja in alloc.values()) <= 2  # two bundles fill one node's 8 CPUs


def test_a_job_that_scales_gets_more_replicas_than_one_that_does_not(pollux):
    # inception-bn speeds up 1.6x from 1 to 4 workers; resnext-110 not at all (1.05x at best)
    sm = default_speed_model()
    assert sm.epochs_per_second("inception-bn", 4, 4) > 1.5 * sm.epochs_per_second("inception-bn", 1, 1)
    assert sm.epochs_per_second("resnext-110", 4, 4) < 1.1 * sm.epochs_per_second("resnext-110", 1, 1)
    jobs = [("flat", JobSpec(job_type="resnext-110", epochs=100.0, max_workers=8, max_ps=8), 0, 0),
            ("scales", JobSpec(job_type="inception-bn", epochs=100.0, max_workers=8, max_ps=8), 0, 0)]
    wins = 0
    for seed in range(3):  # three independent optimiser runs (slot 0 again: the worker resets)
        pollux.seed = seed
        alloc = pollux.decide(_state(4, jobs))
        wins += alloc.get_counts("scales").num_workers > alloc.get_counts("flat").num_workers
    assert wins >= 2


def test_jobs_without_parameter_servers(pollux):
    jobs = [(f"t{i}", JobSpec(job_type=t, epochs=50.0, runtime="pytorch", max_workers=4), 0, 0)
            for i, t in enumerate(["resnet-50", "dssm", "seq2seq"])]
    jobs.append(("mx", JobSpec(job_type="dssm", epochs=50.0, max_workers=4, max_ps=4), 0, 0))
    state = _state(2, jobs)
    req = pollux.request(state)
    assert req["jobs"][0]["resources"] == {"cpu": 2000, "gpu": 1, "mem": 8192, "pods": 1}  # a worker only
    assert req["jobs"][3]["resources"] == {"cpu": 4000, "gpu": 0, "mem": 12288, "pods": 1}  # worker + PS
    alloc = pollux.decide(state)
    validate_allocation(alloc, state)
    assert any(alloc.get_counts(f"t{i}").num_workers for i in range(3))
    for i in range(3):
        assert alloc.get_counts(f"t{i}").num_ps == 0


def test_a_cluster_without_gpus_still_gets_replicas(pollux):
    """Pollux divides demands by the cluster's totals (dominant share): with no GPU anywhere,
    0 / 0 made every job's objective NaN and no job got a replica. GPU-free agents and jobs must
    be scheduled; a job that needs a GPU there cannot run and is left out."""
    cpu_node = Resources(cpus=4.0, gpus=0.0, mem=4096.0)
    small = {"worker": Resources(cpus=1.0, gpus=0.0, mem=256.0), "ps": Resources(cpus=0.5, gpus=0.0, mem=128.0)}
    jobs = [(f"c{i}", JobSpec(job_type="resnet-50", epochs=6.0, **small), 0, 0) for i in range(2)]
    jobs.append(("g", JobSpec(job_type="resnet-50", epochs=6.0), 0, 0))  # default worker: 1 GPU
    state = _state(2, jobs, agent=cpu_node)
    req = pollux.request(state)
    assert all("gpu" not in n["resources"] for n in req["nodes"])
    assert [j["key"] for j in req["jobs"]] == ["c0", "c1"]
    assert req["jobs"][0]["resources"] == {"cpu": 1500, "mem": 384, "pods": 1}
    alloc = pollux.decide(state)
    validate_allocation(alloc, state)
    assert alloc.get_counts("c0").num_workers >= 1 and alloc.get_counts("c1").num_workers >= 1
    assert alloc.get_counts("g").num_workers == 0


def test_a_dead_worker_gives_a_clear_error_and_the_next_slot_starts_a_new_one():
    p = PolluxPolicy(seed=1)
    try:
        state = _state(1, [("a", JobSpec(job_type="dssm", epochs=10.0), 0, 0)])
        p.decide(state)
        old = p.pid
        os.kill(old, signal.SIGKILL)
        p._proc.wait(timeout=10)
        with pytest.raises(PolluxUnavailable, match=r"exited with code -9 while deciding slot 1"):
            p.decide(_state(1, [("a", JobSpec(job_type="dssm", epochs=10.0), 0, 0)], slot=1))
        assert p.pid is None
        alloc = p.decide(_state(1, [("a", JobSpec(job_type="dssm", epochs=10.0), 0, 0)], slot=2))
        assert p.pid is not None and p.pid != old
        assert alloc.get_counts("a").num_workers >= 1
    finally:
        p.close()


def test_missing_environment_is_a_clear_error(tmp_path):
    with pytest.raises(PolluxUnavailable, match="install_pollux_env.sh"):
        PolluxPolicy(python=str(tmp_path / "no-such-python"))


def test_an_interpreter_without_adaptdl_sched_is_a_clear_error():
    import sys

    with pytest.raises(PolluxUnavailable, match="did not start|exited with code"):
        PolluxPolicy(python=sys.executable)  # the main venv: numpy 2, no adaptdl_sched


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError):
        PolluxPolicy(population=1)
    with pytest.raises(ValueError):
        PolluxPolicy(generations=0)


def test_generations_are_cut_to_the_work_budget():
    p = PolluxPolicy.__new__(PolluxPolicy)  # no worker needed for the arithmetic
    p.population, p.generations, p.work_budget, p.min_generations = 30, 30, 1.5e7, 3
    assert p.generations_for(20, 13) == 30
    assert p.generations_for(100, 500) == 5
    assert p.generations_for(1000, 500) == 3


def test_registry_builds_it():
    p = make_policy("pollux", population=4, generations=2)
    try:
        assert p.name == "pollux" and p.pid is not None
    finally:
        p.close()
    assert p.pid is None


def _framework_fakes():
    """The framework tests' fakes (recording driver, offers, harness), loaded by path."""
    path = Path(__file__).resolve().parents[1] / "framework" / "conftest.py"
    spec = importlib.util.spec_from_file_location("dl2_framework_test_fakes", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_framework_keeps_the_last_allocation_when_the_pollux_worker_dies():
    fakes = _framework_fakes()
    policy = PolluxPolicy(seed=2)
    try:
        h = fakes.Harness(policy)
        h.register()
        job = h.submit("dssm", epochs=1000)
        h.offer(fakes.make_offer("a1"))
        h.tick()
        assert h.core.metrics.decision_errors._value.get() == 0
        h.run_all(job)
        counts = (job.num_ps, job.num_workers)
        assert counts[1] >= 1
        os.kill(policy.pid, signal.SIGKILL)
        policy._proc.wait(timeout=10)
        h.driver.clear()
        h.next_slot()
        assert h.core.metrics.decision_errors._value.get() == 1
        assert (job.num_ps, job.num_workers) == counts
        assert not h.driver.named("killTask") and not h.driver.launched()
        assert h.core.last_decision["allocation"] == {job.job_id: list(counts)}
        h.next_slot()  # a new worker answers the next slot
        assert h.core.metrics.decision_errors._value.get() == 1
        assert policy.pid is not None
    finally:
        policy.close()


def test_the_tiny_preset_completes_with_valid_allocations_and_no_job_beats_its_bound():
    from dl2_mesos.policy.sim.bounds import job_bounds
    from dl2_mesos.policy.sim.settings import preset
    from dl2_mesos.policy.sim.simulator import run
    from dl2_mesos.policy.sim.trace import generate_trace

    sc, tc = preset("tiny")
    trace = generate_trace(tc, 2)
    policy = PolluxPolicy(seed=2)

    class Checked:
        name = "pollux"

        def decide(self, state):
            alloc = policy.decide(state)
            validate_allocation(alloc, state)
            return alloc

    try:
        m = run(Checked(), sc, trace, seed=2)
    finally:
        policy.close()
    assert m.num_finished == len(trace) and not m.truncated
    bounds = {b.job_id: b.jct for b in job_bounds(sc, trace)}
    assert all(j.jct >= bounds[j.job_id] - 1e-6 for j in m.jobs)
    assert len(policy.cpu_seconds) == len(policy.generations_used) > 0


def test_the_framework_selects_it_by_name():
    from dl2_mesos.config import load_config
    from dl2_mesos.framework.runner import make_policy as framework_policy

    cfg = load_config(env={}, overrides={"policy": "pollux", "policy_args": '{"population": 4, "generations": 2}'})
    p = framework_policy(cfg)
    try:
        assert isinstance(p, PolluxPolicy) and (p.population, p.generations) == (4, 2)
    finally:
        p.close()
