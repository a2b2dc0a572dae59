"""Comparing the fast greedy loop with full forward passes, step by step.

The fast loop computes the network in a rearranged form, equal up to float rounding (~1e-7
relative), so where two logits are that close the two can pick different actions -- as the
numpy and the torch forward passes do between themselves. Anything else must be identical.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from dl2_mesos.cluster import ClusterState
from dl2_mesos.placement import place

#: largest gap (relative to the logits' size) two logits may have where the two loops part
NEAR_TIE = 1e-5


def assert_same_steps(ref, fast, state: ClusterState, logits: Callable[[np.ndarray], np.ndarray]) -> bool:
    """Assert ``fast`` (allocation, steps) took the steps of ``ref`` (a ``run_slot`` result); if
    the two part, it must be at a near-tie of the reference's logits. True when identical."""
    (a1, s1), (a2, s2) = ref, fast
    for k, (x, y) in enumerate(zip(s1, s2)):
        if x.action != y.action:
            assert x.mask[y.action], f"step {k}: the fast loop took masked action {y.action}"
            lg = logits(x.features)
            gap = abs(float(lg[x.action]) - float(lg[y.action]))
            size = max(1.0, abs(float(lg[x.action])))
            assert gap <= NEAR_TIE * size, (
                f"step {k}: action {y.action} instead of {x.action}, logits {lg[y.action]} vs {lg[x.action]}")
            return False  # a near-tie: the states differ from here on
        assert x.job_id == y.job_id, f"step {k}"
    assert len(s1) == len(s2)
    assert a1 == a2
    assert place(a1, state) == place(a2, state)
    return True


def torch_logits(actor) -> Callable[[np.ndarray], np.ndarray]:
    """The actor's logits for one feature vector, by a full torch forward pass."""
    def logits(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return actor(torch.from_numpy(x)[None])[0].numpy()

    return logits


def torch_greedy(actor) -> Callable:
    """Greedy chooser over a full torch forward pass per inference (the slow reference)."""
    logits = torch_logits(actor)

    def choose(x, mask, ctx, window):
        return int(np.where(mask, logits(x), -np.inf).argmax())

    return choose
