"""Online learning from experience recorded by DL2Policy."""

from __future__ import annotations

import pytest
import torch

from dl2_mesos.policy.dl2.checkpoint import load_checkpoint
from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
from dl2_mesos.policy.dl2.online_learner import (
    ExperienceRecorder,
    OnlineTrainer,
    SlotExperience,
    read_experiences,
    write_experiences,
)
from dl2_mesos.policy.dl2.rollout import make_sim


def _record(net, slots=4):
    rec = ExperienceRecorder()
    pol = DL2Policy(net=net, recorder=rec, sample=True, seed=1)
    sim = make_sim("tiny", 7)
    state = sim.state()
    for _ in range(slots):
        if sim.done:
            break
        alloc = pol.decide(state)
        sim.step(alloc)
        state = sim.state()
        rec.complete_slot(next_state=state)  # reward from the progress the jobs reported
    return rec


def test_recorded_experience_updates_weights_and_bumps_version(tmp_path, small_net):
    rec = _record(small_net)
    exps = rec.drain()
    assert exps and sum(len(e.actions) for e in exps) > 0
    assert all(e.reward >= 0 for e in exps) and any(e.reward > 0 for e in exps)
    before = [p.detach().clone() for p in small_net.parameters()]
    trainer = OnlineTrainer(small_net, version=3)
    stats = trainer.update(exps)
    assert trainer.version == 4 and stats["version"] == 4 and stats["samples"] > 0
    changed = [not torch.equal(b, p) for b, p in zip(before, small_net.parameters())]
    assert any(changed)
    path = trainer.save(tmp_path / "online.pt")
    assert load_checkpoint(path).version == 4


def test_experience_json_round_trip(tmp_path, small_net):
    exps = _record(small_net, slots=2).drain()
    path = tmp_path / "exp.jsonl"
    write_experiences(exps, path)
    back = read_experiences(path)
    assert back == exps
    sd = back[0].to_slot_data()
    assert sd.features.shape[0] == len(back[0].actions)
    assert sd.masks[range(len(sd.actions)), sd.actions].all(), "taken actions were valid"


def test_bad_experience_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="format"):
        SlotExperience.from_dict({"format": 99})
    p = tmp_path / "bad.jsonl"
    p.write_text('{"format": 1, "slot": 0}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        read_experiences(p)


def test_update_with_other_window_is_refused(small_net):
    exp = SlotExperience(slot=0, model_version=0, window=3, features=((0.0,) * 10,), masks=((9,),), actions=(9,),
                         job_ids=(None,), reward=1.0)
    with pytest.raises(ValueError, match="window"):
        OnlineTrainer(small_net).update([exp])
