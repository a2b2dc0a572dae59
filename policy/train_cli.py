"""``dl2 train sl|rl`` and ``dl2 evaluate``: train the DL2 policy and compare it on held-out seeds."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click

from dl2_mesos.errors import CheckpointError, ConfigError, Dl2Error
from dl2_mesos.cli_params import FiniteFloatRange, output_file, output_folder
from dl2_mesos.policy.simulate_cli import trace_source_options, trace_source_preset

logger = logging.getLogger(__name__)


def _seeds(text: str, hint: str) -> list[int]:
    from dl2_mesos.policy.simulate_cli import parse_seeds

    try:
        return parse_seeds(text)
    except click.BadParameter as exc:
        raise click.BadParameter(exc.message, param_hint=hint) from None


def validation_text(score: float, mix: bool) -> str:
    """A validation score as words: one preset's score is its avg JCT; a mix's is the mean over
    its presets of avg JCT relative to the starting model's (``trainer.validation_score``)."""
    return f"{score:.4f} of the start" if mix else f"avg JCT {score:.0f} s"


def _model_options(f):
    f = click.option("--window", type=click.IntRange(min=1), default=40, show_default=True,
                     help="J: jobs per window (actions 3J+1).")(f)
    f = click.option("--hidden", type=click.IntRange(min=1), default=256, show_default=True)(f)
    f = click.option("--layers", type=click.IntRange(min=1), default=2, show_default=True)(f)
    f = click.option("--arch", type=click.Choice(["shared", "flat"]), default="shared", show_default=True,
                     help="shared: per-job MLP with shared weights; flat: the paper's MLP over the whole window.")(f)
    f = click.option("--start", type=click.Choice(["current", "zero"]), default="current", show_default=True,
                     help="Slot starts from the running counts (current) or from nothing (zero, the reference).")(f)
    f = click.option("--actions", type=click.Choice(["grow", "elastic"]), default="elastic", show_default=True,
                     help="grow: +worker/+PS/+bundle per job (3J+1); elastic: also -worker/-PS/pause (6J+1).")(f)
    f = click.option("--features", type=click.Choice(["base", "gains"]), default=None,
                     help="Per-job inputs: base (23 columns; the default for a new model), or gains: also the "
                          "speed-ups growing the job would give it by the speed table (27). With --init: the "
                          "checkpoint's unless given; gains on a base checkpoint widens it (the new inputs start "
                          "at zero weight, so it first decides as before).")(f)
    return f


def _order_option(f):
    return click.option("--order", type=click.Choice(["arrival", "priority"]), default=None,
                        help="Order the loop sees the jobs in (windows, starters): priority (shortest estimated "
                             "remaining time, windows filled from both ends; the default for a new model) or "
                             "arrival. With --init: the checkpoint's unless given.")(f)


def _prune_option(f):
    return click.option("--prune-growth/--no-prune-growth", default=None,
                        help="Mask grow actions that cannot make a job faster by the measured speed table "
                             "(no size at or beyond the grown one is faster). Default: off for a new model; "
                             "with --init the checkpoint's unless given.")(f)


@click.group()
def train() -> None:
    """Train the DL2 policy: `sl` (supervised warm-up), then `rl` (actor-critic)."""


@train.command("sl")
@click.option("--teacher", default="drf", show_default=True,
              help="Policy to imitate: any registry baseline, srpt-elastic (the elastic SRPT teacher) or srpt-elastic-a1 "
                   "(the same with alpha 1), srpt-elastic-min (alpha 1, every job admitted at its minimum).")
@click.option("--preset", default="reference", show_default=True)
@click.option("--seeds", default="1-8", show_default=True, help="Training trace seeds (range or list).")
@click.option("--epochs", type=click.IntRange(min=1), default=30, show_default=True)
@click.option("--lr", type=FiniteFloatRange(min=0, min_open=True), default=1e-3, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--label-running/--no-label-running", default=False, show_default=True,
              help="Also label the teacher's changes to running jobs (teaches restarts).")
@click.option("--also", "also", multiple=True, metavar="PRESET=SEEDS",
              help="Also label PRESET on SEEDS (repeatable), e.g. --also small=1-16: train on a mix of loads.")
@click.option("--dagger", type=click.IntRange(min=0), default=0, show_default=True,
              help="DAgger rounds: the trained student drives the traces, the teacher labels what it reaches.")
