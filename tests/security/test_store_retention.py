"""Ended jobs are deleted after the configured time or beyond the configured count, from memory
and from the state store (issue 14, item 15)."""

from __future__ import annotations

import dataclasses

from dl2_mesos.framework.retention import expire_ended_jobs
from dl2_mesos.framework.state_store import StateStore

from ..framework.conftest import Harness, make_offer

DAY = 86400.0


def _harness(**cfg):
    h = Harness()
    h.cfg = dataclasses.replace(h.cfg, **cfg)
    h.core.cfg = h.cfg
    return h


def test_ended_jobs_beyond_the_count_are_deleted_oldest_first():
    h = _harness(retain_ended_for=0.0, retain_ended_jobs=2)
    ended = []
    for _ in range(4):
        ended.append(h.submit().job_id)
        h.core.cancel(ended[-1])
        h.clock.advance(10)
    h.core.flush()
    running = h.submit().job_id
    assert expire_ended_jobs(h.core, h.clock()) == ended[:2]
    assert set(h.core.jobs) == {*ended[2:], running}
    assert set(StateStore(h.kv).load_jobs()) == {*ended[2:], running}
    assert "dl2_jobs_expired_total 2.0" in h.core.metrics.render().decode()
    assert expire_ended_jobs(h.core, h.clock()) == []


def test_ended_jobs_older_than_the_age_are_deleted_and_live_ones_kept():
    h = _harness(retain_ended_for=2 * DAY, retain_ended_jobs=0)
    h.register()
    old = h.submit().job_id
    h.core.cancel(old)
    busy = h.submit()
    h.offer(make_offer("a1"))
    h.next_slot()
    h.run_all(busy)
    h.core.cancel(busy.job_id)  # cancelled, but its tasks have not ended yet
    h.core.flush()
    h.clock.advance(3 * DAY)
    fresh = h.submit().job_id
    h.core.cancel(fresh)
    assert expire_ended_jobs(h.core, h.clock()) == [old]
    assert busy.job_id in h.core.jobs and fresh in h.core.jobs
    assert old not in StateStore(h.kv).load_jobs()


def test_retention_off_keeps_everything():
    h = _harness(retain_ended_for=0.0, retain_ended_jobs=0)
    for _ in range(3):
        h.core.cancel(h.submit().job_id)
    h.clock.advance(1000 * DAY)
    assert expire_ended_jobs(h.core, h.clock()) == [] and len(h.core.jobs) == 3
