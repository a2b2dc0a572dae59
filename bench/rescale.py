"""Rescale cost of the reference MXNet job through real HDFS, phase by phase.

Starts a real HDFS, runs ``dl2_mesos.programs.mxnet_mlp`` with 1 PS + 2 workers (kvstore
``dist_sync``, CPU), rescales it to 2 PS + 3 workers through the executor's JobRunner (checkpoint
-> stop -> upload -> download -> relaunch -> first batch) and prints each phase's seconds next to
the time to save and load the model alone and to move its checkpoint through HDFS alone.

    .venv/bin/python bench/rescale.py [--repeats 2]
    .venv/bin/python bench/rescale.py --hidden 5000 --repeats 1    # ResNet-50 size: 100 MB of parameters
    .venv/bin/python bench/rescale.py --hidden 11180 --repeats 1   # ~500 MB of parameters, 1 GB checkpoint

``--hidden`` is the width of the MLP's two hidden layers (about hidden^2 parameters; the checkpoint
holds them and the SGD momentum, twice their size). The goal line compares the rescale's total
with 2 x (write the checkpoint once: save + upload; read it once: download + load) + the start of
one job process (Python + MXNet import).
"""

from __future__ import annotations

import argparse
import json
import os
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
from mxnet import autograd, gluon
hidden = int(sys.argv[2])
net = gluon.nn.HybridSequential()
net.add(gluon.nn.Dense(hidden, activation="relu"), gluon.nn.Dense(hidden, activation="relu"), gluon.nn.Dense(10))
net.initialize(mx.init.Xavier()); net(mx.nd.zeros((1, 32)))
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
with autograd.record():
    loss = net(mx.nd.ones((2, 32))).sum()
