"""Robustness of the executor's inputs (framework messages, LaunchSpecs, progress lines) and launch env."""

from __future__ import annotations

import base64
import json
import logging
import queue

import pytest

from dl2_mesos.executor.job_runner import RunnerConfig
from dl2_mesos.executor.launch_env import job_argv, job_python, processes_for_task
from dl2_mesos.executor.mesos_executor import Event, ExecutorLoop, grace_of
from dl2_mesos.job_runtime import JobRuntime, read_events
from dl2_mesos.messages import ClusterSpec, Endpoint, ProgressReport, RescaleRequest, encode_b64


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


MALFORMED = [
    "%%% not base64 %%%",
    b64(b"not json"),
    b64(b"[]"),
    b64(json.dumps({"schema": 99, "kind": "rescale", "body": {}}).encode()),
    b64(json.dumps({"schema": 1, "kind": "nope", "body": {}}).encode()),
    b64(json.dumps({"schema": 1, "kind": "rescale", "body": {"job_id": 5}}).encode()),
    b64(json.dumps({"schema": 1, "kind": "rescale", "body": {"job_id": "j", "cluster": "x", "assignments": []}}).encode()),
    b64(b"{" * 2_000_000),
    encode_b64(ProgressReport(job_id="j", task_id="t", generation=0, epoch=1.0, batch=1, samples_per_second=1.0)),
    encode_b64(RescaleRequest(job_id="unknown-job", cluster=ClusterSpec(1, None, (), ()), assignments=())),
    12345,
    None,
]


@pytest.fixture
def loop(tmp_path, sink):
    return ExecutorLoop(queue.Queue(), sink, RunnerConfig(workdir=tmp_path))


def test_malformed_framework_messages_are_logged_and_dropped(loop, sink, caplog):
    caplog.set_level(logging.WARNING)
    for data in MALFORMED:
        loop.handle(Event("message", data))
    assert not loop.stopped and sink.statuses == [] and sink.messages == []
    assert caplog.text.count("dropped") >= len(MALFORMED)
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize("data", ["", "!!", b64(b"{}"), encode_b64(ProgressReport(
    job_id="j", task_id="t", generation=0, epoch=1.0, batch=1, samples_per_second=1.0))])
def test_malformed_launch_spec_fails_the_task_with_reason(loop, sink, data):
    loop.handle(Event("launch", {"task_id": {"value": "t1"}, "data": data}))
    assert sink.statuses and sink.statuses[0][:2] == ("t1", "TASK_FAILED")
    assert "LaunchSpec" in sink.statuses[0][2]
    assert loop.runners == {}


def test_kill_of_unknown_task_is_reported_killed(loop, sink):
    loop.handle(Event("kill", "ghost"))
    assert sink.statuses == [("ghost", "TASK_KILLED", "unknown task (already gone)")]


def test_grace_period_from_kill_policy():
    assert grace_of({"kill_policy": {"grace_period": {"nanoseconds": 2_500_000_000}}}, 9.0) == 2.5
    assert grace_of({}, 9.0) == 9.0
    assert grace_of({"kill_policy": {"grace_period": {"nanoseconds": "x"}}}, 9.0) == 9.0


def test_malformed_progress_lines_are_dropped(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"type": "progress", "batch": 1}\nnot json\n[1,2]\n{"no_type": 1}\n{"type": "exit"}\n{"type": "par')
    events, off, bad = read_events(f)
    assert [e["type"] for e in events] == ["progress", "exit"]
    assert len(bad) == 3
    assert off == f.read_bytes().rfind(b"\n") + 1  # the partial last line waits for the next read


def test_job_runtime_contract_from_env(tmp_path):
    env = {"DL2_JOB_ID": "j", "DL2_ROLE": "worker", "DL2_RANK": "0", "DL2_NUM_WORKERS": "3",
           "DL2_PROGRESS_FILE": str(tmp_path / "p"), "DL2_CHECKPOINT_DIR": str(tmp_path / "ck"),
           "DL2_PROGRESS_EVERY_S": "0", "DL2_EPOCHS": "2.5"}
    rt = JobRuntime(env)
    assert rt.saver and rt.num_workers == 3 and rt.epochs == 2.5 and rt.restored() is None
    rt.progress(0.5, 10, 100.0, float("nan"))
    d = rt.save_checkpoint(lambda folder: (folder / "w").write_text("x"), 0.5, 10, final=True)
    rt.exit("stopped", param_digest="abc")
    events, _, bad = read_events(tmp_path / "p")
    assert not bad and [e["type"] for e in events] == ["progress", "checkpoint", "exit"]
    assert events[0]["loss"] is None  # NaN never reaches JSON
    assert events[1]["path"] == str(d) and events[1]["final"] is True and (d / "state.json").exists()


def test_launch_env_mxnet_and_pytorch(monkeypatch):
    monkeypatch.setenv("DL2_JOB_PYTHON", "/opt/jobs/bin/python")
    cl = ClusterSpec(3, Endpoint("s", "10.0.0.1", 7000), (Endpoint("p0", "10.0.0.1", 7001), Endpoint("p1", "h2", 1)),
                     (Endpoint("w0", "h3", 7100),))
    procs = processes_for_task(job_id="j", task_id="p0", role="ps", rank=0, runtime="mxnet", cluster=cl,
                               command=(), epochs=3, host="10.0.0.1", extra_env={}, base_env={"PATH": "/bin"})
    assert [p.name for p in procs] == ["scheduler-0", "server-0"]
    env = dict(procs[0].env)
    assert env["DMLC_ROLE"] == "scheduler" and env["DMLC_PS_ROOT_PORT"] == "7000"
    assert env["DMLC_PS_ROOT_URI"] == "10.0.0.1" and env["DMLC_NUM_SERVER"] == "2" and env["DMLC_NUM_WORKER"] == "1"
    assert env["DMLC_NODE_HOST"] == "10.0.0.1" and env["OMP_NUM_THREADS"] == "1" and env["DL2_GENERATION"] == "3"
    assert procs[0].argv == ("/opt/jobs/bin/python", "-m", "dl2_mesos.programs.mxnet_mlp")
    assert job_argv(("python", "train.py", "--x"), "mxnet", "/py") == ("/py", "train.py", "--x")
    assert job_argv(("/usr/bin/env", "bash", "-c", "x"), "mxnet", "/py") == ("/usr/bin/env", "bash", "-c", "x")
    assert job_python({"DL2_JOB_PYTHON": "/other"}) == "/other"
    tp = processes_for_task(job_id="j", task_id="w0", role="worker", rank=0, runtime="pytorch",
                            cluster=ClusterSpec(0, None, (), (Endpoint("w0", "h3", 7100), Endpoint("w1", "h4", 7200))),
                            command=(), epochs=1, host="h3", extra_env={}, base_env={})
    env = dict(tp[0].env)
    assert env["MASTER_ADDR"] == "h3" and env["MASTER_PORT"] == "7100" and env["WORLD_SIZE"] == "2"
    assert env["DL2_SAVER"] == "1" and "DMLC_ROLE" not in env
    with pytest.raises(ValueError, match="workers only"):
        processes_for_task(job_id="j", task_id="p", role="ps", rank=0, runtime="pytorch", cluster=cl, command=(),
                           epochs=1, host="h", extra_env={}, base_env={})
    with pytest.raises(ValueError, match="scheduler"):
        processes_for_task(job_id="j", task_id="p", role="ps", rank=0, runtime="mxnet",
                           cluster=ClusterSpec(0, None, (), ()), command=(), epochs=1, host="h", extra_env={}, base_env={})
