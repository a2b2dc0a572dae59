"""Faults injected mid-run into real parts: ``dl2 framework`` replicas (subprocesses) on real
ZooKeeper, the local Mesos-compatible cluster, the project's executor running small real MXNet
jobs, checkpoints on real HDFS. Each test checks that every job still finishes and that every
committed checkpoint verifies against its sha256 manifest; recovery times are printed (and
reported by ``dl2 bench faults``), never asserted."""

from __future__ import annotations

import pytest

from dl2_rigs import fault_scenarios as sc

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _check(results):
    assert results
    for r in results:
        print(f"{r.fault}: recovered in {r.recovery_s}s, {r.finished}/{r.submitted} finished, "
              f"{r.checkpoints} checkpoints verified")
        assert r.recovery_s is not None, f"{r.fault}: jobs did not progress again; {r.problems}"
        assert r.finished == r.submitted, f"{r.fault}: {r.problems}"
        assert r.checkpoints_ok and r.checkpoints > 0, f"{r.fault}: {r.problems}"
        assert not r.problems, r.problems


def test_leader_sigkilled_during_a_rescale(zookeeper, hdfs, tmp_path):
    _check(sc.leader_killed_during_rescale(hdfs, zookeeper, tmp_path))


def test_zookeeper_down_20s_never_two_leaders(zookeeper, hdfs, tmp_path):
    """Down 5x the session timeout; the old leader reaches ZooKeeper again 12 s after the standby
    (its session expires, the standby is elected): the old leader must have fenced itself."""
    _check(sc.zookeeper_outage(hdfs, zookeeper, tmp_path, downtime=20.0, leader_late_s=12.0))


def test_agent_removed_tasks_relaunched_elsewhere(zookeeper, hdfs, tmp_path):
    _check(sc.agent_removed(hdfs, zookeeper, tmp_path))


def test_worker_oom_kill_and_executor_sigkill(zookeeper, hdfs, tmp_path):
    _check(sc.process_kills(hdfs, zookeeper, tmp_path))


def test_namenode_down_during_checkpoints(zookeeper, hdfs, tmp_path):
    try:
        _check(sc.namenode_outage(hdfs, zookeeper, tmp_path))
    finally:
        if not hdfs.running:
            sc.start_namenode(hdfs)


def test_master_restart_and_connection_cut(zookeeper, hdfs, tmp_path):
    _check(sc.mesos_faults(hdfs, zookeeper, tmp_path))
