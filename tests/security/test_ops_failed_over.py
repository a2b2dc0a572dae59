"""Issue 14 item 13: a framework that Mesos says was failed over (another scheduler subscribed with its
framework id) exits cleanly instead of taking the id back again and again. Real pymesos drivers against
the local Mesos-compatible master."""

from __future__ import annotations

import shutil
import threading
import time

import requests

from dl2_mesos.config import load_config
from dl2_mesos.framework.runner import EXIT_LEADERSHIP_LOST, Replica
from dl2_mesos.services.localcluster import LocalCluster
from dl2_mesos.services.zookeeper import free_port


def _replica(master: str, state: str) -> tuple[Replica, threading.Thread, str, dict]:
    port = free_port()
    cfg = load_config(env={}, overrides={"master": master, "zk": "none", "state_dir": state, "policy": "fifo",
                                         "api": f"127.0.0.1:{port}", "online_learning": False})
    replica = Replica(cfg)
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("code", replica.run()), daemon=True)
    thread.start()
    return replica, thread, f"http://127.0.0.1:{port}", result


def _registered(api: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            h = requests.get(api + "/health", timeout=2).json()
            if h.get("registered") and h.get("framework_id"):
                return h["framework_id"]
        except (requests.RequestException, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"{api} did not register within {timeout}s")


def test_ops_failed_over_framework_exits_instead_of_flapping(tmp_path):
    with LocalCluster(agents=1, cpus=2, mem="1GiB", allocation_interval=0.2, heartbeat_interval=2.0) as cluster:
        first, t1, api1, res1 = _replica(cluster.master, str(tmp_path / "a"))
        second = None
        try:
            fid = _registered(api1)
            # a stale copy of the state (same framework id) in another folder: a second scheduler for the id
            shutil.copytree(tmp_path / "a", tmp_path / "b", ignore=shutil.ignore_patterns(".lock"))
            second, t2, api2, _ = _replica(cluster.master, str(tmp_path / "b"))
            assert _registered(api2) == fid
            t1.join(30)
            assert not t1.is_alive(), "the failed-over framework is still running"
            assert res1["code"] == EXIT_LEADERSHIP_LOST
            assert "failed over" in first._reason
            # the survivor keeps the framework: no flapping back and forth
            time.sleep(3)
            assert requests.get(api2 + "/health", timeout=5).json()["role"] == "leader"
            frameworks = [f for f in cluster.state()["frameworks"] if f["id"] == fid]
            assert len(frameworks) == 1 and frameworks[0]["connected"]
            assert frameworks[0]["webui_url"] == api2 + "/"  # held by the survivor
        finally:
            first.stop()
            if second is not None:
                second.stop()
                t2.join(30)
            t1.join(30)


class _RecordingDriver:
    def __init__(self, log: list) -> None:
        self.log = log

    def stop(self, failover: bool = False) -> None:
        self.log.append(("stop", failover))


def test_failed_over_error_stops_the_driver_on_its_own_thread_before_it_can_resubscribe():
    """pymesos re-subscribes with the same framework id as soon as the master closes the stream; the
    error callback itself stops the driver (without teardown) so the stale scheduler cannot take the
    id back before the loop thread acts. Other errors leave the driver to the loop."""
    import queue

    from dl2_mesos.framework.mesos_scheduler import Dl2MesosScheduler

    log: list = []
    sched = Dl2MesosScheduler(queue.Queue(), outbound=False, on_failed_over=lambda m: log.append(("fence", m)))
    sched.error(_RecordingDriver(log), "Framework failed over")
    assert log == [("stop", True), ("fence", "Framework failed over")]
    log.clear()
    sched.error(_RecordingDriver(log), "Framework has been removed")
    assert log == []
