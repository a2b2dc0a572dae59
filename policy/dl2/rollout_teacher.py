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

Sampled alternatives are what the network already half-believes in. With ``edits`` > 0 the
search also tries up to that many *one-job edits* of the greedy decision (:func:`one_job_edits`):
for a job the greedy decision starts or grows, the same decision with that job taken straight to
its fastest size that fits the room left, held where it is, started at its minimum size instead,
or grown half as far. These are moves a sampled decision rarely makes when the network is
confident (e.g. starting a job at the size it will otherwise reach by restarts, one step at a
time), and the simulated reward alone still decides between them.

The copies see the trace's future arrivals, which no scheduler does; the improver exists only
in training, where :mod:`~dl2_mesos.policy.dl2.policy_iteration` distils its decisions into the
network, which then decides alone. The only signal is the simulated reward of the network's own
alternatives: no heuristic takes part.
"""

from __future__ import annotations

import copy

from dl2_mesos.allocation import Allocation, JobAllocation
from dl2_mesos.cluster import ClusterState, JobView
from dl2_mesos.policy.dl2.growth import speed_and_best_lists
from dl2_mesos.policy.dl2.decision_loop import NetChooser, run_slot_chosen
from dl2_mesos.policy.dl2.greedy import run_slot_greedy_fast
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.network import Actor, NumpyActor
from dl2_mesos.policy.dl2.rollout import jct_reward
from dl2_mesos.policy.sim.simulator import Simulator
from dl2_mesos.resources import ZERO, Resources


def greedy_decision(state: ClusterState, cfg: DL2Config, fast: NumpyActor) -> Allocation:
    """The network's greedy allocation for ``state`` (nothing when no job is there)."""
    if not state.jobs:
        return Allocation()
    return run_slot_greedy_fast(state, cfg, fast, keep_steps=False)[0]


def fastest_fitting(job: JobView, counts: JobAllocation, room: Resources) -> JobAllocation | None:
    """The fastest size at or beyond ``counts`` (by the measured speed table) whose extra
    demand fits in the aggregate resources ``room``; the smallest such size on a tie, and None
    when no size beyond ``counts`` that fits is faster."""
    spec = job.spec
    uses_ps = spec.max_ps > 0
    speed, _ = speed_and_best_lists(spec.job_type, spec.max_ps, spec.max_workers, uses_ps)
    p0, w0 = (counts.num_ps, counts.num_workers) if uses_ps else (0, counts.num_workers)
    base, now = job.demand(counts.num_ps, counts.num_workers), speed[p0][w0]
    best, best_key = None, (now, 0)
    for p in range(p0, len(speed)):
        for w in range(w0, len(speed[p])):
            key = (speed[p][w], -(p + w))
            if key > best_key and (job.demand(p, w) - base).fits_in(room):
                best, best_key = JobAllocation(p, w), key
    return best


def one_job_edits(state: ClusterState, decision: Allocation) -> list[Allocation]:
    """Alternatives to ``decision`` that each change one job it starts or grows.

    For every job given more tasks than it runs now (largest addition first): the decision with
    that job taken to its fastest size that fits the aggregate room the decision leaves
    (:func:`fastest_fitting`; placement may still grant less on a fragmented cluster), held at
    its current counts (a waiting job stays waiting), a waiting job started at its minimum size,
    and the job grown half as far (each count halfway between now and the decision, rounded
    down, within the job's limits). Duplicates and alternatives equal to ``decision`` are left
    out.
    """
    added: list[tuple[int, str]] = []
    for job in state.jobs:
        want = decision.get_counts(job.job_id)
        extra = (want.num_ps - job.num_ps) + (want.num_workers - job.num_workers)
        if want.num_ps >= job.num_ps and want.num_workers >= job.num_workers and extra > 0:
            added.append((extra, job.job_id))
    added.sort(key=lambda t: (-t[0], t[1]))
    counts = {job_id: decision[job_id] for job_id in decision}
    used = ZERO
    for job_id, c in counts.items():
        used = used + state.job(job_id).demand(c.num_ps, c.num_workers)
    room = state.capacity - used
    out: list[Allocation] = []
    for _, job_id in added:
        job = state.job(job_id)
        spec, want = job.spec, counts[job_id]
        options = [JobAllocation(job.num_ps, job.num_workers)]
        faster = fastest_fitting(job, want, room)
        if faster is not None:
            options.insert(0, faster)
        if job.num_workers == 0:
            options.append(JobAllocation(spec.min_ps, spec.min_workers))
        half = JobAllocation(max(spec.min_ps, (job.num_ps + want.num_ps) // 2),
                             max(spec.min_workers, (job.num_workers + want.num_workers) // 2))
        if half.num_ps <= want.num_ps and half.num_workers <= want.num_workers:
            options.append(half)
        for option in options:
            alt = Allocation({**counts, job_id: option})
            if alt != decision and alt not in out:
                out.append(alt)
    return out


class RolloutImprover:
    """The improved policy on one training trace: bound to that trace's simulator.

    ``candidates - 1`` sampled decisions and up to ``edits`` one-job edits of the greedy one
    compete with it.

    ``decide(state)`` must be called with the simulator's current state (as the training loop
    does before it steps the simulator); the simulator itself is never moved by the improver.

    Attributes:
        decided: slots decided; improved: slots where a sampled decision beat greedy;
        last_improved: whether the latest decision was such a slot.
    """

    name = "rollout-improver"

    def __init__(self, sim: Simulator, cfg: DL2Config, actor: Actor, candidates: int = 8,
                 horizon: int = 30, seed: int = 0, edits: int = 0) -> None:
        if candidates < 1:
            raise ValueError(f"candidates must be >= 1, got {candidates}")
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        if edits < 0:
            raise ValueError(f"edits must be >= 0, got {edits}")
        self.sim, self.cfg = sim, cfg
        self.candidates, self.horizon, self.edits = candidates, horizon, edits
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
            alloc, _ = run_slot_chosen(state, self.cfg, self.sampler, record=False)
            if alloc != greedy and alloc not in others:
                others.append(alloc)
        if self.edits:
            others.extend([a for a in one_job_edits(state, greedy) if a not in others][: self.edits])
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
