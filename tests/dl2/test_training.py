"""Supervised warm-up, RL and their determinism on the tiny preset."""

from __future__ import annotations

import numpy as np
import torch

from dl2_mesos.allocation import Allocation
from dl2_mesos.policy.dl2.decision_loop import run_slot
from dl2_mesos.policy.dl2.checkpoint import load_checkpoint
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
from dl2_mesos.policy.dl2.learner import LearnerConfig
from dl2_mesos.policy.dl2.network import ActorCritic
from dl2_mesos.policy.dl2.rollout import make_sim
from dl2_mesos.policy.dl2.supervised import SLConfig, collect_teacher_episode, teacher_steps, train_supervised
from dl2_mesos.policy.dl2.trainer import RLConfig, run_rl, run_sl
from dl2_mesos.policy.registry import make_policy
from dl2_mesos.policy.sim.simulator import run

from .conftest import make_state

CFG = DL2Config(window=6, hidden=32)


def test_teacher_labels_end_with_void_and_reproduce_the_teacher():
    state = make_state(4, 40)
    alloc, steps = teacher_steps(state, CFG, make_policy("drf"))
    assert all(s.mask[s.action] for s in steps)
    drf = make_policy("drf").decide(state)
    assert alloc == drf, "from nothing running, the labels rebuild the teacher's allocation"
    # Optimus stops where more tasks would not help: its slots end with a void label
    slots = collect_teacher_episode(make_sim("small", 1), CFG, make_policy("optimus"))
    voids = [s for s in slots if len(s) and s.actions[-1] == 3 * CFG.window]
    assert voids, "void is a label"


def test_supervised_loss_falls():
    torch.manual_seed(0)
    eps = [collect_teacher_episode(make_sim("tiny", s), CFG, make_policy("optimus")) for s in (1, 2)]
    net = ActorCritic(CFG)
    hist = train_supervised(net, eps, SLConfig(epochs=25, lr=3e-3, batch_size=32))
    assert hist[-1]["loss"] < 0.5 * hist[0]["loss"]
    assert hist[-1]["accuracy"] > 0.8


def _avg_jct(policy_or_chooser, seeds):
    out = []
    for s in seeds:
        sim = make_sim("tiny", s)
        if isinstance(policy_or_chooser, DL2Policy):
            out.append(run(policy_or_chooser, sim.config, sim.trace, s).avg_jct)
            continue
        state = sim.state()
        while not sim.done:
            alloc = run_slot(state, CFG, policy_or_chooser)[0] if state.jobs else Allocation()
            sim.step(alloc)
            state = sim.state()
        out.append(sim.metrics().avg_jct)
    return float(np.mean(out))


def _short_rl(tmp_path, name, iterations=30):
    cfg = RLConfig(preset="tiny", iterations=iterations, workers=0, episodes_per_iteration=2, updates_per_iteration=8,
                   train_seeds=tuple(range(1, 30)), eval_seeds=(1001, 1002), eval_every=5, seed=3,
                   learner=LearnerConfig(lr_actor=1e-3, lr_critic=3e-3, batch_size=64, entropy_start=0.01, seed=3))
    return run_rl(tmp_path / name, cfg, model_cfg=CFG)


def test_short_rl_is_deterministic(tmp_path):
    # same seed -> same weights
    torch.manual_seed(0)
    _short_rl(tmp_path, "b", iterations=4)
    torch.manual_seed(0)
    _short_rl(tmp_path, "c", iterations=4)
    wa = load_checkpoint(tmp_path / "b" / "last.pt").net.state_dict()
    wb = load_checkpoint(tmp_path / "c" / "last.pt").net.state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert (tmp_path / "b" / "curve.png").stat().st_size > 0
    assert (tmp_path / "b" / "log.csv").read_text().count("\n") >= 5


