"""Policy iteration by rollouts (expert iteration): RL that distils a search in the simulator.

Each iteration: (1) for every training preset, ``traces_per_preset`` training traces are run
under the *improved* policy of the current network
(:class:`~dl2_mesos.policy.dl2.rollout_teacher.RolloutImprover`: per slot, the best of the
greedy and sampled decisions, judged by simulating ``horizon`` slots after each); every
decision step of those runs is labelled with the improved policy's choice, the way the
supervised warm-up labels a teacher's (:func:`~dl2_mesos.policy.dl2.supervised.teacher_steps`);
(2) the actor is trained by cross entropy on the labels of the last ``keep`` iterations, a
slot where the search beat greedy counting ``improved_weight`` times (most slots only repeat
what the network already does); (3) the greedy network is validated and the best checkpoint
kept. The improvement step needs nothing but the simulator's reward (avg JCT), so this is
reinforcement learning with the simulator as the model, like the actor-critic of
:mod:`~dl2_mesos.policy.dl2.trainer` but with an exact comparison of a slot's alternatives on
one future in place of a noisy gradient estimate over whole episodes.

Outputs in ``out_dir``, in the RL run's formats (so the same curves and tools read them):
``validation.csv`` (iteration, wall_s, preset, avg_jct), ``log.csv`` (one row per iteration),
``best.pt``, ``last.pt``, ``references.json`` and ``curve_wall.png``.
"""

from __future__ import annotations

