"""Policies by name: ``make_policy("drf")``.

Baselines are imported on demand from ``dl2_mesos.policy.baselines``; "dl2" is imported lazily
from ``dl2_mesos.policy.dl2.dl2_policy`` so that baselines never import torch.
"""

from __future__ import annotations

import importlib

from dl2_mesos.errors import UnknownPolicy
from dl2_mesos.policy_api import Policy

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
