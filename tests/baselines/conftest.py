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
