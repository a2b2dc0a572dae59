"""Online imitation (DAgger on the live states): the trainer, the online model in that mode, the
config check, and, in the simulator, that it lowers the avg JCT of a workload drifted away from
training against the frozen model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from dl2_mesos.config import load_config
from dl2_mesos.errors import ConfigError, UnknownPolicy
from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
from dl2_mesos.policy.dl2.checkpoint import shipped_model_path
from dl2_mesos.policy.dl2.network import masked_log_probs
from dl2_mesos.policy.dl2.online_imitation import ImitationTrainer
from dl2_mesos.policy.dl2.online_learner import OnlineTrainer
from dl2_mesos.policy.dl2.online_model import DL2OnlineModel
from dl2_mesos.policy.registry import make_online_model, make_policy, make_teacher
from dl2_rigs.online_drift import drift_trace, drifted_avg_jct_learning, model_states

TEACHER = "srpt-elastic-min"  # the shipped model's teacher and the framework's default


def _states(trace, slots: int, agents: int = 8):
    """Slot-start states of ``trace`` under the shipped model (its own states, as DAgger labels)."""
    return model_states(trace, slots, agents)


def _drifted(jobs: int, seed: int):
    """The live drift bench's workload in simulated time (the drifted half's job ids ``late-...``)."""
    return drift_trace(jobs, seed)


def _agreement(trainer: ImitationTrainer, labels) -> float:
    x, m, y = (torch.from_numpy(np.concatenate(part)) for part in zip(*labels))
    with torch.no_grad():
        return float((masked_log_probs(trainer.net.actor(x), m).argmax(-1) == y).float().mean())


def test_imitation_trainer_moves_the_actor_towards_the_teacher():
    states = _states(_drifted(30, 101), slots=24)
    policy = DL2Policy()
    trainer = ImitationTrainer(policy.net, make_teacher(TEACHER), version=3)
    labels = [trainer.label(s) for s in states]
    before = _agreement(trainer, labels)
    stats = {}
    for s in states:
        stats = trainer.update([s])
    after = _agreement(trainer, labels)
    assert trainer.version == 3 + len(states) and stats["version"] == trainer.version
    assert stats["samples"] > 0 and np.isfinite(stats["loss"])
    assert after > before + 0.05, (before, after)
    # nothing to learn from: weights and version stay
    w = [p.detach().clone() for p in policy.net.actor.parameters()]
    assert trainer.update([]) == {"samples": 0.0, "version": float(trainer.version)}
    assert all(torch.equal(a, b) for a, b in zip(w, policy.net.actor.parameters()))


def test_online_model_with_a_teacher_learns_from_the_states_it_decided_in():
    states = _states(_drifted(30, 102), slots=3)
    policy = DL2Policy()
    model = make_online_model("dl2", policy, teacher=TEACHER)
    assert isinstance(model, DL2OnlineModel) and isinstance(model.trainer, ImitationTrainer)
    trainer_input = np.concatenate([lab[0] for lab in map(model.trainer.label, states)])
    logits_before = np.stack([policy._fast.logits(v) for v in trainer_input])
    for s in states:
        policy.decide(s)
        assert model.complete_slot(reward=1.0)
    model.skip_slot()  # nothing pending: a no-op
    policy.decide(states[0])
    model.skip_slot()  # a slot without reward is neither learned from nor kept
    assert len(model.recorder.states) == len(states)
    assert model.update() and policy.version == 1
    assert model.recorder.states == [] and model.recorder.completed == []
    # the decisions use the updated weights (the numpy copy was refreshed)
    logits_after = np.stack([policy._fast.logits(v) for v in trainer_input])
    assert not np.allclose(logits_before, logits_after)
    blob = model.dump()
    assert blob and not model.update()  # nothing new: no update


def test_online_teacher_setting():
    with pytest.raises(UnknownPolicy):
        DL2OnlineModel(DL2Policy(), teacher="no-such-teacher")
    with pytest.raises(ConfigError, match="online_teacher: unknown teacher 'no-such-teacher'"):
        load_config(env={}, overrides={"online_teacher": "no-such-teacher"})
    assert load_config(env={}).online_teacher == TEACHER  # imitation is the default
    assert load_config(env={"DL2_ONLINE_TEACHER": "optimus"}).online_teacher == "optimus"
    for off in ("none", "None", ""):  # reinforcement
        assert load_config(env={}, overrides={"online_teacher": off}).online_teacher == ""
    assert isinstance(make_online_model("dl2", DL2Policy()).trainer, OnlineTrainer)
    assert make_online_model("drf", make_policy("drf"), teacher=TEACHER) is None  # a baseline does not learn


def test_online_imitation_lowers_the_drifted_jobs_avg_jct_in_the_simulator():
    """Frozen against online imitation on the drift workload (seeds 101-104, 8 nodes), starting
    from a model that trails the teacher there: the previous shipped model, v7 (its drifted
    half's avg JCT is 1.07-1.22x the teacher's on these seeds). The drifted half's avg JCT must
    fall by 4% or more on average (measured: 0.931, 0.959, 0.947 and 0.800 of frozen).

    v8 and v9 (v8's weights) were not the start here: on this workload they already match their teacher
    (0.96-1.03x the teacher's avg JCT), so imitation has nothing to gain there (measured
    1.03-1.12x frozen: the updates' noise; README, "Online learning")."""
    v7 = shipped_model_path().with_name("dl2-elastic-v7.pt")
    ratios = []
    for seed in (101, 102, 103, 104):
        trace = _drifted(30, seed)
        late = {}
        for teacher in (None, TEACHER):
            policy = DL2Policy(v7)
            model = DL2OnlineModel(policy, teacher=teacher) if teacher else None
            late[teacher] = drifted_avg_jct_learning(policy, model, trace, agents=8)
        ratios.append(late[TEACHER] / late[None])
    assert float(np.mean(ratios)) < 0.96, ratios


def test_an_undrained_recorder_keeps_only_the_newest_slots():
    """With online learning off nothing drains the recorder: it must not grow without bound."""
    from dl2_mesos.policy.dl2.online_learner import MAX_UNDRAINED_SLOTS, ExperienceRecorder

    state = _states(_drifted(30, 101), slots=1)[0]
    policy = DL2Policy(recorder=ExperienceRecorder(keep_states=True))
    for i in range(MAX_UNDRAINED_SLOTS + 5):
        policy.decide(dataclasses.replace(state, slot=i))
        policy.recorder.complete_slot(reward=float(i))
    assert len(policy.recorder.completed) == len(policy.recorder.states) == MAX_UNDRAINED_SLOTS
    assert policy.recorder.completed[0].reward == 5.0 and policy.recorder.states[-1].slot == MAX_UNDRAINED_SLOTS + 4
