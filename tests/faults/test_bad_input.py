"""Bad input gets a clear error and loses nothing: API fuzzing from the OpenAPI document,
malformed executor messages, corrupt checkpoints on real HDFS, malformed traces and invalid
config files given to the real CLI."""

from __future__ import annotations

import base64
import json
import queue
import subprocess
import sys
from pathlib import Path

import pytest

from dl2_mesos.config import Config
from dl2_mesos.executor.job_runner import RunnerConfig
from dl2_mesos.executor.mesos_executor import Event, ExecutorLoop
from dl2_mesos.framework import events as ev
from dl2_mesos.framework.core import SchedulerCore
from dl2_mesos.framework.kv import MemoryKV
from dl2_mesos.framework.state_store import StateStore
from dl2_mesos.jobs import JobSpec
from dl2_mesos.messages import MessageSchemaError, ProgressReport, decode_b64, encode_b64
from dl2_mesos.policy.registry import make_policy
from dl2_mesos.storage import CheckpointStore
from dl2_rigs.faultload import fuzz_api
from dl2_rigs.faults import verify_job_checkpoints

DL2 = str(Path(sys.executable).with_name("dl2"))
GARBAGE = ["", "not base64!!", base64.b64encode(b"\xff\xfe").decode(), base64.b64encode(b"[1, 2]").decode(),
           base64.b64encode(b'{"kind": "progress"}').decode(), base64.b64encode(b'{"kind": "nope", "v": 1}').decode(),
           base64.b64encode(json.dumps({"kind": "progress", "v": 1, "job_id": 5, "epoch": "many"}).encode()).decode(),
           base64.b64encode(b"{" * 5000).decode()]


def test_fuzzing_the_api_from_its_openapi_document_gives_no_5xx():
    res = fuzz_api(cases=250)
    assert res.cases == 250
    assert res.server_errors == 0, res.examples
    assert res.unclear_rejections == 0, res.examples
    # the fuzzer got past auth and validation, and was refused for both reasons
    assert res.status_codes.get(201, 0) > 0 and res.status_codes.get(401, 0) > 0 and res.status_codes.get(422, 0) > 0


@pytest.mark.parametrize("data", GARBAGE)
def test_malformed_messages_are_schema_errors(data):
    with pytest.raises(MessageSchemaError):
        decode_b64(data)


def test_framework_drops_malformed_executor_messages_and_keeps_the_job():
    core = SchedulerCore(Config(policy="fifo"), make_policy("fifo"), StateStore(MemoryKV()))
    core.restore()
    job = core.submit(JobSpec(job_type="resnet-50", epochs=5))
    before = job.to_dict()
    for data in GARBAGE:
        core.handle(ev.FrameworkMessage("e", "a", data))
    # a well-formed report for an unknown job is ignored too
    core.handle(ev.FrameworkMessage("e", "a", encode_b64(ProgressReport("ghost", "t", 0, 1.0, 10, 1.0))))
    assert core.jobs[job.job_id].to_dict() == before
    core.handle(ev.FrameworkMessage("e", "a", encode_b64(ProgressReport(job.job_id, "t", 0, 2.0, 20, 1.0))))
    assert core.jobs[job.job_id].epochs_done == 2.0  # and the next good one still counts


class _Sink:
    def __init__(self):
        self.statuses, self.sent = [], []

    def status(self, task_id, state, message=""):
        self.statuses.append((task_id, state, message))

    def send(self, msg):
        self.sent.append(msg)


def test_executor_fails_a_task_with_a_malformed_launch_spec_and_ignores_bad_messages(tmp_path):
    sink = _Sink()
    loop = ExecutorLoop(queue.Queue(), sink, RunnerConfig(workdir=tmp_path))
    for i, data in enumerate(GARBAGE):
        loop.handle(Event("launch", {"task_id": {"value": f"t{i}"}, "data": data}))
        loop.handle(Event("message", data))
    assert [s for _, s, _ in sink.statuses] == ["TASK_FAILED"] * len(GARBAGE)
    assert all("malformed" in m for _, _, m in sink.statuses)
    assert not loop.runners and not sink.sent


