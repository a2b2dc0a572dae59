"""Leader election on a real ZooKeeper."""

from __future__ import annotations

import threading
import time

import pytest
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


def test_must_fence_after_a_session_timeout_of_suspension(zookeeper):
    from kazoo.client import KazooState

    c = _client(zookeeper)
    try:
        ld = ZkLeadership(c, "/elect-test3/leader", "http://a:1", lambda _: None, session_timeout=4.0)
        ld._listener(KazooState.SUSPENDED)
        since = ld.suspended_since
        assert since is not None and not ld.must_fence(since + 10)  # a standby has nothing to fence
        ld.is_leader = True
        assert not ld.must_fence(since + 3.9) and ld.must_fence(since + 4.0)
        ld._listener(KazooState.SUSPENDED)  # a second SUSPENDED does not restart the clock
        assert ld.suspended_since == since
        ld._listener(KazooState.CONNECTED)  # the session survived: lead on
        assert ld.suspended_since is None and not ld.must_fence(since + 100)
        # the session ends before the timeout has run out (a client stopped while cut off): fence
        # at once, and stay fenced though nothing is suspended any more
        ld._listener(KazooState.SUSPENDED)
        ld._listener(KazooState.LOST)
        assert ld.suspended_since is None and ld.must_fence(since) and ld.must_fence(since + 100)
        ld._listener(KazooState.CONNECTED)  # reconnected with a new session: still not this term's
        assert ld.must_fence(since)
        assert ZkLeadership(c, "/elect-test3/leader", "http://b:2", lambda _: None).session_timeout == 4.0
    finally:
        c.stop()
        c.close()


def test_fenced_store_refuses_every_write():
    from dl2_mesos.framework.kv import MemoryKV, StaleVersion
    from dl2_mesos.framework.state_store import StateStore

    kv = MemoryKV()
    st = StateStore(kv)
    st.begin_term(0.0)
    st.put_model(1, b"x" * 10, {"reason": "test"})
    before = {k: kv.get(k) for k in ("meta", "models/v000001/meta", "models/v000001/blob/00000")}
    st.fence("session expired")
    assert st.fenced
    for write in (lambda: st.put_meta({"term": 9}), lambda: st.begin_term(1.0), lambda: st.set_framework_id("f"),
                  lambda: st.put_model(2, b"y", {}), lambda: st.delete_model(1), lambda: st.put_models({})):
        with pytest.raises(StaleVersion, match="fenced"):
            write()
    assert {k: kv.get(k) for k in before} == before and kv.get("framework_id") is None
    assert st.model_versions() == [1]


def test_lost_session_fences_the_replica(tmp_path):
    from dl2_mesos.config import load_config
    from dl2_mesos.framework.runner import EXIT_LEADERSHIP_LOST, Replica

    r = Replica(load_config(env={}, overrides={"zk": "none", "state_dir": str(tmp_path), "policy": "fifo"}))
    r._zk_change("lost")
    assert r.store.fenced and r._exit_code == EXIT_LEADERSHIP_LOST
    r.leadership.is_leader = True  # even if the election still says so, a fenced replica does not lead
    assert not r.is_leader()


class _Contender:
    """A replica stand-in on real ZooKeeper: contends, and while leading 'acts' until it must
    fence (as the runner does); after a term it starts over with a fresh client (the supervisor's
    restart after exit 75)."""

    def __init__(self, zk, name, acting, log):
        self.zk, self.name, self.acting, self.log = zk, name, acting, log
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        from kazoo.client import KazooClient

        while not self.stop.is_set():
            c = KazooClient(hosts=self.zk.hosts, timeout=2)
            try:
                c.start(timeout=30)
            except Exception:  # noqa: BLE001 - ZooKeeper still down: try again
                c.close()
                continue
            ld = ZkLeadership(c, "/elect-fence/leader", self.name, lambda _: None)

            def lead():
                self.acting.add(self.name)
                self.log.append((time.monotonic(), set(self.acting)))
                try:
                    while not self.stop.is_set() and not ld.must_fence():
                        time.sleep(0.02)
                finally:
                    self.acting.discard(self.name)
                ld.cancel()

            def contend():
                try:
                    ld.run(lead)
                except Exception:  # noqa: BLE001 - the client was closed under the election: start over
                    pass

            t = threading.Thread(target=contend, daemon=True)
            t.start()
            # a standby cut off for a session timeout starts over too (its contender node is gone)
            while t.is_alive() and not self.stop.is_set():
                if ld.suspended_since is not None and time.monotonic() - ld.suspended_since >= ld.session_timeout:
                    break
                time.sleep(0.02)
            ld.cancel()
            try:
                c.stop()
                c.close()
            except Exception:  # noqa: BLE001
                pass


def test_no_two_leaders_across_a_zookeeper_outage_longer_than_the_session(tmp_path):
    """ZooKeeper down 3x the session timeout: the leader fences itself before anyone else can
    be elected; afterwards exactly one contender leads."""
    from dl2_mesos.services.zookeeper import ZooKeeperServer

    zk = ZooKeeperServer(workdir=str(tmp_path / "zk")).start()
    acting: set[str] = set()
    log: list[tuple[float, set[str]]] = []
    overlap: list[set[str]] = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            now = set(acting)
            if len(now) > 1:
                overlap.append(now)
            time.sleep(0.01)

    cs = [_Contender(zk, f"r{i}", acting, log) for i in range(2)]
    w = threading.Thread(target=watch, daemon=True)
    try:
        w.start()
        for c in cs:
            c.thread.start()
        deadline = time.monotonic() + 20
        while len(acting) != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(acting) == 1
        first = next(iter(acting))
        zk.stop()
        t0 = time.monotonic()
        while acting and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        fenced_after = time.monotonic() - t0
        assert not acting, "the leader kept acting without ZooKeeper"
        assert fenced_after < 2 + 1.5  # session timeout 2 s, polled every 20 ms
        time.sleep(max(0.0, 6 - fenced_after))
        zk.start()
        deadline = time.monotonic() + 30
        while len(acting) != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(3)  # and it stays one
        assert len(acting) == 1, acting
        assert not overlap, f"two leaders at once: {overlap[:3]}"
        print(f"first leader {first}; fenced {fenced_after:.1f}s after ZooKeeper stopped; then {acting}")
    finally:
        done.set()
        for c in cs:
            c.stop.set()
        for c in cs:
            c.thread.join(15)
        zk.close()
