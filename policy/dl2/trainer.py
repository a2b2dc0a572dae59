"""Training drivers: supervised warm-up and actor-critic RL in the simulator.

RL loop (synchronous, A2C-like, paper section 4.3): each iteration the learner broadcasts the
actor's weights to ``workers`` processes, each simulates one training trace with the sampled
policy and job-aware exploration, the trajectories go into the replay buffer, and the learner
makes ``updates_per_iteration`` mini-batch updates. Every ``eval_every`` iterations the greedy
policy is run on validation seeds (disjoint from training and evaluation seeds) and the best
model so far is saved as ``best.pt``; ``last.pt`` (with optimiser state) allows ``--resume``.
Logs: ``log.csv`` (one row per iteration), optional TensorBoard, ``curve.png``.
"""

from __future__ import annotations

import csv
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dl2_mesos.allocation import Allocation
from dl2_mesos.errors import ConfigError
from dl2_mesos.policy.dl2.checkpoint import load_checkpoint, save_checkpoint
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.learner import Learner, LearnerConfig, SlotData
from dl2_mesos.policy.dl2.network import ActorCritic
from dl2_mesos.policy.dl2.rollout import EpisodeSpec, WorkerPool, actor_state, make_sim, run_episode
from dl2_mesos.policy.dl2.supervised import SLConfig, train_supervised
from dl2_mesos.policy.dl2.labelling import LabelledTrace, LabelSpec, label_trace
from dl2_mesos.policy.dl2.widen import widen_features

logger = logging.getLogger(__name__)

#: Seed ranges: training traces, validation (model selection), evaluation (reported results).
TRAIN_SEEDS = tuple(range(1, 101))
VALIDATION_SEEDS = (1001, 1002)
EVALUATION_SEEDS = tuple(range(101, 111))


@dataclass(frozen=True)
class RLConfig:
    """RL run settings."""

    preset: str = "reference"
    iterations: int = 100
    workers: int = 2
    episodes_per_iteration: int = 2
    updates_per_iteration: int = 16
    epsilon: float = 0.4  # job-aware exploration (0 = the ablation without it)
    train_seeds: tuple[int, ...] = TRAIN_SEEDS
    eval_seeds: tuple[int, ...] = VALIDATION_SEEDS
    eval_every: int = 5
    max_slots: int | None = None
    seed: int = 0
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    tensorboard: bool = False
    #: slot reward: "progress" (paper eq. 1: epochs trained / total epochs, summed over jobs) or
    #: "jct" (minus the job-slots spent in the system: its episode sum is minus the sum of JCTs)
    reward: str = "progress"
    #: all episodes of an iteration on one trace (needed by the input-dependent baseline)
    same_trace: bool = False
    #: reference policies whose validation avg JCT is drawn as lines on the learning curve
    references: tuple[str, ...] = ("drf", "optimus", "srtf-gain")
    #: roll back on a regression: when a validation score is more than this fraction above the
    #: best so far (e.g. 0.15), the weights and optimiser state go back to the best validation
    #: point and the actor's learning rate is multiplied by ``rollback_lr_factor``; 0: off (the
    #: run only keeps its best checkpoint)
    rollback: float = 0.0
    rollback_lr_factor: float = 0.5
    #: multiplies every job's restart cost in the training episodes (not in validation, which
    #: picks the best checkpoint under the real cost): a curriculum toward rescaling; 1 = off
    restart_scale: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.restart_scale <= 1.0:
            raise ConfigError(f"restart_scale must be in [0, 1], got {self.restart_scale}")
        if self.rollback < 0:
            raise ConfigError(f"rollback must be >= 0, got {self.rollback}")
        if not 0.0 < self.rollback_lr_factor <= 1.0:
            raise ConfigError(f"rollback_lr_factor must be in (0, 1], got {self.rollback_lr_factor}")
        if self.learner.elite and not (self.same_trace and self.episodes_per_iteration >= 2):
            raise ConfigError("elite self-imitation compares rollouts on one trace: it needs same_trace and "
                              f"at least 2 episodes per iteration (got {self.episodes_per_iteration})")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["train_seeds"] = [min(self.train_seeds), max(self.train_seeds)] if self.train_seeds else []
        return d


