"""Online learning: rewards from progress, model versions in the store, rollback, failover resume."""

from __future__ import annotations

import logging

from dl2_mesos.messages import ProgressReport, encode_b64
from dl2_mesos.framework import events as ev
from dl2_mesos.framework.kv import MemoryKV
from dl2_mesos.framework.online_learning import OnlineLearning
from dl2_mesos.framework.state_store import StateStore

from .conftest import Harness, make_offer


class FakeAdapter:
    """A 'model' that is one number; update() adds 1."""

    def __init__(self) -> None:
        self.weight = 0
        self.pending = False
        self.loaded: list[int] = []

    def complete_slot(self, reward):
        had, self.pending = self.pending, False
        return had

    def skip_slot(self):
        self.pending = False

    def set_version(self, version):
        pass

    def record(self):
        self.pending = True

    def update(self):
        self.weight += 1
        return True

    def dump(self):
        return str(self.weight).encode()

    def load(self, blob):
        self.weight = int(blob.decode())
        self.loaded.append(self.weight)


def _learning(store, adapter, **kw):
    ol = OnlineLearning(store, adapter, "fake", window=3, margin=0.2, keep=4, **kw)
    ol.start()
    return ol


def test_versions_are_stored_and_resumed():
    store = StateStore(MemoryKV())
    a = FakeAdapter()
    ol = _learning(store, a)
    assert ol.version == 1 and store.get_model(1) == b"0"
    for r in (1.0, 1.0):
        a.record()
        ol.end_slot(r)
    assert ol.version == 3 and store.get_model(3) == b"2"
    assert ol.describe()["recent_rewards"] == [1.0, 1.0]
    # a new leader resumes version 3
    b = FakeAdapter()
    ol2 = _learning(StateStore(store.kv), b)
    assert ol2.version == 3 and b.weight == 2


def test_frozen_model_is_not_updated():
    store = StateStore(MemoryKV())
    a = FakeAdapter()
    ol = _learning(store, a, enabled=False)
    a.record()
    ol.end_slot(1.0)
    assert ol.version == 1 and a.weight == 0 and ol.describe()["online_learning"] is False


def test_rollback_when_reward_drops(caplog):
    store = StateStore(MemoryKV())
    a = FakeAdapter()
    ol = _learning(store, a)
    for _ in range(3):  # baseline window with the starting model: mean 1.0
        a.record()
        ol.end_slot(1.0)
    assert ol.info["baseline"] == 1.0
    before = ol.version
    with caplog.at_level(logging.WARNING):
        for _ in range(9):  # clearly worse: one window makes it suspect, two more confirm
            a.record()
            ol.end_slot(0.1)
    assert ol.info["rollbacks"] and ol.info["rollbacks"][-1]["from"] > ol.info["rollbacks"][-1]["to"]
    # the one accepted window vouches for the model latest at its start (rewards lag decisions)
    assert before == 4 and ol.info["rollbacks"][-1]["to"] == 1
    assert ol.version == 1
    assert a.loaded and "rolling back" in caplog.text
    assert store.models()["current"] == ol.version


def test_no_rollback_when_reward_holds():
    store = StateStore(MemoryKV())
    a = FakeAdapter()
    ol = _learning(store, a)
    for r in (1.0, 1.0, 1.0, 0.9, 1.1, 0.95, 1.0):
        a.record()
        ol.end_slot(r)
    assert not ol.info["rollbacks"]


def test_core_feeds_slot_rewards_from_reported_progress():
    h = Harness()
    ol = OnlineLearning(h.store, None, "scripted", window=3)
    ol.start()
    h.core.learner = ol
    h.register()
    job = h.submit(epochs=10)
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    w = job.live_tasks("worker")[0]
    msg = ProgressReport(job.job_id, w.task_id, 1, 2.5, 10, 5.0)
    h.core.handle(ev.FrameworkMessage(w.executor_id, w.agent_id, encode_b64(msg)))
    h.next_slot()
    assert ol.describe()["recent_rewards"] == [0.25]
    assert h.core.view()["policy"]["recent_rewards"] == [0.25]


