"""The one Policy interface, used by the simulator, the framework and every baseline, and the
interface of a policy's learnable model for online learning on the cluster."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from dl2_mesos.allocation import Allocation
from dl2_mesos.cluster import ClusterState


@runtime_checkable
class Policy(Protocol):
    """A scheduling policy.

    Contract:
        * ``decide`` is a pure function of the snapshot (and the policy's own parameters): it
          never mutates ``state`` and keeps no hidden dependence on live cluster objects.
        * It returns counts only (no placement); the result passes
          :func:`dl2_mesos.allocation.validate_allocation` for ``state``.
        * Jobs missing from the result get nothing this slot.
        * It must finish well inside the slot (milliseconds for tens of jobs).
    """

    name: str

    def decide(self, state: ClusterState) -> Allocation:
        """Return the PS/worker counts of every job for the slot ``state`` starts."""
        ...


@runtime_checkable
class OnlineModel(Protocol):
    """The learnable model behind a policy, as the framework's online learning drives it.

    The registry (:func:`dl2_mesos.policy.registry.make_online_model`) builds one for a policy
    that can learn (DL2, §4.3: one update at the end of each time slot); baselines have none.
    The policy records its decisions itself; the framework only supplies each slot's reward.
    """

    def complete_slot(self, reward: float) -> bool:
        """Attach ``reward`` to the experience recorded at the last decision; True if there was one."""
        ...

    def skip_slot(self) -> None:
        """Drop the experience of a slot that gets no reward (no job was active)."""
        ...

    def update(self) -> bool:
        """Train on the completed experience; True when the weights changed."""
        ...

    def set_version(self, version: int) -> None:
        """Label the model (and what it records from now on) with its store version."""
        ...

    def dump(self) -> bytes:
        """The model as bytes (what the framework stores per version)."""
        ...

    def load(self, blob: bytes) -> None:
        """Replace the weights with a :meth:`dump` (resume, rollback)."""
        ...
