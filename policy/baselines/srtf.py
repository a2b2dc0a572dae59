"""Shortest remaining time first.

Like FIFO (jobs grown to their caps one after the other), but in order of **remaining time**
(as the name says; not the prototype's remaining fraction, see below): remaining epochs /
epochs per second at the size SRTF gives the job when it is served -- its caps (``max_ps`` PS, ``max_workers`` workers; the speed model clamps counts
beyond the measured range); ties by arrival. The prototype sorted by remaining *fraction*,
under which all new jobs tie at 1.0 and SRTF degenerates to FIFO.

The speed is taken at this fixed size, not at the job's current counts: with the measured,
non-monotone speeds, ranking by current counts lets two jobs swap places every slot (the one
that got fewer tasks can look faster), paying the restart cost each time.
``starter_bundle`` as for FIFO (off by default).
"""

from __future__ import annotations

from dl2_mesos.allocation import Allocation
from dl2_mesos.cluster import ClusterState, JobView
from dl2_mesos.policy.baselines.fifo import serve_in_order
from dl2_mesos.speed_model import default_speed_model


def remaining_seconds(job: JobView, speed_model) -> float:
    """Remaining epochs over the speed at the job's caps (the size SRTF serves it at)."""
    spec = job.spec
    eps = speed_model.epochs_per_second(spec.job_type, spec.max_ps, spec.max_workers, spec.uses_ps)
    return job.remaining_epochs / eps if eps > 0 else float("inf")


class SRTFPolicy:
    """Serve jobs fully, shortest remaining time first."""

    name = "srtf"

    def __init__(self, starter_bundle: bool = False, speed_model=None) -> None:
        self.starter_bundle = starter_bundle
        self.speed_model = speed_model if speed_model is not None else default_speed_model()

    def decide(self, state: ClusterState) -> Allocation:
        order = sorted(
            state.jobs, key=lambda j: (remaining_seconds(j, self.speed_model), j.arrival_time, j.job_id)
        )
        return serve_in_order(state, order, self.starter_bundle)