@pytest.mark.slow
def test_corrupt_checkpoints_on_hdfs_are_detected_and_the_previous_one_restores(hdfs, tmp_path):
    root = f"{hdfs.url}/dl2-faults/corrupt-{tmp_path.name}"
    store = CheckpointStore(root, keep=5)
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / "model.params").write_bytes(bytes([i]) * 4096)
        (src / "state.json").write_text(json.dumps({"epoch": i + 1, "batch": 10 * (i + 1)}))
        store.save(src, name="final" if i == 2 else "", meta={"final": i == 2, "epoch": i + 1})
    infos = store.list()
    assert verify_job_checkpoints(root, 3, tmp_path / "v0") == (3, [])
    # flip the newest checkpoint's parameters (same size): the sha256 check catches it
    newest = infos[-1]
    store.fs.pipe_file(f"{store.root}/{newest.dirname}/model.params", b"\x07" * 4096)
    got = store.restore(tmp_path / "restore")
    assert got.dirname == infos[-2].dirname
    assert (tmp_path / "restore" / "model.params").read_bytes() == b"\x01" * 4096
    n, problems = verify_job_checkpoints(root, 3, tmp_path / "v1")
    assert n == 2 and any(newest.dirname in p and "sha256" in p for p in problems)
    # a truncated manifest: the checkpoint is reported, never half-read
    store.fs.pipe_file(f"{store.root}/{infos[0].dirname}/MANIFEST.json", b'{"seq": 1, "fil')
    n, problems = verify_job_checkpoints(root, 3, tmp_path / "v2")
    assert any(infos[0].dirname in p and "MANIFEST" in p for p in problems)
    # nothing was lost: the untouched middle checkpoint is still intact
    assert store.restore(tmp_path / "r2", name=infos[1].dirname).dirname == infos[1].dirname


BAD_TRACES = {
    "missing column": "arrival_time,job_type\n0,resnet-50\n",
    "not a number": "arrival_time,job_type,epochs\n0,resnet-50,lots\n",
    "unknown type": "arrival_time,job_type,epochs\n0,gpt-17,10\n",
    "negative epochs": "arrival_time,job_type,epochs\n0,resnet-50,-3\n",
    "short row": "arrival_time,job_type,epochs\n0,resnet-50\n",
    "binary": "\x00\x01\x02garbage",
}


@pytest.mark.parametrize("case", sorted(BAD_TRACES))
def test_malformed_traces_fail_cleanly(case, tmp_path):
    trace = tmp_path / "bad.csv"
    trace.write_text(BAD_TRACES[case])
    r = subprocess.run([DL2, "simulate", "--trace", str(trace), "--agents", "2", "-p", "drf", "--seeds", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, r.stdout
    assert "Traceback" not in r.stderr and str(trace.name) in r.stderr, r.stderr


BAD_CONFIGS = {
    "syntax": ("slot = [1, 2\n", "config"),
    "unknown key": ('slott = "30s"\n', "slott"),
    "bad duration": ('slot = "soon"\n', "slot"),
    "bad policy": ('policy = "magic"\n', "policy"),
    "wrong type": ("max_task_failures = \"lots\"\n", "max_task_failures"),
    "bad zk": ('zk = "http://zk:2181"\n', "zk"),
    "secret without principal": ('secret = "x"\n', "secret"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_invalid_config_files_fail_cleanly(case, tmp_path):
    text, word = BAD_CONFIGS[case]
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    state = tmp_path / "state"
    r = subprocess.run([DL2, "framework", "--config", str(cfg), "--state-dir", str(state)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and word in r.stderr, r.stderr
    assert not state.exists() or not any(state.iterdir())  # nothing was started or written


def test_missing_config_file_fails_cleanly(tmp_path):
    r = subprocess.run([DL2, "framework", "--config", str(tmp_path / "nope.toml")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "Traceback" not in r.stderr and "nope.toml" in r.stderr
