"""Benchmark (a measurement of a trained policy, not a scheduler): what one step of rollout
policy improvement would gain over a DL2 model's greedy decisions.

Every slot of a trace the greedy decision and ``--candidates`` *one-deviation* decisions are
scored: a one-deviation decision is the greedy decision loop with one inference (picked at
random) replaced by a uniformly random other valid action, so it reaches decisions the network
gives near-zero probability (sampling from the network does not). A decision is scored by
forking the simulator, applying it, and running the greedy policy ``--horizon`` more slots
(0: to the end of the trace), counting the jobs in the system at every slot start (job-slots,
the JCT reward). The lowest score is applied. This is the rollout algorithm: with the greedy
decision among the candidates, a deterministic simulator and the horizon to the end, the
improved run never spends more job-slots than the greedy one. The forks see every future
arrival of the trace, which no scheduler does: the gain is an upper bound on what one
policy-improvement step from the model's own greedy behaviour (what RL's gradient steps
approximate) could find.

Printed per trace: the greedy and the improved run's avg JCT and job-slots, their ratio, the
slots where a deviation was applied, and the seconds taken. The model card's figures
(``policy/models/MODEL.md``, "A full policy-improvement step") came from

    .venv/bin/python bench/rollout_improvement.py --preset testbed-rho2 --seeds 1001-1004 \\
        --model policy/models/dl2-drf-rl-rho1-rho2-long.pt [--candidates 6] [--horizon 0]
"""

from __future__ import annotations

import argparse
import copy
import time
from dataclasses import dataclass

import click
import numpy as np

from dl2_mesos.allocation import Allocation
from dl2_mesos.cluster import ClusterState
from dl2_mesos.policy.dl2.decision_loop import run_slot
from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
from dl2_mesos.policy.dl2.network import NumpyActor
from dl2_mesos.policy.dl2.rollout import make_sim
from dl2_mesos.policy.dl2.slot import SlotContext
from dl2_mesos.policy.sim.simulator import Simulator
from dl2_mesos.policy.simulate_cli import parse_seeds


@dataclass(frozen=True)
class TraceResult:
    """One trace's greedy and improved runs (avg JCT in seconds, job-slots: jobs in the system
    summed over slot starts)."""

    preset: str
    seed: int
    greedy_jct: float
    greedy_job_slots: int
    improved_jct: float
    improved_job_slots: int
    switched: int
    slots: int
    seconds: float


class OneDeviation:
    """A chooser for the decision loop: greedy (the network's argmax) at every inference but the
    ``k``-th, where it takes a uniformly random other valid action (``k`` < 0: greedy throughout)."""

    def __init__(self, fast: NumpyActor, k: int, rng: np.random.Generator) -> None:
        self.fast, self.k, self.rng, self.n = fast, k, rng, 0

    def __call__(self, x: np.ndarray, mask: np.ndarray, ctx: SlotContext, window: np.ndarray) -> int:
        greedy = int(np.where(mask, self.fast.logits(x), -np.inf).argmax())
        i, self.n = self.n, self.n + 1
        if i != self.k:
            return greedy
        others = [a for a in np.flatnonzero(mask) if a != greedy]
        return int(self.rng.choice(others)) if others else greedy


def _decide(policy: DL2Policy, state: ClusterState) -> Allocation:
    return policy.decide(state) if state.jobs else Allocation()


def job_slots_after(sim: Simulator, alloc: Allocation, policy: DL2Policy, horizon: int) -> int:
    """Job-slots of a fork of ``sim`` that applies ``alloc`` now and then ``policy``'s greedy
    decisions for ``horizon`` slots (0: until every job has finished)."""
    fork = copy.deepcopy(sim)
    fork.step(alloc)
    cost, steps = 0, 0
    while not fork.done and (horizon <= 0 or steps < horizon):
        state = fork.state()
        cost += len(state.jobs)
        fork.step(_decide(policy, state))
        steps += 1
    if not fork.done:
        cost += len(fork.state().jobs)
    return cost


