"""Online imitation: DAgger on the live cluster, an alternative to the paper's online RL.

The shipped model was trained by imitating a teacher (``srpt-elastic-min``) on simulated
traces, then on the states its own decisions reach (DAgger). When the live workload drifts away
from those traces (other job types, longer jobs, faster arrivals) the student may meet states it
never saw and trail its teacher there by more than on its training traces (the previous model,
v7, trailed its teacher by 10-15% of the drifted jobs' avg JCT on the drift bench's workload in
the simulator, against 2.5-3% in distribution; see the README). Where the student already
matches its teacher, imitation has nothing to gain and its updates only add noise (v8 on that
same workload: see the README). Online
imitation continues DAgger on the cluster: every slot DL2 decided is labelled with the teacher's
decision from the same state (the teacher's label path, :func:`~.supervised.teacher_steps`),
and the actor takes a few cross-entropy steps on the labels of the last ``keep_slots`` slots.

Unlike online RL it needs no reward to learn from (the framework still judges each window by
its reward and rolls a bad update back the same way), and it does not wait for the consequences
of a decision to show up in the reward.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from dl2_mesos.cluster import ClusterState
from dl2_mesos.policy.dl2.features import input_size
from dl2_mesos.policy.dl2.learner import stack_steps
from dl2_mesos.policy.dl2.network import ActorCritic, masked_log_probs
from dl2_mesos.policy.dl2.online_learner import save_online_model
from dl2_mesos.policy.dl2.supervised import teacher_steps
from dl2_mesos.policy_api import Policy


class ImitationTrainer:
    """Updates a live DL2 actor towards ``teacher``'s decisions on the states it decided in.

    Args:
        net: the model to update in place (e.g. ``DL2Policy.net``).
        teacher: the policy whose decisions are the labels.
        lr: Adam learning rate of the actor.
        steps_per_slot: gradient steps per slot learned from.
        batch: samples per gradient step (drawn from the kept slots).
        keep_slots: the labels of this many recent slots are learned from (older ones are
            dropped: the workload drifts).
        version: the model's current version; each update bumps it.
        seed: seed of the minibatch draws.
    """

    def __init__(self, net: ActorCritic, teacher: Policy, *, lr: float = 1e-3, steps_per_slot: int = 8,
                 batch: int = 256, keep_slots: int = 50, version: int = 0, seed: int = 0) -> None:
        if lr <= 0 or steps_per_slot < 1 or batch < 1 or keep_slots < 1:
            raise ValueError("online imitation: lr must be > 0, steps_per_slot, batch and keep_slots >= 1")
        self.net = net
        self.teacher = teacher
        self.steps_per_slot = steps_per_slot
        self.batch = batch
        self.version = version
        self._opt = torch.optim.Adam(net.actor.parameters(), lr=lr)
        self._slots: deque[tuple[np.ndarray, np.ndarray, np.ndarray]] = deque(maxlen=keep_slots)
        self._gen = torch.Generator().manual_seed(seed)

    def label(self, state: ClusterState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The teacher's label path from ``state``: (features, masks, actions) arrays."""
        cfg = self.net.cfg
        _, steps = teacher_steps(state, cfg, self.teacher)
        return stack_steps(steps, input_size(cfg.window, "", cfg.features), cfg.per_job * cfg.window + 1)

    def update(self, states: Sequence[ClusterState]) -> dict[str, float]:
        """Label ``states`` (slots DL2 decided in) and learn from the kept slots' labels.

        Returns ``loss`` (mean cross entropy of the last step), ``accuracy`` (the actor's argmax
        agreement with the new labels before this update), ``samples`` (new labels) and
        ``version``. No new label leaves the weights and the version as they were.
        """
        new = [self.label(s) for s in states if s.jobs]
        new = [lab for lab in new if len(lab[2])]
        samples = sum(len(lab[2]) for lab in new)
        stats: dict[str, float] = {"samples": float(samples), "version": float(self.version)}
        if not samples:
            return stats
        x_new = torch.from_numpy(np.concatenate([lab[0] for lab in new]))
        m_new = torch.from_numpy(np.concatenate([lab[1] for lab in new]))
        y_new = torch.from_numpy(np.concatenate([lab[2] for lab in new]))
        with torch.no_grad():
            agree = (masked_log_probs(self.net.actor(x_new), m_new).argmax(-1) == y_new).float().mean()
        self._slots.extend(new)
        xs, ms, ys = (torch.from_numpy(np.concatenate(part)) for part in zip(*self._slots))
        loss = torch.zeros(())
        for _ in range(self.steps_per_slot * len(new)):
            idx = torch.randint(len(ys), (min(self.batch, len(ys)),), generator=self._gen)
            loss = nn.functional.nll_loss(masked_log_probs(self.net.actor(xs[idx]), ms[idx]), ys[idx])
            self._opt.zero_grad()
            loss.backward()
            self._opt.step()
        self.version += 1
        stats.update(loss=float(loss.item()), accuracy=float(agree), version=float(self.version))
        return stats

    def save(self, path: str | Path, meta: Mapping[str, Any] | None = None) -> Path:
        """Write the updated model (with its version) to ``path``."""
        return save_online_model(self.net, self.version, path, dict(meta or {}, imitation=True))
