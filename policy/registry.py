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


def make_online_model(name: str, policy: Policy) -> OnlineModel | None:
    """The learnable model of ``policy`` (built by ``make_policy(name)``), or None if it does not learn."""
    key = name.strip().lower() if isinstance(name, str) else name
    if key not in _ONLINE_MODELS:
        return None
    module_name, cls_name = _ONLINE_MODELS[key].split(":")
    return getattr(importlib.import_module(module_name), cls_name)(policy)


def make_policy_with_learner(name: str, **kwargs) -> tuple[Policy, OnlineModel | None]:
    """A new policy and, for a policy that learns online, its learnable model."""
    policy = make_policy(name, **kwargs)
    return policy, make_online_model(name, policy)