def _avg_jct_of(path, preset, seeds):
    pol = DL2Policy(model_path=path)
    return float(np.mean([run(pol, make_sim(preset, s).config, make_sim(preset, s).trace, s).avg_jct for s in seeds]))


def test_short_rl_beats_its_warm_up_on_a_contended_tiny_cluster(tmp_path):
    """RL (JCT reward, input-dependent baseline: 4 rollouts per trace) from a DRF warm-up on the
    tiny preset (3 nodes, jobs queue) lowers the avg JCT on held-out seeds."""
    cfg = DL2Config(window=6, hidden=32, actions="elastic")
    torch.manual_seed(0)
    run_sl(tmp_path / "sl.pt", cfg, teacher="drf", preset="tiny", seeds=range(1, 9),
           sl_cfg=SLConfig(epochs=10, lr=3e-3, batch_size=64))
    rc = RLConfig(preset="tiny", iterations=20, workers=0, episodes_per_iteration=4, updates_per_iteration=8,
                  train_seeds=tuple(range(1, 30)), eval_seeds=(1001, 1002, 1003), eval_every=5, seed=3,
                  reward="jct", same_trace=True, references=(),
                  learner=LearnerConfig(lr_actor=1e-3, lr_critic=3e-3, batch_size=64, entropy_start=0.01, seed=3,
                                        gamma=0.95, baseline="input", reward_scale=0.1))
    run_rl(tmp_path / "rl", rc, init=tmp_path / "sl.pt")
    seeds = range(201, 211)
    warm = _avg_jct_of(tmp_path / "sl.pt", "tiny", seeds)
    tuned = _avg_jct_of(tmp_path / "rl" / "best.pt", "tiny", seeds)
    assert tuned < 0.97 * warm, (tuned, warm)


def test_resume_continues_from_last(tmp_path):
    _short_rl(tmp_path, "r", iterations=2)
    cfg = RLConfig(preset="tiny", iterations=3, workers=0, episodes_per_iteration=1, updates_per_iteration=2,
                   eval_seeds=(1001,), eval_every=5, seed=3, learner=LearnerConfig(batch_size=32))
    run_rl(tmp_path / "r", cfg, resume=True)
    assert load_checkpoint(tmp_path / "r" / "last.pt").meta["iteration"] == 3
    lines = (tmp_path / "r" / "log.csv").read_text().strip().splitlines()
    assert [ln.split(",")[0] for ln in lines[1:]] == ["0", "1", "2", "3"]


def test_srtf_gain_labels_grow_running_jobs_and_reproduce_the_teacher():
    """The add-only teacher's decisions are expressible: labelled with label_running, the
    actions rebuild its allocation, growth of running jobs included."""
    teacher = make_policy("srtf-gain")
    sim = make_sim("small", 4)
    state = sim.state()
    grown = same = total = 0
    while not sim.done and sim.slot < 60:
        if state.jobs:
            alloc, steps = teacher_steps(state, DL2Config(window=40), teacher, label_running=True)
            want = teacher.decide(state)
            total += 1
            same += alloc == want
            for j in state.jobs:
                c = alloc.get_counts(j.job_id)
                if j.num_workers and (c.num_ps, c.num_workers) != (j.num_ps, j.num_workers):
                    grown += 1
            sim.step(alloc)
        else:
            sim.step(Allocation())
        state = sim.state()
    assert grown > 0
    assert same >= 0.9 * total, (same, total)


def test_sl_on_a_mix_of_presets(tmp_path):
    from dl2_mesos.policy.dl2.trainer import run_sl

    meta = run_sl(tmp_path / "m.pt", CFG, teacher="srtf-gain", preset="tiny", seeds=[1], label_running=True,
                  sl_cfg=SLConfig(epochs=2, batch_size=64), extra=[("small", [1])], max_slots=30,
                  dagger_rounds=1, dagger_epochs=1)
    assert meta["extra"] == [["small", [1]]]
    (rnd,) = meta["dagger"]  # one DAgger round: the student drove both traces, the teacher labelled
    assert set(rnd["student_avg_jct"]) == {"tiny", "small"}
    assert rnd["final"]["samples"] > meta["samples_before_dagger"]
    only_tiny = run_sl(tmp_path / "t.pt", CFG, teacher="srtf-gain", preset="tiny", seeds=[1], label_running=True,
                       sl_cfg=SLConfig(epochs=1, batch_size=64), max_slots=30)
    assert meta["final"]["samples"] > only_tiny["final"]["samples"]


