"""Rollout policy improvement: a slot's decision chosen by simulating what follows it.

The policy-improvement step of policy iteration, done by search in the simulator instead of by a
gradient estimate. In a state of a training trace, the network's greedy decision and
``candidates - 1`` decisions sampled from the network (its own alternatives, in proportion to
the probability it gives them) are each applied to a copy of the simulator, which then runs
``horizon`` more slots under the greedy network; the decision whose copy spends the fewest
job-slots (the JCT reward: minus its sum over a run is the sum of JCTs) is taken. Every copy
starts from the same state and draws the same random numbers, so two decisions are compared on
one and the same future, exactly, not through the noise of separate rollouts that a policy
gradient averages over. Ties go to the greedy decision, and with it among the candidates the
improved decision never spends more job-slots over the horizon than greedy.

The copies see the trace's future arrivals, which no scheduler does; the improver exists only
in training, where :mod:`~dl2_mesos.policy.dl2.policy_iteration` distils its decisions into the
network, which then decides alone. The only signal is the simulated reward of the network's own
alternatives: no heuristic takes part.
"""

from __future__ import annotations

import copy

from dl2_mesos.allocation import Allocation
from dl2_mesos.cluster import ClusterState
from dl2_mesos.policy.dl2.decision_loop import NetChooser, run_slot
from dl2_mesos.policy.dl2.greedy import run_slot_greedy_fast
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.network import Actor, NumpyActor
from dl2_mesos.policy.dl2.rollout import jct_reward
from dl2_mesos.policy.sim.simulator import Simulator


def greedy_decision(state: ClusterState, cfg: DL2Config, fast: NumpyActor) -> Allocation:
    """The network's greedy allocation for ``state`` (nothing when no job is there)."""
    if not state.jobs:
        return Allocation()
    return run_slot_greedy_fast(state, cfg, fast, keep_steps=False)[0]


class RolloutImprover:
    """The improved policy on one training trace: bound to that trace's simulator.

    ``decide(state)`` must be called with the simulator's current state (as the training loop
    does before it steps the simulator); the simulator itself is never moved by the improver.

    Attributes:
        decided: slots decided; improved: slots where a sampled decision beat greedy;
        last_improved: whether the latest decision was such a slot.
    """

    name = "rollout-improver"

    def __init__(self, sim: Simulator, cfg: DL2Config, actor: Actor, candidates: int = 8,
                 horizon: int = 30, seed: int = 0) -> None:
        if candidates < 1:
            raise ValueError(f"candidates must be >= 1, got {candidates}")
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        self.sim, self.cfg = sim, cfg
        self.candidates, self.horizon = candidates, horizon
        self.fast = NumpyActor(actor)
        self.sampler = NetChooser(actor, sample=True, seed=seed)
        self.decided = self.improved = 0
        self.last_improved = False

    def decide(self, state: ClusterState) -> Allocation:
        """The best of the greedy and the sampled decisions for ``state`` over the horizon."""
        self.last_improved = False
        greedy = greedy_decision(state, self.cfg, self.fast)
        if not state.jobs:
            return greedy
        self.decided += 1
        others: list[Allocation] = []
        for _ in range(self.candidates - 1):
            alloc, _ = run_slot(state, self.cfg, self.sampler)
            if alloc != greedy and alloc not in others:
                others.append(alloc)
        if not others:
            return greedy
        best, best_score = greedy, self.score(greedy)
        for alloc in others:
            s = self.score(alloc)
            if s > best_score + 1e-9:
                best, best_score = alloc, s
        if best is not greedy:
            self.improved += 1
            self.last_improved = True
        return best

    def score(self, allocation: Allocation) -> float:
        """Minus the job-slots a copy of the simulator spends when it applies ``allocation`` now
        and the greedy network's decisions for ``horizon - 1`` more slots (higher is better)."""
        fork = copy.deepcopy(self.sim)
        state, alloc, total = fork.state(), allocation, 0.0
        for _ in range(self.horizon):
            out = fork.step(alloc)
            total += jct_reward(state, out, fork.config.slot_seconds, fork.end_times(out.finished))
            if fork.done:
                break
            state = fork.state()
            alloc = greedy_decision(state, self.cfg, self.fast)
        return total
