"""Load on real parts: a burst of 1000 submissions to a live ``dl2 framework`` (ZooKeeper state
store): every one accepted and listed, or refused with a reason; and many concurrent jobs on many
local agents with light executors (progress reports, no training): all launched and running.
Latencies are printed (and reported by ``dl2 bench faults``), never asserted."""

from __future__ import annotations

import pytest

from dl2_rigs.faultload import BUSY_TICK_S, agents_load, api_burst
from dl2_rigs.faults import TOKEN, FaultRig, RigOptions

pytestmark = [pytest.mark.slow, pytest.mark.integration]


class _NoHdfs:
    url = "hdfs://127.0.0.1:1"  # no job runs: the checkpoint root is never touched


def test_burst_of_1000_submissions_none_lost(zookeeper, tmp_path):
    with FaultRig("burst", _NoHdfs(), zookeeper, tmp_path, RigOptions(agents=0)) as rig:
        res = api_burst(rig.api(), TOKEN, 1000, concurrency=32)
    print(f"burst: {res}")
    assert res.submitted == 1000
    assert res.accepted + res.refused == 1000, res.problems
    assert res.lost == 0, res.problems
    assert res.stored_refused == 0, res.problems  # a 503 "retry" means not stored
    assert res.accepted > 0


def test_many_jobs_on_many_agents_all_running(tmp_path):
    res = agents_load(agents=60, jobs=120, workdir=str(tmp_path), slot="3s", settle_slots=2, timeout=150)
    print(f"load: {res}")
    assert not res.problems, res.problems
    assert res.running == 120 and res.seconds_to_all_running is not None
    assert res.accepted == 120 and res.lost == 0
    assert res.decisions >= 2 and res.offer_events > 0 and res.offers >= 60
    # every TASK_RUNNING reached the loop (2 tasks per job); calls to the master left the loop thread
    assert res.status_events >= 240 and res.outbound_sent > 0 and res.outbound_dropped == 0
    # several calls in flight at once over the pooled connections; every launch and ack answered
    assert res.outbound_failed == 0 and res.outbound_peak_in_flight > 1
    assert res.calls_by_kind["acknowledgeStatusUpdate"] >= 240 and res.calls_by_kind["launchTasks"] >= 60
    assert res.wave_tasks > 0 and res.wave_unacknowledged == 0 and res.wave_acknowledged_s is not None
    # the CPU sampled over that wave: the window covers it, the framework and the cluster worked in it
    # (the busy time is counted in clock ticks: it may pass cores x window by a tick per core at each end)
    assert res.wave_window_s >= res.wave_acknowledged_s and 0 < res.wave_machine_busy_s
    assert res.wave_machine_busy_s <= res.cores * (res.wave_window_s + 2 * BUSY_TICK_S)
    assert res.wave_cpu_seconds["framework"] > 0 and res.wave_cpu_seconds["master and agents"] > 0