def test_sl_labels_in_parallel_processes_give_the_same_weights(tmp_path):
    """Labelling in worker processes (``workers``) changes how fast the labels come, not what
    they are: same samples, same student runs, bit-identical weights. Both within-slot and
    teacher-path DAgger rounds, three traces over two presets."""
    for within in (False, True):
        metas, nets = [], []
        for workers in (0, 2):
            out = tmp_path / f"w{workers}-{within}.pt"
            metas.append(run_sl(out, CFG, teacher="srtf-gain", preset="tiny", seeds=[1, 2], extra=[("small", [1])],
                                sl_cfg=SLConfig(epochs=1, batch_size=64), max_slots=25, dagger_rounds=1,
                                dagger_within=within, workers=workers))
            nets.append(load_checkpoint(out).net.state_dict())
        assert metas[0]["final"] == metas[1]["final"]
        assert metas[0]["dagger"] == metas[1]["dagger"], "the student drove the traces to the same JCTs"
        assert all(torch.equal(nets[0][k], nets[1][k]) for k in nets[0])


def test_rl_on_a_mix_of_presets_scores_relative_to_the_start(tmp_path):
    cfg = RLConfig(preset="tiny,small", iterations=2, workers=0, episodes_per_iteration=2, updates_per_iteration=2,
                   train_seeds=(1, 2), eval_seeds=(1001,), eval_every=1, max_slots=15, seed=1,
                   learner=LearnerConfig(batch_size=32))
    run_rl(tmp_path / "mix", cfg, model_cfg=CFG)
    best = load_checkpoint(tmp_path / "mix" / "best.pt").meta
    last = load_checkpoint(tmp_path / "mix" / "last.pt").meta
    assert set(last["val_base"]) == {"tiny", "small"}
    rows = (tmp_path / "mix" / "log.csv").read_text().strip().splitlines()
    assert float(rows[1].split(",")[6]) == 1.0  # iteration 0: the start scores 1.0 by definition
    assert best["val_avg_jct"] <= 1.0


def test_sl_continues_from_a_checkpoint_with_its_config(tmp_path):
    from dl2_mesos.policy.dl2.checkpoint import save_checkpoint

    cfg = DL2Config(window=6, hidden=16, actions="elastic")
    torch.manual_seed(0)
    save_checkpoint(tmp_path / "start.pt", ActorCritic(cfg))
    # the command line's model options (window 40) lose against the checkpoint's
    meta = run_sl(tmp_path / "more.pt", DL2Config(), teacher="drf", preset="tiny", seeds=[1],
                  sl_cfg=SLConfig(epochs=1, batch_size=32), init=tmp_path / "start.pt")
    more = load_checkpoint(tmp_path / "more.pt")
    assert more.net.cfg == cfg and meta["final"]["samples"] > 0
    start = load_checkpoint(tmp_path / "start.pt").net.state_dict()
    assert any(not torch.equal(start[k], v) for k, v in more.net.state_dict().items()), "it trained"