def test_dl2_adapter_updates_real_model():
    import torch
    from dl2_mesos.policy.dl2.model_config import DL2Config
    from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
    from dl2_mesos.policy.dl2.network import ActorCritic
    from dl2_mesos.policy.dl2.online_model import DL2OnlineModel

    torch.manual_seed(0)
    policy = DL2Policy(net=ActorCritic(DL2Config()))
    adapter = DL2OnlineModel(policy)
    h = Harness(policy=policy)
    ol = OnlineLearning(h.store, adapter, "dl2", window=5)
    ol.start()
    h.core.learner = ol
    h.register()
    job = h.submit(epochs=10)
    h.offer(make_offer("a1"), make_offer("a2"))
    h.tick()
    h.run_all(job)
    before = {k: v.clone() for k, v in policy.net.state_dict().items()}
    for w in job.live_tasks("worker")[:1]:  # an untrained model may give the job nothing
        h.core.handle(ev.FrameworkMessage(w.executor_id, w.agent_id,
                                          encode_b64(ProgressReport(job.job_id, w.task_id, 1, 1.0, 1, 1.0))))
    h.offer(make_offer("a1"), make_offer("a2"))
    h.next_slot()
    assert ol.version == 2
    after = policy.net.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    blob = h.store.get_model(2)
    other = DL2OnlineModel(DL2Policy(net=ActorCritic(DL2Config())))
    other.load(blob)
    assert all(torch.equal(other.policy.net.state_dict()[k], after[k]) for k in after)


def _dl2_state(slot: int):
    from dl2_mesos.cluster import AgentView, ClusterState, JobView
    from dl2_mesos.jobs import JobSpec
    from dl2_mesos.resources import Resources

    node = Resources(cpus=8.0, gpus=2.0, mem=48 * 1024.0)
    agents = tuple(AgentView(f"a{i}", f"h{i}", node, node) for i in range(2))
    jobs = tuple(JobView(f"j{i}", JobSpec(job_type="resnet-50", epochs=100.0), arrival_slot=0, arrival_time=0.0,
                         epochs_done=0.0, num_ps=0, num_workers=0, slots_run=slot, slots_since_rescale=0)
                 for i in range(3))
    return ClusterState(slot=slot, slot_seconds=60.0, now=60.0 * slot, jobs=jobs, agents=agents, tasks=())


def test_dl2_updates_rollbacks_and_resumes_reach_the_decisions():
    """The greedy DL2 path decides with a numpy copy of the actor: every weight change (online
    update, rollback, resume) must reach that copy, and the versions must agree with the store."""
    import numpy as np
    import torch

    from dl2_mesos.policy.dl2.online_model import DL2OnlineModel
    from dl2_mesos.policy.dl2.model_config import DL2Config
    from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
    from dl2_mesos.policy.dl2.network import ActorCritic

    torch.manual_seed(0)
    policy = DL2Policy(net=ActorCritic(DL2Config()))
    adapter = DL2OnlineModel(policy)
    store = StateStore(MemoryKV())
    ol = OnlineLearning(store, adapter, "dl2", window=3, margin=0.2, keep=4)
    ol.start()

    from dl2_mesos.policy.dl2.slot import SlotContext

    def decides_with_net() -> bool:
        ctx = SlotContext(_dl2_state(50), policy.config)
        feats = ctx.features(ctx.windows[0], 0).astype(np.float32)
        with torch.no_grad():
            want = policy.net.actor(torch.from_numpy(feats)[None, :])[0].numpy()
        return bool(np.allclose(policy._fast.logits(feats), want, atol=1e-5))

    start = [p.detach().clone() for p in policy.net.actor.parameters()]
    assert ol.version == 1 and policy.version == 1
    for slot in range(1, 4):
        policy.decide(_dl2_state(slot))
        ol.end_slot(1.0)
    assert ol.version == 4 and policy.version == 4
    assert any(not torch.equal(a, b) for a, b in zip(start, policy.net.actor.parameters()))
    assert decides_with_net()
    # an idle slot (no reward) drops the pending experience without a version
    policy.decide(_dl2_state(10))
    ol.end_slot(None)
    assert not adapter.recorder.pending and ol.version == 4
    # a new leader resumes version 4: same weights, and they reach its decisions
    other = DL2Policy(net=ActorCritic(DL2Config()))
    ol2 = OnlineLearning(store, DL2OnlineModel(other), "dl2", window=3)
    ol2.start()
    assert ol2.version == 4 and other.version == 4
    assert all(torch.equal(a, b) for a, b in zip(policy.net.actor.parameters(), other.net.actor.parameters()))
    policy = other
    assert decides_with_net()


