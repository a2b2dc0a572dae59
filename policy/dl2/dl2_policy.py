"""``DL2Policy``: the learned scheduler behind the Policy protocol.

Greedy (argmax over the masked action distribution) at inference by default, so a decision is
a deterministic function of the snapshot and the weights. The network runs in eval mode
without gradients. The result is validated against the state before it is returned.
"""

from __future__ import annotations

import logging
import os

import torch
from threadpoolctl import ThreadpoolController

from dl2_mesos.allocation import Allocation
from dl2_mesos.cluster import ClusterState
from dl2_mesos.policy.dl2.decision_loop import NetChooser, run_slot_chosen, run_slot_greedy
from dl2_mesos.policy.dl2.checkpoint import LoadedModel, load_checkpoint
from dl2_mesos.policy.dl2.greedy import run_slot_greedy_fast
from dl2_mesos.policy.dl2.network import ActorCritic
from dl2_mesos.policy.dl2.online_learner import ExperienceRecorder

logger = logging.getLogger(__name__)

_blas: ThreadpoolController | None = None


def _blas_controller() -> ThreadpoolController:
    """The BLAS thread pools of this process, found once: ``threadpool_limits()`` would scan the
    loaded libraries again at every call (~0.7 ms, a twentieth of a decision)."""
    global _blas
    if _blas is None:
        _blas = ThreadpoolController()
    return _blas


class DL2Policy:
    """The DL2 policy.

    Args:
        model_path: checkpoint to load (default: the model shipped in ``dl2_mesos.policy.models``).
        net: use this in-memory network instead of loading one (training, tests).
        sample: sample actions instead of taking the argmax (off by default).
        seed: seed for sampling.
        recorder: when given, every slot's inferences are recorded into it (online learning).
    """

    name = "dl2"

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        net: ActorCritic | None = None,
        sample: bool = False,
        seed: int = 0,
        recorder: ExperienceRecorder | None = None,
        version: int = 0,
    ) -> None:
        if net is None:
            loaded: LoadedModel = load_checkpoint(model_path)
            net, version = loaded.net, loaded.version
        self.net = net
        self.net.eval()
        self.version = version
        self.config = net.cfg
        self.recorder = recorder
        self.sample = sample
        self._seed = seed
        self.reload_weights()

    def reload_weights(self) -> None:
        """Pick up weights changed in ``self.net`` (online update, rollback, resume).

        The greedy path decides with a numpy *copy* of the actor, so without this call a
        changed network would not change any decision.
        """
        self._chooser = NetChooser(self.net.actor, sample=self.sample, seed=self._seed)
        self._fast = self._chooser.fast  # the chooser's numpy copy (one copy per reload)

    def decide(self, state: ClusterState) -> Allocation:
        """Counts of every job for the slot ``state`` starts (see the slot module for the rules)."""
        # One intra-op thread: the per-inference tensors are tiny, and extra threads only add
        # contention (12 ms instead of 0.25 ms per inference on a busy 2-core machine).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            # same for numpy's BLAS (the greedy path runs the network in numpy)
            with torch.inference_mode(), _blas_controller().limit(limits=1, user_api="blas"):
                if self.sample:
                    alloc, steps = run_slot_chosen(state, self.config, self._chooser)
                elif self.config.arch == "shared":
                    record = self.recorder is not None  # the steps are only needed to learn from
                    alloc, steps = run_slot_greedy_fast(state, self.config, self._fast, record=record,
                                                        keep_steps=record)
                else:
                    alloc, steps = run_slot_greedy(state, self.config, self._fast)
        finally:
            torch.set_num_threads(threads)
        # (the slot context validated the allocation against the state when it built it)
        if self.recorder is not None:
            self.recorder.record_decision(state, steps, alloc, self.version, per_job=self.config.per_job)
        return alloc