def reference_jcts(presets: Sequence[str], seeds: Sequence[int], names: Sequence[str],
                   max_slots: int | None = None) -> dict[str, dict[str, float]]:
    """Mean avg JCT (s) of baseline policies and of the no-queueing lower bound on ``seeds``, per
    preset: the reference lines of the learning curve."""
    from dl2_mesos.policy.registry import make_policy
    from dl2_mesos.policy.sim.bounds import avg_jct_lower_bound

    out: dict[str, dict[str, float]] = {}
    for p in presets:
        row: dict[str, float] = {}
        for name in names:
            jcts = []
            for s in seeds:
                sim = make_sim(p, int(s), max_slots)
                pol = make_policy(name)
                state = sim.state()
                while not sim.done:
                    sim.step(pol.decide(state) if state.jobs else Allocation())
                    state = sim.state()
                jcts.append(sim.metrics(name).avg_jct)
            row[name] = float(np.mean(jcts))
        bounds = []
        for s in seeds:
            sim = make_sim(p, int(s), max_slots)
            bounds.append(avg_jct_lower_bound(sim.config, sim.trace))
        row["bound"] = float(np.mean(bounds))
        out[p] = row
    return out


def presets_of(preset: str) -> list[str]:
    """The presets named by ``preset``: one name or a comma-separated mix (``reference,small``)."""
    names = [p.strip() for p in preset.split(",") if p.strip()]
    if not names:
        raise ValueError(f"no preset named in {preset!r}")
    return names


def evaluate_greedy(net: ActorCritic, preset: str, seeds: Sequence[int], runner: WorkerPool,
                    max_slots: int | None = None) -> float:
    """Mean average JCT (s) of the greedy policy over ``seeds`` (one preset)."""
    return evaluate_greedy_by_preset(net, [preset], seeds, runner, max_slots)[preset]


def evaluate_greedy_by_preset(net: ActorCritic, presets: Sequence[str], seeds: Sequence[int], runner: WorkerPool,
                              max_slots: int | None = None) -> dict[str, float]:
    """Mean average JCT (s) of the greedy policy over ``seeds``, for each preset."""
    sd = actor_state(net.actor)
    specs = [EpisodeSpec(net.cfg.to_dict(), sd, p, s, sample=False, max_slots=max_slots, record=False)
             for p in presets for s in seeds]
    res = runner.map(run_episode, specs)
    n = len(seeds)
    return {p: float(np.mean([r.summary["avg_jct"] for r in res[k * n:(k + 1) * n]])) for k, p in enumerate(presets)}


def validation_score(vals: dict[str, float], base: dict[str, float]) -> float:
    """Model-selection score: the avg JCT itself for one preset; for a mix, the mean over presets
    of avg JCT relative to the starting model's (1.0 = as good as the start), so that the large
    preset's seconds do not drown the small one's."""
    if len(vals) == 1:
        return next(iter(vals.values()))
    return float(np.mean([vals[p] / base[p] for p in vals]))