def test_sl_from_a_checkpoint_can_move_it_to_another_job_order(tmp_path):
    from dl2_mesos.policy.dl2.checkpoint import save_checkpoint

    cfg = DL2Config(window=6, hidden=16, actions="elastic")  # order "arrival" (as v5)
    torch.manual_seed(0)
    save_checkpoint(tmp_path / "start.pt", ActorCritic(cfg))
    run_sl(tmp_path / "ranked.pt", DL2Config(), teacher="drf", preset="tiny", seeds=[1],
           sl_cfg=SLConfig(epochs=1, batch_size=32), init=tmp_path / "start.pt", order="priority")
    ranked = load_checkpoint(tmp_path / "ranked.pt").net.cfg
    assert ranked.order == "priority" and ranked.window == 6  # the rest of the checkpoint's config stays
    run_sl(tmp_path / "kept.pt", DL2Config(), teacher="drf", preset="tiny", seeds=[1],
           sl_cfg=SLConfig(epochs=1, batch_size=32), init=tmp_path / "ranked.pt")
    assert load_checkpoint(tmp_path / "kept.pt").net.cfg.order == "priority", "without order: the checkpoint's"


def test_shrink_weight_makes_the_rare_pause_and_shrink_labels_count_more():
    """Same data, same start: with the pause/shrink labels weighted up, the trained actor gives
    them a higher probability than plain cross entropy does."""
    from dl2_mesos.policy.dl2.features import input_size
    from dl2_mesos.policy.dl2.learner import SlotData
    from dl2_mesos.policy.dl2.network import masked_log_probs
    from dl2_mesos.policy.dl2.slot import PAUSE, SHRINK_PS, WORKER

    cfg = DL2Config(window=6, hidden=32, actions="elastic")
    rng = np.random.default_rng(0)
    n, D, A, K = 600, input_size(cfg.window, cfg.arch), cfg.num_actions, cfg.per_job
    x = rng.normal(size=(n, D)).astype(np.float32)
    # mostly grows and voids, a few pauses and shrinks (as in the teacher's labels)
    kinds = rng.choice([WORKER, -1, PAUSE, SHRINK_PS], size=n, p=[0.6, 0.36, 0.02, 0.02])
    cols = rng.integers(0, cfg.window, size=n)
    y = np.where(kinds < 0, cfg.void, K * cols + np.maximum(kinds, 0)).astype(np.int64)
    data = [[SlotData(x, np.ones((n, A), dtype=bool), y, (None,) * n, 0.0)]]
    shrink = (y != cfg.void) & np.isin(y % K, [PAUSE, SHRINK_PS])
    mean_logp = {}
    for weight in (1.0, 20.0):
        torch.manual_seed(3)
        net = ActorCritic(cfg)
        train_supervised(net, data, SLConfig(epochs=15, lr=3e-3, batch_size=64, shrink_weight=weight, seed=1))
        with torch.no_grad():
            logp = masked_log_probs(net.actor(torch.from_numpy(x)), torch.ones((n, A), dtype=torch.bool))
        mean_logp[weight] = float(logp[torch.arange(n), torch.from_numpy(y)][torch.from_numpy(shrink)].mean())
    assert mean_logp[20.0] > mean_logp[1.0] + 0.5, mean_logp


