"""Benchmark: simulator throughput for RL (slots/s, episodes/h) and the reference-scale run time.

Part 1, throughput on the presets RL trains on: per preset, a few episodes (seeds 1..N) run to
the end under each policy; printed per row: simulated slots, wall and CPU seconds, slots per
CPU-second and episodes per CPU-hour (one core; the machine is shared, so CPU time is the
steadier figure). The row ``dl2-rl`` is what an RL iteration's workers run: the shipped DL2
network sampling its actions with job-aware exploration (epsilon 0.4) and every inference
recorded (``rollout.run_episode``). The row ``(sim only)`` replays DRF's recorded decisions: the simulator's own
cost (state snapshot, validation, placement, progress), without any policy.
Goal: thousands of episodes per hour on the small/testbed presets.

Part 2 (``--reference``), the reference scale (500 nodes, 200 jobs) under DRF and Optimus:
wall and CPU seconds of one full run. Goal: DRF at this scale in <= 2 s on a 2-core machine.

    .venv/bin/python bench/simulator.py [--presets tiny,small,testbed-rho2]
        [--policies drf,srtf-gain,dl2,dl2-rl] [--episodes 5] [--reference] [--reference-only]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from dl2_mesos.allocation import Allocation
from dl2_mesos.policy.baselines.optimus import optimus_speed_model
from dl2_mesos.policy.registry import make_policy
from dl2_mesos.policy.sim.settings import preset
from dl2_mesos.policy.sim.simulator import Simulator, run
from dl2_mesos.policy.sim.trace import generate_trace
from dl2_mesos.speed_model import default_speed_model


def _row(preset_name: str, label: str, episodes: int, slots: int, wall: float, cpu: float) -> str:
    return (
        f"{preset_name:14s} {label:11s} {episodes:4d} {slots:7d} {wall:8.2f} {cpu:8.2f} "
        f"{slots / cpu:9.0f} {episodes / cpu * 3600:11.0f}"
    )


def throughput(presets: list[str], policies: list[str], episodes: int) -> None:
    import torch

    torch.set_num_threads(1)
    print(
        f"{'preset':14s} {'policy':11s} {'eps':>4s} {'slots':>7s} {'wall s':>8s} {'cpu s':>8s} "
        f"{'slots/s':>9s} {'episodes/h':>11s}   (per CPU core)"
    )
    for name in presets:
        sc, tc = preset(name)
        traces = [generate_trace(tc, s) for s in range(1, episodes + 1)]
        recorded: list[list[Allocation]] = []
        for pol in policies:
            if pol == "dl2-rl":
                _rl_rollouts(name, episodes)
                continue
            policy = make_policy(pol)
            run(policy, sc, traces[0], seed=1)  # warm-up: model load, caches
            slots = 0
            w0, c0 = time.perf_counter(), time.process_time()
            for seed, tr in enumerate(traces, start=1):
                slots += run(policy, sc, tr, seed=seed).slots
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            print(_row(name, pol, episodes, slots, wall, cpu), flush=True)
        # the simulator alone: replay DRF's decisions
        drf = make_policy("drf")
        for seed, tr in enumerate(traces, start=1):
            sim, allocs = Simulator(sc, tr, seed=seed), []
            while not sim.done:
                st = sim.state()
                allocs.append(drf.decide(st) if st.jobs else Allocation())
                sim.step(allocs[-1])
            recorded.append(allocs)
        slots = 0
        w0, c0 = time.perf_counter(), time.process_time()
        for seed, (tr, allocs) in enumerate(zip(traces, recorded), start=1):
            sim = Simulator(sc, tr, seed=seed)
            for a in allocs:
                sim.state()
                sim.step(a)
            sim.metrics()
            slots += len(allocs)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        print(_row(name, "(sim only)", episodes, slots, wall, cpu), flush=True)


def _rl_rollouts(preset_name: str, episodes: int) -> None:
    """The ``dl2-rl`` row: RL's sampled, explored and recorded episodes (seeds 1..N)."""
    from dl2_mesos.policy.dl2.checkpoint import load_checkpoint
    from dl2_mesos.policy.dl2.rollout import EpisodeSpec, run_episode

    net = load_checkpoint(None).net
    weights = {k: v for k, v in net.actor.state_dict().items()}

    def spec(seed: int) -> EpisodeSpec:
        return EpisodeSpec(net.cfg.to_dict(), weights, preset_name, seed, sample=True, epsilon=0.4,
                           chooser_seed=seed, reward="jct")

    run_episode(spec(1))  # warm-up
    slots = 0
    w0, c0 = time.perf_counter(), time.process_time()
    for seed in range(1, episodes + 1):
        slots += len(run_episode(spec(seed)).slots)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    print(_row(preset_name, "dl2-rl", episodes, slots, wall, cpu), flush=True)


def reference_scale(policies: list[str], seed: int, jobs: int, agents: int) -> None:
    t0 = time.perf_counter()
    default_speed_model()
    optimus_speed_model()
    build = time.perf_counter() - t0
    sim_cfg, trace_cfg = preset("reference")
    sim_cfg = replace(sim_cfg, num_agents=agents)
    trace = generate_trace(replace(trace_cfg, num_jobs=jobs), seed)
    print(
        f"reference scale: {agents} nodes, {len(trace)} jobs, seed {seed}; "
        f"speed models built in {build:.2f} s (once per process, excluded below)"
    )
    print(
        f"{'policy':8s} {'wall s':>8s} {'cpu s':>8s} {'slots':>6s} {'slots/s':>9s} {'avg JCT (slots)':>16s}"
    )
    for name in policies:
        policy = make_policy(name)
        w0, c0 = time.perf_counter(), time.process_time()
        m = run(policy, sim_cfg, trace, seed=seed)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        print(f"{name:8s} {wall:8.2f} {cpu:8.2f} {m.slots:6d} {m.slots / wall:9.1f} {m.avg_jct_slots:16.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="tiny,small,testbed-rho2")
    ap.add_argument("--policies", default="drf,srtf-gain,dl2,dl2-rl",
                    help="registry policies, and dl2-rl (RL's sampled, recorded rollouts)")
    ap.add_argument("--episodes", type=int, default=5, help="episodes (seeds 1..N) per preset and policy")
    ap.add_argument("--reference", action="store_true", help="also time the reference scale (DRF, Optimus)")
    ap.add_argument("--reference-only", action="store_true", help="only the reference-scale timing")
    ap.add_argument("--seed", type=int, default=1, help="reference scale: trace seed")
    ap.add_argument("--jobs", type=int, default=200, help="reference scale: jobs")
    ap.add_argument("--agents", type=int, default=500, help="reference scale: nodes")
    args = ap.parse_args()
    if args.episodes < 1:
        ap.error("--episodes must be >= 1")
    if not args.reference_only:
        throughput(
            [p.strip() for p in args.presets.split(",") if p.strip()],
            [p.strip() for p in args.policies.split(",") if p.strip()],
            args.episodes,
        )
    if args.reference or args.reference_only:
        reference_scale(["drf", "optimus"], args.seed, args.jobs, args.agents)


if __name__ == "__main__":
    main()
