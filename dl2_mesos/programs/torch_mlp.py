"""Reference PyTorch job: the same MLP task, all-reduce data parallelism (gloo on CPU), workers only.

``python -m dl2_mesos.programs.torch_mlp [options]``; rendezvous at ``MASTER_ADDR:MASTER_PORT``
(worker rank 0's endpoint), ``RANK``/``WORLD_SIZE`` from the executor. Same contract as the MXNet
program: resume, progress events, rank 0 checkpoints (``model.pt``), stop flag all-reduced every batch.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

from dl2_mesos.job_runtime import JobRuntime
from dl2_mesos.programs.common import BatchLoop, SyntheticTask, digest, parse_args


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
    flag = torch.zeros(1)

    def write(folder) -> None:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, folder / "model.pt")

    loop = BatchLoop(rt, args, start_batch=batch, samples_per_batch=args.batch_size * world, write=write)
    while loop.running:
        x, y = task.batch(loop.batch, rt.rank)
        opt.zero_grad()
        loss = loss_fn(model(torch.from_numpy(x)), torch.from_numpy(y).long())
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= world
        opt.step()
        flag.fill_(1.0 if rt.stop_requested else 0.0)
        dist.all_reduce(flag, op=dist.ReduceOp.SUM)
        if not loop.after_step(float(loss.item()), bool(flag.item() > 0)):
            break
    loop.finish(digest([p.detach().numpy() for p in model.parameters()]))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
