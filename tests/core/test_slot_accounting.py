"""The slot reward and job view shared by the simulator and the framework."""

from __future__ import annotations

import pytest

from dl2_mesos.jobs import JobSpec
from dl2_mesos.slot_accounting import job_reward, job_view, slot_reward


def test_slot_reward_sums_the_fraction_of_each_jobs_epochs_trained():
    # job A trained 2 of its 10 epochs, job B 1 of its 4: 0.2 + 0.25
    assert slot_reward({"a": 2.0, "b": 1.0}, {"a": 10.0, "b": 4.0, "c": 1.0}) == pytest.approx(0.45)
    assert slot_reward({}, {}) == 0.0


def test_job_reward_never_negative_and_ignores_jobs_without_epochs():
    assert job_reward(-1.0, 10.0) == 0.0  # a progress report that went backwards gives nothing
    assert job_reward(3.0, 0.0) == 0.0


def test_job_view_derives_slots_run_from_the_arrival_slot():
    spec = JobSpec(job_type="resnet-50", epochs=10)
    v = job_view("j", spec, slot=7, arrival_slot=3, arrival_time=30.0, epochs_done=1.5, num_ps=1, num_workers=2,
                 slots_since_rescale=2, rescales=1, measured_epochs_per_second=0.1)
    assert (v.slots_run, v.slots_since_rescale, v.num_ps, v.num_workers) == (4, 2, 1, 2)
    early = job_view("j", spec, slot=2, arrival_slot=3, arrival_time=30.0, epochs_done=0.0, num_ps=0,
                     num_workers=0, slots_since_rescale=-1, rescales=0)
    assert early.slots_run == 0 and early.slots_since_rescale == 0
