"""The slot reward and job view shared by the simulator and the framework."""

from __future__ import annotations

import pytest

from dl2_mesos.jobs import JobSpec
from dl2_mesos.slot_accounting import RescaleLedger, account_counts, job_reward, job_view, slot_reward


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
                 ledger=RescaleLedger(5, True, 1), measured_epochs_per_second=0.1)
    assert (v.slots_run, v.slots_since_rescale, v.num_ps, v.num_workers) == (4, 2, 1, 2)
    early = job_view("j", spec, slot=2, arrival_slot=3, arrival_time=30.0, epochs_done=0.0, num_ps=0,
                     num_workers=0, ledger=RescaleLedger(3))
    assert early.slots_run == 0 and early.slots_since_rescale == 0


def test_first_launch_is_free_and_starts_the_rescale_clock():
    booked = account_counts(RescaleLedger(2), 4, (0, 0), (1, 2), restart_seconds=360.0, slot_seconds=1200.0)
    assert booked == account_counts(RescaleLedger(2), 4, (0, 0), (1, 2), 360.0, 1200.0)  # a pure function
    assert not booked.restarted and booked.restart_seconds == 0.0
    assert booked.ledger == RescaleLedger(4, True, 0)
    assert booked.ledger.slots_since_rescale(4) == 0 and booked.ledger.slots_since_rescale(7) == 3


def test_waiting_jobs_count_slots_since_arrival():
    # a job that never ran keeps its arrival slot as the last change (the clock runs while it waits)
    booked = account_counts(RescaleLedger(2), 5, (0, 0), (0, 0), 360.0, 1200.0)
    assert booked.ledger == RescaleLedger(2) and booked.ledger.slots_since_rescale(5) == 3


def test_changes_after_the_first_run_are_charged_at_most_a_slot():
    ran = RescaleLedger(1, True, 0)
    kept = account_counts(ran, 3, (1, 2), (1, 2), 360.0, 1200.0)
    assert kept.ledger == ran and not kept.restarted
    grown = account_counts(ran, 3, (1, 2), (2, 2), 360.0, 1200.0)
    assert grown.restarted and grown.restart_seconds == 360.0 and grown.ledger == RescaleLedger(3, True, 1)
    assert account_counts(ran, 3, (1, 2), (1, 1), 5000.0, 1200.0).restart_seconds == 1200.0


def test_a_preemption_is_free_and_the_resume_is_a_rescale():
    ran = RescaleLedger(1, True, 0)
    stopped = account_counts(ran, 4, (1, 2), (0, 0), 360.0, 1200.0)
    assert not stopped.restarted and stopped.ledger == RescaleLedger(4, True, 0)
    resumed = account_counts(stopped.ledger, 6, (0, 0), (1, 2), 360.0, 1200.0)
    assert resumed.restarted and resumed.ledger == RescaleLedger(6, True, 1)


def test_ledger_round_trips_through_a_dict():
    ledger = RescaleLedger(7, True, 3)
    assert RescaleLedger.from_dict(ledger.to_dict()) == ledger
