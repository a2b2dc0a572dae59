"""The outbound driver proxy: calls to the master leave the loop thread; several senders make them
at once, never reordering calls about the same task, agent, offer or executor."""

from __future__ import annotations

import logging
import queue
import random
import threading
import time

import pytest

from dl2_mesos.framework import events as ev
from dl2_mesos.framework.mesos_scheduler import Dl2MesosScheduler
from dl2_mesos.framework.metrics import FrameworkMetrics
from dl2_mesos.framework.outbound import OutboundDriver, call_keys


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
    """An outbound driver with ONE sender, stuck inside ``call(*args)`` until ``gate`` is set."""
    gate = threading.Event()
    d = RecordingDriver(gate=gate)
    o = outbound(d, senders=1, **kwargs)
    getattr(o, call)(*args)
    assert d.entered.wait(5)
    return d, o, gate

def test_one_sender_makes_every_call_in_order_on_its_thread(outbound):
    d = RecordingDriver()
    o = outbound(d, name="sender-x", senders=1)
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
    o = outbound(d, senders=1)
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
    o.join(5)
    assert not o.running


def test_swapped_driver_gets_the_calls_made_after_the_swap(outbound):
    gate = threading.Event()
    old, new = RecordingDriver(gate=gate), RecordingDriver()
    o = outbound(old, senders=1)
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
    o.join(5)
    assert not o.running
    assert [a[0]["value"] for _, a in d.calls] == ["in-flight"]
    assert o.stats().dropped == 5


# -- several senders: concurrency and the order Mesos needs ----------------------------------------

class TimingDriver:
    """Records when each call started and ended; a call sleeps ``delay(name, args)`` seconds."""

    def __init__(self, delay=lambda name, args: 0.0) -> None:
        self.delay = delay
        self.lock = threading.Lock()
        self.log: list[tuple[str, tuple, float, float]] = []  # (name, args, start, end)
        self.active = self.peak = 0
        self.aborted = False

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args):
            with self.lock:
                self.active += 1
                self.peak = max(self.peak, self.active)
            start = time.monotonic()
            time.sleep(self.delay(name, args))
            end = time.monotonic()
            with self.lock:
                self.active -= 1
                self.log.append((name, args, start, end))
        return call

    def spans(self, name: str) -> list[tuple[float, float]]:
        return [(s, e) for n, _, s, e in self.log if n == name]


def _status(task: str, agent: str, uuid: str, state: str = "TASK_RUNNING") -> dict:
    return {"task_id": {"value": task}, "agent_id": {"value": agent}, "uuid": uuid, "state": state}


def _info(task: str, agent: str) -> dict:
    return {"task_id": {"value": task}, "agent_id": {"value": agent}, "name": task}


def test_calls_for_different_agents_are_made_at_once(outbound):
    d = TimingDriver(lambda name, args: 0.2)
    o = outbound(d, senders=8)
    t0 = time.monotonic()
    for i in range(8):
        o.acknowledgeStatusUpdate(_status(f"t{i}", f"a{i}", "u"))
    assert o.flush(10)
    assert d.peak == 8 and o.stats().peak_in_flight == 8
    assert time.monotonic() - t0 < 1.0  # 8 x 0.2 s one after the other would be 1.6 s
    assert o.stats().sent == 8


def test_a_launch_is_answered_before_its_tasks_acks_and_kill_are_made(outbound):
    # the launch is slow; the acknowledgement and the kill of its task must wait for its answer
    d = TimingDriver(lambda name, args: 0.3 if name == "launchTasks" else 0.0)
    o = outbound(d, senders=8)
    o.launchTasks([{"value": "o1"}], [_info("t1", "a1"), _info("t2", "a1")])
    o.acknowledgeStatusUpdate(_status("t1", "a1", "u1"))
    o.killTask({"value": "t2"})  # no agent in a kill: learnt from the launch
    o.acknowledgeStatusUpdate(_status("x", "a2", "u9"))  # another agent: does not wait
    assert o.flush(10)
    launch_end = d.spans("launchTasks")[0][1]
    by_task = {a[0]["task_id"]["value"]: s for n, a, s, _ in d.log if n == "acknowledgeStatusUpdate"}
    assert by_task["t1"] >= launch_end and d.spans("killTask")[0][0] >= launch_end
    assert by_task["x"] < launch_end