@click.option("--dagger-epochs", type=click.IntRange(min=1), help="Epochs per DAgger round (default --epochs).")
@click.option("--shrink-weight", type=FiniteFloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Loss weight of the labels that pause or shrink a job (rare; 1 = plain cross entropy).")
@click.option("--dagger-within", is_flag=True,
              help="In the DAgger rounds the student also acts inside each slot and every state it reaches there "
                   "is labelled (default: the teacher labels its own path through the slots the student starts).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Label the traces in this many processes (the trained weights do not depend on it).")
@click.option("--out", type=click.Path(dir_okay=False), default="runs/sl/sl.pt", show_default=True,
              callback=output_file)
@click.option("--init", type=click.Path(dir_okay=False, exists=True),
              help="Continue from this checkpoint (its model options win), e.g. for more DAgger rounds.")
@_model_options
@_order_option
@_prune_option
@trace_source_options
def train_sl(teacher, preset, seeds, epochs, lr, batch_size, label_running, also, dagger, dagger_epochs, shrink_weight,
             dagger_within, seed, workers, out, init, window, hidden, layers, arch, start, actions, features, order,
             prune_growth, **trace_opts):
    """Supervised warm-up: imitate TEACHER's decisions (cross entropy, void labelled)."""
    preset = trace_source_preset(preset, trace_opts)
    from tqdm import tqdm

    from dl2_mesos.policy.dl2.model_config import DL2Config
    from dl2_mesos.policy.dl2.supervised import SLConfig
    from dl2_mesos.policy.dl2.trainer import run_sl
    from dl2_mesos.policy.sim.settings import preset as get_preset

    from dl2_mesos.policy.registry import teacher_names

    known = teacher_names()
    if teacher not in known:
        raise click.BadParameter(f"unknown teacher {teacher!r}; known: {', '.join(known)}", param_hint="--teacher")
    try:
        mcfg = DL2Config(window=window, hidden=hidden, layers=layers, arch=arch, start=start, actions=actions,
                         order=order or "priority", prune_growth=bool(prune_growth),
                         features=features or "base")
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    seed_list = _seeds(seeds, "--seeds")
    extra = []
    for item in also:
        name, sep, text = item.rpartition("=")  # the last "=": a trace preset has its own
        if not sep or not name.strip():
            raise click.BadParameter(f"expected PRESET=SEEDS, got {item!r}", param_hint="--also")
        try:
            get_preset(name.strip())
        except ConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="--also") from None
        extra.append((name.strip(), _seeds(text, "--also")))
    bar = tqdm(total=epochs + dagger * (dagger_epochs or epochs), desc=f"SL ({teacher})", unit="epoch")

    def prog(epoch, stats):
        bar.update(1)
        bar.set_postfix(loss=f"{stats['loss']:.3f}", acc=f"{stats['accuracy']:.3f}")

    try:
        meta = run_sl(out, mcfg, teacher=teacher, preset=preset, seeds=seed_list,
                      sl_cfg=SLConfig(lr=lr, batch_size=batch_size, epochs=epochs, seed=seed,
                                     shrink_weight=shrink_weight),
                      label_running=label_running, progress=prog, extra=extra, dagger_rounds=dagger,
                      dagger_epochs=dagger_epochs, init=init, order=order, dagger_within=dagger_within,
                      prune_growth=prune_growth, workers=workers, features=features if init else None)
    except (Dl2Error, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        bar.close()
    click.echo(f"wrote {out}: {int(meta['final']['samples'])} samples, loss {meta['final']['loss']:.4f}, "
               f"accuracy {meta['final']['accuracy']:.3f}, {meta['wall_s']:.0f} s")


@train.command("set-rules")
@click.argument("model", type=click.Path(dir_okay=False, exists=True))
@click.option("--prune-growth/--no-prune-growth", default=None,
              help="Mask grow actions that cannot make a job faster by the measured speed table.")
@click.option("--idle-fastest/--no-idle-fastest", default=None,
              help="When every job fits at its fastest size at once, give each that size (the network is not asked).")
@click.option("--restart-payback/--no-restart-payback", default=None,
              help="Mask growth of a running job whose speed-up on its remaining work cannot repay its restart cost.")
@click.option("--restore-idle-shrinks/--no-restore-idle-shrinks", default=None,
              help="Give a shrunk or paused job its tasks back when no other job took the room it freed.")
@click.option("--out", type=click.Path(dir_okay=False), required=True, callback=output_file,
              help="Where to write the checkpoint (the same weights, the new rules).")
def train_set_rules(model, prune_growth, idle_fastest, restart_payback, restore_idle_shrinks, out):
    """Change a checkpoint's decision-loop rules without training (the weights stay as they are).

    Growth pruning, the idle-cluster rule, the restart-payback rule and the idle-shrink rule
    belong to the loop the network acts in, not to its weights, so they can be switched on for a
    model trained without them (the shipped model was made so); their effect is measured with `dl2 evaluate` or `dl2 matrix` like any other change.
    Rules not named keep their setting.
    """
    import dataclasses

    from dl2_mesos.policy.dl2.checkpoint import load_checkpoint, save_checkpoint

    rules = (("prune_growth", prune_growth), ("idle_fastest", idle_fastest), ("restart_payback", restart_payback),
             ("restore_idle_shrinks", restore_idle_shrinks))
    changes = {k: v for k, v in rules if v is not None}
    if not changes:
        raise click.UsageError("name a rule to set: --prune-growth, --idle-fastest, --restart-payback or "
                               "--restore-idle-shrinks (or their --no- forms)")
    try:
        loaded = load_checkpoint(model)
    except CheckpointError as exc:
        raise click.ClickException(str(exc)) from None
    net = loaded.net
    before = {k: getattr(net.cfg, k) for k in changes}
    net.cfg = dataclasses.replace(net.cfg, **changes)
    meta = dict(loaded.meta)
    meta["rules"] = {"from": str(model), **changes}
    save_checkpoint(out, net, version=loaded.version, meta=meta)
    said = ", ".join(f"{k} {str(before[k]).lower()} -> {str(v).lower()}" for k, v in changes.items())
    click.echo(f"wrote {out}: {said}, weights unchanged")


@train.command("rl")
@click.option("--init", type=click.Path(dir_okay=False, exists=True), help="Start from this checkpoint (e.g. SL).")
@click.option("--out", type=click.Path(file_okay=False), default="runs/rl", show_default=True, callback=output_folder,
              help="Run directory: log.csv, last.pt, best.pt, curve.png.")
@click.option("--resume", is_flag=True,
              help="Continue from OUT/last.pt (weights, optimiser, iteration; the traces drawn "
                   "from then on differ from an uninterrupted run's).")
@click.option("--preset", default="reference", show_default=True,
              help="Preset, or a comma-separated mix (e.g. reference,small): episodes alternate between them and "
                   "validation scores the mean avg JCT relative to the starting model's.")
@click.option("--iterations", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--workers", type=click.IntRange(min=0), default=2, show_default=True,
              help="Simulation worker processes (0 = in the learner process).")
@click.option("--episodes-per-iteration", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--updates", type=click.IntRange(min=1), default=16, show_default=True,
              help="Mini-batch updates per iteration.")
@click.option("--epsilon", type=FiniteFloatRange(0, 1), default=0.4, show_default=True,
              help="Job-aware exploration probability on bad states.")
@click.option("--no-exploration", is_flag=True, help="Ablation: no job-aware exploration.")
@click.option("--no-replay", is_flag=True, help="Ablation: learn only from the newest episodes.")
@click.option("--no-critic", is_flag=True, help="Ablation: mean-return baseline instead of the critic.")
@click.option("--per-job-reward", is_flag=True, help="Ablation: each action rewarded with its job's progress.")
@click.option("--lr-actor", type=FiniteFloatRange(min=0, min_open=True), default=3e-4, show_default=True)
@click.option("--lr-critic", type=FiniteFloatRange(min=0, min_open=True), default=1e-3, show_default=True)
@click.option("--gamma", type=FiniteFloatRange(0, 1), default=0.9, show_default=True)
@click.option("--lam", type=FiniteFloatRange(0, 1), default=0.9, show_default=True, help="TD(lambda) mixing.")
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--replay-size", type=click.IntRange(min=1), default=8192, show_default=True)
@click.option("--entropy-start", type=FiniteFloatRange(min=0), default=0.05, show_default=True)
@click.option("--entropy-end", type=FiniteFloatRange(min=0), default=0.002, show_default=True)
@click.option("--entropy-half-life", type=click.IntRange(min=1), default=300, show_default=True,
              help="Updates over which the entropy weight halves.")
@click.option("--train-seeds", default="1-100", show_default=True)
@click.option("--val-seeds", default="1001-1002", show_default=True)
@click.option("--eval-every", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--max-slots", type=click.IntRange(min=1), help="Cap simulated slots per episode.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--tensorboard", is_flag=True, help="Also write TensorBoard logs (if installed).")
@click.option("--reward", type=click.Choice(["progress", "jct"]), default="progress", show_default=True,
              help="progress: the paper's epochs-trained reward; jct: minus job-slots in the system (= -sum of JCTs).")
@click.option("--reward-scale", type=FiniteFloatRange(min=0, min_open=True), default=1.0, show_default=True)
@click.option("--baseline", type=click.Choice(["critic", "input"]), default="critic", show_default=True,
              help="input: mean return of the other rollouts on the same trace (implies --same-trace).")
@click.option("--same-trace", is_flag=True, help="All episodes of an iteration on one trace.")
@click.option("--clip", type=FiniteFloatRange(0, 1, max_open=True), default=0.0, show_default=True,
              help="PPO-style clipping of the probability ratio (e.g. 0.2); 0: the paper's plain policy gradient.")
@click.option("--elite", is_flag=True,
              help="Self-imitation: keep only the best of each trace's rollouts (by total reward) and raise the "
                   "probability of its actions, in place of the policy gradient (implies --same-trace).")
@click.option("--elite-margin", type=FiniteFloatRange(min=0), default=0.0, show_default=True,
              help="With --elite: keep a trace's best rollout only when its total reward beats the others' mean "
                   "by more than this fraction (e.g. 0.01).")
@click.option("--rollback", type=FiniteFloatRange(min=0), default=0.0, show_default=True,
              help="When validation is more than this fraction above the best so far (e.g. 0.15), go back to "
                   "the best weights and halve the actor's learning rate; 0: off.")
@click.option("--restart-scale", type=FiniteFloatRange(0, 1), default=1.0, show_default=True,
              help="Multiply every job's restart cost in the training episodes (validation keeps the real "
                   "cost): a curriculum toward rescaling; 1: off.")
@click.option("--references", default="drf,optimus,srtf-gain", show_default=True,
              help="Policies drawn as reference lines on the learning curve ('' for none).")
@_model_options
@trace_source_options
def train_rl(init, out, resume, preset, iterations, workers, episodes_per_iteration, updates, epsilon,
             no_exploration, no_replay, no_critic, per_job_reward, lr_actor, lr_critic, gamma, lam, batch_size,
             replay_size, entropy_start, entropy_end, entropy_half_life, train_seeds, val_seeds, eval_every,
             max_slots, seed, tensorboard, reward, reward_scale, baseline, same_trace, clip, elite, elite_margin, rollback, restart_scale, references,
             window, hidden, layers, arch, start, actions, features, **trace_opts):
    """Actor-critic RL in the simulator (parallel workers, replay, job-aware exploration)."""
    preset = trace_source_preset(preset, trace_opts)
    from tqdm import tqdm

    from dl2_mesos.policy.dl2.model_config import DL2Config
    from dl2_mesos.policy.dl2.learner import LearnerConfig
    from dl2_mesos.policy.sim.settings import preset as get_preset
    from dl2_mesos.policy.dl2.trainer import RLConfig, presets_of, run_rl

    for name in preset.split(","):
        try:
            get_preset(name.strip())
        except ConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="--preset") from None
    tr, va = _seeds(train_seeds, "--train-seeds"), _seeds(val_seeds, "--val-seeds")
    if set(tr) & set(va):
        raise click.BadParameter("training and validation seeds overlap", param_hint="--val-seeds")
    try:
        lcfg = LearnerConfig(lr_actor=lr_actor, lr_critic=lr_critic, gamma=gamma, lam=lam, batch_size=batch_size,
                             replay_size=replay_size, replay=not no_replay, critic=not no_critic,
                             per_job_reward=per_job_reward, entropy_start=entropy_start, entropy_end=entropy_end,
                             entropy_half_life=entropy_half_life, seed=seed, reward_scale=reward_scale,
                             baseline=baseline, clip=clip, elite=elite, elite_margin=elite_margin)
        cfg = RLConfig(preset=preset, iterations=iterations, workers=workers,
                       episodes_per_iteration=episodes_per_iteration, updates_per_iteration=updates,
                       epsilon=0.0 if no_exploration else epsilon, train_seeds=tuple(tr), eval_seeds=tuple(va),
                       eval_every=eval_every, max_slots=max_slots, seed=seed, learner=lcfg, tensorboard=tensorboard,
                       reward=reward, same_trace=same_trace or baseline == "input" or elite,
                       references=tuple(n.strip() for n in references.split(",") if n.strip()), rollback=rollback,
                       restart_scale=restart_scale)
        mcfg = DL2Config(window=window, hidden=hidden, layers=layers, arch=arch, start=start, actions=actions,
                         features=features or "base")
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    mix = len(presets_of(preset)) > 1  # the validation score is then a ratio, not seconds
    bar = tqdm(total=iterations, desc="RL", unit="it")

    def prog(it, row):
        bar.n = it
        post = {"jct": f"{row['train_avg_jct']:.0f}"}
        if row.get("val_avg_jct"):
            post["val"] = validation_text(row["val_avg_jct"], mix)
        bar.set_postfix(post)
        bar.refresh()

    try:
        res = run_rl(out, cfg, model_cfg=mcfg, init=init, resume=resume, progress=prog,
                     features=features if init else None)
    except (Dl2Error, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        bar.close()
    click.echo(f"best validation {validation_text(res['best_val_avg_jct'], mix)} "
               f"(iteration {res['best_iteration']}); {res['wall_s']:.0f} s; "
               f"model {Path(out) / 'best.pt'}; curve {Path(out) / 'curve.png'}")


@train.command("pi")
@click.option("--init", type=click.Path(dir_okay=False, exists=True), required=True,
              help="Start from this checkpoint (a warm-up).")
@click.option("--out", type=click.Path(file_okay=False), default="runs/pi", show_default=True, callback=output_folder,
              help="Output folder (best.pt, last.pt, log.csv, validation.csv, curve_wall.png).")
@click.option("--preset", default="testbed-rho2", show_default=True,
              help="Training and validation preset, or a comma-separated mix (scored relative to the start).")
@click.option("--iterations", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--traces-per-preset", type=click.IntRange(min=1), default=2, show_default=True,
              help="Training traces run under the improved policy per preset and iteration.")
@click.option("--candidates", type=click.IntRange(min=2), default=8, show_default=True,
              help="Decisions compared per slot: the greedy one and this many less one sampled from the network.")
@click.option("--horizon", type=click.IntRange(min=1), default=30, show_default=True,
              help="Slots each decision's simulated future runs (under the greedy network).")
@click.option("--edits", type=click.IntRange(min=0), default=0, show_default=True,
              help="Also compare up to this many one-job edits of the greedy decision (a job it starts or "
                   "grows held, started at its minimum, or grown half as far).")
@click.option("--epochs", type=click.IntRange(min=1), default=3, show_default=True,
              help="Cross-entropy epochs per iteration.")
@click.option("--lr", type=FiniteFloatRange(min=0, min_open=True), default=5e-4, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--keep", type=click.IntRange(min=1), default=3, show_default=True,
              help="Train on the labels of the last this many iterations.")
@click.option("--improved-weight", type=click.IntRange(min=1), default=8, show_default=True,
              help="How many times a slot where the search beat greedy counts in the loss.")
@click.option("--train-seeds", default="1-100", show_default=True)
@click.option("--val-seeds", default="1001-1004", show_default=True)
@click.option("--max-slots", type=click.IntRange(min=1), help="Cap simulated slots per episode.")
@click.option("--workers", type=click.IntRange(min=0), default=2, show_default=True,
              help="Processes running the improved traces and the validation (0: in this one).")
@click.option("--references", default="drf,optimus,srtf-gain", show_default=True,
              help="Policies drawn as reference lines on the learning curve ('' for none).")
@click.option("--seed", type=int, default=0, show_default=True)
@trace_source_options
def train_pi(init, out, preset, iterations, traces_per_preset, candidates, horizon, edits, epochs, lr, batch_size, keep,
             improved_weight, train_seeds, val_seeds, max_slots, workers, references, seed, **trace_opts):
    """Policy iteration by rollouts: RL that distils a search over the network's own decisions.

    Every slot of some training traces, the greedy decision and decisions sampled from the
    network are each simulated HORIZON slots ahead on the same future; the best is taken and
    the network learns it (cross entropy), then the loop repeats from the new network.
    """
    from tqdm import tqdm

    from dl2_mesos.policy.dl2.checkpoint import load_checkpoint
    from dl2_mesos.policy.dl2.policy_iteration import PIConfig, run_policy_iteration
    from dl2_mesos.policy.dl2.trainer import presets_of
    from dl2_mesos.policy.sim.settings import preset as get_preset

    preset = trace_source_preset(preset, trace_opts)  # --trace FILE...: the cluster's own history
    try:
        names = presets_of(preset)
        for name in names:
            get_preset(name)
    except (ConfigError, ValueError) as exc:
        raise click.BadParameter(str(exc), param_hint="--preset") from None
    tr, va = _seeds(train_seeds, "--train-seeds"), _seeds(val_seeds, "--val-seeds")
    if set(tr) & set(va):
        raise click.BadParameter("training and validation seeds overlap", param_hint="--val-seeds")
    try:
        load_checkpoint(init)  # fail fast, before any simulation
        cfg = PIConfig(presets=tuple(names), iterations=iterations, traces_per_preset=traces_per_preset,
                       candidates=candidates, horizon=horizon, edits=edits, epochs=epochs, lr=lr, batch_size=batch_size,
                       keep=keep, improved_weight=improved_weight, train_seeds=tuple(tr), val_seeds=tuple(va),
                       references=tuple(n.strip() for n in references.split(",") if n.strip()), max_slots=max_slots,
                       workers=workers, seed=seed)
    except CheckpointError as exc:
        raise click.ClickException(str(exc)) from None
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    mix = len(names) > 1  # the validation score is then a ratio, not seconds
    bar = tqdm(total=iterations, desc="policy iteration", unit="it")

    def prog(it, row):
        bar.n = it
        bar.set_postfix({"improved": f"{row['improved_slots']}/{row['decided_slots']}",
                         "val": validation_text(row["val_score"], mix)})
        bar.refresh()

    try:
        res = run_policy_iteration(out, cfg, init, progress=prog)
    except (Dl2Error, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        bar.close()
    click.echo(f"best validation {validation_text(res['best_val_score'], mix)} "
               f"(iteration {res['best_iteration']}); "
               f"{res['wall_s']:.0f} s; model {Path(out) / 'best.pt'}")


@click.command()
@click.option("--policies", default="dl2,drf,tetris,optimus,srtf,fifo", show_default=True)
@click.option("--seeds", default="101-110", show_default=True, help="Held-out seeds (disjoint from training).")
@click.option("--preset", default="reference", show_default=True)
@click.option("--model", "model_path", type=click.Path(dir_okay=False), help="DL2 weights (default: shipped).")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), callback=output_file,
              help="Write results as JSON.")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True, help="Parallel processes.")