def test_rollback_returns_to_the_best_weights_with_a_lower_learning_rate(tmp_path, monkeypatch):
    """A validation score far above the best so far sends the weights back to the best point and
    halves the actor's learning rate; within the tolerance nothing is rolled back."""
    import dl2_mesos.policy.dl2.trainer as trainer

    scores = iter([100.0, 90.0, 95.0, 150.0, 120.0])  # start, it 2 (best), 4 (within 10%), 6, 8
    seen: dict[int, dict] = {}

    def fake_validation(net, presets, seeds, runner, max_slots):
        seen[len(seen)] = {k: v.clone() for k, v in net.state_dict().items()}
        return {presets[0]: next(scores)}

    monkeypatch.setattr(trainer, "evaluate_greedy_by_preset", fake_validation)
    cfg = RLConfig(preset="tiny", iterations=8, workers=0, episodes_per_iteration=1, updates_per_iteration=4,
                   eval_seeds=(1001,), eval_every=2, seed=3, references=(), rollback=0.1,
                   learner=LearnerConfig(lr_actor=1e-2, batch_size=32, seed=3))
    run_rl(tmp_path / "rb", cfg, model_cfg=CFG)
    rows = (tmp_path / "rb" / "log.csv").read_text().strip().splitlines()
    header = rows[0].split(",")
    by_it = {r.split(",")[0]: dict(zip(header, r.split(","))) for r in rows[1:]}
    assert by_it["4"]["rolled_back"] == "" and float(by_it["4"]["actor_lr"]) == 1e-2
    assert by_it["6"]["rolled_back"] == "1" and float(by_it["6"]["actor_lr"]) == 5e-3
    assert by_it["8"]["rolled_back"] == "1" and float(by_it["8"]["actor_lr"]) == 2.5e-3
    # best.pt holds iteration 2's weights; the run moved away from them, and the rollback at the
    # last iteration put them back (last.pt is written after it)
    best = load_checkpoint(tmp_path / "rb" / "best.pt")
    last = load_checkpoint(tmp_path / "rb" / "last.pt")
    assert best.meta["iteration"] == 2
    assert all(torch.equal(best.net.state_dict()[k], seen[1][k]) for k in seen[1])
    assert not all(torch.equal(seen[4][k], seen[1][k]) for k in seen[1])
    assert all(torch.equal(last.net.state_dict()[k], seen[1][k]) for k in seen[1])
    assert last.optim["actor"]["param_groups"][0]["lr"] == 2.5e-3


def test_rollback_rejects_a_bad_factor():
    import pytest

    from dl2_mesos.errors import ConfigError

    with pytest.raises(ConfigError, match="rollback"):
        RLConfig(rollback=-0.1)
    with pytest.raises(ConfigError, match="rollback_lr_factor"):
        RLConfig(rollback=0.1, rollback_lr_factor=0.0)


def test_restart_scale_curriculum_reaches_the_training_episodes_only():
    """--restart-scale cheapens restarts in training episodes; validation keeps the real cost."""
    import pytest

    from dl2_mesos.errors import ConfigError
    from dl2_mesos.policy.dl2.rollout import make_sim

    with pytest.raises(ConfigError, match="restart_scale"):
        RLConfig(restart_scale=1.5)
    assert make_sim("small", 1).config.restart_charge_scale == 1.0
    assert make_sim("small", 1, restart_scale=0.5).config.restart_charge_scale == 0.5


def test_rollback_after_a_resume_returns_to_best_pt(tmp_path, monkeypatch):
    """A resumed run rolls back to the weights in best.pt (its snapshot in memory is gone)."""
    import dl2_mesos.policy.dl2.trainer as trainer

    scores = iter([100.0, 90.0, 95.0, 200.0])  # start, it 2 (best), it 4; after the resume: it 6
    monkeypatch.setattr(trainer, "evaluate_greedy_by_preset",
                        lambda net, presets, seeds, runner, max_slots: {presets[0]: next(scores)})
    base = dict(preset="tiny", workers=0, episodes_per_iteration=1, updates_per_iteration=4, eval_seeds=(1001,),
                eval_every=2, seed=3, references=(), rollback=0.1,
                learner=LearnerConfig(lr_actor=1e-2, batch_size=32, seed=3))
    run_rl(tmp_path / "rr", RLConfig(iterations=4, **base), model_cfg=CFG)
    run_rl(tmp_path / "rr", RLConfig(iterations=6, **base), resume=True)
    best = load_checkpoint(tmp_path / "rr" / "best.pt")
    last = load_checkpoint(tmp_path / "rr" / "last.pt")
    assert best.meta["iteration"] == 2 and last.meta["iteration"] == 6
    assert all(torch.equal(last.net.state_dict()[k], v) for k, v in best.net.state_dict().items())
    assert last.optim["actor"]["param_groups"][0]["lr"] == 5e-3