def greedy_run(preset: str, seed: int, policy: DL2Policy) -> tuple[float, int]:
    """(avg JCT, job-slots) of the plain greedy run."""
    sim = make_sim(preset, seed)
    cost = 0
    while not sim.done:
        state = sim.state()
        cost += len(state.jobs)
        sim.step(_decide(policy, state))
    return sim.metrics("dl2").avg_jct, cost


def improved_run(preset: str, seed: int, policy: DL2Policy, candidates: int, horizon: int) -> TraceResult:
    """Greedy run and rollout-improved run of one trace (see the module docstring)."""
    t0 = time.perf_counter()
    greedy_jct, greedy_cost = greedy_run(preset, seed, policy)
    rng = np.random.default_rng(seed)
    cfg, fast = policy.config, NumpyActor(policy.net.actor)
    sim = make_sim(preset, seed)
    cost = switched = slots = 0
    while not sim.done:
        state = sim.state()
        cost += len(state.jobs)
        if not state.jobs:
            sim.step(Allocation())
            continue
        slots += 1
        greedy, steps = run_slot(state, cfg, OneDeviation(fast, -1, rng))
        others: dict[Allocation, None] = {}  # distinct deviations, in the order drawn
        for _ in range(candidates):
            k = int(rng.integers(len(steps))) if steps else 0
            alloc, _ = run_slot(state, cfg, OneDeviation(fast, k, rng))
            if alloc != greedy:
                others.setdefault(alloc)
        best = greedy
        if others:
            best_cost = job_slots_after(sim, greedy, policy, horizon)
            for alloc in others:
                c = job_slots_after(sim, alloc, policy, horizon)
                if c < best_cost:
                    best, best_cost = alloc, c
        switched += best is not greedy
        sim.step(best)
    return TraceResult(preset, seed, greedy_jct, greedy_cost, sim.metrics("dl2").avg_jct, cost, switched, slots,
                       time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="testbed-rho2")
    ap.add_argument("--seeds", default="1001-1004", help="e.g. 1001-1004 or 1,5,9")
    ap.add_argument("--model", default=None, help="DL2 checkpoint (default: the shipped model)")
    ap.add_argument("--candidates", type=int, default=6, help="one-deviation decisions scored per slot")
    ap.add_argument("--horizon", type=int, default=0, help="slots each fork runs on (0: to the end)")
    args = ap.parse_args(argv)
    if args.candidates < 1 or args.horizon < 0:
        ap.error("--candidates must be >= 1 and --horizon >= 0")
    try:
        seeds = parse_seeds(args.seeds)
    except click.BadParameter as exc:
        ap.error(exc.format_message())
    policy = DL2Policy(model_path=args.model)
    print(f"{'preset':14s} {'seed':>5s} {'greedy JCT':>11s} {'improved':>9s} {'ratio':>7s} {'job-slots g/i':>15s} "
          f"{'switched':>9s} {'s':>6s}")
    results = []
    for seed in seeds:
        r = improved_run(args.preset, seed, policy, args.candidates, args.horizon)
        results.append(r)
        print(f"{r.preset:14s} {r.seed:5d} {r.greedy_jct:11.0f} {r.improved_jct:9.0f} "
              f"{r.improved_jct / r.greedy_jct:7.4f} {r.greedy_job_slots:7d}/{r.improved_job_slots:<7d} "
              f"{r.switched:4d}/{r.slots:<4d} {r.seconds:6.0f}", flush=True)
    g = sum(r.greedy_jct for r in results) / len(results)
    i = sum(r.improved_jct for r in results) / len(results)
    print(f"mean avg JCT: greedy {g:.0f} s, improved {i:.0f} s ({i / g:.4f}); candidates {args.candidates}, "
          f"horizon {args.horizon or 'to the end'}")


if __name__ == "__main__":
    main()
