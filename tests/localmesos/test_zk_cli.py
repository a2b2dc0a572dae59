"""``zk://`` master detection with a real ZooKeeper, and ``dl2 local-cluster`` as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from kazoo.client import KazooClient
from pymesos import MesosSchedulerDriver

from dl2_mesos.services.localcluster import LocalCluster

from .conftest import FAST, RecordingScheduler, executor_task, leftover_executors, wait_all_acknowledged


@pytest.mark.integration
def test_master_registers_in_zookeeper_and_pymesos_detects_it(zookeeper, ids):
    url = zookeeper.url(f"/mesos-{ids('zk')}")
    with LocalCluster(agents=1, cpus=2, zk=url, **FAST) as cluster:
        zk = KazooClient(hosts=zookeeper.hosts)
        zk.start()
        try:
            path = url.split(zookeeper.hosts, 1)[1]
            children = zk.get_children(path)
            assert len(children) == 1 and children[0].startswith("json.info_")
            info = json.loads(zk.get(f"{path}/{children[0]}")[0])
            assert info["address"] == {
                "hostname": "127.0.0.1",
                "ip": "127.0.0.1",
                "port": int(cluster.master.split(":")[1]),
            }
            assert info["id"] == cluster.state()["id"] and info["version"].startswith("1.")

            sched = RecordingScheduler()
            tid = ids()
            sched.queue(executor_task(tid, {}))
            driver = MesosSchedulerDriver(
                sched, {"user": "", "name": "zk-fw"}, cluster.mesos_master, use_addict=False
            )
            assert cluster.mesos_master.startswith("zk://")
            driver.start()
            try:
                sched.wait_state(tid, "TASK_RUNNING")
                wait_all_acknowledged(cluster)
                cluster.restart_master()  # new znode (new sequence number), same address
                sched.wait_for(lambda n, p: n == "reregistered", timeout=20)
                children = zk.get_children(path)
                assert (
                    len(children) == 1
                    and json.loads(zk.get(f"{path}/{children[0]}")[0])["id"] == cluster.state()["id"]
                )
            finally:
                driver.stop()
                driver.join()
        finally:
            zk.stop()
            zk.close()
    zk = KazooClient(hosts=zookeeper.hosts)
    zk.start()
    try:  # the ephemeral znode went away with the master
        assert zk.get_children(url.split(zookeeper.hosts, 1)[1]) == []
    finally:
        zk.stop()
        zk.close()


@pytest.mark.integration
def test_cli_subprocess_cluster_runs_tasks_and_sigterm_stops_executors(ids):
    with LocalCluster(agents=2, cpus=2, mem="2GiB", in_subprocess=True, **FAST) as cluster:
        assert len(cluster.agent_ids) == 2
        sched = RecordingScheduler()
        tid = ids()
        sched.queue(executor_task(tid, {}))
        driver = MesosSchedulerDriver(sched, {"user": "", "name": "cli-fw"}, cluster.master, use_addict=False)
        driver.start()
        try:
            sched.wait_state(tid, "TASK_RUNNING")
            assert len(cluster.executor_pids()) == 1
            aid = cluster.agent_ids[0]
            new = cluster.add_agent(cpus=1, mem="1GiB")
            assert new in cluster.agents and len(cluster.state()["slaves"]) == 3
            cluster.remove_agent(aid)
            assert aid not in cluster.agents
            wait_all_acknowledged(cluster)
            cluster.restart_master()
            sched.wait_for(lambda n, p: n == "reregistered", timeout=20)
        finally:
            driver.stop(failover=True)  # leave the task running: stopping the cluster must end it
            driver.join()
    deadline = time.monotonic() + 10
    while leftover_executors() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftover_executors() == []


def test_dl2_cli_lists_local_cluster_and_rejects_bad_sizes():
    dl2 = [sys.executable, "-m", "dl2_mesos.cli"]
    out = subprocess.run(dl2 + ["local-cluster", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--agents" in out.stdout and "--zk" in out.stdout
    bad = subprocess.run(dl2 + ["local-cluster", "--mem", "lots"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "cannot read a size" in bad.stderr
