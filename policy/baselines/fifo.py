"""First-in-first-out.

As in the authors' prototype: jobs in arrival order, each grown bundle by bundle up to
its caps before the next job is served. A job that cannot grow (its next bundle fits nowhere)
no longer ends the pass: later jobs are still tried (the prototype stopped the whole pass
there), so a small CPU-only job can use what a large GPU job leaves.

``starter_bundle=True`` first gives every job one bundle (its minimum) in arrival order, as
the DL2 prototype does for its own policy (before its network adds single tasks). It is
off by default: the prototype's FIFO does not have it, and it would turn FIFO into a
different, fairer policy.
"""

from __future__ import annotations

from dl2_mesos.allocation import Allocation
from dl2_mesos.cluster import ClusterState, JobView
from dl2_mesos.policy.baselines.common import Grower


def serve_in_order(state: ClusterState, order: list[JobView], starter_bundle: bool) -> Allocation:
    """Grow jobs to their caps in ``order`` (after an optional starter bundle each)."""
    g = Grower(state)
    if starter_bundle:
        for job in order:
            g.add_unit(job)
    for job in order:
        g.fill(job)
    return g.allocation()


class FIFOPolicy:
    """Serve jobs fully in arrival order."""

    name = "fifo"

    def __init__(self, starter_bundle: bool = False) -> None:
        self.starter_bundle = starter_bundle

    def decide(self, state: ClusterState) -> Allocation:
        order = sorted(state.jobs, key=lambda j: (j.arrival_time, j.job_id))
        return serve_in_order(state, order, self.starter_bundle)
