"""Per-slot accounting shared by the simulator and the framework: the reward of a slot and the
per-job view a policy decides on.

Both paths must agree on these, or a model trained in the simulator would see different
numbers on the cluster (train/serve skew).
"""

from __future__ import annotations

from collections.abc import Mapping

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


def job_view(job_id: str, spec: JobSpec, *, slot: int, arrival_slot: int, arrival_time: float,
             epochs_done: float, num_ps: int, num_workers: int, slots_since_rescale: int, rescales: int,
             measured_epochs_per_second: float | None = None,
             measured_restart_seconds: float | None = None) -> JobView:
    """The view of one active job at the start of ``slot`` (what every policy receives).

    ``slots_run`` (the paper's *d*, §4.1: slots the job has been in the cluster) is derived here,
    the same way for both paths.
    """
    return JobView(
        job_id=job_id, spec=spec, arrival_slot=arrival_slot, arrival_time=arrival_time,
        epochs_done=epochs_done, num_ps=num_ps, num_workers=num_workers,
        slots_run=max(0, slot - arrival_slot), slots_since_rescale=max(0, slots_since_rescale),
        rescales=rescales, measured_epochs_per_second=measured_epochs_per_second,
        measured_restart_seconds=measured_restart_seconds,
    )
