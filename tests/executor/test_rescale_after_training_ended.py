"""A rescale request that reaches an executor after the job trained its last epoch finishes the
job's tasks instead of starting a new generation (which would restore the final checkpoint and
wait forever for peers on other agents that have ended). Real MXNet processes, file storage."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from dl2_mesos.storage import CheckpointStore

pytestmark = [pytest.mark.integration]


def test_rescale_after_the_last_epoch_finishes_instead_of_relaunching(make_runner, sink, job_id, kit, tmp_path):
    uri = f"file://{tmp_path}/ckpt/{job_id}"
    g0 = kit.cluster_spec(0, servers=1, workers=1, job=job_id)
    specs = kit.launch_specs(job_id, g0, uri, epochs=1.0)
    runner = make_runner(specs[0])
    for s in specs:
        runner.launch(s)
    # training ends (1 epoch) while nobody polls the runner: the request below is "on its way"
    deadline = time.monotonic() + 90
    while runner._running_procs() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not runner._running_procs(), "the 1-epoch job did not end"
    assert not runner.finished  # not noticed yet

    req, new_ids = kit.rescale_request(job_id, g0, kit.cluster_spec(1, servers=1, workers=1, job=job_id))
    assert not new_ids
    assert runner.rescale(req) is None
    started_g1 = [p.name for p in [*runner.procs.values(), *runner.retired] if p.spec.generation == 1]
    assert started_g1 == [], f"a new generation was started after training ended: {started_g1}"
    assert runner.finished
    for s in specs:
        assert sink.states(s.task_id)[-1] == "TASK_FINISHED", sink.statuses


def _proc(role: str, status: str | None) -> SimpleNamespace:
    return SimpleNamespace(spec=SimpleNamespace(role=role), exit_event={"status": status} if status else None)


def test_which_endings_count_as_trained_to_the_end(make_runner, job_id, kit, tmp_path):
    uri = f"file://{tmp_path}/ckpt/{job_id}"
    g0 = kit.cluster_spec(0, servers=1, workers=1, job=job_id)
    runner = make_runner(kit.launch_specs(job_id, g0, uri, epochs=2.0)[0])
    done = runner._trained_to_the_end
    assert done([_proc("worker", "finished"), _proc("worker", "finished")], ended_on_their_own=False)
    assert not done([_proc("worker", "finished"), _proc("worker", "stopped")], ended_on_their_own=True)
    assert not done([_proc("worker", None)], ended_on_their_own=True)  # crashed: no exit event
    # servers only: the storage decides, and only when the processes ended before any stop request
    assert not done([], ended_on_their_own=True)  # no checkpoint at all
    local = tmp_path / "final"
    local.mkdir()
    (local / "state.json").write_text(json.dumps({"epoch": 1.0}))
    CheckpointStore(uri).save(local, name="final", meta={"epoch": 1.0, "batch": 20, "final": True, "generation": 0})
    assert not done([], ended_on_their_own=True)  # a rescale's final checkpoint, mid-training
    CheckpointStore(uri).save(local, name="final", meta={"epoch": 2.0, "batch": 40, "final": True, "generation": 0})
    assert done([], ended_on_their_own=True)
    assert not done([], ended_on_their_own=False)  # stopped by this request: a normal rescale
