"""Reconciliation, at-least-once status updates, framework failover, agent loss and master restarts."""

from __future__ import annotations

import json
import time

from pymesos import decode_data, encode_data

from .conftest import RecordingScheduler, executor_task, wait_all_acknowledged
from .test_tasks import _alive


def test_explicit_and_implicit_reconciliation(cluster, make_driver, ids):
    sched = RecordingScheduler()
    tid = ids()
    sched.queue(executor_task(tid, {}))
    driver = make_driver(sched)
    running = sched.wait_state(tid, "TASK_RUNNING")
    aid = running["agent_id"]["value"]
    mark = sched.mark()
    # pymesos's reconcileTasks() drops agent_id, so send the same RECONCILE call with it through the
    # driver's own HTTP connection (same stream id)
    driver._send(
        {
            "type": "RECONCILE",
            "framework_id": {"value": sched.framework_id},
            "reconcile": {
                "tasks": [
                    {"task_id": {"value": tid}},
                    {"task_id": {"value": "ghost-1"}, "agent_id": {"value": aid}},
                    {"task_id": {"value": "ghost-2"}},
                ]
            },
        }
    )
    got = {}
    for name in (tid, "ghost-1", "ghost-2"):
        st = sched.wait_for(
            lambda n, p, name=name: n == "update" and p["task_id"]["value"] == name, after=mark
        )
        assert (
            st["reason"] == "REASON_RECONCILIATION" and "uuid" not in st and st["source"] == "SOURCE_MASTER"
        )
        got[name] = st["state"]
    assert got == {tid: "TASK_RUNNING", "ghost-1": "TASK_GONE", "ghost-2": "TASK_UNKNOWN"}
    mark = sched.mark()
    driver.reconcileTasks([])  # implicit: every task the master knows of
    st = sched.wait_for(lambda n, p: n == "update" and p.get("reason") == "REASON_RECONCILIATION", after=mark)
    assert st["task_id"]["value"] == tid and st["state"] == "TASK_RUNNING"


def test_status_updates_are_retried_until_acknowledged(cluster, make_driver, ids):
    sched = RecordingScheduler()
    tid = ids()
    sched.queue(executor_task(tid, {"run_seconds": 0.2}))
    driver = make_driver(sched, implicit_acks=False)
    first = sched.wait_state(tid, "TASK_RUNNING")
    again = sched.wait_state(tid, "TASK_RUNNING", timeout=5, after=sched.mark())  # re-sent, same uuid
    assert again["uuid"] == first["uuid"]
    time.sleep(0.5)
    assert "TASK_FINISHED" not in sched.states(tid)  # in order: FINISHED waits for RUNNING's ack
    driver.acknowledgeStatusUpdate(first)
    finished = sched.wait_state(tid, "TASK_FINISHED")
    driver.acknowledgeStatusUpdate(finished)
    time.sleep(1.5)  # retry interval is 0.5 s: an acknowledged update is not sent again
    assert sched.states(tid).count("TASK_FINISHED") == 1
    cluster.wait_until(lambda s: any(t["id"] == tid for t in s["frameworks"][0]["completed_tasks"]))


def test_failover_resubscribe_keeps_tasks(cluster, make_driver, ids):
    first = RecordingScheduler()
    tid = ids()
    first.queue(executor_task(tid, {}))
    driver = make_driver(first, failover_timeout=30)
    running = first.wait_state(tid, "TASK_RUNNING")
    fid = first.framework_id
    driver.stop(failover=True)  # no TEARDOWN: the scheduler "crashed"
    driver.join()
    cluster.wait_until(lambda s: not s["frameworks"][0]["connected"])
    second = RecordingScheduler()
    driver2 = make_driver(second, framework_id=fid, failover_timeout=30)
    second.wait_for(lambda n, p: n == "reregistered")
    driver2.reconcileTasks([])
    assert (
        second.wait_for(lambda n, p: n == "update" and p["task_id"]["value"] == tid)["state"]
        == "TASK_RUNNING"
    )
    driver2.sendFrameworkMessage(running["executor_id"], running["agent_id"], encode_data(b"still there?"))
    assert decode_data(second.wait_for(lambda n, p: n == "message")["data"]) == b"echo:still there?"
    fw = cluster.state()["frameworks"][0]
    assert fw["id"] == fid and fw["connected"] and [t["state"] for t in fw["tasks"]] == ["TASK_RUNNING"]


def test_failover_timeout_kills_tasks_and_removes_framework(cluster, make_driver, ids):
    sched = RecordingScheduler()
    tid = ids()
    sched.queue(executor_task(tid, {"report": True}))
    driver = make_driver(sched, failover_timeout=1.0)
    pid = json.loads(decode_data(sched.wait_for(lambda n, p: n == "message")["data"]))["pid"]
    fid = sched.framework_id
    driver.stop(failover=True)
    driver.join()
    state = cluster.wait_until(lambda s: s if s["completed_frameworks"] else None, timeout=10)
    done = state["completed_frameworks"][0]
    assert done["id"] == fid and [t["state"] for t in done["completed_tasks"]] == ["TASK_KILLED"]
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)
    late = RecordingScheduler()
    make_driver(late, framework_id=fid)
    assert late.wait_for(lambda n, p: n == "error") == "Framework has been removed"