def run_rl(
    out_dir: str | Path,
    cfg: RLConfig,
    model_cfg: DL2Config | None = None,
    init: str | Path | None = None,
    resume: bool = False,
    progress: Callable[[int, dict[str, float]], None] | None = None,
    features: str | None = None,
) -> dict[str, Any]:
    """Train with RL; writes log.csv, last.pt, best.pt and curve.png under ``out_dir``.

    Args:
        init: checkpoint to start from (e.g. the supervised warm-up); None = random weights.
        resume: continue from ``out_dir/last.pt`` (weights, optimiser, iteration count). The
            traces drawn after a resume come from a generator seeded with ``seed`` plus the
            iteration resumed at, so a resumed run is one more run of the recipe from that
            point, not the uninterrupted run's continuation (measured: the same validation
            to the digit until the resume, another curve after it).
        features: with ``init``, the feature set to train on when it extends the checkpoint's
            (:func:`~dl2_mesos.policy.dl2.widen.widen_features`: it starts deciding as before).
    Returns a summary: ``best_val_avg_jct`` (the best :func:`validation_score`: an avg JCT in
    seconds for one preset, the mean ratio to the start for a mix), ``best_iteration``,
    ``wall_s`` and ``iterations``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    start_it, optim_state, best, best_it = 0, None, float("inf"), 0
    meta: dict[str, Any] = {}
    presets = presets_of(cfg.preset)
    base: dict[str, float] = {}
    if resume and (out / "last.pt").is_file():
        lm = load_checkpoint(out / "last.pt")
        net, optim_state = lm.net, lm.optim
        start_it = int(lm.meta.get("iteration", 0))
        best = float(lm.meta.get("best_val_jct", float("inf")))
        if (out / "best.pt").is_file():
            best_it = int(load_checkpoint(out / "best.pt").meta.get("iteration", 0))
        base = dict(lm.meta.get("val_base") or {})
        meta = lm.meta
    elif init is not None:
        net = load_checkpoint(init).net
        meta = {"init": str(init)}
        if features is not None and features != net.cfg.features:
            meta["widened_from"] = net.cfg.features
            net = widen_features(net, features)
    else:
        net = ActorCritic(model_cfg or DL2Config())
    learner = Learner(net, cfg.learner, optim_state)
    # where a rollback returns to: the best validation point (on a resume, best.pt's weights)
    rollback_to = None
    if cfg.rollback > 0 and resume and (out / "best.pt").is_file():
        rollback_to = {**learner.snapshot(), "net": load_checkpoint(out / "best.pt").net.state_dict()}
    runner = WorkerPool(cfg.workers)
    log_path = out / "log.csv"
    new_log = not (resume and log_path.is_file())
    fields = ["iteration", "wall_s", "train_avg_jct", "train_reward", "steps", "samples", "val_avg_jct",
              "policy_loss", "value_loss", "entropy", "entropy_weight", "advantage_abs", "actor_lr", "rolled_back"]
    tb = None
    if cfg.tensorboard:
        try:
            from torch.utils.tensorboard import SummaryWriter

            tb = SummaryWriter(str(out / "tb"))
        except ImportError:
            logger.warning("tensorboard is not installed; logging to CSV only")
    t0 = time.time() - float(meta.get("wall_s", 0.0))
    rng = np.random.default_rng(cfg.seed + start_it)
    try:
        with open(log_path, "w" if new_log else "a", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=fields)
            if new_log:
                w.writeheader()
            if new_log and start_it == 0:
                if cfg.references:
                    refs = reference_jcts(presets, cfg.eval_seeds, cfg.references, cfg.max_slots)
                    (out / "references.json").write_text(json.dumps(refs, indent=1))
                base = evaluate_greedy_by_preset(net, presets, cfg.eval_seeds, runner, cfg.max_slots)
                with open(out / "validation.csv", "w") as vf:
                    vf.write("iteration,wall_s,preset,avg_jct\n")
                    for p_, v_ in base.items():
                        vf.write(f"0,{time.time() - t0:.1f},{p_},{v_:.1f}\n")
                val = best = validation_score(base, base)
                logger.info("validation at the start: %s", base)
                save_checkpoint(out / "best.pt", net, meta={"iteration": 0, "val_avg_jct": val, "val_base": base})
                if cfg.rollback > 0:
                    rollback_to = learner.snapshot()
                w.writerow({"iteration": 0, "wall_s": round(time.time() - t0, 1), "val_avg_jct": val})
                fh.flush()
            for it in range(start_it + 1, cfg.iterations + 1):
                sd = actor_state(net.actor)
                seeds = rng.choice(cfg.train_seeds, size=cfg.episodes_per_iteration)
                if cfg.same_trace:
                    seeds[:] = seeds[0]
                    names = [presets[it % len(presets)]] * len(seeds)
                else:
                    names = [presets[(it * len(seeds) + k) % len(presets)] for k in range(len(seeds))]
                specs = [EpisodeSpec(net.cfg.to_dict(), sd, names[k], int(s),
                                     sample=True, epsilon=cfg.epsilon,
                                     chooser_seed=int(cfg.seed * 100003 + it * 101 + k), max_slots=cfg.max_slots,
                                     reward=cfg.reward, restart_scale=cfg.restart_scale)
                         for k, s in enumerate(seeds)]
                results = runner.map(run_episode, specs)
                if cfg.same_trace:
                    samples = learner.add_trajectories([(r.slots, not r.truncated) for r in results])
                else:
                    samples = sum(learner.add_trajectory(r.slots, terminal=not r.truncated) for r in results)
                stats = learner.update(cfg.updates_per_iteration)
                row: dict[str, Any] = {
                    "iteration": it,
                    "wall_s": round(time.time() - t0, 1),
                    "train_avg_jct": float(np.mean([r.summary["avg_jct"] for r in results])),
                    "train_reward": float(np.mean([sum(s.reward for s in r.slots) for r in results])),
                    "steps": sum(r.steps for r in results),
                    "samples": samples,
                    **{k: round(v, 5) for k, v in stats.items()},
                }
                if it % cfg.eval_every == 0 or it == cfg.iterations:
                    vals = evaluate_greedy_by_preset(net, presets, cfg.eval_seeds, runner, cfg.max_slots)
                    base = base or vals  # resumed from a run that did not record its start
                    val = validation_score(vals, base)
                    logger.info("iteration %d validation: %s", it, vals)
                    with open(out / "validation.csv", "a") as vf:
                        for p_, v_ in vals.items():
                            vf.write(f"{it},{time.time() - t0:.1f},{p_},{v_:.1f}\n")
                    row["val_avg_jct"] = val
                    if val < best:
                        best, best_it = val, it
                        save_checkpoint(out / "best.pt", net, meta={"iteration": it, "val_avg_jct": val,
                                                                      "wall_s": row["wall_s"]})
                        if cfg.rollback > 0:
                            rollback_to = learner.snapshot()
                    elif rollback_to is not None and val > best * (1 + cfg.rollback):
                        lr = learner.restore(rollback_to, cfg.rollback_lr_factor)
                        row["rolled_back"] = 1
                        logger.info("iteration %d: validation %.4g is %.0f%% above the best %.4g: back to the "
                                    "best weights, actor learning rate %.3g", it, val, 100 * (val / best - 1), best, lr)
                row["actor_lr"] = f"{learner.actor_lr:.3g}"
                w.writerow({k: row.get(k, "") for k in fields})
                fh.flush()
                if tb is not None:
                    for k, v in row.items():
                        if isinstance(v, (int, float)) and k != "iteration":
                            tb.add_scalar(k, v, it)
                meta_last = {"iteration": it, "best_val_jct": best, "wall_s": row["wall_s"],
                             "rl_config": cfg.to_dict(), "val_base": base}
                save_checkpoint(out / "last.pt", net, meta=meta_last, optim=learner.optim_state())
                if progress is not None:
                    progress(it, row)
    finally:
        runner.close()
        if tb is not None:
            tb.close()
    plot_curve(log_path, out / "curve.png")
    if (out / "validation.csv").is_file():
        plot_wall_curve(out / "validation.csv", out / "references.json", out / "curve_wall.png")
    return {"best_val_avg_jct": best, "best_iteration": best_it, "wall_s": time.time() - t0,
            "iterations": cfg.iterations}


def run_sl(
    out_path: str | Path,
    model_cfg: DL2Config,
    teacher: str = "drf",
    preset: str = "reference",
    seeds: Sequence[int] = tuple(range(1, 9)),
    sl_cfg: SLConfig | None = None,
    label_running: bool = False,
    max_slots: int | None = None,
    progress: Callable[[int, dict[str, float]], None] | None = None,
    extra: Sequence[tuple[str, Sequence[int]]] = (),
    dagger_rounds: int = 0,
    dagger_epochs: int | None = None,
    init: str | Path | None = None,
    order: str | None = None,
    dagger_within: bool = False,
    prune_growth: bool | None = None,
    workers: int = 0,
    features: str | None = None,
) -> dict[str, Any]:
    """Generate teacher labels on ``seeds`` and train a fresh model on them; saves to ``out_path``.

    ``extra`` adds (preset, seeds) pairs labelled the same way, to train on a mix of cluster
    loads (e.g. ``[("small", range(1, 17))]`` next to the ``reference`` seeds).
    ``init``: continue from this checkpoint's weights (its config wins over ``model_cfg``).
    ``order``: when given, the job order of the model trained (overrides ``init``'s: the order
    does not change the weights' shapes, so a model can be moved to another order and tuned).
    ``prune_growth``: when given, whether the trained model's decision loop masks growth that
    cannot make a job faster (overrides ``init``'s, like ``order``).
    ``features``: with ``init``, a feature set extending the checkpoint's to train on (the
    weights reading the added columns start at zero; :mod:`~dl2_mesos.policy.dl2.widen`).
    ``dagger_rounds``: after the first training, that many DAgger rounds: the student drives
    the same traces, the teacher labels the states it reaches, and training continues on all
    labels collected so far (``dagger_epochs`` epochs per round, default ``sl_cfg.epochs``).
    ``dagger_within``: in those rounds the student also acts inside each slot and every state
    it reaches there is labelled (:func:`~dl2_mesos.policy.dl2.supervised.student_steps`);
    otherwise the teacher labels its own path through the slots the student starts.
    ``workers``: label the traces in that many processes (0 or 1: in this one); the labels and
    the trained weights are the same for any number (:mod:`~dl2_mesos.policy.dl2.labelling`).
    """
    sl_cfg = sl_cfg or SLConfig()
    torch.manual_seed(sl_cfg.seed)
    t0 = time.time()
    start_net = load_checkpoint(init).net if init is not None else None
    if start_net is not None and features is not None:
        start_net = widen_features(start_net, features)
    if start_net is not None:
        model_cfg = start_net.cfg
    if order is not None:
        model_cfg = replace(model_cfg, order=order)
    if prune_growth is not None:
        model_cfg = replace(model_cfg, prune_growth=prune_growth)
    if start_net is not None:
        start_net.cfg = model_cfg
    sources = [(preset, seeds), *extra]
    traces = [(name, int(s)) for name, seed_list in sources for s in seed_list]

    # one pool for the whole run (0 or 1 worker: in this process), started once, not per round
    pool = WorkerPool(min(workers, len(traces)) if workers > 1 else 0)

    def label(student: dict[str, Any] | None = None) -> list[LabelledTrace]:
        specs = [LabelSpec(name, s, model_cfg.to_dict(), teacher, label_running, max_slots, student, dagger_within)
                 for name, s in traces]
        return pool.map(label_trace, specs)

    try:
        episodes: list[list[SlotData]] = [t.slots for t in label()]
        t_data = time.time() - t0
        net = start_net if start_net is not None else ActorCritic(model_cfg)
        hist = train_supervised(net, episodes, sl_cfg, progress)
        first_samples = hist[-1]["samples"]
        rounds = []
        for r in range(dagger_rounds):
            t1 = time.time()
            labelled = label(student=actor_state(net.actor))
            episodes.extend(t.slots for t in labelled)
            jcts = [(name, t.avg_jct) for (name, _), t in zip(traces, labelled)]
            t_data += time.time() - t1
            cfg_r = replace(sl_cfg, epochs=dagger_epochs or sl_cfg.epochs, seed=sl_cfg.seed + r + 1)
            hist = train_supervised(net, episodes, cfg_r, progress)
            by_preset = {n: float(np.mean([j for m, j in jcts if m == n])) for n, _ in sources}
            rounds.append({"round": r + 1, "student_avg_jct": by_preset, "final": hist[-1]})
            logger.info("DAgger round %d: student avg JCT %s; %s", r + 1, by_preset, hist[-1])
    finally:
        pool.close()
    meta = {"phase": "sl", "teacher": teacher, "preset": preset, "seeds": [int(s) for s in seeds],
            "dagger": rounds, "dagger_within": dagger_within, "samples_before_dagger": first_samples,
            "extra": [[n, [int(s) for s in sl]] for n, sl in extra],
            "sl_config": asdict(sl_cfg), "final": hist[-1], "data_s": t_data, "wall_s": time.time() - t0}
    save_checkpoint(out_path, net, meta=meta)
    return meta


def plot_wall_curve(val_csv: str | Path, refs_json: str | Path, png: str | Path) -> None:
    """Validation avg JCT (greedy) against wall time, one panel per preset, with the reference
    policies and the lower bound as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[tuple[float, float]]] = {}
    with open(val_csv, newline="") as fh:
        for row in csv.DictReader(fh):
            series.setdefault(row["preset"], []).append((float(row["wall_s"]), float(row["avg_jct"])))
    refs = json.loads(Path(refs_json).read_text()) if Path(refs_json).is_file() else {}
    fig, axes = plt.subplots(1, len(series), figsize=(6.5 * len(series), 4), squeeze=False)
    for ax, (name, pts) in zip(axes[0], series.items()):
        ax.plot([p[0] / 60 for p in pts], [p[1] for p in pts], marker="o", label="DL2 (greedy, validation)")
        for k, (ref, v) in enumerate(sorted(refs.get(name, {}).items())):
            ax.axhline(v, linestyle="--", color=f"C{k + 1}", label=ref)
        ax.set_xlabel("wall time (min)")
        ax.set_ylabel("average JCT (s)")
        ax.set_title(name)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def plot_curve(log_csv: str | Path, png: str | Path) -> None:
    """Learning curve (train and validation average JCT against iteration) as a PNG.

    Skipped, with a warning, when matplotlib (the ``plot`` extra) is not installed."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        logger.warning("no learning-curve plot %s: matplotlib is not installed (pip install 'dl2-mesos[plot]')", png)
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    its, tr, vits, val = [], [], [], []
    with open(log_csv, newline="") as fh:
        for row in csv.DictReader(fh):
            if row.get("train_avg_jct"):
                its.append(int(row["iteration"]))
                tr.append(float(row["train_avg_jct"]))
            if row.get("val_avg_jct"):
                vits.append(int(row["iteration"]))
                val.append(float(row["val_avg_jct"]))
    fig, ax = plt.subplots(figsize=(7, 4))
    if its:
        ax.plot(its, tr, label="training episodes (sampled + exploration)", alpha=0.6)
    if vits:
        ax.plot(vits, val, marker="o", label="validation (greedy)")
    ax.set_xlabel("iteration")
    ax.set_ylabel("average JCT (s)")
    ax.set_title("DL2 RL learning curve")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
