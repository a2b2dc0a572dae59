"""The DL2 model configuration: everything needed to rebuild a network and its input schema.

A :class:`DL2Config` is stored inside every checkpoint together with :data:`SCHEMA_VERSION`,
so a checkpoint is only ever loaded into a network that reads features the same way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from dl2_mesos.errors import ConfigError
from dl2_mesos.policy.dl2.features import FEATURE_SETS

#: Version of the feature layout (see :mod:`dl2_mesos.policy.dl2.features`). Bump it whenever the
#: meaning or order of a feature changes; older checkpoints then fail to load with a clear error.
SCHEMA_VERSION = 4

ARCHS = ("shared", "flat")
STARTS = ("current", "zero")
#: job orders of the decision loop (see :mod:`~dl2_mesos.policy.dl2.priority`)
ORDERS = ("arrival", "priority")
#: action spaces and their actions per job column (see :mod:`~dl2_mesos.policy.dl2.slot`)
ACTION_SPACES = {"grow": 3, "elastic": 6}


@dataclass(frozen=True)
class DL2Config:
    """Constructor arguments of the DL2 actor/critic and of its decision loop.

    Attributes:
        window: J, the number of job columns the network sees at once (actions = 3J + 1).
        hidden: width of each hidden layer (paper: 256).
        layers: number of hidden layers (paper: 2).
        arch: ``"flat"`` = the paper's MLP over the flattened J x F state; ``"shared"`` = the same
            2 x 256 MLP applied to every job column with weights shared across columns, plus a
            pooled summary of the window (permutation-equivariant; learns much faster).
        start: where a slot's allocation starts: ``"current"`` = from the jobs' running counts
            (keeping them costs no restart), ``"zero"`` = rebuilt from nothing with a starter
            bundle per job, as in the reference.
        max_steps_per_slot: safety bound on inferences in one slot.
        actions: ``"grow"`` = per job +worker, +PS, +bundle (3J + 1 actions; a job is never
            shrunk); ``"elastic"`` = those plus -worker, -PS and pause (6J + 1 actions), so the
            policy can also take capacity back (restart cost charged by the simulator).
        order: the order the loop sees the jobs in (windows, starters): ``"arrival"`` or
            ``"priority"`` (see :mod:`~dl2_mesos.policy.dl2.priority`). Checkpoints without
            the field (up to ``dl2-elastic-v5``) load as ``"arrival"``.
        prune_growth: mask grow actions that cannot make the job faster by the measured speed
            table (no size at or beyond the grown one is faster than the job's size now; see
            :mod:`~dl2_mesos.policy.dl2.growth`). A rule of the decision loop, not of the
            weights; checkpoints without the field (up to ``dl2-elastic-v8``) load with it off.
        idle_fastest: the idle-cluster rule (see :mod:`~dl2_mesos.policy.dl2.idle`): when every
            job present fits at its fastest size at once, the slot gives each job that size and
            the network is not asked. A rule of the decision loop; checkpoints without the field
            (up to ``dl2-elastic-v11``) load with it off.
        restart_payback: growth of a running job must repay its restart cost on the job's
            remaining work (see :func:`~dl2_mesos.policy.dl2.growth.payback_speed`): a grow
            action is masked unless some size at or beyond its target would (it includes growth
            pruning's test), and a job the slot leaves at a size that would not goes back to
            the size it ran at (``SlotContext.settle_growth``). A rule of the decision loop;
            checkpoints without the field load with it off.
        restore_idle_shrinks: a running job the slot's decision shrank or paused gets its tasks
            back at the end of the slot when the room it freed is still free (no other job took
            it), unless the smaller size is faster by the speed table
            (``SlotContext.settle_shrinks``). A rule of the decision loop; checkpoints without
            the field load with it off.
        features: the per-job feature set: ``"base"`` (23 columns) or ``"gains"`` (also the
            speed-ups growth would give the job, 27 columns; see
            :mod:`~dl2_mesos.policy.dl2.features`). Checkpoints without the field load as
            ``"base"``.
    """

    window: int = 40
    hidden: int = 256
    layers: int = 2
    arch: str = "shared"
    start: str = "current"
    max_steps_per_slot: int = 20000
    actions: str = "grow"
    order: str = "arrival"
    prune_growth: bool = False
    features: str = "base"
    idle_fastest: bool = False
    restart_payback: bool = False
    restore_idle_shrinks: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.window, int) or self.window < 1:
            raise ConfigError(f"window must be an integer >= 1, got {self.window!r}")
        if not isinstance(self.hidden, int) or self.hidden < 1:
            raise ConfigError(f"hidden must be an integer >= 1, got {self.hidden!r}")
        if not isinstance(self.layers, int) or self.layers < 1:
            raise ConfigError(f"layers must be an integer >= 1, got {self.layers!r}")
        if self.arch not in ARCHS:
            raise ConfigError(f"arch must be one of {ARCHS}, got {self.arch!r}")
        if self.start not in STARTS:
            raise ConfigError(f"start must be one of {STARTS}, got {self.start!r}")
        if self.actions not in ACTION_SPACES:
            raise ConfigError(f"actions must be one of {tuple(ACTION_SPACES)}, got {self.actions!r}")
        if self.order not in ORDERS:
            raise ConfigError(f"order must be one of {ORDERS}, got {self.order!r}")
        if not isinstance(self.prune_growth, bool):
            raise ConfigError(f"prune_growth must be true or false, got {self.prune_growth!r}")
        if not isinstance(self.idle_fastest, bool):
            raise ConfigError(f"idle_fastest must be true or false, got {self.idle_fastest!r}")
        if not isinstance(self.restart_payback, bool):
            raise ConfigError(f"restart_payback must be true or false, got {self.restart_payback!r}")
        if not isinstance(self.restore_idle_shrinks, bool):
            raise ConfigError(f"restore_idle_shrinks must be true or false, got {self.restore_idle_shrinks!r}")
        if self.features not in FEATURE_SETS:
            raise ConfigError(f"features must be one of {tuple(FEATURE_SETS)}, got {self.features!r}")

    @property
    def job_features(self) -> int:
        """Columns per job in the network input."""
        return FEATURE_SETS[self.features]

    @property
    def num_actions(self) -> int:
        return self.per_job * self.window + 1

    @property
    def per_job(self) -> int:
        """Actions per job column (3 for ``grow``, 6 for ``elastic``)."""
        return ACTION_SPACES[self.actions]

    @property
    def void(self) -> int:
        """Index of the void action (the last one)."""
        return self.per_job * self.window

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DL2Config:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown DL2 config field(s): {', '.join(unknown)}")
        return cls(**data)
