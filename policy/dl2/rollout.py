"""Simulated episodes with a DL2 actor, runnable in worker processes.

Workers receive the actor's weights (broadcast by the learner each iteration), run whole
simulations with the sampled (and optionally explored) policy, and send back the inferences
and rewards per slot. Only numpy arrays and plain values cross the process boundary.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from dl2_mesos.allocation import Allocation
from dl2_mesos.policy.dl2.decision_loop import NetChooser, run_slot_chosen, run_slot_greedy
from dl2_mesos.policy.dl2.network import NumpyActor
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.features import input_size
from dl2_mesos.policy.dl2.learner import SlotData, stack_steps
from dl2_mesos.policy.dl2.network import Actor

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class EpisodeSpec:
    """What one worker task simulates."""

    config: dict[str, Any]  # DL2Config.to_dict()
    actor_state: dict[str, Any]  # actor weights (cpu tensors)
    preset: str
    seed: int
    sample: bool = True
    epsilon: float = 0.0
    chooser_seed: int = 0
    max_slots: int | None = None
    record: bool = True
    reward: str = "progress"  # "progress" (paper eq. 1) or "jct" (minus job-slots spent in the system)
    restart_scale: float = 1.0  # multiplies the restart cost charged, not the one shown (a training curriculum)


@dataclass
class EpisodeResult:
    seed: int
    slots: list[SlotData]
    summary: dict[str, Any]
    truncated: bool
    steps: int


def make_sim(preset_name: str, seed: int, max_slots: int | None = None, restart_scale: float = 1.0):
    """A simulator for ``preset_name`` on the trace generated with ``seed``.

    ``NAME@N`` is preset NAME on N nodes (same trace): e.g. ``small@8`` is the ``small`` trace on
    a more contended cluster; ``NAME*K`` has every job K times as long
    (:func:`dl2_mesos.policy.sim.settings.preset`). ``restart_scale`` multiplies the restart cost
    charged, not the one the policy sees (a training curriculum: cheaper restarts make the payoff
    of rescaling easier to find, while the observations stay those of the real cluster).
    """
    from dataclasses import replace

    from dl2_mesos.policy.sim.settings import preset
    from dl2_mesos.policy.sim.simulator import Simulator
    from dl2_mesos.policy.sim.trace import generate_trace

    sc, tc = preset(preset_name)
    if max_slots is not None:
        sc = replace(sc, max_slots=max_slots)
    if restart_scale != 1.0:
        sc = replace(sc, restart_charge_scale=restart_scale)
    return Simulator(sc, generate_trace(tc, seed), seed=seed)


def jct_reward(state, outcome, slot_seconds: float, end_times) -> float:
    """Minus the job-slots spent in the system during the slot (Little's law: summed over an
    episode it is minus the sum of JCTs, in slots). A job finishing mid-slot counts the
    fraction of the slot it was still there; ``end_times`` maps finished jobs to end times."""
    gone = 0.0
    for jid in outcome.finished:
        gone += 1.0 - min(1.0, max(0.0, (end_times[jid] - state.now) / slot_seconds))
    return -(len(state.jobs) - gone)


def init_worker() -> None:
    """Process initialiser: one torch thread per worker (tiny tensors; avoid contention)."""
    torch.set_num_threads(1)


class WorkerPool:
    """Spawned worker processes kept for a whole training run (RL episodes, teacher labels);
    ``workers`` 0: everything runs in this process."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.pool = mp.get_context("spawn").Pool(workers, initializer=init_worker) if workers > 0 else None

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``fn`` over ``items``, results in ``items``' order (one item per task: their costs
        differ by orders of magnitude)."""
        if self.pool is None:
            return [fn(x) for x in items]
        return self.pool.map(fn, items, chunksize=1)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool.join()
            self.pool = None


def run_episode(spec: EpisodeSpec) -> EpisodeResult:
    """Simulate one trace with the given weights; returns per-slot data and the run summary."""
    cfg = DL2Config.from_dict(spec.config)
    actor = Actor(cfg)
    actor.load_state_dict(spec.actor_state)
    actor.eval()
    chooser = NetChooser(actor, sample=spec.sample, epsilon=spec.epsilon, seed=spec.chooser_seed)
    fast = NumpyActor(actor)
    sim = make_sim(spec.preset, spec.seed, spec.max_slots, restart_scale=spec.restart_scale)
    D, A = input_size(cfg.window, cfg.arch, cfg.features), cfg.num_actions
    slots: list[SlotData] = []
    n_steps = 0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        state = sim.state()
        while not sim.done:
            if state.jobs:
                with torch.inference_mode():
                    if spec.sample or spec.epsilon > 0:
                        alloc, steps = run_slot_chosen(state, cfg, chooser, record=spec.record)
                    else:  # greedy evaluation: the fast incremental path DL2Policy uses
                        alloc, steps = run_slot_greedy(state, cfg, fast, record=spec.record)
            else:
                alloc, steps = Allocation(), []
            totals = {j.job_id: j.spec.epochs for j in state.jobs}
            out = sim.step(alloc)
            n_steps += len(steps)
            if spec.record:
                f, m, a = stack_steps(steps, D, A)
                job_rewards = {k: v / totals[k] for k, v in out.epochs.items() if k in totals}
                r = out.reward
                if spec.reward == "jct":
                    r = jct_reward(state, out, sim.config.slot_seconds, sim.end_times(out.finished))
                slots.append(SlotData(f, m, a, tuple(s.job_id for s in steps), r, job_rewards))
            state = sim.state()
    finally:
        torch.set_num_threads(threads)
    metrics = sim.metrics("dl2")
    summary = metrics.summary()
    return EpisodeResult(spec.seed, slots, summary, bool(summary.get("truncated", False)), n_steps)


def actor_state(actor: Actor) -> dict[str, Any]:
    """Detached CPU copy of the actor's weights, for broadcasting to workers."""
    return {k: v.detach().cpu().clone() for k, v in actor.state_dict().items()}


def mean_of(results: list[EpisodeResult], key: str) -> float:
    vals = [r.summary[key] for r in results if key in r.summary]
    return float(np.mean(vals)) if vals else float("nan")
