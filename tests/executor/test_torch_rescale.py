"""PyTorch all-reduce jobs (gloo, CPU, workers only) through the same runner and contract."""

from __future__ import annotations

import dataclasses
import time

import pytest

from dl2_mesos.messages import CheckpointReport, ProgressReport, RescaleReport
from dl2_mesos.storage import CheckpointStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def max_batch(sink, generation=None) -> int:
    return max((m.batch for m in sink.of(ProgressReport) if generation is None or m.generation == generation), default=0)


def test_torch_job_rescaled_from_2_to_3_workers(hdfs, make_runner, sink, job_id, kit):
    uri = f"{hdfs.webhdfs_url}/dl2/checkpoints/{job_id}"  # this one goes through WebHDFS
    g0 = kit.cluster_spec(0, servers=0, workers=2, runtime="pytorch", job=job_id)
    specs = kit.launch_specs(job_id, g0, uri, runtime="pytorch")
    runner = make_runner(specs[0])
    for s in specs:
        runner.launch(s)
    proc_env = dict(runner.procs["worker-1"].spec.env)
    assert proc_env["MASTER_PORT"] == str(g0.workers[0].port) and proc_env["WORLD_SIZE"] == "2"
    assert proc_env["RANK"] == "1" and "DMLC_ROLE" not in proc_env
    kit.wait_until(runner, lambda: max_batch(sink, 0) >= 30, 90, "30 batches in generation 0")
    req, new_ids = kit.rescale_request(job_id, g0, kit.cluster_spec(1, servers=0, workers=3, runtime="pytorch",
                                                                    job=job_id))
    runner.rescale(req)  # the new task arrives after the request: started at once in generation 1
    for s in kit.launch_specs(job_id, req.cluster, uri, runtime="pytorch", only=set(new_ids)):
        runner.launch(s)
    kit.wait_until(runner, lambda: sink.of(RescaleReport), 90, "the rescale report")
    assert sink.of(RescaleReport)[0].ok
    final0 = [c for c in CheckpointStore(uri).list() if c.meta.get("final") and c.meta["generation"] == 0][-1]
    kit.wait_until(runner, lambda: max_batch(sink, 1) >= final0.meta["batch"] + 20, 90, "20 more batches")
    restored = [ev for p in runner.procs.values() for ev in kit.events(p) if ev["type"] == "restored"]
    assert len(restored) == 3 and {ev["batch"] for ev in restored} == {final0.meta["batch"]}
    runner.kill(list(runner.tasks))
    exits = [p.exit_event for p in runner.retired if p.spec.generation == 1 and p.exit_event]
    assert len(exits) == 3 and len({e["param_digest"] for e in exits}) == 1
    g0_loss = [loss for g, _, loss in runner.loss_history if g == 0]
    g1_loss = [loss for g, _, loss in runner.loss_history if g == 1]
    assert sum(g1_loss[:3]) / 3 < sum(g0_loss[:3]) / 3 * 0.8, (g0_loss[:3], g1_loss[:3])


def test_hdfs_outage_during_checkpoint_upload(hdfs, make_runner, sink, job_id, kit):
    """HDFS goes down while the job checkpoints: uploads retry, training goes on, old checkpoints stay."""
    uri = f"{hdfs.url}/dl2/checkpoints/{job_id}"
    g0 = kit.cluster_spec(0, servers=0, workers=2, runtime="pytorch", job=job_id)
    specs = [dataclasses.replace(s, env=(("DL2_CHECKPOINT_EVERY_S", "0.5"),))
             for s in kit.launch_specs(job_id, g0, uri, runtime="pytorch")]
    runner = make_runner(specs[0])
    for s in specs:
        runner.launch(s)
    kit.wait_until(runner, lambda: len(sink.of(CheckpointReport)) >= 2, 90, "two checkpoints before the outage")
    before = [c.dirname for c in CheckpointStore(uri).list()]
    hdfs.stop()
    try:
        t_down = time.monotonic()
        kit.wait_until(runner, lambda: runner.uploader.pending > 0, 30, "an upload to hit the outage")
        while time.monotonic() - t_down < 3:
            runner.poll()
            time.sleep(0.1)
        n_reports = len(sink.of(CheckpointReport))
    finally:
        hdfs.start()
    kit.wait_until(runner, lambda: len(sink.of(CheckpointReport)) > n_reports + 1, 90, "uploads to resume")
    after = CheckpointStore(uri).list()
    assert before[-1] in [c.dirname for c in after] or after[0].seq > int(before[-1][:6])  # pruned only by newer
    assert all(c.meta["generation"] == 0 for c in after)
    out = runner.workdir / "verify"
    # the newest verifies (sha256); training goes on meanwhile, so it may be newer than the listing
    restored = CheckpointStore(uri).restore(out)
    assert restored.seq >= after[-1].seq and restored.seq in [c.seq for c in CheckpointStore(uri).list()]
    assert max_batch(sink) > 0 and not sink.states(specs[0].task_id).count("TASK_FAILED")
