"""One inference of DL2's within-slot loop, as recorded for training.

Its own module so that the decision loop (:mod:`~dl2_mesos.policy.dl2.decision_loop`) and its fast
greedy path (:mod:`~dl2_mesos.policy.dl2.greedy`) both use it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Step:
    """One inference: its input, the valid actions, the action taken and the job it touched."""

    features: np.ndarray  # float32 (J*F+G,)
    mask: np.ndarray  # bool (KJ+1,)
    action: int
    job_id: str | None  # None for void
