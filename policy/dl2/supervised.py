"""Supervised warm-up: imitate a baseline scheduler's decisions (paper section 4.2).

Labels. A teacher (DRF by default; any registry policy) returns target counts for a slot. The
DL2 decision loop cannot express targets directly, so they are turned into an action sequence
by diffing them against the slot's starting counts (see :mod:`~dl2_mesos.policy.dl2.slot`):
window by window, for each job in arrival order, ``min(dPS, dW)`` bundle actions, then the
remaining worker actions, then the remaining PS actions -- each labelled in the state reached
so far -- and finally the **void** action for the window (the prototype never labelled void,
so its network could not learn when to stop). Increments that are masked
(caps, no fit) are skipped.

With ``start="current"`` only jobs that run nothing at the slot start get increments by
default (``label_running=False``): the teacher rebuilds every slot, and copying its changes to
running jobs would teach restarts (each costs the job ``restart_seconds``).

The simulation then advances with the allocation the labels produce (the states the learner
will itself visit), and every labelled state also gets the slot's discounted return, which
warms up the critic. DAgger rounds (``run_sl(dagger_rounds=...)``) then let the trained student
drive the simulation while the teacher keeps labelling, and retrain on all labels so far.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from dl2_mesos.allocation import Allocation
from dl2_mesos.cluster import ClusterState
from dl2_mesos.policy.dl2.decision_loop import Step, run_slot
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.learner import SlotData, stack_steps
from dl2_mesos.policy.dl2.network import ActorCritic, NumpyActor, masked_log_probs
from dl2_mesos.policy.dl2.features import input_size
from dl2_mesos.policy.dl2.slot import BUNDLE, PAUSE, PS, SHRINK_PS, SHRINK_WORKER, WORKER, SlotContext
from dl2_mesos.policy_api import Policy

logger = logging.getLogger(__name__)


def teacher_steps(state: ClusterState, cfg: DL2Config, teacher: Policy, label_running: bool = False):
    """Label one slot with ``teacher``'s decision; returns (allocation reached, steps).

    The slot's decision loop is run with the teacher's next action
    (:func:`teacher_next_action`) as the choice at every state. Per window: with the
    ``elastic`` actions, first every shrink the target asks for (pause when the target is zero,
    else -worker / -PS), so the capacity they free is there for the grows; then per job in
    window order the start (bundle action) of a job that runs nothing, and the increments
    (bundles, then workers, then PS); then void. ``label_running=False`` labels only jobs that
    run nothing at the slot start (always True with ``elastic``).
    """
    target = teacher.decide(state)
    return run_slot(state, cfg, lambda x, mask, ctx, window: teacher_next_action(ctx, window, mask, target,
                                                                                   label_running))


def teacher_next_action(ctx: SlotContext, window: np.ndarray, mask: np.ndarray, target: Allocation,
                        label_running: bool = False) -> int:
    """The teacher's next action in the window from the slot's current (partial) state: the
    first step, in :func:`teacher_steps`'s order, that moves a job towards ``target`` and is
    valid now (shrinks and pauses first, then per job its start and increments); void when
    none is."""
    K = ctx.K
    elastic = ctx.elastic
    ids = ctx.job_ids
    if elastic:
        for col, i in enumerate(window):
            t = target.get_counts(ids[i])
            p, w = int(ctx.ps[i]), int(ctx.w[i])
            if t.is_zero:
                if (p or w) and mask[K * col + PAUSE]:
                    return K * col + PAUSE
                continue
            if t.num_workers < w and mask[K * col + SHRINK_WORKER]:
                return K * col + SHRINK_WORKER
            if t.num_ps < p and mask[K * col + SHRINK_PS]:
                return K * col + SHRINK_PS
    for col, i in enumerate(window):
        if not (label_running or elastic) and (ctx.ps0[i] or ctx.w0[i]):
            continue
        t = target.get_counts(ids[i])
        if t.is_zero:
            continue
        p, w = int(ctx.ps[i]), int(ctx.w[i])
        if p == 0 and w == 0:
            if mask[K * col + BUNDLE]:
                return K * col + BUNDLE
            continue
        dp, dw = t.num_ps - p, t.num_workers - w
        kinds = (BUNDLE, WORKER, PS) if dp > 0 and dw > 0 else (WORKER,) if dw > 0 else (PS,) if dp > 0 else ()
        for k in kinds:
            if mask[K * col + k]:
                return K * col + k
    return ctx.cfg.void


def student_steps(state: ClusterState, cfg: DL2Config, teacher: Policy, student: NumpyActor,
                  label_running: bool = False) -> tuple[Allocation, list[Step]]:
    """DAgger inside the slot: the student takes its own (greedy) actions through the slot's
    decision loop, and every state it reaches is labelled with the teacher's next action from
    there (:func:`teacher_next_action`), so it also learns what to do after its own mistakes
    within a slot (a wrong grow, an early void). Returns the student's allocation and the
    labelled steps."""
    target = teacher.decide(state)
    steps: list[Step] = []

    def choose(x: np.ndarray, mask: np.ndarray, ctx: SlotContext, window: np.ndarray) -> int:
        label = teacher_next_action(ctx, window, mask, target, label_running)
        job_id = None if label == cfg.void else ctx.job_ids[int(window[label // ctx.K])]
        steps.append(Step(x.copy(), mask.copy(), label, job_id))
        return int(np.where(mask, student.logits(x), -np.inf).argmax())

    alloc, _ = run_slot(state, cfg, choose)
    return alloc, steps


def collect_teacher_episode(sim, cfg: DL2Config, teacher: Policy, label_running: bool = False,
                            driver: Policy | None = None, within_slot: NumpyActor | None = None) -> list[SlotData]:
    """Run one simulation under the teacher's labels; one SlotData per slot.

    ``driver`` (DAgger): the simulation advances with the driver's decisions -- typically the
    student being trained -- while every visited state is still labelled by the teacher, so the
    student learns what to do in the states its own mistakes lead to. The slot's reward is the
    driver's. ``within_slot`` (a student's numpy actor): the student also decides inside each
    slot and the states it reaches there are labelled (:func:`student_steps`); its allocation
    drives the run.
    """
    D, A = input_size(cfg.window, cfg.arch, cfg.features), cfg.num_actions
    state = sim.reset()
    slots: list[SlotData] = []
    while not sim.done:
        if state.jobs and within_slot is not None:
            alloc, steps = student_steps(state, cfg, teacher, within_slot, label_running)
        elif state.jobs:
            alloc, steps = teacher_steps(state, cfg, teacher, label_running)
            if driver is not None:
                alloc = driver.decide(state)
        else:
            alloc, steps = Allocation(), []
        out = sim.step(alloc)
        f, m, a = stack_steps(steps, D, A)
        slots.append(SlotData(f, m, a, tuple(s.job_id for s in steps), out.reward))
        state = sim.state()
    return slots


@dataclass(frozen=True)
class SLConfig:
    """Supervised warm-up settings (paper: Adam lr 0.005, batch 256; 0.001 is steadier here)."""

    lr: float = 1e-3
    batch_size: int = 256
    epochs: int = 30
    gamma: float = 0.9
    train_critic: bool = True
    seed: int = 0
    #: weight of a label that pauses or shrinks a job in the loss (1 = plain cross entropy):
    #: those labels are rare (about 2% of them) and the student misses most pauses
    shrink_weight: float = 1.0


def discounted(rewards: Sequence[float], gamma: float) -> np.ndarray:
    g = np.zeros(len(rewards))
    acc = 0.0
    for t in reversed(range(len(rewards))):
        acc = rewards[t] + gamma * acc
        g[t] = acc
    return g


def train_supervised(
    net: ActorCritic,
    episodes: Sequence[Sequence[SlotData]],
    cfg: SLConfig,
    progress: Callable[[int, dict[str, float]], None] | None = None,
) -> list[dict[str, float]]:
    """Cross-entropy training of the actor on teacher labels (+ critic on returns).

    Returns per-epoch stats (``loss``: mean cross entropy, ``accuracy``: argmax agreement,
    ``value_loss``).
    """
    feats, masks, acts, rets = [], [], [], []
    for ep in episodes:
        g = discounted([s.reward for s in ep], cfg.gamma)
        for t, s in enumerate(ep):
            if len(s):
                feats.append(s.features)
                masks.append(s.masks)
                acts.append(s.actions)
                rets.append(np.full(len(s), g[t], np.float32))
    if not feats:
        raise ValueError("no labelled samples: the teacher made no decision the loop could express")
    X = torch.from_numpy(np.concatenate(feats))
    M = torch.from_numpy(np.concatenate(masks))
    Y = torch.from_numpy(np.concatenate(acts))
    G = torch.from_numpy(np.concatenate(rets))
    n = len(Y)
    shrink_weight = None if cfg.shrink_weight == 1.0 else float(cfg.shrink_weight)
    kind = torch.remainder(Y, net.cfg.per_job)
    shrink_label = (Y != net.cfg.void) & ((kind == SHRINK_WORKER) | (kind == SHRINK_PS) | (kind == PAUSE))
    gen = torch.Generator().manual_seed(cfg.seed)
    opt_a = torch.optim.Adam(net.actor.parameters(), lr=cfg.lr)
    opt_c = torch.optim.Adam(net.critic.parameters(), lr=cfg.lr)
    history = []
    net.train()
    for epoch in range(cfg.epochs):
        perm = torch.randperm(n, generator=gen)
        tot = {"loss": 0.0, "accuracy": 0.0, "value_loss": 0.0}
        for k in range(0, n, cfg.batch_size):
            idx = perm[k : k + cfg.batch_size]
            x, m, y = X[idx], M[idx], Y[idx]
            logits = net.actor(x)
            logp = masked_log_probs(logits, m)
            if shrink_weight is None:
                loss = nn.functional.nll_loss(logp, y)
            else:
                wts = torch.where(shrink_label[idx], shrink_weight, 1.0)
                loss = (nn.functional.nll_loss(logp, y, reduction="none") * wts).sum() / wts.sum()
            opt_a.zero_grad()
            loss.backward()
            opt_a.step()
            tot["loss"] += loss.item() * len(idx)
            tot["accuracy"] += float((logp.argmax(1) == y).float().sum())
            if cfg.train_critic:
                vl = nn.functional.mse_loss(net.critic(x), G[idx])
                opt_c.zero_grad()
                vl.backward()
                opt_c.step()
                tot["value_loss"] += vl.item() * len(idx)
        stats = {k: v / n for k, v in tot.items()}
        stats["samples"] = float(n)
        history.append(stats)
        if progress is not None:
            progress(epoch, stats)
    net.eval()
    return history
