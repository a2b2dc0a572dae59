"""Reference MXNet job: a gluon MLP trained with kvstore ``dist_sync`` on a synthetic task.

Run by the executor under the job interpreter as ``python -m dl2_mesos.programs.mxnet_mlp [options]``
for every role: the MXNet scheduler and servers only import mxnet (ps-lite serves until the
workers finalise); workers train. The program follows the contract in :mod:`dl2_mesos.job_runtime`:
resumes from ``DL2_RESTORE_DIR``, writes progress events, checkpoints from worker rank 0
(``model.params`` + ``trainer.states`` + ``state.json``) and, on SIGTERM, stops all workers at the
same batch (a stop flag summed through the kvstore every batch), saves and exits.
"""

from __future__ import annotations

import sys

from dl2_mesos.job_runtime import JobRuntime
from dl2_mesos.programs.common import BatchLoop, SyntheticTask, digest, parse_args

STOP_KEY = 999_983  # an integer key far above the Trainer's parameter indices


def serve() -> None:
    """Scheduler or server: importing mxnet with DMLC_ROLE set runs ps-lite until shutdown."""
    import mxnet  # noqa: F401


def train(argv: list[str] | None = None) -> int:
    args = parse_args(argv, "dl2 reference MXNet job (gluon MLP, dist_sync)")
    rt = JobRuntime.from_env()
    rt.install_signal_handlers()
    rt.event("started", role=rt.role, rank=rt.rank, generation=rt.generation)

    import mxnet as mx
    from mxnet import autograd, gluon

    mx.random.seed(args.seed)
    kv = mx.kv.create("dist_sync")
    kv.init(STOP_KEY, mx.nd.zeros(1))
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(args.hidden, activation="relu"), gluon.nn.Dense(args.hidden, activation="relu"),
            gluon.nn.Dense(args.classes))
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    net(mx.nd.zeros((1, args.features)))  # materialise shapes before loading or broadcasting
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": args.lr, "momentum": args.momentum},
                            kvstore=kv, update_on_kvstore=False)
    batch = 0
    restored = rt.restored()
    if restored is not None:
        net.load_parameters(str(restored.path / "model.params"), ctx=mx.cpu())
        if (restored.path / "trainer.states").exists():
            trainer.load_states(str(restored.path / "trainer.states"))
        batch = restored.batch
        rt.event("restored", checkpoint=restored.checkpoint, epoch=restored.epoch, batch=batch)

    task = SyntheticTask(args)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    global_batch = args.batch_size * rt.num_workers
    flag, flag_out = mx.nd.zeros(1), mx.nd.zeros(1)

    def params() -> list:
        return [p.data().asnumpy() for _, p in sorted(net.collect_params().items())]

    def write(folder) -> None:
        net.save_parameters(str(folder / "model.params"))
        trainer.save_states(str(folder / "trainer.states"))

    loop = BatchLoop(rt, args, start_batch=batch, samples_per_batch=global_batch, write=write)
    while loop.running:
        x, y = task.batch(loop.batch, rt.rank)
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x)), mx.nd.array(y))
        loss.backward()
        trainer.step(global_batch)  # gradients are summed over workers by the kvstore
        # Every worker contributes its stop flag; the sum is the same everywhere, so all stop together.
        flag[:] = 1.0 if rt.stop_requested else 0.0
        kv.push(STOP_KEY, flag)
        kv.pull(STOP_KEY, out=flag_out)
        if not loop.after_step(float(loss.mean().asscalar()), float(flag_out.asscalar()) > 0):
            break
    loop.finish(digest(params()))
    return 0


def main(argv: list[str] | None = None) -> int:
    rt = JobRuntime.from_env()
    if rt.role in ("scheduler", "server"):
        serve()
        return 0
    return train(argv)


if __name__ == "__main__":
    sys.exit(main())
