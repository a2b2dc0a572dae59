"""Fixtures of the simulator tests."""

from __future__ import annotations

import pytest

from dl2_mesos.jobs import JobSpec
from dl2_mesos.policy.sim.trace import TraceJob


def _job(job_id: str, job_type: str, epochs: float, arrival: float = 0.0, **kw) -> TraceJob:
    return TraceJob(job_id, arrival, JobSpec(job_type=job_type, epochs=epochs, **kw))


@pytest.fixture
def make_job():
    """Builder of one trace job: make_job(id, type, epochs, arrival=0.0, **spec fields)."""
    return _job


def _state(agent_caps, jobs):
    """A ClusterState from node capacities and (job_id, type, spec kwargs, view kwargs) tuples."""
    from dl2_mesos.cluster import AgentView, ClusterState, JobView

    avs = tuple(AgentView(f"n{i}", f"n{i}", r, r) for i, r in enumerate(agent_caps))
    views = []
    for i, (jid, t, spec_kw, view_kw) in enumerate(jobs):
        spec_kw = {"epochs": 1000.0, **spec_kw}
        views.append(
            JobView(
                job_id=jid,
                spec=JobSpec(job_type=t, **spec_kw),
                arrival_slot=0,
                arrival_time=float(i),
                **{"epochs_done": 0.0, **view_kw},
            )
        )
    return ClusterState(slot=0, slot_seconds=1200.0, now=0.0, jobs=tuple(views), agents=avs)


@pytest.fixture
def make_state():
    """make_state([Resources...], [(job_id, type, spec_kw, view_kw), ...]) -> ClusterState."""
    return _state
