"""Rescale cost of the reference MXNet job through real HDFS, phase by phase.

Starts a real HDFS, runs ``dl2_mesos.programs.mxnet_mlp`` with 1 PS + 2 workers (kvstore
``dist_sync``, CPU), rescales it to 2 PS + 3 workers through the executor's JobRunner (checkpoint
-> stop -> upload -> download -> relaunch -> first batch) and prints each phase's seconds next to
the time to save and load the model alone and to move its checkpoint through HDFS alone.

    .venv/bin/python bench/rescale.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from dl2_mesos.executor.job_runner import JobRunner, RunnerConfig
from dl2_mesos.executor.launch_env import job_python
from dl2_mesos.messages import ClusterSpec, Endpoint, LaunchSpec, ProgressReport, RescaleReport, RescaleRequest
from dl2_mesos.storage import CheckpointStore
from dl2_mesos.services.hdfs import HdfsCluster
from dl2_mesos.services.zookeeper import free_port

ARGS = ("--batches-per-epoch", "20", "--batch-sleep", "0.01")

MODEL_ALONE = r"""
import json, sys, time, tempfile, os
import mxnet as mx
from mxnet import gluon
net = gluon.nn.HybridSequential()
net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(10))
net.initialize(mx.init.Xavier()); net(mx.nd.zeros((1, 32)))
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
d = sys.argv[1]
t0 = time.perf_counter(); net.save_parameters(d + "/model.params"); trainer.save_states(d + "/trainer.states")
t1 = time.perf_counter(); net.load_parameters(d + "/model.params"); trainer.load_states(d + "/trainer.states")
t2 = time.perf_counter()
print(json.dumps({"save": t1 - t0, "load": t2 - t1}))
"""


class Sink:
    def __init__(self) -> None:
        self.messages: list[object] = []

    def status(self, task_id: str, state: str, message: str = "") -> None:
        pass

    def send(self, msg: object) -> None:
        self.messages.append(msg)


def ep(tid: str) -> Endpoint:
    return Endpoint(tid, "127.0.0.1", free_port())


def one_rescale(hdfs: HdfsCluster, workdir: Path) -> dict[str, float]:
    job = f"bench-{uuid.uuid4().hex[:6]}"
    uri = f"{hdfs.url}/dl2/bench/{job}"
    g0 = ClusterSpec(0, ep("sched"), (ep("ps-0"),), (ep("w-0"), ep("w-1")))
    sink = Sink()

    def spec(tid: str, role: str, rank: int, cluster: ClusterSpec) -> LaunchSpec:
        return LaunchSpec(job_id=job, task_id=tid, role=role, rank=rank, runtime="mxnet", job_type="mlp",
                          epochs=1000.0, command=("python", "-m", "dl2_mesos.programs.mxnet_mlp", *ARGS),
                          checkpoint_uri=uri, cluster=cluster, progress_interval_s=0.2)

    runner = JobRunner(spec("ps-0", "ps", 0, g0), RunnerConfig(workdir=workdir, grace_s=20.0), sink)
    try:
        for tid, role, rank in (("ps-0", "ps", 0), ("w-0", "worker", 0), ("w-1", "worker", 1)):
            runner.launch(spec(tid, role, rank, g0))
        deadline = time.monotonic() + 120
        while max((m.batch for m in sink.messages if isinstance(m, ProgressReport)), default=0) < 30:
            if time.monotonic() > deadline:
                raise RuntimeError("job did not train")
            runner.poll()
            time.sleep(0.05)
        g1 = ClusterSpec(1, g0.scheduler, (g0.servers[0], ep("ps-1")), (*g0.workers, ep("w-2")))
        for tid, role, rank in (("ps-1", "ps", 1), ("w-2", "worker", 2)):
            runner.launch(spec(tid, role, rank, g1))
        runner.rescale(RescaleRequest(job_id=job, cluster=g1, assignments=(
            ("ps-0", "ps", 0), ("w-0", "worker", 0), ("w-1", "worker", 1))))
        deadline = time.monotonic() + 120
        while not [m for m in sink.messages if isinstance(m, RescaleReport)]:
            if time.monotonic() > deadline:
                raise RuntimeError("no rescale report")
            runner.poll()
            time.sleep(0.02)
        report = [m for m in sink.messages if isinstance(m, RescaleReport)][0]
        return dict(report.phases)
    finally:
        runner.close()


def model_alone(hdfs: HdfsCluster) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([job_python(), "-c", MODEL_ALONE, d], capture_output=True, text=True, check=True)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        store = CheckpointStore(f"{hdfs.url}/dl2/bench/alone-{uuid.uuid4().hex[:6]}")
        t0 = time.perf_counter()
        store.save(d)
        t1 = time.perf_counter()
        store.restore(Path(d) / "back")
        t2 = time.perf_counter()
        res.update({"hdfs_upload": t1 - t0, "hdfs_download": t2 - t1,
                    "bytes": sum(p.stat().st_size for p in Path(d).glob("*") if p.is_file())})
        return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    with HdfsCluster() as hdfs, tempfile.TemporaryDirectory() as work:
        runs = [one_rescale(hdfs, Path(work) / f"r{i}") for i in range(args.repeats)]
        alone = [model_alone(hdfs) for _ in range(3)]
    phases = ["stop", "save", "upload", "download", "relaunch", "first_batch", "total"]
    print(f"rescale of the reference MXNet job 1 PS + 2 workers -> 2 PS + 3 workers, through real HDFS "
          f"({args.repeats} runs; seconds, median [min-max])")
    for ph in phases:
        vals = [r.get(ph, float("nan")) for r in runs]
        print(f"  {ph:<12} {statistics.median(vals):8.3f}  [{min(vals):.3f}-{max(vals):.3f}]")
    print(f"model alone ({int(alone[0]['bytes'])} bytes: params + trainer states; median of 3)")
    for k in ("save", "load", "hdfs_upload", "hdfs_download"):
        print(f"  {k:<13} {statistics.median(a[k] for a in alone):8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
