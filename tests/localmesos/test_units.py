"""Unit tests of the pieces with arithmetic: resource math, RecordIO framing, sizes, ZooKeeper URLs."""

from __future__ import annotations

import json

import pytest
from pymesos import MesosSchedulerDriver

from dl2_mesos.localmesos.executor_process import command_argv, executor_environment, format_duration
from dl2_mesos.localmesos.recordio import encode_record
from dl2_mesos.localmesos.resources import ResourceBag, ResourceError, parse_size_mib
from dl2_mesos.localmesos.zk import parse_zk_url

from .conftest import RecordingScheduler, command_task


def test_resource_bag_contains_subtract_add():
    agent = ResourceBag.of(cpus=8, mem=1024, gpus=2, ports=[(31000, 31999)])
    task = ResourceBag.from_json(
        [
            {"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}},
            {
                "name": "ports",
                "type": "RANGES",
                "ranges": {"range": [{"begin": 31000, "end": 31001}, {"begin": 31500, "end": 31500}]},
            },
        ]
    )
    left = agent - task
    assert left.scalar("cpus") == 7.9 and left.ranges["ports"] == ((31002, 31499), (31501, 31999))
    assert agent.contains(task) and not left.contains(task) and left + task == agent
    assert not agent.contains(ResourceBag.of(cpus=8.001))
    assert not agent.contains(ResourceBag.of(ports=[(30999, 31000)]))
    assert ResourceBag.of(cpus=0.005).allocatable() is False and ResourceBag.of(mem=32).allocatable()
    assert agent.summary()["ports"] == "[31000-31999]"


@pytest.mark.parametrize(
    "bad",
    [
        [{"name": "cpus", "type": "SCALAR", "scalar": {"value": -1}}],
        [{"name": "gpus", "type": "SCALAR", "scalar": {"value": 0.5}}],
        [{"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": 5, "end": 4}]}}],
        [{"name": "cpus", "type": "TEXT"}],
        [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 1}, "role": "prod"}],
        [{"type": "SCALAR", "scalar": {"value": 1}}],
    ],
)
def test_invalid_resources_are_rejected_with_a_reason(bad):
    with pytest.raises(ResourceError):
        ResourceBag.from_json(bad)


def test_recordio_framing():
    rec = encode_record({"type": "HEARTBEAT", "x": "é"})
    length, body = rec.split(b"\n", 1)
    assert int(length) == len(body) and json.loads(body) == {"type": "HEARTBEAT", "x": "é"}


def test_sizes_durations_argv_and_urls():
    assert (
        parse_size_mib("16GiB") == 16384 and parse_size_mib("512MiB") == 512 and parse_size_mib(2048) == 2048
    )
    with pytest.raises(ValueError):
        parse_size_mib("lots")
    assert format_duration(5.0) == "5secs"
    assert command_argv({"value": "echo hi"}) == ("/bin/sh", ["sh", "-c", "echo hi"])
    assert command_argv({"value": "/bin/echo", "shell": False, "arguments": ["echo", "a"]}) == (
        "/bin/echo",
        ["echo", "a"],
    )
    assert parse_zk_url("zk://h1:2181,h2:2181/mesos") == ("h1:2181,h2:2181", "/mesos")
    with pytest.raises(ValueError):
        parse_zk_url("http://x/mesos")
    env = executor_environment(
        agent_endpoint="127.0.0.1:1",
        agent_id="A",
        framework_id="F",
        executor_id="E",
        directory="/tmp/s",
        checkpoint=True,
        grace_period=2,
        gpus=[1, 3],
        mesos_local=False,
        command={"environment": {"variables": [{"name": "K", "value": "V"}]}},
        base={"MESOS_LOCAL": "1", "PATH": "/bin"},
    )
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3" and env["K"] == "V" and "MESOS_LOCAL" not in env
    assert env["MESOS_CHECKPOINT"] == "1" and env["MESOS_RECOVERY_TIMEOUT"] and env["PATH"] == "/bin"


def test_shared_local_cluster_fixture_runs_a_command_task(local_cluster):
    sched = RecordingScheduler()
    sched.queue(command_task("fixture-cmd", "true"))
    driver = MesosSchedulerDriver(
        sched, {"user": "", "name": "fixture"}, local_cluster.mesos_master, use_addict=False
    )
    driver.start()
    try:
        sched.wait_state("fixture-cmd", "TASK_FINISHED")
    finally:
        driver.stop()
        driver.join()
