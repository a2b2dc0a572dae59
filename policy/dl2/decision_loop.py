"""The within-slot decision loop and the ways of choosing an action (greedy, sampled, explored).

Loop (paper section 4.1): infer -> apply the increment -> update the state -> infer again, until
the void action or nothing in the window can be added; then the next window (see
:mod:`~dl2_mesos.policy.dl2.slot`). Every inference made is returned as a :class:`Step` so that
training (simulated or online) can learn from it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dl2_mesos.allocation import Allocation
from dl2_mesos.cluster import ClusterState
from dl2_mesos.policy.dl2.idle import idle_allocation
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.network import Actor, NumpyActor
from dl2_mesos.policy.dl2.sampling import bad_state_action, draw_action
from dl2_mesos.policy.dl2.slot import SlotContext
from dl2_mesos.policy.dl2.step import Step

#: chooser(features, mask, context, window) -> action index
Chooser = Callable[[np.ndarray, np.ndarray, SlotContext, np.ndarray], int]


def run_slot(state: ClusterState, cfg: DL2Config, choose: Chooser) -> tuple[Allocation, list[Step]]:
    """Decide one slot with ``choose``; returns the allocation and every inference made (none
    when the config's idle-cluster rule decides the slot)."""
    if cfg.idle_fastest:
        idle = idle_allocation(state)
        if idle is not None:
            return idle, []
    ctx = SlotContext(state, cfg)
    steps: list[Step] = []
    void = cfg.void
    K = cfg.per_job
    budget = cfg.max_steps_per_slot
    for w_index, window in enumerate(ctx.windows):
        while budget > 0:
            mask = ctx.mask(window)
            if not mask[:-1].any():
                break  # nothing can be added in this window: no decision to learn from
            x = ctx.features(window, w_index)
            a = int(choose(x, mask, ctx, window))
            if not mask[a]:
                raise RuntimeError(f"chooser picked masked action {a}")
            budget -= 1
            if a == void:
                steps.append(Step(x, mask, a, None))
                break
            job_id = ctx.job_ids[int(window[a // K])]
            steps.append(Step(x, mask, a, job_id))
            ctx.apply(window, a)
    return ctx.finish(), steps


def run_slot_greedy(state: ClusterState, cfg: DL2Config, fast: NumpyActor,
                    record: bool = False) -> tuple[Allocation, list[Step]]:
    """Greedy decision of one slot, with incremental inference (``arch="shared"`` only).

    Gives the same decisions as ``run_slot`` with a greedy chooser, at a fraction of the cost
    (see :mod:`~dl2_mesos.policy.dl2.greedy`). The steps carry input vectors and masks only
    when ``record`` is set.
    """
    if cfg.arch != "shared":
        return run_slot(state, cfg, NetChooser.greedy(fast))
    from dl2_mesos.policy.dl2.greedy import run_slot_greedy_fast

    return run_slot_greedy_fast(state, cfg, fast, record=record)


def run_slot_chosen(state: ClusterState, cfg: DL2Config, chooser: NetChooser,
                    record: bool = True) -> tuple[Allocation, list[Step]]:
    """Decide one slot with ``chooser``'s network, rule and generator: the steps and draws of
    ``run_slot(state, cfg, chooser)``, through the incremental loop where it applies (a sampling
    chooser, ``arch="shared"``), which costs a fraction of a forward pass per inference (see
    :mod:`~dl2_mesos.policy.dl2.greedy`). The steps carry input vectors and masks only when
    ``record`` is set (``run_slot`` always keeps them)."""
    if not chooser.sample:
        if chooser.epsilon > 0:
            return run_slot(state, cfg, chooser)
        return run_slot_greedy(state, cfg, chooser.fast, record=record)
    if cfg.arch != "shared":
        return run_slot(state, cfg, chooser)
    from dl2_mesos.policy.dl2.greedy import run_slot_sampled_fast

    return run_slot_sampled_fast(state, cfg, chooser.fast, chooser.rng, chooser.epsilon, record=record)


class NetChooser:
    """Chooses with the actor network: greedy (argmax) or sampled, optionally with exploration.

    Args:
        actor: the policy network; its current weights are copied into :attr:`fast` (a
            :class:`NumpyActor`), which makes every choice: rebuild the chooser after the weights
            change.
        sample: draw from the masked distribution instead of taking the argmax.
        epsilon: probability of replacing the choice by the job-aware fixing action when a
            window job is in a bad state (paper: 0.4; 0 = off).
        seed: seed of the sampling/exploration generator (determinism).
    """

    def __init__(self, actor: Actor, sample: bool = False, epsilon: float = 0.0, seed: int = 0) -> None:
        self.sample = sample
        self.epsilon = epsilon
        self.rng = np.random.default_rng(seed)
        # a numpy copy of the weights: several times faster per inference than a torch forward
        # pass on these tiny inputs (greedy and sampled decisions alike)
        self.fast = NumpyActor(actor)

    @classmethod
    def greedy(cls, fast: NumpyActor) -> NetChooser:
        """A greedy chooser over an existing numpy actor."""
        self = cls.__new__(cls)
        self.sample, self.epsilon = False, 0.0
        self.rng = np.random.default_rng(0)
        self.fast = fast
        return self

    def __call__(self, x: np.ndarray, mask: np.ndarray, ctx: SlotContext, window: np.ndarray) -> int:
        if self.epsilon > 0 and self.rng.random() < self.epsilon:
            a = bad_state_action(ctx, window, mask)
            if a is not None:
                return a
        logits = np.where(mask, self.fast.logits(x), -np.inf)
        if not self.sample:
            return int(logits.argmax())
        return draw_action(logits, self.rng)


def random_chooser(seed: int = 0) -> Chooser:
    """Uniform over the valid actions (the 'random policy' used as a floor in tests)."""
    rng = np.random.default_rng(seed)

    def choose(x: np.ndarray, mask: np.ndarray, ctx: SlotContext, window: np.ndarray) -> int:
        return int(rng.choice(np.flatnonzero(mask)))

    return choose

