"""Subscribe, offers, launch, status updates, kill, messages and executor environment with real pymesos."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx

from pymesos import decode_data, encode_data

from .conftest import RecordingScheduler, command_task, executor_task, scalar


def test_subscribe_offers_within_agent_resources(cluster, make_driver):
    sched = RecordingScheduler(hold_offers=True)
    make_driver(sched)
    fid = sched.wait_for(lambda n, p: n == "registered")
    assert fid.startswith(cluster.state()["id"])
    sched.wait_for(lambda n, p: n == "heartbeat", timeout=5)  # heartbeat_interval_seconds = 1
    offers = [
        sched.wait_for(lambda n, p, aid=aid: n == "offer" and p["agent_id"]["value"] == aid)
        for aid in cluster.agent_ids
    ]
    for offer in offers:
        assert offer["framework_id"]["value"] == fid
        assert scalar(offer, "cpus") == 4 and scalar(offer, "mem") == 4096 and scalar(offer, "gpus") == 1
        ports = [r for r in offer["resources"] if r["name"] == "ports"][0]
        assert ports["type"] == "RANGES" and len(ports["ranges"]["range"]) == 1
        attrs = {a["name"]: a["text"]["value"] for a in offer["attributes"]}
        assert attrs["rack"] == "r1" and "agent" in attrs
    port_ranges = [
        [r for r in o["resources"] if r["name"] == "ports"][0]["ranges"]["range"][0] for o in offers
    ]
    assert port_ranges[0]["end"] < port_ranges[1]["begin"]  # agents get disjoint port ranges
    state = cluster.state()
    fw = state["frameworks"][0]
    assert fw["id"] == fid and fw["connected"] and fw["offered_resources"]["cpus"] == 8


def test_custom_executor_runs_and_finishes(cluster, make_driver, ids):
    sched = RecordingScheduler()
    tid = ids()
    sched.queue(executor_task(tid, {"run_seconds": 0.5, "report": True}, env={"TINY_EXTRA": "x y"}))
    make_driver(sched)
    running = sched.wait_state(tid, "TASK_RUNNING")
    assert running["source"] == "SOURCE_EXECUTOR" and running["uuid"] and running["agent_id"]["value"]
    msg = sched.wait_for(lambda n, p: n == "message")
    env = json.loads(decode_data(msg["data"]))
    assert env["MESOS_FRAMEWORK_ID"] == sched.framework_id and env["MESOS_EXECUTOR_ID"] == f"ex-{tid}"
    assert env["MESOS_AGENT_ENDPOINT"] == cluster.agents[msg["agent_id"]]
    assert env["MESOS_SLAVE_ID"] == env["MESOS_AGENT_ID"] == msg["agent_id"]
    assert env["MESOS_SANDBOX"] == env["MESOS_DIRECTORY"] == env["cwd"]
    assert env["MESOS_CHECKPOINT"] == "0" and env["MESOS_HTTP_COMMAND_EXECUTOR"] == "0"
    assert env["MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD"] == "1secs" and env["MESOS_LOCAL"] == "1"
    assert env["TINY_EXTRA"] == "x y" and env["CUDA_VISIBLE_DEVICES"] == ""  # GPU agent, no GPUs asked
    assert env["pgid"] != os.getpgid(0)  # its own process group (the sh -c leader)
    assert Path(env["MESOS_SANDBOX"]).is_relative_to(cluster.work_dir)
    finished = sched.wait_state(tid, "TASK_FINISHED")
    assert finished["message"] == "done"
    assert sched.states(tid) == ["TASK_RUNNING", "TASK_FINISHED"]
    assert "tiny executor starting" in (Path(env["MESOS_SANDBOX"]) / "stdout").read_text()
    # acknowledged terminal task moves to completed_tasks in /master/state
    cluster.wait_until(
        lambda s: [
            t
            for t in s["frameworks"][0]["completed_tasks"]
            if t["id"] == tid and t["state"] == "TASK_FINISHED"
        ],
        timeout=10,
    )


def test_kill_and_messages_both_ways(cluster, make_driver, ids):
    sched = RecordingScheduler()
    tid = ids()
    sched.queue(executor_task(tid, {}))
    driver = make_driver(sched)
    running = sched.wait_state(tid, "TASK_RUNNING")
    agent_id, executor_id = running["agent_id"]["value"], running["executor_id"]["value"]
    state = cluster.state()
    task = [t for t in state["frameworks"][0]["tasks"] if t["id"] == tid][0]
    assert (
        task["state"] == "TASK_RUNNING" and task["resources"]["cpus"] == 0.5 and task["slave_id"] == agent_id
    )
    driver.sendFrameworkMessage({"value": executor_id}, {"value": agent_id}, encode_data(b"ping"))
    msg = sched.wait_for(lambda n, p: n == "message")
    assert decode_data(msg["data"]) == b"echo:ping" and msg["executor_id"] == executor_id
    driver.killTask({"value": tid})
    killed = sched.wait_state(tid, "TASK_KILLED")
    assert killed["message"] == "killed by request"


def test_command_task_finishes_and_fails(cluster, make_driver, ids):
    sched = RecordingScheduler()
    ok, bad = ids("ok"), ids("bad")
    sched.queue(
        command_task(ok, "echo localmesos-cmd; echo $MESOS_SANDBOX > where"), command_task(bad, "exit 3")
    )
    make_driver(sched)
    sched.wait_state(ok, "TASK_RUNNING")
    sched.wait_state(ok, "TASK_FINISHED")
    failed = sched.wait_state(bad, "TASK_FAILED")
    assert "status 3" in failed["message"]


def test_command_task_kill(cluster, make_driver, ids):
    sched = RecordingScheduler()
    tid = ids()
    sched.queue(command_task(tid, "exec sleep 60 # localmesos-cmd"))
    driver = make_driver(sched)
    sched.wait_state(tid, "TASK_RUNNING")
    driver.killTask({"value": tid})
    sched.wait_state(tid, "TASK_KILLED")


def test_cuda_visible_devices_from_gpu_indices(cluster, make_driver, ids):
    sched = RecordingScheduler()
    a, b = ids("gpu"), ids("gpu")
    sched.queue(executor_task(a, {"report": True}, gpus=1), executor_task(b, {"report": True}, gpus=1))
    make_driver(sched)
    reports = {}
    for _ in range(2):
        mark = 0
        msg = sched.wait_for(
            lambda n, p: n == "message" and json.loads(decode_data(p["data"]))["task_id"] not in reports,
            after=mark,
        )
        env = json.loads(decode_data(msg["data"]))
        reports[env["task_id"]] = (msg["agent_id"], env["CUDA_VISIBLE_DEVICES"])
    # one GPU per agent: the two tasks land on different agents, each sees its agent's GPU 0
    assert {r[1] for r in reports.values()} == {"0"}
    assert len({r[0] for r in reports.values()}) == 2
    # GPU indices are the agent's business (its /state), not the master's
    free = {aid: httpx.get(f"http://{e}/state", timeout=5).json()["free_gpus"]
            for aid, e in cluster.agents.items()}
    assert all(v == [] for v in free.values())
    assert all("free_gpu_indices" not in s for s in cluster.state()["slaves"])


def test_executor_shutdown_on_teardown_kills_process_group(cluster, make_driver, ids):
    sched = RecordingScheduler()
    tid = ids()
    sched.queue(executor_task(tid, {"report": True}))
    driver = make_driver(sched)
    msg = sched.wait_for(lambda n, p: n == "message")
    pid = json.loads(decode_data(msg["data"]))["pid"]
    driver.stop()  # not failover: TEARDOWN -> executors get SHUTDOWN
    driver.join()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    assert not _alive(pid)
    state = cluster.state()
    assert state["frameworks"] == [] and state["completed_frameworks"][0]["id"] == sched.framework_id


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_command_without_shell_uses_value_as_executable_and_arguments_as_argv(cluster, make_driver, ids):
    sched = RecordingScheduler()
    ok, bad = ids("argv"), ids("argv")
    for tid, code in ((ok, 0), (bad, 7)):
        task = command_task(tid, "")
        task["command"] = {
            "shell": False,
            "value": "/bin/sh",
            "arguments": ["sh", "-c", f"exit {code}", "localmesos-cmd"],
        }
        sched.queue(task)
    make_driver(sched)
    sched.wait_state(ok, "TASK_FINISHED")
    assert "status 7" in sched.wait_state(bad, "TASK_FAILED")["message"]
