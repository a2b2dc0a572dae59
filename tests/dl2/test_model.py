"""Network, checkpoints, DL2Policy and the shipped model."""

from __future__ import annotations

import torch
import pytest

from dl2_mesos.allocation import validate_allocation
from dl2_mesos.errors import CheckpointError
from dl2_mesos.policy.dl2 import checkpoint as ckpt
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
from dl2_mesos.policy.dl2.features import input_size
from dl2_mesos.policy.dl2.network import ActorCritic, masked_log_probs
from dl2_mesos.policy_api import Policy

from .conftest import make_state


@pytest.mark.parametrize("arch", ["shared", "flat"])
def test_network_shapes(arch):
    cfg = DL2Config(window=5, hidden=16, arch=arch)
    net = ActorCritic(cfg)
    x = torch.randn(3, input_size(5, arch))
    assert net.actor(x).shape == (3, 16)
    assert net.critic(x).shape == (3,)
    mask = torch.zeros(3, 16, dtype=torch.bool)
    mask[:, -1] = True
    mask[:, 0] = True
    p = masked_log_probs(net.actor(x), mask).exp()
    assert torch.allclose(p.sum(1), torch.ones(3))
    assert (p[:, 1:-1] == 0).all(), "masked actions get zero probability"


def test_checkpoint_round_trip(tmp_path, small_net):
    path = ckpt.save_checkpoint(tmp_path / "m.pt", small_net, version=7, meta={"note": "x"})
    lm = ckpt.load_checkpoint(path)
    assert lm.version == 7 and lm.meta["note"] == "x" and lm.config == small_net.cfg
    x = torch.randn(2, input_size(8, "shared"))
    with torch.no_grad():
        assert torch.equal(lm.net.actor(x), small_net.actor(x))
        assert torch.equal(lm.net.critic(x), small_net.critic(x))


def test_mismatching_checkpoints_raise_clear_errors(tmp_path, small_net, monkeypatch):
    with pytest.raises(CheckpointError, match="no DL2 model"):
        ckpt.load_checkpoint(tmp_path / "missing.pt")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a readable"):
        ckpt.load_checkpoint(junk)
    other = tmp_path / "other.pt"
    torch.save({"weights": 1}, other)
    with pytest.raises(CheckpointError, match="not a DL2 checkpoint"):
        ckpt.load_checkpoint(other)
    old = tmp_path / "old.pt"
    monkeypatch.setattr(ckpt, "SCHEMA_VERSION", ckpt.SCHEMA_VERSION - 1)
    ckpt.save_checkpoint(old, small_net)
    monkeypatch.undo()
    with pytest.raises(CheckpointError, match="schema version"):
        ckpt.load_checkpoint(old)
    # weights that do not fit the stored config
    bad = tmp_path / "bad.pt"
    ckpt.save_checkpoint(bad, small_net)
    payload = torch.load(bad, weights_only=True)
    payload["config"]["hidden"] = 64
    torch.save(payload, bad)
    with pytest.raises(CheckpointError, match="do not match"):
        ckpt.load_checkpoint(bad)


def test_policy_is_deterministic_and_valid(small_net):
    state = make_state(12, 6, running={"j0000": (2, 2), "j0003": (1, 1)})
    pol = DL2Policy(net=small_net)
    assert isinstance(pol, Policy) and pol.name == "dl2"
    a1, a2 = pol.decide(state), pol.decide(state)
    assert a1 == a2
    validate_allocation(a1, state)


def test_sampling_is_deterministic_under_a_seed(small_net):
    state = make_state(12, 30)
    d1 = DL2Policy(net=small_net, sample=True, seed=5).decide(state)
    d2 = DL2Policy(net=small_net, sample=True, seed=5).decide(state)
    assert d1 == d2


