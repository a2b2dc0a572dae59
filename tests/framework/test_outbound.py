"""The outbound driver proxy: calls to the master leave the loop thread, in order, one sender."""

from __future__ import annotations

import logging
import queue
import threading

import pytest

from dl2_mesos.framework import events as ev
from dl2_mesos.framework.mesos_scheduler import Dl2MesosScheduler
from dl2_mesos.framework.metrics import FrameworkMetrics
from dl2_mesos.framework.outbound import OutboundDriver


class RecordingDriver:
    """Records calls with the thread that made them; can block every call on a gate or fail one."""

    def __init__(self, gate: threading.Event | None = None, fail: str | None = None) -> None:
        self.calls: list[tuple[str, tuple]] = []
        self.threads: set[str] = set()
        self.gate = gate
        self.fail = fail
        self.entered = threading.Event()
        self.aborted = False
        self.framework_id = "fw-7"

    def _call(self, name: str, *args) -> None:
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(10), "test gate never opened"
        self.threads.add(threading.current_thread().name)
        if name == self.fail:
            raise RuntimeError(f"master said no to {name}")
        self.calls.append((name, args))

    def launchTasks(self, *a):  # noqa: N802
        self._call("launchTasks", *a)

    def killTask(self, *a):  # noqa: N802
        self._call("killTask", *a)

    def acknowledgeStatusUpdate(self, *a):  # noqa: N802
        self._call("acknowledgeStatusUpdate", *a)

    def declineOffer(self, *a):  # noqa: N802
        self._call("declineOffer", *a)

    def reviveOffers(self):  # noqa: N802
        self._call("reviveOffers")


@pytest.fixture
def outbound():
    made: list[OutboundDriver] = []

    def make(driver, **kw) -> OutboundDriver:
        o = OutboundDriver(driver, **kw)
        made.append(o)
        return o

    yield make
    for o in made:
        o.stop(timeout=5, drain=False)
        assert not o.running



def _stuck_sender(outbound, call: str, *args, **kwargs):
    """An outbound driver whose sender is stuck inside ``call(*args)`` until ``gate`` is set."""
    gate = threading.Event()
    d = RecordingDriver(gate=gate)
    o = outbound(d, **kwargs)
    getattr(o, call)(*args)
    assert d.entered.wait(5)
    return d, o, gate

def test_calls_are_made_in_order_on_one_sender_thread(outbound):
    d = RecordingDriver()
    o = outbound(d, name="sender-x")
    for i in range(200):
        o.launchTasks([{"value": f"o{i}"}], [{"task_id": {"value": f"t{i}"}}])
        o.killTask({"value": f"t{i}"})
        o.acknowledgeStatusUpdate({"uuid": str(i)})
    assert o.flush(10)
    names = [n for n, _ in d.calls]
    assert names == ["launchTasks", "killTask", "acknowledgeStatusUpdate"] * 200
    assert [a[0]["value"] for n, a in d.calls if n == "killTask"] == [f"t{i}" for i in range(200)]
    assert d.threads == {"sender-x"}
    s = o.stats()
    assert (s.sent, s.failed, s.dropped, s.queued) == (600, 0, 0, 0)


def test_a_slow_master_does_not_block_the_caller(outbound):
    # the sender is stuck in the first call
    d, o, gate = _stuck_sender(outbound, "declineOffer", [{"value": "o1"}])
    for i in range(50):  # returns at once although the master does not answer
        o.killTask({"value": f"t{i}"})
    assert d.calls == [] and o.stats().queued == 50
    gate.set()
    assert o.flush(10)
    assert len(d.calls) == 51 and d.calls[0][0] == "declineOffer"


def test_failed_calls_are_logged_and_later_calls_still_made(outbound, caplog):
    d = RecordingDriver(fail="killTask")
    m = FrameworkMetrics()
    o = outbound(d)
    o.bind_metrics(m)
    with caplog.at_level(logging.WARNING, logger="dl2_mesos.framework.outbound"):
        o.killTask({"value": "t1"})
        o.reviveOffers()
        assert o.flush(10)
    assert d.calls == [("reviveOffers", ())]
    assert any("killTask failed" in r.getMessage() and "master said no" in r.getMessage() for r in caplog.records)
    assert o.stats().failed == 1 and o.running
    assert m.outbound_calls.labels("killTask", "failed")._value.get() == 1
    assert m.outbound_calls.labels("reviveOffers", "ok")._value.get() == 1


def test_full_queue_applies_backpressure_then_drops_with_an_error(outbound, caplog):
    d, o, gate = _stuck_sender(outbound, "killTask", {"value": "in-flight"}, maxsize=2, put_timeout=0.2)
    assert o.submit("killTask", {"value": "q1"}) and o.submit("killTask", {"value": "q2"})
    with caplog.at_level(logging.ERROR, logger="dl2_mesos.framework.outbound"):
        assert not o.submit("killTask", {"value": "q3"})  # waited 0.2 s for room, then dropped
    assert any("queue full" in r.getMessage() for r in caplog.records)
    s = o.stats()
    assert s.dropped == 1 and s.blocked_seconds >= 0.15 and s.peak_queued == 2
    gate.set()
    assert o.flush(10)
    assert [a[0]["value"] for _, a in d.calls] == ["in-flight", "q1", "q2"]