def test_registry_gives_a_learnable_model_only_to_policies_that_learn():
    """The learner comes from the policy registry by name (not from probing the policy's attributes)."""
    from dl2_mesos.config import Config
    from dl2_mesos.framework.runner import make_learner
    from dl2_mesos.policy.registry import make_online_model, make_policy_with_learner
    from dl2_mesos.policy_api import OnlineModel

    drf, none = make_policy_with_learner("drf")
    assert none is None and make_online_model("fifo", drf) is None
    dl2, model = make_policy_with_learner("dl2")
    assert isinstance(model, OnlineModel) and model.policy is dl2
    store = StateStore(MemoryKV())
    assert make_learner(Config(policy="drf"), drf, store).describe()["learnable"] is False
    assert make_learner(Config(policy="dl2"), dl2, store).describe()["learnable"] is True


def _slot(ol, adapter, reward, jobs=None):
    """One slot as the core drives it: decision (begin_slot), then the reward at the next slot."""
    from types import SimpleNamespace

    from dl2_mesos.jobs import JobSpec

    adapter.record()
    if jobs is not None:
        spec = JobSpec(job_type="dssm", epochs=100.0)
        ol.begin_slot(SimpleNamespace(jobs=[SimpleNamespace(spec=spec)] * jobs, slot_seconds=60.0), {})
    ol.end_slot(reward)


def test_a_cluster_that_empties_is_not_a_regression():
    """The raw reward sums over jobs, so it falls as jobs finish; the rollback compares per job.
    (Judged on raw rewards against the first window, this run rolled back at every window.)"""
    import random

    rng = random.Random(3)
    store = StateStore(MemoryKV())
    a = FakeAdapter()
    ol = _learning(store, a)
    for n_jobs in [6] * 6 + [5] * 6 + [4] * 6 + [3] * 6 + [2] * 6 + [1] * 6:
        # per job 0.05 of its epochs per slot, seen through 1 or 2 progress reports per slot
        per_job = 0.05 * rng.choice([0.5, 1.0, 1.5])
        _slot(ol, a, per_job * n_jobs, jobs=n_jobs)
    assert not ol.info["rollbacks"], ol.info["rollbacks"]
    assert ol.version > 30


def test_report_noise_alone_does_not_roll_back():
    """Short slots see one progress report more or fewer: a noisy but unchanged reward."""
    import random

    rng = random.Random(7)
    store = StateStore(MemoryKV())
    a = FakeAdapter()
    ol = OnlineLearning(store, a, "fake", window=10, margin=0.2, keep=5)
    ol.start()
    for _ in range(200):
        _slot(ol, a, rng.choice([0.0, 0.1, 0.1, 0.2]), jobs=2)
    assert not ol.info["rollbacks"], ol.info["rollbacks"]


def test_a_drop_under_a_frozen_model_is_not_blamed_on_it():
    store = StateStore(MemoryKV())
    a = FakeAdapter()
    ol = _learning(store, a, enabled=False)
    for r in (1.0, 1.0, 1.0, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1):
        _slot(ol, a, r, jobs=1)
    assert ol.version == 1 and not ol.info["rollbacks"]


def test_rollback_restores_the_window_start_then_holds_it_frozen_for_a_window(caplog):
    store = StateStore(MemoryKV())
    a = FakeAdapter()
    ol = _learning(store, a)  # window 3, keep 4
    for _ in range(3):
        _slot(ol, a, 1.0, jobs=2)
    # the model that decided the window's last slot is the candidate; it becomes the checkpoint
    # once the next window (its consequences) is accepted
    assert ol.info["checkpoint"] == 1 and ol.info["candidate"] == 3 and ol.version == 4
    for _ in range(3):
        _slot(ol, a, 1.0, jobs=2)
    assert ol.info["checkpoint"] == 3
    with caplog.at_level(logging.WARNING):
        for _ in range(12):  # the updates made it far worse
            checkpoint = ol.info["checkpoint"]
            assert store.get_model(checkpoint) is not None  # kept although keep=4 versions are fewer
            _slot(ol, a, 0.05, jobs=2)
            if ol.info["rollbacks"]:
                break
    assert "rolling back" in caplog.text
    rb = ol.info["rollbacks"][-1]
    assert rb["to"] == checkpoint and rb["from"] > checkpoint
    assert "below 80% of the reference window's" in rb["reason"] and "standard error" in rb["reason"]
    assert ol.version == checkpoint and a.weight == checkpoint - 1 and store.models()["current"] == checkpoint
    assert ol.describe()["probation"] is True
    # probation: the restored model is measured frozen for a window (no cascade of rollbacks)
    for _ in range(2):
        _slot(ol, a, 0.05, jobs=2)
    assert ol.version == checkpoint and ol.describe()["probation"] is True
    _slot(ol, a, 0.05, jobs=2)  # the window ends: it is the new reference, and learning resumes
    assert len(ol.info["rollbacks"]) == 1 and ol.describe()["probation"] is False
    assert ol.version > checkpoint and len(set(ol.info["reference"])) == 1


