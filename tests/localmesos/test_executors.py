"""Executor lifecycle: shared executors, executor death, registration timeout, failover by a second
scheduler, unreachable agents."""

from __future__ import annotations

import json

from pymesos import MesosSchedulerDriver, decode_data

from dl2_mesos.services.localcluster import LocalCluster

from .conftest import FAST, RecordingScheduler, executor_task


def test_tasks_share_one_executor_process(cluster, make_driver, ids):
    sched = RecordingScheduler()
    a, b = ids(), ids()
    sched.queue(executor_task(a, {"report": True}, executor_id="shared"))
    make_driver(sched)
    first = json.loads(decode_data(sched.wait_for(lambda n, p: n == "message")["data"]))
    sched.queue(executor_task(b, {"report": True}, executor_id="shared"))
    mark = sched.mark()
    second = json.loads(decode_data(sched.wait_for(lambda n, p: n == "message", after=mark)["data"]))
    assert second["task_id"] == b and second["pid"] == first["pid"]  # LAUNCH went to the running executor
    fw = cluster.state()["frameworks"][0]
    assert [e["executor_id"] for e in fw["executors"]] == ["shared"]
    assert fw["used_resources"]["cpus"] == 0.5 + 0.5 + 0.1  # executor resources counted once
    assert len(cluster.executor_pids()) == 1


def test_executor_exit_fails_its_tasks_and_reports_executor_lost(cluster, make_driver, ids):
    sched = RecordingScheduler()
    tid = ids()
    sched.queue(executor_task(tid, {"exit_code": 3}))
    make_driver(sched)
    sched.wait_state(tid, "TASK_RUNNING")
    failed = sched.wait_state(tid, "TASK_FAILED")
    assert failed["reason"] == "REASON_EXECUTOR_TERMINATED" and failed["source"] == "SOURCE_AGENT"
    lost = sched.wait_for(lambda n, p: n == "executor_lost")
    assert lost["executor_id"] == f"ex-{tid}" and lost["status"] == 3 << 8  # waitpid-style status


def test_executor_that_never_subscribes_times_out(ids):
    with LocalCluster(
        agents=1, cpus=2, mem="1GiB", **{**FAST, "executor_registration_timeout": 1.0}
    ) as cluster:
        sched = RecordingScheduler()
        tid = ids()
        task = executor_task(tid)
        task["executor"]["command"] = {"value": "exec sleep 30 # localmesos-cmd"}
        sched.queue(task)
        driver = MesosSchedulerDriver(sched, {"user": "", "name": "t"}, cluster.master, use_addict=False)
        driver.start()
        try:
            failed = sched.wait_state(tid, "TASK_FAILED", timeout=15)
            assert failed["reason"] == "REASON_EXECUTOR_REGISTRATION_TIMEOUT"
        finally:
            driver.stop()
            driver.join()


def test_second_scheduler_with_same_id_takes_over(cluster, make_driver, ids):
    class StopOnError(RecordingScheduler):
        def error(self, driver, message):
            super().error(driver, message)
            driver.stop(failover=True)  # a scheduler that was failed over must stop (Mesos semantics)

    first = StopOnError()
    tid = ids()
    first.queue(executor_task(tid, {}))
    make_driver(first)
    first.wait_state(tid, "TASK_RUNNING")
    second = RecordingScheduler()
    make_driver(second, framework_id=first.framework_id)
    assert first.wait_for(lambda n, p: n == "error") == "Framework failed over"
    second.wait_for(lambda n, p: n == "reregistered")
    fw = cluster.state()["frameworks"]
    assert len(fw) == 1 and fw[0]["connected"] and fw[0]["tasks"][0]["state"] == "TASK_RUNNING"


def test_unreachable_agent_gives_task_unreachable(cluster, make_driver, ids):
    sched = RecordingScheduler()
    tid = ids()
    sched.queue(executor_task(tid, {}))
    make_driver(sched)
    running = sched.wait_state(tid, "TASK_RUNNING")
    cluster.remove_agent(running["agent_id"]["value"], unreachable=True)
    st = sched.wait_state(tid, "TASK_UNREACHABLE")
    assert st["source"] == "SOURCE_MASTER" and "uuid" not in st
