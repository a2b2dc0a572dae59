"""Per-slot accounting shared by the simulator and the framework: the reward of a slot, the
per-job view a policy decides on, and each job's rescale bookkeeping (:class:`RescaleLedger`,
:func:`account_counts`).

Both paths must agree on these, or a model trained in the simulator would see different
numbers on the cluster (train/serve skew).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dl2_mesos.cluster import JobView
from dl2_mesos.jobs import JobSpec


def job_reward(epochs_trained: float, total_epochs: float) -> float:
    """One job's share of a slot's reward: the fraction of its epochs trained in the slot.

    Normalising by the job's total epochs keeps large jobs from dominating (DL2 §4.3, eq. (1)).
    """
    if total_epochs <= 0:
        return 0.0
    return max(0.0, float(epochs_trained)) / float(total_epochs)


def slot_reward(trained: Mapping[str, float], total_epochs: Mapping[str, float]) -> float:
    """DL2's reward of one slot (§4.3, eq. (1)): the sum over the jobs that ran of
    epochs trained in the slot / the job's total epochs.

    Args:
        trained: epochs each job trained in the slot.
        total_epochs: each of those jobs' total epochs.
    """
    return sum(job_reward(done, total_epochs[job_id]) for job_id, done in trained.items())


@dataclass(frozen=True)
class RescaleLedger:
    """One job's rescale bookkeeping, kept the same way by the simulator and the framework
    (changed only by :func:`account_counts`, read by :func:`job_view`).

    Attributes:
        last_change_slot: the last slot whose decision changed the job's (PS, workers) counts
            (a start, a grow, a shrink, a preemption); its arrival slot until then.
        has_run: whether a slot has granted the job tasks (its first launch is free: there is
            no checkpoint to restore).
        rescales: slots that restarted the job from its checkpoint so far.
    """

    last_change_slot: int
    has_run: bool = False
    rescales: int = 0

    def slots_since_rescale(self, slot: int) -> int:
        """Slots since the counts last changed, as the policy sees it at the start of ``slot``."""
        return max(0, slot - self.last_change_slot)

    def to_dict(self) -> dict[str, Any]:
        return {"last_change_slot": self.last_change_slot, "has_run": self.has_run, "rescales": self.rescales}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RescaleLedger:
        return cls(int(d["last_change_slot"]), bool(d["has_run"]), int(d["rescales"]))


@dataclass(frozen=True)
class SlotCounts:
    """What one slot's decision did to one job (:func:`account_counts`).

    Attributes:
        ledger: the job's bookkeeping after the decision.
        restarted: the job restarts from its checkpoint in this slot (one more rescale).
        restart_seconds: the restart cost the slot is charged (0 unless ``restarted``).
    """

    ledger: RescaleLedger
    restarted: bool = False
    restart_seconds: float = 0.0


def account_counts(ledger: RescaleLedger, slot: int, running: tuple[int, int], granted: tuple[int, int],
                   restart_seconds: float, slot_seconds: float) -> SlotCounts:
    """Book the decision of ``slot`` that moves a job from ``running`` to ``granted`` (PS, workers).

    The one rule of both paths (restart costs: DL2 §5 is about making them cheap):

    * any change of the counts, to zero included, restarts the ``slots_since_rescale`` clock;
    * a job that has run before and is granted different, non-zero counts restarts from its
      checkpoint -- a grow, a shrink, a resume after a preemption: the slot counts as a rescale
      and is charged ``restart_seconds`` (at most the whole slot);
    * the first launch is free.

    ``running`` is what the job ran when the slot's snapshot was taken (its ``JobView`` counts).
    """
    changed = (int(granted[0]), int(granted[1])) != (int(running[0]), int(running[1]))
    last = slot if changed else ledger.last_change_slot
    if granted[0] == 0 and granted[1] == 0:
        return SlotCounts(RescaleLedger(last, ledger.has_run, ledger.rescales))
    if ledger.has_run and changed:
        charged = min(float(slot_seconds), max(0.0, float(restart_seconds)))
        return SlotCounts(RescaleLedger(last, True, ledger.rescales + 1), True, charged)
    return SlotCounts(RescaleLedger(last, True, ledger.rescales))


def job_view(job_id: str, spec: JobSpec, *, slot: int, arrival_slot: int, arrival_time: float,
             epochs_done: float, num_ps: int, num_workers: int, ledger: RescaleLedger,
             measured_epochs_per_second: float | None = None,
             measured_restart_seconds: float | None = None) -> JobView:
    """The view of one active job at the start of ``slot`` (what every policy receives).

    ``slots_run`` (the paper's *d*, §4.1: slots the job has been in the cluster) and
    ``slots_since_rescale`` are derived here, the same way for both paths.
    """
    return JobView(
        job_id=job_id, spec=spec, arrival_slot=arrival_slot, arrival_time=arrival_time,
        epochs_done=epochs_done, num_ps=num_ps, num_workers=num_workers,
        slots_run=max(0, slot - arrival_slot), slots_since_rescale=ledger.slots_since_rescale(slot),
        rescales=ledger.rescales, measured_epochs_per_second=measured_epochs_per_second,
        measured_restart_seconds=measured_restart_seconds,
    )