def test_ready_acknowledgements_go_before_ready_launches_but_never_before_their_own_launch(outbound):
    # one sender stuck in a first call; meanwhile a launch wave for 20 agents is queued, then the
    # acknowledgements of tasks launched earlier (a0's is behind its own launch, on agent a0)
    d, o, gate = _stuck_sender(outbound, "declineOffer", [{"value": "o-first"}])
    for i in range(20):
        o.launchTasks([{"value": f"o{i}"}], [_info(f"t{i}", f"a{i}")])
    o.acknowledgeStatusUpdate(_status("old1", "b1", "u1"))
    o.acknowledgeStatusUpdate(_status("old2", "b2", "u2"))
    o.acknowledgeStatusUpdate(_status("t0", "a0", "u3"))
    gate.set()
    assert o.flush(10)
    order = [(n, a[0]["task_id"]["value"] if n == "acknowledgeStatusUpdate" else a[1][0]["task_id"]["value"])
             for n, a in d.calls if n != "declineOffer"]
    # the independent acknowledgements overtook the whole wave; t0's waited for t0's launch only
    assert order[:2] == [("acknowledgeStatusUpdate", "old1"), ("acknowledgeStatusUpdate", "old2")]
    launch_t0 = order.index(("launchTasks", "t0"))
    ack_t0 = order.index(("acknowledgeStatusUpdate", "t0"))
    assert ack_t0 == launch_t0 + 1 < len(order) - 1  # made as soon as it was ready, before later launches
    assert [t for n, t in order if n == "launchTasks"] == [f"t{i}" for i in range(20)]  # launches keep FIFO


def test_calls_for_one_agent_never_overlap_and_keep_their_order(outbound):
    d = TimingDriver(lambda name, args: 0.05)
    o = outbound(d, senders=8)
    for i in range(6):
        o.acknowledgeStatusUpdate(_status(f"t{i}", "same-agent", f"u{i}"))
    assert o.flush(10)
    spans = [(a[0]["task_id"]["value"], s, e) for _, a, s, e in d.log]
    assert [t for t, _, _ in sorted(spans, key=lambda x: x[1])] == [f"t{i}" for i in range(6)]
    for (_, _, e1), (_, s2, _) in zip(spans, spans[1:]):
        assert s2 >= e1
    assert d.peak == 1


def test_a_framework_message_follows_the_launch_of_its_executor(outbound):
    d = TimingDriver(lambda name, args: 0.2 if name == "launchTasks" else 0.0)
    o = outbound(d, senders=8)
    o.launchTasks([{"value": "o1"}], [_info("t1", "a1")])
    o.sendFrameworkMessage({"value": "e1"}, {"value": "a1"}, "rescale")
    assert o.flush(10)
    assert d.spans("sendFrameworkMessage")[0][0] >= d.spans("launchTasks")[0][1]


def test_revive_waits_for_every_earlier_call_and_later_calls_wait_for_it(outbound):
    d = TimingDriver(lambda name, args: 0.2 if name in ("declineOffer", "reviveOffers") else 0.0)
    o = outbound(d, senders=8)
    o.declineOffer([{"value": "o1"}], {"refuse_seconds": 60})
    o.declineOffer([{"value": "o2"}], {"refuse_seconds": 60})
    o.reviveOffers()  # must not overtake the declines whose filters it clears
    o.acknowledgeStatusUpdate(_status("t1", "a1", "u1"))
    assert o.flush(10)
    revive = d.spans("reviveOffers")[0]
    assert all(e <= revive[0] for _, e in d.spans("declineOffer"))
    assert d.spans("acknowledgeStatusUpdate")[0][0] >= revive[1]
    # the two declines (different offers) overlapped
    (s1, e1), (s2, e2) = d.spans("declineOffer")
    assert s2 < e1 and s1 < e2