def test_room_freed_by_the_sender_unblocks_a_waiting_caller(outbound):
    d, o, gate = _stuck_sender(outbound, "killTask", {"value": "a"}, maxsize=1, put_timeout=10)
    o.killTask({"value": "b"})
    threading.Timer(0.2, gate.set).start()
    assert o.submit("killTask", {"value": "c"})  # waits until the sender takes "b"
    assert o.flush(10)
    assert [a[0]["value"] for _, a in d.calls] == ["a", "b", "c"]


def test_stop_drains_queued_calls_then_refuses_new_ones(outbound):
    gate = threading.Event()
    d = RecordingDriver(gate=gate)
    o = outbound(d)
    for i in range(5):
        o.killTask({"value": f"t{i}"})
    gate.set()
    o.stop(timeout=10)
    assert not o.running
    assert len(d.calls) == 5
    assert not o.submit("killTask", {"value": "late"})
    assert o.stats().dropped == 1 and len(d.calls) == 5


def test_stop_without_drain_discards_the_queue(outbound):
    d, o, gate = _stuck_sender(outbound, "killTask", {"value": "first"})
    for i in range(5):
        o.killTask({"value": f"t{i}"})
    threading.Timer(0.2, gate.set).start()
    o.stop(timeout=10, drain=False)
    assert not o.running
    assert [a[0]["value"] for _, a in d.calls] == ["first"]
    assert o.stats().dropped == 5


def test_sender_exits_by_itself_once_the_driver_is_stopped(outbound):
    d = RecordingDriver()
    o = outbound(d)
    o.killTask({"value": "t"})
    assert o.flush(5)
    d.aborted = True  # pymesos: driver.stop() was called
    o._thread.join(5)
    assert not o.running


def test_swapped_driver_gets_the_calls_made_after_the_swap(outbound):
    gate = threading.Event()
    old, new = RecordingDriver(gate=gate), RecordingDriver()
    o = outbound(old)
    o.killTask({"value": "to-old"})
    assert old.entered.wait(5)
    o.killTask({"value": "queued"})
    o.set_driver(new)
    gate.set()
    assert o.flush(10)
    assert [a[0]["value"] for _, a in old.calls] == ["to-old"]
    assert [a[0]["value"] for _, a in new.calls] == ["queued"]
    assert o.framework_id == "fw-7"  # other attributes: read from the current driver


def test_scheduler_hands_the_loop_one_proxy_following_the_driver():
    events: queue.Queue = queue.Queue()
    sched = Dl2MesosScheduler(events)
    d1, d2 = RecordingDriver(), RecordingDriver()
    try:
        sched.registered(d1, {"value": "fw-7"}, {"hostname": "m", "port": 5050})
        sched.reregistered(d2, {"hostname": "m", "port": 5050})
        e1, e2 = events.get_nowait(), events.get_nowait()
        assert isinstance(e1, ev.Registered) and isinstance(e1.driver, OutboundDriver)
        assert e2.driver is e1.driver and e1.driver.driver is d2
        e1.driver.reviveOffers()
        assert e1.driver.flush(5)
        assert d2.calls == [("reviveOffers", ())] and d1.calls == []
    finally:
        sched.close()
    assert not sched.outbound.running


def test_an_acknowledgement_still_queued_is_not_queued_again(outbound):
    d, o, gate = _stuck_sender(outbound, "killTask", {"value": "first"})
    st = {"task_id": {"value": "t1"}, "uuid": "u1", "state": "TASK_RUNNING"}
    o.acknowledgeStatusUpdate(st)
    o.acknowledgeStatusUpdate(dict(st))  # the agent re-sent the update meanwhile
    o.acknowledgeStatusUpdate({**st, "uuid": "u2"})  # a different update: queued
    gate.set()
    assert o.flush(10)
    assert [a[0]["uuid"] for n, a in d.calls if n == "acknowledgeStatusUpdate"] == ["u1", "u2"]
    assert o.stats().coalesced == 1
    o.acknowledgeStatusUpdate(dict(st))  # once sent, a new copy is acknowledged again
    assert o.flush(10)
    assert [a[0]["uuid"] for n, a in d.calls if n == "acknowledgeStatusUpdate"] == ["u1", "u2", "u1"]


def test_calls_still_queued_when_the_driver_stops_are_dropped(outbound):
    d, o, gate = _stuck_sender(outbound, "killTask", {"value": "in-flight"})
    for i in range(5):
        o.killTask({"value": f"t{i}"})
    d.aborted = True  # the term ended: pymesos driver stopped while calls were queued
    gate.set()
    o._thread.join(5)
    assert not o.running
    assert [a[0]["value"] for _, a in d.calls] == ["in-flight"]
    assert o.stats().dropped == 5
