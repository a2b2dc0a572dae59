"""Policies by name: ``make_policy("drf")``.

Baselines are imported on demand from ``dl2_mesos.policy.baselines``; "dl2" is imported lazily
from ``dl2_mesos.policy.dl2.dl2_policy`` so that baselines never import torch.
"""

from __future__ import annotations

import importlib

from dl2_mesos.errors import UnknownPolicy
from dl2_mesos.policy_api import OnlineModel, Policy

# name -> "module:class"
_POLICIES: dict[str, str] = {
    "drf": "dl2_mesos.policy.baselines.drf:DRFPolicy",
    "tetris": "dl2_mesos.policy.baselines.tetris:TetrisPolicy",
    "optimus": "dl2_mesos.policy.baselines.optimus:OptimusPolicy",
    "fifo": "dl2_mesos.policy.baselines.fifo:FIFOPolicy",
    "srtf": "dl2_mesos.policy.baselines.srtf:SRTFPolicy",
    "srtf-gain": "dl2_mesos.policy.baselines.srtf_gain:SRTFGainPolicy",
    "pollux": "dl2_mesos.policy.baselines.pollux:PolluxPolicy",
    "tiresias": "dl2_mesos.policy.baselines.tiresias:TiresiasPolicy",
    "dl2": "dl2_mesos.policy.dl2.dl2_policy:DL2Policy",
}
# name -> "module:class" of the learnable model online learning drives (policies that learn)
_ONLINE_MODELS: dict[str, str] = {
    "dl2": "dl2_mesos.policy.dl2.online_model:DL2OnlineModel",
}
# name -> "module:class" of the teachers DL2 imitates (in training and online) besides the policies
_TEACHERS: dict[str, str] = {
    "srpt-elastic": "dl2_mesos.policy.dl2.teacher:ElasticSRPTTeacher",
    "srpt-elastic-a1": "dl2_mesos.policy.dl2.teacher:ElasticSRPTTeacherA1",
    "srpt-elastic-min": "dl2_mesos.policy.dl2.teacher:ElasticSRPTTeacherMin",
}
BASELINES = ("drf", "tetris", "optimus", "fifo", "srtf", "srtf-gain", "tiresias")
# baselines that run in a process and environment of their own (seconds per slot, not milliseconds)
EXTERNAL_BASELINES = ("pollux",)


def policy_names() -> tuple[str, ...]:
    """Every registered policy name."""
    return tuple(_POLICIES)


def make_policy(name: str, **kwargs) -> Policy:
    """A new policy instance.

    Raises:
        UnknownPolicy: ``name`` is not registered (the message lists the known names).
    """
    key = name.strip().lower() if isinstance(name, str) else name
    if key not in _POLICIES:
        raise UnknownPolicy(f"unknown policy {name!r}; known: {', '.join(_POLICIES)}")
    module_name, cls_name = _POLICIES[key].split(":")
    module = importlib.import_module(module_name)
    return getattr(module, cls_name)(**kwargs)


def teacher_names() -> tuple[str, ...]:
    """Every name :func:`make_teacher` knows: the teachers and every policy but ``dl2``."""
    return tuple(_TEACHERS) + tuple(n for n in _POLICIES if n != "dl2")


def make_teacher(name: str) -> Policy:
    """A teacher by name: ``srpt-elastic``, ``srpt-elastic-a1``, ``srpt-elastic-min`` or a policy (``drf``, ``optimus``...).

    Raises:
        UnknownPolicy: ``name`` is neither.
    """
    if name in _TEACHERS:
        module_name, cls_name = _TEACHERS[name].split(":")
        return getattr(importlib.import_module(module_name), cls_name)()
    return make_policy(name)


def make_online_model(name: str, policy: Policy, teacher: str | None = None, twin: bool = False) -> OnlineModel | None:
    """The learnable model of ``policy`` (built by ``make_policy(name)``), or None if it does not learn.

    ``teacher``: learn online by imitating this teacher or policy (by name) on the live states
    instead of by reinforcement (raises UnknownPolicy for an unknown name); ``twin``: imitate it on
    simulated futures of the live workload instead (needs ``teacher``).
    """
    key = name.strip().lower() if isinstance(name, str) else name
    if key not in _ONLINE_MODELS:
        return None
    module_name, cls_name = _ONLINE_MODELS[key].split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    if twin:
        return cls(policy, teacher=teacher, twin=True)
    return cls(policy, teacher=teacher) if teacher else cls(policy)


def make_policy_with_learner(name: str, **kwargs) -> tuple[Policy, OnlineModel | None]:
    """A new policy and, for a policy that learns online, its learnable model."""
    policy = make_policy(name, **kwargs)
    return policy, make_online_model(name, policy)
