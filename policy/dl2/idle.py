"""The idle-cluster rule: when every job fits at its fastest size at once, run them all so.

If the jobs present would all fit in the cluster's aggregate capacity at the sizes the
no-queueing bound gives them (:func:`~dl2_mesos.policy.sim.bounds.fastest_speed`: each job's
fastest size within its caps), nothing competes for capacity in this slot, and giving each job
that size is what the bound itself does: no decision of the network can do better for the jobs
present. The rule then decides the slot alone (the network is not asked; there is nothing to
learn from a slot whose answer is known). A job already running at another size is rescaled to
its fastest one, paying its restart cost, as the simulator and the cluster charge it.

Why a rule and not the reward: on an idle cluster the rollouts of a stochastic policy differ by
a fraction of a percent, so the policy gradient has almost nothing to go on there, and a policy
trained under contention keeps new jobs small on an idle cluster too (measured: 3 of 200 jobs
started at their fastest size at rho 0.25 by an RL policy from a DRF warm-up). Under contention
the rule never fires and the network decides everything. A rule of the decision loop, like
growth pruning: the checkpoint's ``idle_fastest`` switches it on.
"""

from __future__ import annotations

from dl2_mesos.allocation import Allocation, JobAllocation
from dl2_mesos.cluster import ClusterState, JobView
from dl2_mesos.policy.sim.bounds import fastest_speed
from dl2_mesos.resources import ZERO, Resources


#: (the size's inputs, capacity) -> (PS, workers); the spec itself is not hashable (it carries a
#: dict), so the key names everything the size depends on
_FASTEST: dict[tuple, tuple[int, int]] = {}


def fastest_size(job: JobView, capacity: Resources) -> JobAllocation:
    """The job's fastest size within its caps whose demand fits ``capacity`` (the bound's)."""
    s = job.spec
    key = (s.job_type, s.min_ps, s.max_ps, s.min_workers, s.max_workers, s.worker, s.ps, s.runtime, capacity)
    size = _FASTEST.get(key)
    if size is None:
        if len(_FASTEST) > 4096:
            _FASTEST.clear()
        _, p, w = fastest_speed(s, capacity)
        size = _FASTEST[key] = (p, w)
    return JobAllocation(*size)


def idle_allocation(state: ClusterState) -> Allocation | None:
    """Every job at its fastest size when all of them fit at once, else None (contention)."""
    if not state.jobs:
        return None
    capacity = state.capacity
    sizes: dict[str, JobAllocation] = {}
    need = ZERO
    for job in state.jobs:
        size = fastest_size(job, capacity)
        if size.num_workers == 0:
            return None  # a job that fits nowhere: leave it to the network (it stays waiting)
        sizes[job.job_id] = size
        need = need + job.demand(size.num_ps, size.num_workers)
        if not need.fits_in(capacity):
            return None
    return Allocation(sizes)