def test_random_interleavings_keep_the_order_of_calls_sharing_a_key(outbound):
    rng = random.Random(7)
    d = TimingDriver(lambda name, args: rng.random() * 0.004)
    o = outbound(d, senders=6)
    submitted = []
    for i in range(400):
        t, a = f"t{rng.randrange(30)}", f"a{rng.randrange(8)}"
        kind = rng.choice(["launch", "ack", "ack", "kill", "decline", "message", "revive"] if i % 50 else ["revive"])
        if kind == "launch":
            call = ("launchTasks", ([{"value": f"o{i}"}], [_info(t, a)]))
        elif kind == "ack":
            call = ("acknowledgeStatusUpdate", (_status(t, a, f"u{i}"),))
        elif kind == "kill":
            call = ("killTask", ({"value": t},))
        elif kind == "decline":
            call = ("declineOffer", ([{"value": f"o{i - 1}"}],))
        elif kind == "message":
            call = ("sendFrameworkMessage", ({"value": f"e-{t}"}, {"value": a}, "m"))
        else:
            call = ("reviveOffers", ([f"role-{i}"],))  # a barrier (the roles only tell calls apart)
        submitted.append(call)
        o.submit(call[0], *call[1])
    assert o.flush(30)
    assert len(d.log) == len(submitted) and d.peak > 1
    index = {id(args[0]): k for k, (_, args) in enumerate(submitted)}  # every call's first argument is its own
    span = {index[id(args[0])]: (s, e) for _, args, s, e in d.log}
    assert len(span) == len(submitted)
    # every pair of calls that shares a key (or where one is a barrier): the later one started
    # after the earlier one ended; a kill's agent is the one of the task's latest launch/ack before it
    where: dict[str, str] = {}
    keys = []
    for n, a in submitted:
        keys.append(call_keys(n, a, {}, dict(where)))
        if n == "launchTasks":
            where[a[1][0]["task_id"]["value"]] = a[1][0]["agent_id"]["value"]
        elif n == "acknowledgeStatusUpdate":
            where[a[0]["task_id"]["value"]] = a[0]["agent_id"]["value"]
    for j in range(len(submitted)):
        for i in range(j):
            if keys[i] is None or keys[j] is None or keys[i] & keys[j]:
                assert span[j][0] >= span[i][1], (submitted[i], submitted[j])


def test_call_keys_name_what_a_call_must_stay_ordered_with():
    assert call_keys("launchTasks", ([{"value": "o1"}], [_info("t1", "a1")]), {}) == {
        "offer:o1", "task:t1", "agent:a1"}
    assert call_keys("acceptOffers", ([{"value": "o1"}], [{"type": "LAUNCH", "launch": {
        "task_infos": [_info("t2", "a2")]}}]), {}) == {"offer:o1", "task:t2", "agent:a2"}
    assert call_keys("acknowledgeStatusUpdate", (_status("t1", "a1", "u"),), {}) == {"task:t1", "agent:a1"}
    assert call_keys("killTask", ({"value": "t1"},), {}) == {"task:t1"}
    assert call_keys("killTask", ({"value": "t1"},), {}, {"t1": "a3"}) == {"task:t1", "agent:a3"}
    assert call_keys("declineOffer", ([{"value": "o1"}, {"value": "o2"}],), {}) == {"offer:o1", "offer:o2"}
    assert call_keys("sendFrameworkMessage", ({"value": "e"}, {"value": "a"}, "x"), {}) == {"executor:e", "agent:a"}
    assert call_keys("reconcileTasks", ([{"task_id": {"value": "t1"}}],), {}) == {"task:t1"}
    for barrier in (("reconcileTasks", ([],)), ("reviveOffers", ()), ("suppressOffers", ()), ("somethingNew", ())):
        assert call_keys(barrier[0], barrier[1], {}) is None
