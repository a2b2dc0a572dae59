"""Shared fixtures. Real services are started here, once per test session, and stopped at the end.

Component-specific fixtures live in each test folder's own conftest.py.
"""

from __future__ import annotations

import pytest
from dl2_rigs.serial_lock import serial_tests_run_alone  # noqa: F401  (an autouse fixture)

from dl2_mesos.services.hdfs import HdfsCluster, hdfs_available
from dl2_mesos.services.zookeeper import ZooKeeperServer, zookeeper_available


@pytest.fixture(scope="session")
def zookeeper():
    """A real standalone ZooKeeper for the whole test session."""
    if not zookeeper_available():
        pytest.fail("ZooKeeper is not installed: run `bash scripts/install_services.sh` (CI does)")
    server = ZooKeeperServer().start()
    yield server
    server.close()


@pytest.fixture(scope="session")
def hdfs():
    """A real single-node HDFS (NameNode + DataNode + WebHDFS) for the whole test session.

    Tests that stop it (outage tests) must call ``hdfs.start()`` again before they finish.
    """
    if not hdfs_available():
        pytest.fail("HDFS is not installed: run `bash scripts/install_services.sh` (CI does)")
    cluster = HdfsCluster().start()
    yield cluster
    cluster.close()


@pytest.fixture
def local_cluster():
    """A Mesos-compatible local master with 2 agents (4 CPUs, 4 GiB each) and quick Mesos timings."""
    from dl2_mesos.services.localcluster import LocalCluster

    with LocalCluster(agents=2, cpus=4, mem="4GiB", allocation_interval=0.2, heartbeat_interval=2.0,
                      executor_shutdown_grace_period=2.0, status_update_retry_interval=1.0) as cluster:
        yield cluster
