"""DL2's learnable model on the cluster: what the framework's online learning drives.

The framework supplies each slot's reward (§4.3, eq. (1)); the policy records its own
inferences while deciding. This adapter attaches the reward to the recorded slot, trains on
completed slots, and moves the weights in and out of the framework's model store.
"""

from __future__ import annotations

import os
import tempfile

from dl2_mesos.policy.dl2.checkpoint import load_checkpoint
from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
from dl2_mesos.policy.dl2.online_imitation import ImitationTrainer
from dl2_mesos.policy.dl2.online_learner import ExperienceRecorder, OnlineTrainer
from dl2_mesos.policy.dl2.twin import TwinConfig, TwinTrainer
from dl2_mesos.policy.registry import make_teacher


class DL2OnlineModel:
    """:class:`~dl2_mesos.policy_api.OnlineModel` over a ``DL2Policy``, its
    ``ExperienceRecorder`` and an ``OnlineTrainer`` (the paper's online RL), or, with
    ``teacher`` (a teacher or policy name, e.g. ``srpt-elastic-a1``), an ``ImitationTrainer``
    (online DAgger: :mod:`~dl2_mesos.policy.dl2.online_imitation`); with ``twin`` as well, a
    ``TwinTrainer`` (DAgger on simulated futures of the live workload, labelled by that teacher:
    :mod:`~dl2_mesos.policy.dl2.twin`; ``twin_config`` its settings, by default rounds in a
    background process).

    Raises:
        UnknownPolicy: ``teacher`` names no teacher or policy.
    """

    def __init__(self, policy: DL2Policy, teacher: str | None = None, twin: bool = False,
                 twin_config: TwinConfig | None = None) -> None:
        self.policy = policy
        if policy.recorder is None:
            policy.recorder = ExperienceRecorder()
        self.recorder = policy.recorder
        self.trainer: OnlineTrainer | ImitationTrainer | TwinTrainer
        if twin and not teacher:
            raise ValueError("online learning on a twin of the workload needs a teacher to label it")
        if teacher:
            self.recorder.keep_states = True
            labeller = make_teacher(teacher)
            self.trainer = (TwinTrainer(policy.net, labeller, twin_config, version=policy.version) if twin
                            else ImitationTrainer(policy.net, labeller, version=policy.version))
        else:
            self.trainer = OnlineTrainer(policy.net, version=policy.version)

    def complete_slot(self, reward: float) -> bool:
        return self.recorder.complete_slot(reward=reward) is not None

    def skip_slot(self) -> None:
        """Drop the pending experience of a slot without reward (no job was active: nothing
        was decided, and the recorder would otherwise warn about it at the next decision)."""
        self.recorder.drop_pending()

    def set_version(self, version: int) -> None:
        """Label the model (and the experience recorded from now on) with its store version."""
        self.policy.version = self.trainer.version = int(version)

    def _weights_changed(self) -> None:
        # the policy decides with a numpy copy of the actor: refresh it, or an update (or a
        # rollback / resume) would never reach a decision
        reload = getattr(self.policy, "reload_weights", None)
        if reload is not None:
            reload()

    def update(self) -> bool:
        exps = self.recorder.drain()
        if not exps:
            return False
        self.policy.net.train()
        try:
            if isinstance(self.trainer, (ImitationTrainer, TwinTrainer)):
                stats = self.trainer.update(self.recorder.drain_states())
            else:
                stats = self.trainer.update(exps)
        finally:
            self.policy.net.eval()
        self.policy.version = self.trainer.version
        changed = stats.get("samples", 0.0) > 0
        if changed:
            self._weights_changed()
        return changed

    def dump(self) -> bytes:
        fd, path = tempfile.mkstemp(suffix=".pt")
        os.close(fd)
        try:
            self.trainer.save(path)
            with open(path, "rb") as fh:
                return fh.read()
        finally:
            os.unlink(path)

    def load(self, blob: bytes) -> None:
        fd, path = tempfile.mkstemp(suffix=".pt")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
            loaded = load_checkpoint(path)
        finally:
            os.unlink(path)
        self.policy.net.load_state_dict(loaded.net.state_dict())
        self.policy.net.eval()
        self._weights_changed()