import csv
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dl2_mesos.allocation import Allocation
from dl2_mesos.errors import ConfigError
from dl2_mesos.policy.dl2.checkpoint import load_checkpoint, save_checkpoint
from dl2_mesos.policy.dl2.features import input_size
from dl2_mesos.policy.dl2.learner import SlotData, stack_steps
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.network import ActorCritic
from dl2_mesos.policy.dl2.rollout import WorkerPool, actor_state, make_sim
from dl2_mesos.policy.dl2.rollout_teacher import RolloutImprover
from dl2_mesos.policy.dl2.supervised import SLConfig, teacher_steps, train_supervised
from dl2_mesos.policy.dl2.trainer import (
    TRAIN_SEEDS,
    VALIDATION_SEEDS,
    validation_score,
    evaluate_greedy_by_preset,
    plot_wall_curve,
    reference_jcts,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PIConfig:
    """Settings of a policy-iteration run (see the module docstring)."""

    presets: tuple[str, ...] = ("testbed-rho2",)
    iterations: int = 10
    traces_per_preset: int = 2
    candidates: int = 8
    horizon: int = 30
    #: one-job edits of the greedy decision searched besides the samples (0: samples only)
    edits: int = 0
    epochs: int = 3
    lr: float = 5e-4
    batch_size: int = 256
    keep: int = 3
    improved_weight: int = 8
    train_seeds: tuple[int, ...] = TRAIN_SEEDS
    val_seeds: tuple[int, ...] = VALIDATION_SEEDS
    references: tuple[str, ...] = ("drf", "optimus", "srtf-gain")
    max_slots: int | None = None
    workers: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.presets:
            raise ConfigError("policy iteration needs at least one training preset")
        for name, value, low in (("iterations", self.iterations, 1), ("traces_per_preset", self.traces_per_preset, 1),
                                 ("candidates", self.candidates, 2), ("horizon", self.horizon, 1), ("edits", self.edits, 0),
                                 ("epochs", self.epochs, 1), ("batch_size", self.batch_size, 1),
                                 ("keep", self.keep, 1), ("improved_weight", self.improved_weight, 1),
                                 ("workers", self.workers, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
        if not (isinstance(self.lr, (int, float)) and np.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"lr must be a finite number > 0, got {self.lr!r}")
        if not self.train_seeds or not self.val_seeds:
            raise ConfigError("policy iteration needs training and validation seeds")
        if set(self.train_seeds) & set(self.val_seeds):
            raise ConfigError("training and validation seeds overlap: "
                              f"{sorted(set(self.train_seeds) & set(self.val_seeds))[:5]}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["train_seeds"] = [min(self.train_seeds), max(self.train_seeds)]
        return d


@dataclass(frozen=True)
class ImproveSpec:
    """One training trace to run under the improved policy (a worker task)."""

    preset: str
    seed: int
    config: dict[str, Any]  # DL2Config.to_dict()
    actor: dict[str, Any]  # the actor's weights
    candidates: int
    horizon: int
    chooser_seed: int
    improved_weight: int = 1
    max_slots: int | None = None
    edits: int = 0


@dataclass(frozen=True)
class ImprovedTrace:
    """The labelled slots of one improved run (improved slots repeated ``improved_weight``
    times), its avg JCT (s), and how many of its decided slots the search changed."""

    slots: list[SlotData]
    avg_jct: float
    improved: int
    decided: int


def improve_trace(spec: ImproveSpec) -> ImprovedTrace:
    """Run one training trace under the improved policy and label every decision step."""
    cfg = DL2Config.from_dict(spec.config)
    with torch.random.fork_rng():  # building the network must not move the caller's seed
        net = ActorCritic(cfg)
    net.actor.load_state_dict(spec.actor)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        sim = make_sim(spec.preset, spec.seed, spec.max_slots)
        improver = RolloutImprover(sim, cfg, net.actor, spec.candidates, spec.horizon, spec.chooser_seed,
                                   spec.edits)
        D, A = input_size(cfg.window, cfg.arch, cfg.features), cfg.num_actions
        slots: list[SlotData] = []
        state = sim.state()
        while not sim.done:
            improver.last_improved = False
            if state.jobs:
                # the loop's canonical path to the improved allocation (label_running: the
                # search may change running jobs too)
                alloc, steps = teacher_steps(state, cfg, improver, label_running=True)
            else:
                alloc, steps = Allocation(), []
            out = sim.step(alloc)
            f, m, a = stack_steps(steps, D, A)
            slot = SlotData(f, m, a, tuple(s.job_id for s in steps), out.reward)
            slots.extend([slot] * (spec.improved_weight if improver.last_improved else 1))
            state = sim.state()
    finally:
        torch.set_num_threads(threads)
    return ImprovedTrace(slots, float(sim.metrics("dl2").avg_jct), improver.improved, improver.decided)


def run_policy_iteration(
    out_dir: str | Path,
    cfg: PIConfig,
    init: str | Path,
    progress: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Policy iteration from the checkpoint ``init``; writes the outputs named in the module
    docstring under ``out_dir``. Returns a summary (best validation score, its iteration,
    wall time)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    net = load_checkpoint(init).net
    presets = list(cfg.presets)
    rng = np.random.default_rng(cfg.seed)
    runner = WorkerPool(cfg.workers)
    t0 = time.time()
    fields = ["iteration", "wall_s", "improved_avg_jct", "improved_slots", "decided_slots", "samples", "loss",
              "accuracy", "val_score"]
    history: list[list[list[SlotData]]] = []
    best_it = 0
    try:
        if cfg.references:
            refs = reference_jcts(presets, cfg.val_seeds, cfg.references, cfg.max_slots)
            (out / "references.json").write_text(json.dumps(refs, indent=1))
        base = evaluate_greedy_by_preset(net, presets, cfg.val_seeds, runner, cfg.max_slots)
        best = validation_score(base, base)
        meta = {"init": str(init), "pi_config": cfg.to_dict(), "val_base": base}
        save_checkpoint(out / "best.pt", net, meta={**meta, "iteration": 0, "val_avg_jct": best})
        with open(out / "validation.csv", "w") as vf:
            vf.write("iteration,wall_s,preset,avg_jct\n")
            for p, v in base.items():
                vf.write(f"0,{time.time() - t0:.1f},{p},{v:.1f}\n")
        with open(out / "log.csv", "w", newline="") as fh:
            log = csv.DictWriter(fh, fieldnames=fields)
            log.writeheader()
            log.writerow({"iteration": 0, "wall_s": round(time.time() - t0, 1), "val_score": best})
            for it in range(1, cfg.iterations + 1):
                sd = actor_state(net.actor)
                specs = [ImproveSpec(p, int(rng.choice(cfg.train_seeds)), net.cfg.to_dict(), sd, cfg.candidates,
                                     cfg.horizon, int(cfg.seed * 100003 + it * 101 + k), cfg.improved_weight,
                                     cfg.max_slots, cfg.edits)
                         for k, p in enumerate(p for p in presets for _ in range(cfg.traces_per_preset))]
                runs = runner.map(improve_trace, specs)
                history = [*history, [r.slots for r in runs]][-cfg.keep:]
                episodes = [ep for batch in history for ep in batch]
                stats = train_supervised(net, episodes, SLConfig(lr=cfg.lr, batch_size=cfg.batch_size,
                                                                 epochs=cfg.epochs, seed=cfg.seed * 1009 + it))[-1]
                vals = evaluate_greedy_by_preset(net, presets, cfg.val_seeds, runner, cfg.max_slots)
                score = validation_score(vals, base)
                wall = round(time.time() - t0, 1)
                with open(out / "validation.csv", "a") as vf:
                    for p, v in vals.items():
                        vf.write(f"{it},{wall},{p},{v:.1f}\n")
                row = {"iteration": it, "wall_s": wall,
                       "improved_avg_jct": round(float(np.mean([r.avg_jct for r in runs])), 1),
                       "improved_slots": sum(r.improved for r in runs), "decided_slots": sum(r.decided for r in runs),
                       "samples": int(sum(len(s) for ep in episodes for s in ep)),
                       "loss": round(stats["loss"], 5), "accuracy": round(stats["accuracy"], 4),
                       "val_score": round(score, 5)}
                log.writerow(row)
                fh.flush()
                logger.info("iteration %d: validation %s (score %.4f)", it, vals, score)
                if score < best:
                    best, best_it = score, it
                    save_checkpoint(out / "best.pt", net, meta={**meta, "iteration": it, "val_avg_jct": score,
                                                                "wall_s": wall})
                save_checkpoint(out / "last.pt", net, meta={**meta, "iteration": it, "val_avg_jct": score,
                                                            "wall_s": wall})
                if progress is not None:
                    progress(it, row)
    finally:
        runner.close()
    if (out / "references.json").is_file():
        plot_wall_curve(out / "validation.csv", out / "references.json", out / "curve_wall.png")
    return {"best_val_score": best, "best_iteration": best_it, "wall_s": time.time() - t0,
            "iterations": cfg.iterations}

