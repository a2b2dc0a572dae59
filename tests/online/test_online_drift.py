"""Online learning live on the local cluster (light executors at the speed table's pace, 2 s
slots): model updates are applied, and a deliberately corrupted update is rolled back with its
reason recorded. ``bench/online_drift.py`` runs the long version and compares against the
frozen model."""

from __future__ import annotations

import pytest

from dl2_rigs.online_drift import DRIFT, drift_workload, injection_slot, run_drift

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_drift_workload_changes_mix_sizes_and_rate_half_way():
    w = drift_workload(20, 2.0, seed=101)
    early, late = [d for d in w if not d.late], [d for d in w if d.late]
    assert len(early) == len(late) == 10 and [d.at for d in w] == sorted(d.at for d in w)
    assert all(d.job_type in DRIFT["job_types"] for d in late)
    assert max(d.at for d in early) < min(d.at for d in late)
    by_type = {d.job_type: d.epochs for d in early}
    assert any(d.epochs > 2 * by_type[d.job_type] for d in late if d.job_type in by_type)


def test_live_online_updates_and_rollback_of_an_injected_regression(tmp_path):
    window = 4
    run = run_drift(drift_workload(16, 2.0, seed=101), online=True, agents=4, slot_seconds=2.0, window=window,
                    inject_after_slot=injection_slot(window), stop_after_rollback=True, timeout=240, workdir=str(tmp_path))
    # online updates were applied (one per slot with a reward) before the injected one
    assert run.injected_version is not None, run
    assert run.injected_version > window, run
    # the corrupted update was caught: rolled back to the checkpoint it replaced, reason recorded
    caught = [rb for rb in run.rollbacks if rb["from"] >= run.injected_version]
    assert caught, run.rollbacks
    assert caught[0]["to"] < run.injected_version
    assert "reference window's" in caught[0]["reason"] and "standard error" in caught[0]["reason"]
    # nothing else was rolled back before it (no rollback from noise)
    assert all(rb["from"] >= run.injected_version for rb in run.rollbacks), run.rollbacks
