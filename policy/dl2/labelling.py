"""Teacher labelling of whole training traces, in parallel worker processes.

The supervised warm-up and its DAgger rounds spend about half their wall time labelling: one
simulation per (preset, seed), each labelled by the teacher and, in a DAgger round, driven by
the student. Traces are independent, so :func:`label_trace` runs in the training run's worker
pool (:class:`~dl2_mesos.policy.dl2.rollout.WorkerPool`), results in the order given. Every labelling is a deterministic function of
its spec (the teacher is a heuristic, the student decides greedily with one BLAS thread), so
the labels, and the weights trained on them, are the same for any number of workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dl2_mesos.policy.dl2.learner import SlotData
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.network import NumpyActor
from dl2_mesos.policy.dl2.rollout import make_sim
from dl2_mesos.policy.dl2.supervised import collect_teacher_episode


@dataclass(frozen=True)
class LabelSpec:
    """One trace to label.

    ``student``: the student's actor weights (a DAgger round: the student drives the trace and
    the teacher labels the states it reaches); None: the teacher drives. ``within_slot``: the
    student also acts inside each slot (see :func:`collect_teacher_episode`).
    """

    preset: str
    seed: int
    config: dict[str, Any]  # DL2Config.to_dict()
    teacher: str
    label_running: bool = False
    max_slots: int | None = None
    student: dict[str, Any] | None = None
    within_slot: bool = False


@dataclass(frozen=True)
class LabelledTrace:
    """The labels of one trace and the avg JCT (s) of the run that produced them."""

    slots: list[SlotData]
    avg_jct: float


def label_trace(spec: LabelSpec) -> LabelledTrace:
    """Simulate and label one trace (runs in a worker process or inline)."""
    from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
    from dl2_mesos.policy.dl2.network import ActorCritic
    from dl2_mesos.policy.registry import make_teacher

    cfg = DL2Config.from_dict(spec.config)
    driver = within = None
    if spec.student is not None:
        with torch.random.fork_rng():  # building the network must not move the caller's seed
            net = ActorCritic(cfg)
        net.actor.load_state_dict(spec.student)
        if spec.within_slot:
            within = NumpyActor(net.actor)
        else:
            driver = DL2Policy(net=net)
    sim = make_sim(spec.preset, spec.seed, spec.max_slots)
    slots = collect_teacher_episode(sim, cfg, make_teacher(spec.teacher), spec.label_running,
                                    driver=driver, within_slot=within)
    return LabelledTrace(slots, float(sim.metrics().avg_jct))

