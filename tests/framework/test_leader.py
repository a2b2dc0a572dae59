"""Leader election on a real ZooKeeper."""

from __future__ import annotations

import threading
import time

from kazoo.client import KazooClient

from dl2_mesos.framework.leader import ZkLeadership


def _client(zk):
    c = KazooClient(hosts=zk.hosts, timeout=4)
    c.start(timeout=10)
    return c


def test_one_leader_then_handover(zookeeper):
    c1, c2 = _client(zookeeper), _client(zookeeper)
    changes: list[str] = []
    try:
        a = ZkLeadership(c1, "/elect-test/leader", "http://a:1", changes.append)
        b = ZkLeadership(c2, "/elect-test/leader", "http://b:2", changes.append)
        release_a = threading.Event()
        led: list[str] = []

        def lead_a():
            led.append("a")
            release_a.wait(10)

        def lead_b():
            led.append("b")

        ta = threading.Thread(target=a.run, args=(lead_a,), daemon=True)
        ta.start()
        deadline = time.monotonic() + 5
        while not a.is_leader and time.monotonic() < deadline:
            time.sleep(0.05)
        assert a.is_leader
        tb = threading.Thread(target=b.run, args=(lead_b,), daemon=True)
        tb.start()
        time.sleep(0.3)
        assert not b.is_leader and led == ["a"]
        assert b.leader_url() == "http://a:1" and a.leader_url() == "http://a:1"
        release_a.set()  # a gives up: b takes over at once
        tb.join(5)
        assert led == ["a", "b"]
        ta.join(5)
    finally:
        c1.delete("/elect-test", recursive=True)
        for c in (c1, c2):
            c.stop()
            c.close()


def test_listener_reports_suspended_and_lost(zookeeper):
    c = _client(zookeeper)
    changes: list[str] = []
    try:
        ld = ZkLeadership(c, "/elect-test2/leader", "http://a:1", changes.append)
        from kazoo.client import KazooState

        ld._listener(KazooState.SUSPENDED)
        ld._listener(KazooState.CONNECTED)
        ld._listener(KazooState.LOST)
        assert changes == ["suspended", "resumed", "lost"]
    finally:
        c.stop()
        c.close()


def test_replica_gives_up_on_lost_session_and_queues_suspend(tmp_path):
    from dl2_mesos.config import load_config
    from dl2_mesos.framework import events as ev
    from dl2_mesos.framework.runner import EXIT_LEADERSHIP_LOST, Replica

    r = Replica(load_config(env={}, overrides={"zk": "none", "state_dir": str(tmp_path), "policy": "fifo"}))
    r._zk_change("suspended")
    assert isinstance(r.events.get_nowait(), ev.Leadership)
    r._zk_change("lost")
    assert r._stop.is_set() and r._exit_code == EXIT_LEADERSHIP_LOST and "session lost" in r._reason
    assert not r.is_leader() and r.health()["role"] == "standby"