def test_a_bad_update_whose_first_window_still_looks_fine_is_rolled_back_to_a_model_before_it():
    """Rewards lag decisions: the window right after a bad update still earns about what the
    good model's earlier decisions set up. That window must not make the bad model the rollback
    target (CI once rolled a corrupted update back to a later version of itself)."""
    store = StateStore(MemoryKV())
    a = FakeAdapter()
    ol = _learning(store, a)  # window 3
    for _ in range(9):
        _slot(ol, a, 1.0, jobs=2)
    bad = ol.version + 1  # the next update is the bad one
    for r in (0.9, 0.9, 0.9):  # its first window: within the margin (lagged consequences)
        _slot(ol, a, r, jobs=2)
    assert ol.info["checkpoint"] < bad
    for _ in range(15):
        _slot(ol, a, 0.2, jobs=2)
        if ol.info["rollbacks"]:
            break
    rb = ol.info["rollbacks"][-1]
    assert rb["from"] >= bad and rb["to"] < bad
    assert store.get_model(rb["to"]) is not None and ol.version == rb["to"]


def _yardstick_state(n_jobs: int, nodes: int):
    from dl2_mesos.cluster import AgentView, ClusterState, JobView
    from dl2_mesos.jobs import JobSpec
    from dl2_mesos.resources import Resources

    node = Resources(cpus=8.0, gpus=2.0, mem=48 * 1024.0)
    agents = tuple(AgentView(f"a{i}", f"h{i}", node, node) for i in range(nodes))
    # resnet-50 at its minimum (1 PS + 1 worker): 4 CPUs and 1 GPU, so a node holds two
    jobs = tuple(JobView(f"j{i}", JobSpec(job_type="resnet-50", epochs=100.0 * (i + 1)), arrival_slot=0,
                         arrival_time=0.0, epochs_done=0.0) for i in range(n_jobs))
    return ClusterState(slot=0, slot_seconds=60.0, now=0.0, jobs=jobs, agents=agents, tasks=())


def test_the_yardstick_counts_only_the_jobs_the_cluster_holds_at_their_minimum():
    """On a contended cluster the jobs at their minimal sizes do not all fit: the yardstick is
    what the ones that fit would earn (the most valuable first), so a burst of arrivals does not
    raise it beyond what any allocation could earn (the reward's ratio to it would fall under
    every model, and a bad update after the burst would be judged against the burst's windows)."""
    from dl2_mesos.framework.online_learning import slot_yardstick
    from dl2_mesos.speed_model import default_speed_model

    per_epoch = default_speed_model().epochs_per_second("resnet-50", 1, 1, True) * 60.0
    value = [per_epoch / (100.0 * (i + 1)) for i in range(10)]  # job i has 100 (i + 1) epochs
    # four jobs on two nodes fit: every job counts, as without the cap
    assert abs(slot_yardstick(_yardstick_state(4, 2)) - sum(value[:4])) < 1e-12
    # ten jobs on two nodes: four fit, the four most valuable (the shortest) count
    assert abs(slot_yardstick(_yardstick_state(10, 2)) - sum(value[:4])) < 1e-12
    # a burst does not move it while the cluster stays full
    assert slot_yardstick(_yardstick_state(10, 2)) == slot_yardstick(_yardstick_state(6, 2))
    # a state that names no agents: every job counts
    from types import SimpleNamespace

    bare = _yardstick_state(10, 2)
    assert abs(slot_yardstick(SimpleNamespace(jobs=bare.jobs, slot_seconds=60.0)) - sum(value)) < 1e-12