loss.backward(); trainer.step(2)  # momentum states exist, as in a training job's checkpoint
mx.nd.waitall()
d = sys.argv[1]
t0 = time.perf_counter(); net.save_parameters(d + "/model.params"); trainer.save_states(d + "/trainer.states")
t1 = time.perf_counter(); net.load_parameters(d + "/model.params"); trainer.load_states(d + "/trainer.states")
t2 = time.perf_counter()
print(json.dumps({"save": t1 - t0, "load": t2 - t1}))
"""
PROCESS_START = "import time; t0 = time.perf_counter(); import mxnet; print(time.perf_counter() - t0)"


class Sink:
    def __init__(self) -> None:
        self.messages: list[object] = []

    def status(self, task_id: str, state: str, message: str = "") -> None:
        pass

    def send(self, msg: object) -> None:
        self.messages.append(msg)


def ep(tid: str) -> Endpoint:
    return Endpoint(tid, "127.0.0.1", free_port())


def one_rescale(hdfs: HdfsCluster, workdir: Path, hidden: int = 64, warm_batches: int = 30, fast: bool = True,
                batch_size: int = 64) -> dict[str, float]:
    job = f"bench-{uuid.uuid4().hex[:6]}"
    uri = f"{hdfs.url}/dl2/bench/{job}"
    g0 = ClusterSpec(0, ep("sched"), (ep("ps-0"),), (ep("w-0"), ep("w-1")))
    sink = Sink()

    def spec(tid: str, role: str, rank: int, cluster: ClusterSpec) -> LaunchSpec:
        return LaunchSpec(job_id=job, task_id=tid, role=role, rank=rank, runtime="mxnet", job_type="mlp",
                          epochs=1000.0, command=("python", "-m", "dl2_mesos.programs.mxnet_mlp", *ARGS,
                                                  "--hidden", str(hidden), "--batch-size", str(batch_size)),
                          checkpoint_uri=uri, cluster=cluster, progress_interval_s=0.2)

    runner = JobRunner(spec("ps-0", "ps", 0, g0), RunnerConfig(workdir=workdir, grace_s=120.0, fast_rescale=fast,
                                                               upload_timeout_s=600.0), sink)
    try:
        for tid, role, rank in (("ps-0", "ps", 0), ("w-0", "worker", 0), ("w-1", "worker", 1)):
            runner.launch(spec(tid, role, rank, g0))
        deadline = time.monotonic() + 120 + 10 * warm_batches
        while max((m.batch for m in sink.messages if isinstance(m, ProgressReport)), default=0) < warm_batches:
            if time.monotonic() > deadline:
                raise RuntimeError("job did not train")
            runner.poll()
            time.sleep(0.05)
        g1 = ClusterSpec(1, g0.scheduler, (g0.servers[0], ep("ps-1")), (*g0.workers, ep("w-2")))
        for tid, role, rank in (("ps-1", "ps", 1), ("w-2", "worker", 2)):
            runner.launch(spec(tid, role, rank, g1))
        runner.rescale(RescaleRequest(job_id=job, cluster=g1, assignments=(
            ("ps-0", "ps", 0), ("w-0", "worker", 0), ("w-1", "worker", 1))))
        deadline = time.monotonic() + 600
        while not [m for m in sink.messages if isinstance(m, RescaleReport)]:
            if time.monotonic() > deadline:
                raise RuntimeError("no rescale report")
            runner.poll()
            time.sleep(0.02)
        report = [m for m in sink.messages if isinstance(m, RescaleReport)][0]
        return dict(report.phases)
    finally:
        runner.close()


def model_alone(hdfs: HdfsCluster, hidden: int = 64) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([job_python(), "-c", MODEL_ALONE, d, str(hidden)], capture_output=True, text=True,
                             check=True)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        store = CheckpointStore(f"{hdfs.url}/dl2/bench/alone-{uuid.uuid4().hex[:6]}")
        t0 = time.perf_counter()
        store.save(d)
        t1 = time.perf_counter()
        store.restore(Path(d) / "back")
        t2 = time.perf_counter()
        res.update({"hdfs_upload": t1 - t0, "hdfs_download": t2 - t1,
                    "bytes": sum(p.stat().st_size for p in Path(d).glob("*") if p.is_file()),
                    "params_bytes": (Path(d) / "model.params").stat().st_size})
        out = subprocess.run([job_python(), "-c", PROCESS_START], capture_output=True, text=True, check=True)
        res["process_start"] = float(out.stdout.strip().splitlines()[-1])
        store.fs.rm(store.root, recursive=True)  # 1 GB checkpoints: do not keep them around
        return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64, help="hidden layer width (model size ~ hidden^2 parameters)")
    ap.add_argument("--warm-batches", type=int, default=None,
                    help="batches trained before the rescale (default 30; 3 when --hidden >= 1000)")
    ap.add_argument("--alone-repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64, help="samples per worker per batch")
    ap.add_argument("--compare", action="store_true",
                    help="also rescale with RunnerConfig.fast_rescale off (every step in turn, restore downloaded)")
    args = ap.parse_args()
    warm = args.warm_batches if args.warm_batches is not None else (30 if args.hidden < 1000 else 3)
    load0 = os.getloadavg()[0]
    with HdfsCluster() as hdfs, tempfile.TemporaryDirectory() as work:
        variants = [True, False] if args.compare else [True]
        runs = {fast: [] for fast in variants}
        for i in range(args.repeats):  # interleaved, so both variants see the same machine load
            for fast in variants:
                runs[fast].append(one_rescale(hdfs, Path(work) / f"r{i}-{fast}", args.hidden, warm, fast,
                                              args.batch_size))
        alone = [model_alone(hdfs, args.hidden) for _ in range(args.alone_repeats)]
    phases = ["stop", "save", "relaunch", "upload", "download", "first_batch", "total"]
    print(f"rescale of the reference MXNet job (hidden {args.hidden}, batch {args.batch_size}) 1 PS + 2 workers -> "
          f"2 PS + 3 workers, through real HDFS ({args.repeats} runs; seconds, median [min-max]); load average "
          f"{load0:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for fast in variants:
        if args.compare:
            print("  fast rescale (local copy, overlapped start):" if fast else
                  "  one step after the other, restore downloaded (fast_rescale off):")
        for ph in phases:
            vals = [r.get(ph, float("nan")) for r in runs[fast]]
            print(f"  {ph:<12} {statistics.median(vals):8.3f}  [{min(vals):.3f}-{max(vals):.3f}]")
    med = {k: statistics.median(a[k] for a in alone) for k in alone[0]}
    print(f"model alone ({int(med['bytes'])} bytes: params {int(med['params_bytes'])} + trainer states; "
          f"median of {len(alone)})")
    for k in ("save", "load", "hdfs_upload", "hdfs_download", "process_start"):
        print(f"  {k:<13} {med[k]:8.3f}")
    once = med["save"] + med["hdfs_upload"] + med["hdfs_download"] + med["load"]
    bound = 2 * once + med["process_start"]
    total = statistics.median(r.get("total", float("nan")) for r in runs[True])
    print(f"goal: total {total:.2f} s <= 2 x {once:.2f} s (write + read the checkpoint once) + "
          f"{med['process_start']:.2f} s (process start) = {bound:.2f} s: {'OK' if total <= bound else 'over'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