@click.option("--max-slots", type=click.IntRange(min=1), help="Stop each run after this many slots.")
@click.option("--per-seed", is_flag=True, help="Also print each seed's avg JCT next to its lower bound.")
@click.option("--by-size", type=click.IntRange(min=2, max=20), metavar="N",
              help="Also break each policy's jobs down into N classes by their no-queueing run time "
                   "(mean JCT, wait, stretch, rescales, share of the avg JCT).")
def evaluate(policies, seeds, preset, model_path, json_out, workers, max_slots, per_seed, by_size):
    """Evaluate DL2 and the baselines on held-out seeds; prints a table with JCT ratios."""
    from tqdm import tqdm

    from dl2_mesos.policy.dl2.checkpoint import load_checkpoint
    from dl2_mesos.policy.dl2.evaluation import evaluate as run_eval
    from dl2_mesos.policy.dl2.evaluation import format_per_seed, format_table
    from dl2_mesos.policy.registry import policy_names
    from dl2_mesos.policy.sim.settings import preset as get_preset

    names = [n.strip().lower() for n in policies.split(",") if n.strip()]
    unknown = [n for n in names if n not in policy_names()]
    if not names or unknown:
        raise click.BadParameter(f"unknown policy {unknown[0] if unknown else ''!r}; known: "
                                 f"{', '.join(policy_names())}", param_hint="--policies")
    seed_list = _seeds(seeds, "--seeds")
    try:
        get_preset(preset)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--preset") from None
    if "dl2" in names:
        try:
            load_checkpoint(model_path)  # fail fast, before any simulation
        except CheckpointError as exc:
            raise click.ClickException(str(exc)) from None
    bar = tqdm(total=len(names) * len(seed_list), desc="evaluating", unit="run")
    try:
        doc = run_eval(names, seed_list, preset, model_path, workers=workers, max_slots=max_slots,
                       progress=lambda n, s: bar.update(1), by_size=by_size)
    finally:
        bar.close()
    click.echo(f"preset {preset}; seeds {seeds}; model {model_path or 'shipped'}")
    click.echo(format_table(doc))
    if per_seed:
        click.echo(format_per_seed(doc))
    if by_size:
        from dl2_mesos.policy.sim.size_classes import SizeClass, format_size_classes

        click.echo(format_size_classes([SizeClass.from_dict(d) for d in doc["size_classes"]]))
    if json_out:
        Path(json_out).write_text(json.dumps(doc, indent=1))
        click.echo(f"wrote {json_out}")
