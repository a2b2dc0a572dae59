"""Experience replay: a FIFO ring buffer of (input, mask, action, target return) samples.

The paper keeps the samples of recent slots (8192) and trains on mini-batches (256) drawn from
them, so one update mixes several slots and episodes (its ablation: +39.6% JCT without it).
Sampling is uniform; the oldest samples are overwritten first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Batch:
    """A mini-batch of samples (numpy arrays, first axis = sample)."""

    features: np.ndarray  # float32 (B, D)
    masks: np.ndarray  # bool (B, A)
    actions: np.ndarray  # int64 (B,)
    returns: np.ndarray  # float32 (B,)
    baselines: np.ndarray | None = None  # float32 (B,): input-dependent baselines (None: none)
    #: float32 (B,): log-probability of the action under the policy that acted (None: unknown);
    #: what the clipped (PPO-style) update measures its step against
    old_log_probs: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.actions)


class ReplayBuffer:
    """Ring buffer with uniform sampling.

    Args:
        capacity: samples kept (paper: 8192).
        input_dim: length of a feature vector; num_actions: length of a mask.
    """

    def __init__(self, capacity: int, input_dim: int, num_actions: int) -> None:
        if capacity < 1:
            raise ValueError("replay capacity must be >= 1")
        self.capacity = capacity
        self.features = np.zeros((capacity, input_dim), dtype=np.float32)
        self.masks = np.zeros((capacity, num_actions), dtype=bool)
        self.actions = np.zeros(capacity, dtype=np.int64)
        self.returns = np.zeros(capacity, dtype=np.float32)
        self.baselines = np.full(capacity, np.nan, dtype=np.float32)
        self.old_log_probs = np.full(capacity, np.nan, dtype=np.float32)
        self._next = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, batch: Batch) -> None:
        """Append samples (the oldest are overwritten when full)."""
        n = len(batch)
        if n == 0:
            return
        if n >= self.capacity:  # only the newest fit
            sl = slice(n - self.capacity, n)
            batch = Batch(batch.features[sl], batch.masks[sl], batch.actions[sl], batch.returns[sl],
                          None if batch.baselines is None else batch.baselines[sl],
                          None if batch.old_log_probs is None else batch.old_log_probs[sl])
            n = self.capacity
        idx = (self._next + np.arange(n)) % self.capacity
        self.features[idx] = batch.features
        self.masks[idx] = batch.masks
        self.actions[idx] = batch.actions
        self.returns[idx] = batch.returns
        self.baselines[idx] = np.nan if batch.baselines is None else batch.baselines
        self.old_log_probs[idx] = np.nan if batch.old_log_probs is None else batch.old_log_probs
        self._next = int((self._next + n) % self.capacity)
        self.size = min(self.capacity, self.size + n)

    def sample(self, batch_size: int, rng: np.random.Generator) -> Batch:
        """Uniform mini-batch without replacement (all samples when fewer are stored)."""
        if self.size == 0:
            raise ValueError("replay buffer is empty")
        k = min(batch_size, self.size)
        idx = rng.choice(self.size, size=k, replace=False)
        return Batch(self.features[idx], self.masks[idx], self.actions[idx], self.returns[idx], self.baselines[idx],
                     self.old_log_probs[idx])

    def mean_return(self) -> float:
        return float(self.returns[: self.size].mean()) if self.size else 0.0

    def clear(self) -> None:
        self._next = 0
        self.size = 0
