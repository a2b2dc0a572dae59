"""Pieces shared by the reference programs: arguments, a deterministic synthetic data set, and
the job-runtime bookkeeping around each training step (:class:`BatchLoop`).

Runs under the job interpreter (numpy < 1.24); imports numpy lazily so ``--help`` stays cheap.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Callable
from typing import Any

from dl2_mesos.job_runtime import EXIT_FINISHED, EXIT_STOPPED, JobRuntime


def parse_args(argv: list[str] | None, description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--batches-per-epoch", type=int, default=50, help="batches (per worker) in one epoch")
    p.add_argument("--batch-size", type=int, default=64, help="samples per worker per batch")
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--batch-sleep", type=float, default=0.0,
                   help="seconds to sleep after each batch (keeps tests gentle on small machines)")
    return p.parse_args(argv)


class SyntheticTask:
    """Classification by a fixed random two-layer teacher: learnable, so the loss falls.

    Batch ``b`` of worker ``r`` among ``n`` workers is generated from seed ``(seed, b, r)``, so a
    resumed job sees the same stream whatever happened before.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        import numpy as np

        self.np = np
        self.args = args
        rng = np.random.RandomState(args.seed)
        self.w1 = rng.normal(size=(args.features, 48)).astype("float32")
        self.w2 = rng.normal(size=(48, args.classes)).astype("float32")

    def batch(self, index: int, rank: int) -> tuple[Any, Any]:
        np = self.np
        rng = np.random.RandomState((self.args.seed * 1_000_003 + index * 101 + rank) % (2**31))
        x = rng.normal(size=(self.args.batch_size, self.args.features)).astype("float32")
        y = np.argmax(np.tanh(x @ self.w1) @ self.w2, axis=1).astype("float32")
        return x, y


def digest(arrays: list[Any]) -> str:
    """sha256 of parameter arrays (in a fixed order): equal digests = bitwise-identical parameters."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(a.tobytes())
    return h.hexdigest()


class BatchLoop:
    """What every reference program does around a training step, per the job-runtime contract.

    Usage::

        loop = BatchLoop(rt, args, start_batch=batch, samples_per_batch=..., write=write)
        while loop.running:
            loss = train_one_batch(loop.batch)
            stop = all_workers_agree(rt.stop_requested)  # kvstore sum / all-reduce
            if not loop.after_step(loss, stop):
                break
        loop.finish(param_digest)

    ``after_step`` emits the first-batch event and progress, checkpoints when due (the saver
    only) and paces the loop; ``finish`` saves the final checkpoint and reports the exit.
    """

    def __init__(self, rt: JobRuntime, args: argparse.Namespace, start_batch: int, samples_per_batch: int,
                 write: Callable[[Any], None]) -> None:
        self.rt, self.args, self.write = rt, args, write
        self.total_batches = int(round(rt.epochs * args.batches_per_epoch))
        self.batch = self.start_batch = start_batch
        self.samples_per_batch = samples_per_batch
        self.status, self.loss = EXIT_FINISHED, None
        self._t_start = time.monotonic()

    @property
    def running(self) -> bool:
        return self.batch < self.total_batches

    @property
    def epoch(self) -> float:
        return self.batch / self.args.batches_per_epoch

    def after_step(self, loss: float, stop: bool) -> bool:
        """Account one trained batch; False when every worker must stop now (a stop was requested)."""
        self.loss = loss
        self.batch += 1
        if self.batch == self.start_batch + 1:
            self.rt.event("first_batch", batch=self.batch)
        elapsed = max(time.monotonic() - self._t_start, 1e-6)
        self.rt.progress(self.epoch, self.batch, (self.batch - self.start_batch) * self.samples_per_batch / elapsed,
                         loss, force=stop or not self.running)
        if stop:
            self.status = EXIT_STOPPED
            return False
        if self.rt.saver and self.rt.checkpoint_due():
            self.rt.save_checkpoint(self.write, self.epoch, self.batch)
        if self.args.batch_sleep:
            time.sleep(self.args.batch_sleep)
        return True

    def finish(self, param_digest: str) -> None:
        """Final checkpoint (the saver) and the exit event."""
        if self.rt.saver:
            self.rt.save_checkpoint(self.write, self.epoch, self.batch, final=True)
        self.rt.exit(self.status, batch=self.batch, loss=self.loss, param_digest=param_digest)
