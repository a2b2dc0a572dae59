"""Pieces shared by the reference programs: arguments and a deterministic synthetic data set.

Runs under the job interpreter (numpy < 1.24); imports numpy lazily so ``--help`` stays cheap.
"""

from __future__ import annotations

import argparse
import hashlib
from typing import Any


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
