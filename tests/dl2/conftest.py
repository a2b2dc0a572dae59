"""Fixtures for the DL2 policy tests: hand-built cluster states and small models."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from dl2_mesos.cluster import AgentView, ClusterState, JobView, TaskView
from dl2_mesos.job_types import job_type_names
from dl2_mesos.jobs import JobSpec
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.network import ActorCritic
from dl2_mesos.resources import Resources

NODE = Resources(cpus=8.0, gpus=2.0, mem=48 * 1024.0)


def make_state(n_jobs: int, n_agents: int, running: dict[str, tuple[int, int]] | None = None,
               max_tasks: int = 16, slot: int = 3) -> ClusterState:
    """A state with ``n_jobs`` jobs (types cycling) on ``n_agents`` reference nodes.

    ``running`` maps job ids to (PS, workers) counts whose tasks are placed round-robin.
    """
    running = running or {}
    agents = tuple(AgentView(f"a{i:04d}", f"h{i}", NODE, NODE) for i in range(n_agents))
    names = job_type_names()
    jobs, tasks = [], []
    free = [NODE for _ in agents]
    k = 0
    for i in range(n_jobs):
        jid = f"j{i:04d}"
        spec = JobSpec(job_type=names[i % len(names)], epochs=1000.0 + 100 * i, max_ps=max_tasks,
                       max_workers=max_tasks)
        p, w = running.get(jid, (0, 0))
        for role, n, res in (("ps", p, spec.ps), ("worker", w, spec.worker)):
            for _ in range(n):
                for _ in range(len(agents)):
                    if res.fits_in(free[k % len(agents)]):
                        break
                    k += 1
                a = k % len(agents)
                free[a] = free[a] - res
                tasks.append(TaskView(f"t{len(tasks)}", jid, role, agents[a].agent_id, res))
                k += 1
        jobs.append(JobView(jid, spec, arrival_slot=0, arrival_time=0.0, epochs_done=10.0 * i, num_ps=p,
                            num_workers=w, slots_run=slot, slots_since_rescale=1))
    return ClusterState(slot=slot, slot_seconds=1200.0, now=slot * 1200.0, jobs=tuple(jobs), agents=agents,
                        tasks=tuple(tasks))


@pytest.fixture
def small_net() -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(DL2Config(window=8, hidden=32, layers=2))


def load_bench(script: str) -> Iterator[ModuleType]:
    """Import ``bench/<script>.py`` (bench scripts are not part of the package) for the span of a
    fixture; registered in ``sys.modules`` because dataclasses look their module up."""
    path = Path(__file__).resolve().parents[2] / "bench" / f"{script}.py"
    spec = importlib.util.spec_from_file_location(f"dl2_bench_{script}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)
