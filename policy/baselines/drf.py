"""Dominant Resource Fairness (the default in YARN and Mesos; DL2's supervised teacher).

As in the authors' prototype: every job starts the slot at share 0; the job with the
lowest dominant share (ties: earlier arrival) gets one bundle (1 PS + 1 worker), then is
re-queued with its new share until it reaches its caps. Unlike the prototype, a bundle that
fits nowhere drops only that job from the pass; the others keep being served.
"""

from __future__ import annotations

import heapq

from dl2_mesos.allocation import Allocation
from dl2_mesos.cluster import ClusterState
from dl2_mesos.policy.baselines.common import Grower


class DRFPolicy:
    """Progressive filling by dominant share, one bundle at a time."""

    name = "drf"

    def decide(self, state: ClusterState) -> Allocation:
        g = Grower(state)
        heap = [(0.0, i, j.job_id) for i, j in enumerate(state.jobs)]
        heapq.heapify(heap)
        while heap:
            _, i, job_id = heapq.heappop(heap)
            job = state.jobs[i]
            if not g.add_unit(job):
                continue  # does not fit anywhere: skip this job, keep serving the others
            if g.can_grow(job):
                heapq.heappush(heap, (g.dominant_share(job), i, job_id))
        return g.allocation()
