"""The one Policy interface, used by the simulator, the framework and every baseline."""

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
