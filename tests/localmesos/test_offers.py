"""DECLINE filters, SUPPRESS/REVIVE, and launches that break the rules (TASK_ERROR / TASK_DROPPED)."""

from __future__ import annotations

import time

import httpx

from .conftest import RecordingScheduler, executor_task, res


def _offer_times(sched: RecordingScheduler, agent_id: str) -> list[float]:
    return [t for t, (n, p) in sched.timed if n == "offer" and p["agent_id"]["value"] == agent_id]


class TimedScheduler(RecordingScheduler):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.timed: list[tuple[float, tuple]] = []

    def _record(self, name, payload=None):
        self.timed.append((time.monotonic(), (name, payload)))
        super()._record(name, payload)


def test_decline_refuse_seconds_is_honoured(cluster, make_driver):
    sched = TimedScheduler(refuse_seconds=2.0)
    make_driver(sched)
    aid = cluster.agent_ids[0]
    sched.wait_for(lambda n, p: n == "offer" and p["agent_id"]["value"] == aid)
    deadline = time.monotonic() + 6
    while len(_offer_times(sched, aid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    times = _offer_times(sched, aid)
    assert len(times) >= 2
    gaps = [b - a for a, b in zip(times, times[1:])]
    # allocation_interval is 0.2 s: without the filter re-offers would come ~5x faster
    assert all(g >= 1.9 for g in gaps), gaps


def test_decline_zero_refuse_seconds_reoffers_quickly(cluster, make_driver):
    sched = TimedScheduler(refuse_seconds=0.0)
    make_driver(sched)
    aid = cluster.agent_ids[0]
    sched.wait_for(lambda n, p: n == "offer" and p["agent_id"]["value"] == aid)
    time.sleep(1.5)
    times = _offer_times(sched, aid)
    assert len(times) >= 3 and min(b - a for a, b in zip(times, times[1:])) < 1.0


def test_suppress_stops_offers_and_revive_restarts_them(cluster, make_driver):
    sched = TimedScheduler(refuse_seconds=0.0)
    driver = make_driver(sched)
    sched.wait_for(lambda n, p: n == "offer")
    driver.suppressOffers()
    time.sleep(0.5)  # let in-flight offers land
    before = sched.count("offer")
    time.sleep(1.5)
    assert sched.count("offer") == before
    fw = cluster.state()["frameworks"][0]
    assert fw["active"] is True and "suppressed" not in fw  # Mesos: a suppressing framework stays active
    metrics = httpx.get(cluster.master_url + "/metrics/snapshot", timeout=5).json()
    assert metrics[f"master/frameworks/{fw['name']}/{fw['id']}/roles/{fw['role']}/suppressed"] == 1.0
    mark = sched.mark()
    driver.reviveOffers()
    sched.wait_for(lambda n, p: n == "offer", timeout=5, after=mark)


def test_revive_clears_decline_filters(cluster, make_driver):
    sched = TimedScheduler(refuse_seconds=3600.0)
    driver = make_driver(sched)
    for aid in cluster.agent_ids:
        sched.wait_for(lambda n, p, aid=aid: n == "offer" and p["agent_id"]["value"] == aid)
    time.sleep(0.3)
    mark = sched.mark()
    driver.reviveOffers()
    sched.wait_for(lambda n, p: n == "offer", timeout=5, after=mark)


def test_launch_beyond_offered_resources_is_task_error(cluster, make_driver, ids):
    sched = RecordingScheduler(hold_offers=True)
    driver = make_driver(sched)
    offer = sched.wait_for(lambda n, p: n == "offer")
    tid = ids()
    task = dict(executor_task(tid, cpus=64), agent_id=offer["agent_id"])
    driver.launchTasks(offer["id"], [task])
    err = sched.wait_state(tid, "TASK_ERROR")
    assert err["reason"] == "REASON_TASK_INVALID" and "more resources" in err["message"]
    assert err["source"] == "SOURCE_MASTER" and "uuid" not in err


def test_launch_with_ports_not_offered_is_task_error(cluster, make_driver, ids):
    sched = RecordingScheduler(hold_offers=True)
    driver = make_driver(sched)
    offer = sched.wait_for(lambda n, p: n == "offer")
    tid = ids()
    task = dict(executor_task(tid), agent_id=offer["agent_id"])
    task["resources"] = res(0.5, 64, ports=[(80, 80)])
    driver.launchTasks(offer["id"], [task])
    err = sched.wait_state(tid, "TASK_ERROR")
    assert "ports" in err["message"]


def test_unknown_offer_id_drops_task_with_reason(cluster, make_driver, ids):
    sched = RecordingScheduler(hold_offers=True)
    driver = make_driver(sched)
    offer = sched.wait_for(lambda n, p: n == "offer")
    tid = ids()
    task = dict(executor_task(tid), agent_id=offer["agent_id"])
    driver.launchTasks({"value": "no-such-offer"}, [task])
    dropped = sched.wait_state(tid, "TASK_DROPPED")  # TASK_LOST for frameworks without PARTITION_AWARE
    assert dropped["reason"] == "REASON_INVALID_OFFERS" and "no-such-offer" in dropped["message"]


def test_task_with_both_command_and_executor_is_task_error(cluster, make_driver, ids):
    sched = RecordingScheduler(hold_offers=True)
    driver = make_driver(sched)
    offer = sched.wait_for(lambda n, p: n == "offer")
    tid = ids()
    task = dict(executor_task(tid), agent_id=offer["agent_id"], command={"value": "true"})
    driver.launchTasks(offer["id"], [task])
    assert "not both" in sched.wait_state(tid, "TASK_ERROR")["message"]


def test_offers_used_twice_are_invalid(cluster, make_driver, ids):
    sched = RecordingScheduler(hold_offers=True)
    driver = make_driver(sched)
    offer = sched.wait_for(lambda n, p: n == "offer")
    first, second = ids(), ids()
    driver.launchTasks(offer["id"], [dict(executor_task(first, {}), agent_id=offer["agent_id"])])
    sched.wait_state(first, "TASK_RUNNING")
    driver.launchTasks(offer["id"], [dict(executor_task(second, {}), agent_id=offer["agent_id"])])
    assert sched.wait_state(second, "TASK_DROPPED")["reason"] == "REASON_INVALID_OFFERS"