@pytest.mark.parametrize("arch", ["shared", "flat"])
def test_sampled_choice_follows_the_torch_policy_distribution(arch):
    """The sampling chooser draws from the numpy copy of the actor; its probabilities are the
    torch actor's masked softmax, and its draws follow them."""
    import numpy as np

    from dl2_mesos.policy.dl2.decision_loop import NetChooser
    from dl2_mesos.policy.dl2.sampling import action_probabilities
    from dl2_mesos.policy.dl2.network import NumpyActor

    torch.manual_seed(3)
    net = ActorCritic(DL2Config(window=4, hidden=16, arch=arch))
    x = torch.randn(input_size(4, arch))
    mask = torch.tensor([True, False, True] * 4 + [True])
    with torch.no_grad():
        ref = masked_log_probs(net.actor(x.unsqueeze(0))[0], mask).exp().numpy()
    m = mask.numpy()
    p = action_probabilities(np.where(m, NumpyActor(net.actor).logits(x.numpy()), -np.inf))
    assert np.allclose(p, ref, atol=1e-5) and (p[~m] == 0).all()
    assert (p > 0.05).sum() >= 3, "a spread distribution, so the draws below test something"
    chooser = NetChooser(net.actor, sample=True, seed=11)
    draws = np.bincount([chooser(x.numpy(), m, None, None) for _ in range(4000)], minlength=len(m)) / 4000
    assert (draws[~m] == 0).all()
    assert np.abs(draws - p).max() < 0.03


def test_shipped_model_loads_and_decides_within_capacity():
    path = ckpt.shipped_model_path()
    assert path.is_file(), "the package ships dl2.pt"
    assert path.stat().st_size < 5 * 1024 * 1024
    pol = DL2Policy()
    for n_jobs, n_agents in ((5, 3), (60, 40), (300, 200)):
        state = make_state(n_jobs, n_agents, running={"j0000": (2, 3)})
        alloc = pol.decide(state)
        validate_allocation(alloc, state)
        used_gpus = sum(state.job(j).demand(a.num_ps, a.num_workers).gpus for j, a in alloc.items())
        assert used_gpus <= state.capacity.gpus
        assert len(alloc) > 0


@pytest.mark.parametrize("name", sorted(p.name for p in ckpt.shipped_model_path().parent.glob("*.pt")))
def test_every_model_shipped_beside_the_default_loads_and_decides(name):
    """The card's figures for older models and the RL-from-DRF runs are reproducible with `--model`:
    each file in the models folder is a loadable checkpoint that starts jobs within capacity."""
    path = ckpt.shipped_model_path().with_name(name)
    assert path.stat().st_size < 5 * 1024 * 1024
    pol = DL2Policy(path)
    state = make_state(30, 13, running={"j0000": (1, 1)})
    alloc = pol.decide(state)
    validate_allocation(alloc, state)
    assert sum(1 for a in alloc.values() if a.num_workers > 0) >= 2, "it starts waiting jobs"


def test_registry_builds_dl2_with_model_path(tmp_path, small_net):
    from dl2_mesos.policy.registry import make_policy

    p = ckpt.save_checkpoint(tmp_path / "m.pt", small_net)
    pol = make_policy("dl2", model_path=str(p))
    assert pol.name == "dl2" and pol.config.window == 8


@pytest.mark.parametrize("arch", ["shared", "flat"])
def test_numpy_inference_matches_torch(arch):
    import numpy as np

    from dl2_mesos.policy.dl2.network import NumpyActor

    torch.manual_seed(1)
    net = ActorCritic(DL2Config(window=5, hidden=16, arch=arch))
    x = torch.rand(input_size(5, arch))
    x[: 5 * 23].view(5, 23)[3:, :] = 0  # two empty columns
    x[: 5 * 23].view(5, 23)[:3, 8] = 1
    with torch.no_grad():
        ref = net.actor(x.unsqueeze(0))[0].numpy()
    assert np.allclose(NumpyActor(net.actor).logits(x.numpy()), ref, atol=1e-5)


def test_incremental_greedy_matches_full_inference(small_net):
    from dl2_mesos.policy.dl2.decision_loop import NetChooser, run_slot, run_slot_greedy
    from dl2_mesos.policy.dl2.network import NumpyActor

    # make the untrained net add tasks: bias the job logits up
    with torch.no_grad():
        small_net.actor.job_head.bias += 3.0
    state = make_state(30, 20, running={"j0000": (2, 2), "j0005": (1, 3)})
    cfg = small_net.cfg
    a1, s1 = run_slot(state, cfg, NetChooser(small_net.actor, sample=False))
    a2, s2 = run_slot_greedy(state, cfg, NumpyActor(small_net.actor), record=True)
    assert [s.action for s in s1] == [s.action for s in s2] and len(s1) >= 5
    assert a1 == a2
    assert all((x.features == y.features).all() for x, y in zip(s1, s2))
