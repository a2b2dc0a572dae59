"""Reference PyTorch job: the same MLP task, all-reduce data parallelism (gloo on CPU), workers only.

``python -m dl2_mesos.programs.torch_mlp [options]``; rendezvous at ``MASTER_ADDR:MASTER_PORT``
(worker rank 0's endpoint), ``RANK``/``WORLD_SIZE`` from the executor. Same contract as the MXNet
program: resume, progress events, rank 0 checkpoints (``model.pt``), stop flag all-reduced every batch.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

from dl2_mesos.job_runtime import EXIT_FINISHED, EXIT_STOPPED, JobRuntime
from dl2_mesos.programs.common import SyntheticTask, digest, parse_args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, "dl2 reference PyTorch job (MLP, gloo all-reduce)")
    rt = JobRuntime.from_env()
    rt.install_signal_handlers()
    rt.event("started", role=rt.role, rank=rt.rank, generation=rt.generation)

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    world = int(os.environ.get("WORLD_SIZE", rt.num_workers))
    dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                            rank=rt.rank, world_size=world, timeout=timedelta(seconds=120))
    model = torch.nn.Sequential(
        torch.nn.Linear(args.features, args.hidden), torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, args.classes),
    )
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    batch = 0
    restored = rt.restored()
    if restored is not None:
        state = torch.load(restored.path / "model.pt", weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        batch = restored.batch
        rt.event("restored", checkpoint=restored.checkpoint, epoch=restored.epoch, batch=batch)
    for p in model.parameters():  # every worker starts from rank 0's parameters
        dist.broadcast(p.data, src=0)

    task = SyntheticTask(args)
    loss_fn = torch.nn.CrossEntropyLoss()
    total_batches = int(round(rt.epochs * args.batches_per_epoch))
    flag = torch.zeros(1)
    t_start, start_batch, first = time.monotonic(), batch, True
    status, loss_value = EXIT_FINISHED, None

    def write(folder) -> None:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, folder / "model.pt")

    while batch < total_batches:
        x, y = task.batch(batch, rt.rank)
        opt.zero_grad()
        loss = loss_fn(model(torch.from_numpy(x)), torch.from_numpy(y).long())
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= world
        opt.step()
        loss_value = float(loss.item())
        batch += 1
        if first:
            rt.event("first_batch", batch=batch)
            first = False
        flag.fill_(1.0 if rt.stop_requested else 0.0)
        dist.all_reduce(flag, op=dist.ReduceOp.SUM)
        stop = bool(flag.item() > 0)
        elapsed = max(time.monotonic() - t_start, 1e-6)
        rt.progress(batch / args.batches_per_epoch, batch, (batch - start_batch) * args.batch_size * world / elapsed,
                    loss_value, force=stop or batch >= total_batches)
        if stop:
            status = EXIT_STOPPED
            break
        if rt.saver and rt.checkpoint_due():
            rt.save_checkpoint(write, batch / args.batches_per_epoch, batch)
        if args.batch_sleep:
            time.sleep(args.batch_sleep)

    if rt.saver:
        rt.save_checkpoint(write, batch / args.batches_per_epoch, batch, final=True)
    rt.exit(status, batch=batch, loss=loss_value,
            param_digest=digest([p.detach().numpy() for p in model.parameters()]))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
