"""Tetris (Grandl et al., SIGCOMM 2014) adapted to PS/worker jobs, as in DL2's comparison.

The paper's intent (as DL2's evaluation, §6, describes Tetris): prefer jobs whose task
*packs well* on a node and jobs with the **shortest remaining time**. The prototype's formula, read literally, adds remaining
work with a positive weight and so prefers the *longest* jobs; we follow the intent and
subtract it.

Per slot, from scratch, as in the authors' prototype: agents are visited in id order; on the current agent,
every job whose next unit (a bundle of 1 PS + 1 worker, its minimum first) fits there gets

* ``align = sum_r free_r / capacity_r * demand_r / capacity_r`` over cpus, gpus, mem (the
  packing score: large when the demand matches what the agent has left), and
* ``rem = remaining epochs / epochs-per-second at one bundle x sum_r demand_r / capacity_r``
  (remaining work: remaining time at a fixed reference size times the unit's size),

``score = align - weight * rem`` with ``weight = mean(align) / mean(rem)`` over the candidates
(the prototype's balancing of the two terms). The best job gets its unit on this agent; scores
are recomputed; when no unit fits the agent, the walk moves on. So the top job keeps getting
tasks while it packs well (Tetris's "keep adding until a threshold"), up to its caps.
``starter_bundle`` as for FIFO (off by default).

Demands that fit on no single agent (``dl2-facts`` has none; a user's trace may): a job whose
minimum fits on no one agent gets it first, spread over agents all or nothing (the placement
every baseline shares), and a job whose PS + worker bundle fits on no one agent grows one task
at a time (the role it has fewer of). Otherwise such jobs would never start or grow.
"""

from __future__ import annotations

import numpy as np

from dl2_mesos.allocation import Allocation, JobAllocation
from dl2_mesos.cluster import ClusterState
from dl2_mesos.placement import PlacementBoard
from dl2_mesos.policy.baselines.common import minimum, place_tasks
from dl2_mesos.speed_model import default_speed_model


class TetrisPolicy:
    """Packing score plus shortest-remaining-time preference, node by node."""

    name = "tetris"

    def __init__(self, starter_bundle: bool = False, speed_model=None) -> None:
        self.starter_bundle = starter_bundle
        self.speed_model = speed_model if speed_model is not None else default_speed_model()

    def decide(self, state: ClusterState) -> Allocation:
        jobs = state.jobs
        n = len(jobs)
        if n == 0:
            return Allocation()
        agents = state.agents
        caps = np.array([[a.available.cpus, a.available.gpus, a.available.mem] for a in agents], dtype=float)
        free = caps.copy()
        index = {a.agent_id: i for i, a in enumerate(agents)}
        ps_d = np.array([[j.spec.ps.cpus, j.spec.ps.gpus, j.spec.ps.mem] for j in jobs], dtype=float)
        w_d = np.array(
            [[j.spec.worker.cpus, j.spec.worker.gpus, j.spec.worker.mem] for j in jobs], dtype=float
        )
        uses_ps = np.array([j.spec.uses_ps for j in jobs])
        max_ps = np.array([j.spec.max_ps if j.spec.uses_ps else 0 for j in jobs])
        max_w = np.array([j.spec.max_workers for j in jobs])
        mins = [minimum(j.spec) for j in jobs]
        min_ps = np.array([m[0] for m in mins])
        min_w = np.array([m[1] for m in mins])
        ps = np.zeros(n, dtype=int)
        w = np.zeros(n, dtype=int)
        # demands that fit on no single agent: spread the minimum, grow one task at a time
        best_agent = caps.max(axis=0)
        min_d = min_ps[:, None] * ps_d + min_w[:, None] * w_d
        spread = ~np.all(min_d <= best_agent + 1e-9, axis=1)
        split = ~np.all(ps_d + w_d <= best_agent + 1e-9, axis=1)
        rem_time = np.empty(n)
        for k, j in enumerate(jobs):
            eps = self.speed_model.epochs_per_second(
                j.spec.job_type, min_ps[k] or min_w[k], min_w[k], j.spec.uses_ps
            )
            rem_time[k] = j.remaining_epochs / eps if eps > 0 else 1e18

        def unit_of(k: int) -> tuple[int, int]:
            if ps[k] == 0 and w[k] == 0:
                return (0, 0) if spread[k] else (int(min_ps[k]), int(min_w[k]))
            add_ps, add_w = int(ps[k] < max_ps[k] and uses_ps[k]), int(w[k] < max_w[k])
            if add_ps and add_w and split[k]:  # the bundle fits no agent: the scarcer role alone
                return (0, 1) if w[k] <= ps[k] else (1, 0)
            return add_ps, add_w

        def place_on(agent_order, single: bool) -> None:
            """Walk agents; ``single``: each job gets at most one unit (starter pass)."""
            units = [unit_of(k) for k in range(n)]
            add_ps = np.array([u[0] for u in units], dtype=float)
            add_w = np.array([u[1] for u in units], dtype=float)
            demand = add_ps[:, None] * ps_d + add_w[:, None] * w_d
            growable = (add_ps + add_w) > 0
            for a in agent_order:
                c = caps[a]
                inv = np.divide(1.0, c, out=np.zeros(3), where=c > 0)
                inv2 = inv * inv
                while True:
                    f = free[a]
                    ok = growable & np.all(demand <= f + 1e-9, axis=1)
                    cnt = np.count_nonzero(ok)
                    if cnt == 0:
                        break
                    align = demand @ (f * inv2)  # sum_r demand_r/cap_r * free_r/cap_r
                    rem = rem_time * (demand @ inv)
                    ma, mr = align[ok].sum() / cnt, rem[ok].sum() / cnt
                    weight = ma / mr if mr > 0 else 0.0
                    score = np.where(ok, align - weight * rem, -np.inf)
                    k = int(np.argmax(score))  # first maximum: earliest arrival wins ties
                    free[a] -= demand[k]
                    ps[k] += int(add_ps[k])
                    w[k] += int(add_w[k])
                    if single:
                        growable[k] = False
                        continue
                    u = unit_of(k)
                    add_ps[k], add_w[k] = u
                    demand[k] = u[0] * ps_d[k] + u[1] * w_d[k]
                    growable[k] = (u[0] + u[1]) > 0
                if not growable.any():
                    return

        if spread.any():
            # minimums that fit on no one agent go first, spread over agents all or nothing
            board = PlacementBoard(agents)
            for k in np.flatnonzero(spread):
                spec = jobs[k].spec
                placed = place_tasks(board, spec.ps, spec.worker, int(min_ps[k]), int(min_w[k]))
                if placed is None:
                    continue
                for agent_id, d in placed:
                    free[index[agent_id]] -= (d.cpus, d.gpus, d.mem)
                ps[k], w[k] = min_ps[k], min_w[k]
        order = range(len(agents))
        if self.starter_bundle:
            place_on(order, single=True)
        place_on(order, single=False)
        return Allocation(
            {jobs[k].job_id: JobAllocation(int(ps[k]), int(w[k])) for k in range(n) if ps[k] or w[k]}
        )