def test_cut_connection_scheduler_resubscribes_by_itself(cluster, make_driver, ids):
    sched = RecordingScheduler()
    tid = ids()
    sched.queue(executor_task(tid, {}))
    make_driver(sched)
    sched.wait_state(tid, "TASK_RUNNING")
    wait_all_acknowledged(cluster)
    assert cluster.disconnect_framework(sched.framework_id)
    sched.wait_for(lambda n, p: n == "disconnected")
    sched.wait_for(lambda n, p: n == "reregistered")
    assert cluster.state()["frameworks"][0]["tasks"][0]["state"] == "TASK_RUNNING"


def _first(sched, predicate):
    """The first recorded event payload satisfying predicate, else None (no waiting)."""
    found = sched.all(predicate)
    return found[0] if found else None


def test_agent_loss(cluster, make_driver, ids):
    aware, plain = RecordingScheduler(hold_offers=True), RecordingScheduler(hold_offers=True)
    # one agent's offer for each framework: "aware" subscribes first and keeps its first offer; the
    # other agent's offer, when it went to "aware" too (which of the two subscriptions the allocator
    # sees first is a race), is declined for a minute so that it goes to "plain"
    d1 = make_driver(aware, name="aware")
    o1 = aware.wait_for(lambda n, p: n == "offer")
    d2 = make_driver(plain, name="plain", partition_aware=False)

    def other(name, payload):  # an offer of the agent o1 is not of
        return name == "offer" and payload["agent_id"] != o1["agent_id"]

    deadline = time.monotonic() + 20
    declined: set[str] = set()
    while not (o2 := _first(plain, other)):
        for offer in aware.all(other):
            if offer["id"]["value"] not in declined:
                declined.add(offer["id"]["value"])
                d1.declineOffer(offer["id"], {"refuse_seconds": 60})
        assert time.monotonic() < deadline, "no offer of the second agent reached the second framework"
        time.sleep(0.05)
    t1, t2 = ids(), ids()
    d1.launchTasks(o1["id"], [dict(executor_task(t1, {"report": True}), agent_id=o1["agent_id"])])
    d2.launchTasks(
        o2["id"], [dict(executor_task(t2, {}), agent_id=o1["agent_id"])]
    )  # wrong agent -> TASK_ERROR
    assert plain.wait_state(t2, "TASK_ERROR")["message"].startswith("Task uses invalid agent")
    pid = json.loads(decode_data(aware.wait_for(lambda n, p: n == "message")["data"]))["pid"]
    lost_agent = o1["agent_id"]["value"]
    cluster.remove_agent(lost_agent)
    gone = aware.wait_state(t1, "TASK_GONE")
    assert gone["reason"] == "REASON_AGENT_REMOVED" and gone["agent_id"]["value"] == lost_agent
    assert aware.wait_for(lambda n, p: n == "agent_lost") == lost_agent
    assert plain.wait_for(lambda n, p: n == "agent_lost") == lost_agent
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
    state = cluster.state()
    assert lost_agent not in [s["id"] for s in state["slaves"]] and len(state["slaves"]) == 1


def test_agent_loss_rescinds_offers_and_non_partition_aware_gets_task_lost(cluster, make_driver, ids):
    sched = RecordingScheduler(hold_offers=True)
    driver = make_driver(sched, partition_aware=False)
    offers = {}
    for aid in cluster.agent_ids:
        offers[aid] = sched.wait_for(lambda n, p, aid=aid: n == "offer" and p["agent_id"]["value"] == aid)
    a, b = cluster.agent_ids
    tid = ids()
    driver.launchTasks(offers[a]["id"], [dict(executor_task(tid, {}), agent_id=offers[a]["agent_id"])])
    sched.wait_state(tid, "TASK_RUNNING")
    cluster.remove_agent(a)
    assert sched.wait_state(tid, "TASK_LOST")["reason"] == "REASON_AGENT_REMOVED"
    cluster.remove_agent(b)
    assert sched.wait_for(lambda n, p: n == "rescinded") == offers[b]["id"]["value"]


def test_master_restart_frameworks_resubscribe_and_keep_tasks(cluster, make_driver, ids):
    sched = RecordingScheduler()
    tid = ids()
    sched.queue(executor_task(tid, {}))
    driver = make_driver(sched)
    sched.wait_state(tid, "TASK_RUNNING")
    wait_all_acknowledged(cluster)
    old_id = cluster.state()["id"]
    cluster.restart_master()
    sched.wait_for(lambda n, p: n == "reregistered", timeout=20)
    state = cluster.state()
    assert state["id"] != old_id and len(state["slaves"]) == 2  # agents re-registered
    fw = state["frameworks"][0]
    assert fw["id"] == sched.framework_id and [t["state"] for t in fw["tasks"]] == ["TASK_RUNNING"]
    mark = sched.mark()
    driver.killTask({"value": tid})
    sched.wait_state(tid, "TASK_KILLED", after=mark)
