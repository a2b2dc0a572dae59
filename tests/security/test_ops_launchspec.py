"""Issue 14 item 12: the executor treats a LaunchSpec as hostile input. A malformed one fails only that
task (TASK_FAILED with a reason, never stuck in TASK_STARTING) and never touches files outside the sandbox."""

from __future__ import annotations

import base64
import dataclasses
import json
import queue
from pathlib import Path

import pytest

from dl2_mesos.errors import MessageSchemaError
from dl2_mesos.executor.job_runner import RunnerConfig
from dl2_mesos.executor.mesos_executor import Event, ExecutorLoop
from dl2_mesos.messages import ClusterSpec, Endpoint, LaunchSpec, decode, encode


class Sink:
    def __init__(self) -> None:
        self.statuses: list[tuple[str, str, str]] = []

    def status(self, task_id: str, state: str, message: str = "") -> None:
        self.statuses.append((task_id, state, message))

    def send(self, msg: object) -> None:
        pass


def _good(tmp_path: Path) -> LaunchSpec:
    cluster = ClusterSpec(0, None, (), (Endpoint("j1.worker.1", "127.0.0.1", 31000),))
    return LaunchSpec(job_id="j1", task_id="j1.worker.1", role="worker", rank=0, runtime="pytorch",
                      job_type="resnet-50", epochs=1.0, command=("true",), checkpoint_uri=f"file://{tmp_path}/ckpt",
                      cluster=cluster)


def _raw(spec: LaunchSpec, **body_changes) -> bytes:
    env = json.loads(encode(spec))
    env["body"].update(body_changes)
    return json.dumps(env).encode()


BAD = {
    "path escape in job_id": {"job_id": "../../../escape"},
    "slash in job_id": {"job_id": "a/b"},
    "dot-dot job_id": {"job_id": ".."},
    "empty job_id": {"job_id": ""},
    "path escape in task_id": {"task_id": "../t"},
    "non-string env value": {"env": [["A", 1]]},
    "env not pairs": {"env": [["A"]]},
    "env bad name": {"env": [["A=B", "x"]]},
    "env as object": {"env": {"A": "b"}},
    "NUL in argv": {"command": ["true\x00"]},
    "unknown runtime": {"runtime": "bash"},
    "negative rank": {"rank": -1},
    "rank beyond cluster": {"rank": 5},
    "zero epochs": {"epochs": 0},
    "checkpoint uri with ..": {"checkpoint_uri": "file:///tmp/x/../../etc"},
    "checkpoint uri of another scheme": {"checkpoint_uri": "http://evil/x"},
    "relative checkpoint uri": {"checkpoint_uri": "ckpt"},
    "negative generation": {"cluster": {"generation": -1, "scheduler": None, "servers": [], "workers": []}},
    "host with spaces": {"cluster": {"generation": 0, "scheduler": None, "servers": [],
                                     "workers": [{"task_id": "w", "host": "a b", "port": 1}]}},
}


@pytest.mark.parametrize("change", BAD.values(), ids=list(BAD))
def test_ops_malformed_launchspec_is_refused_by_decode(tmp_path, change):
    with pytest.raises(MessageSchemaError):
        decode(_raw(_good(tmp_path), **change))


def test_ops_good_launchspec_still_decodes(tmp_path):
    spec = _good(tmp_path)
    assert decode(encode(spec)) == spec
    assert decode(encode(dataclasses.replace(spec, env=(("OMP_NUM_THREADS", "2"),)))).env == (("OMP_NUM_THREADS", "2"),)


@pytest.mark.parametrize("name", ["path escape in job_id", "non-string env value", "rank beyond cluster"])
def test_ops_executor_fails_only_the_bad_task(tmp_path, name):
    """Through the executor loop: the bad task gets TASK_FAILED with a reason, nothing is written outside
    the work folder, and a good task launched next to it still starts."""
    work = tmp_path / "sandbox" / "dl2-jobs"
    loop = ExecutorLoop(queue.Queue(), Sink(), RunnerConfig(workdir=work))
    bad = {"task_id": {"value": "bad-1"}, "data": base64.b64encode(_raw(_good(tmp_path), **BAD[name])).decode()}
    loop.handle(Event("launch", bad))
    assert loop.sink.statuses[-1][:2] == ("bad-1", "TASK_FAILED")
    assert "LaunchSpec" in loop.sink.statuses[-1][2]
    assert not (tmp_path / "escape").exists() and not (tmp_path.parent / "escape").exists()
    assert "STARTING" not in " ".join(s for _, s, _ in loop.sink.statuses)
    good = {"task_id": {"value": "j1.worker.1"}, "data": base64.b64encode(encode(_good(tmp_path))).decode()}
    loop.handle(Event("launch", good))
    assert ("j1.worker.1", "TASK_RUNNING") in [(t, s) for t, s, _ in loop.sink.statuses]
    loop.shutdown()


def test_ops_runner_error_after_starting_still_ends_in_task_failed(tmp_path, monkeypatch):
    """Any error while starting a task (not only the anticipated ones) ends in TASK_FAILED."""
    from dl2_mesos.executor import job_runner

    def boom(*a, **k):
        raise TypeError("unexpected")

    monkeypatch.setattr(job_runner, "processes_for_task", boom)
    loop = ExecutorLoop(queue.Queue(), Sink(), RunnerConfig(workdir=tmp_path / "w"))
    loop.handle(Event("launch", {"task_id": {"value": "j1.worker.1"},
                                 "data": base64.b64encode(encode(_good(tmp_path))).decode()}))
    assert loop.sink.statuses[-1][:2] == ("j1.worker.1", "TASK_FAILED")
    loop.shutdown()
