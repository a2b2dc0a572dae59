"""Benchmark of the DL2 policy: decision time per slot, and (with --eval) JCT ratios.

Usage::

    .venv/bin/python bench/policy.py [--model FILE] [--repeat 9] [--eval] [--seeds 101-110]
    .venv/bin/python bench/policy.py --jobs 5000 --no-slots     # only the 5000-job case

Prints the median wall time of one slot's decision (``DL2Policy.decide``, the whole within-slot
loop: features, masks, every inference, placement checks), with the fastest run and the median
CPU time of the process (less sensitive to other jobs on a shared machine), for

* 40 concurrent jobs on the reference cluster (500 nodes; goal <= 20 ms), and
* 1000 concurrent jobs on 1000 nodes = 2000 GPUs (goal <= 1 s),
* 5000 concurrent jobs on 2000 nodes = 4000 GPUs (the framework's scale run; no goal, reported;
  at most 3 repeats),
* every slot of one reference simulation (seed 101: median, p95 and max),

each from a state where about half the jobs already run (so the policy both keeps and grows),
and, with ``--eval``, the held-out average-JCT ratios of DL2 to DRF and to Optimus on the
reference preset (goals <= 0.50 and <= 0.78).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from dl2_mesos.cluster import AgentView, ClusterState, JobView, TaskView
from dl2_mesos.job_types import job_type_names
from dl2_mesos.jobs import JobSpec
from dl2_mesos.placement import place
from dl2_mesos.allocation import Allocation
from dl2_mesos.resources import Resources

NODE = Resources(cpus=8.0, gpus=2.0, mem=48 * 1024.0)


def build_state(n_jobs: int, n_agents: int) -> ClusterState:
    """n_jobs jobs (types cycling), the even-numbered ones already running 2 PS + 1 worker."""
    agents = tuple(AgentView(f"node-{i:04d}", f"node-{i:04d}", NODE, NODE) for i in range(n_agents))
    names = job_type_names()
    jobs = []
    for i in range(n_jobs):
        spec = JobSpec(job_type=names[i % len(names)], epochs=5000.0 + 37 * i)
        jobs.append(JobView(f"j{i:05d}", spec, arrival_slot=i // 10, arrival_time=1200.0 * (i // 10),
                            epochs_done=50.0 * (i % 7), slots_run=max(0, 5 - i // 10), slots_since_rescale=2))
    bare = ClusterState(slot=5, slot_seconds=1200.0, now=6000.0, jobs=tuple(jobs), agents=agents)
    target = Allocation({j.job_id: (2, 1) for k, j in enumerate(jobs) if k % 2 == 0})
    plan = place(target, bare)
    tasks = tuple(TaskView(f"t{k}", p.job_id, p.role, p.agent_id, p.resources) for k, p in enumerate(plan.start))
    counts = plan.granted
    jobs2 = tuple(
        JobView(j.job_id, j.spec, j.arrival_slot, j.arrival_time, j.epochs_done,
                num_ps=counts.get_counts(j.job_id).num_ps, num_workers=counts.get_counts(j.job_id).num_workers,
                slots_run=j.slots_run, slots_since_rescale=j.slots_since_rescale)
        for j in jobs
    )
    return ClusterState(slot=5, slot_seconds=1200.0, now=6000.0, jobs=jobs2, agents=agents, tasks=tasks)


def time_decide(policy, state: ClusterState, repeat: int) -> tuple[float, float, float, int]:
    """(median wall time, min wall time, median CPU time of this process, jobs allocated).

    The CPU time is much less sensitive to other jobs sharing the machine than the wall time.
    """
    policy.decide(state)  # warm-up
    times, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        alloc = policy.decide(state)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(times), min(times), statistics.median(cpu), len(alloc)


def typical_slots(policy, seed: int) -> None:
    """Decision time of every slot of one reference simulation (the load the goal describes)."""
    from dl2_mesos.policy.sim.settings import preset
    from dl2_mesos.policy.sim.simulator import Simulator
    from dl2_mesos.policy.sim.trace import generate_trace

    sc, tc = preset("reference")
    sim = Simulator(sc, generate_trace(tc, seed), seed=seed)
    times, sizes = [], []
    state = sim.state()
    while not sim.done:
        if state.jobs:
            t = time.perf_counter()
            alloc = policy.decide(state)
            times.append(time.perf_counter() - t)
            sizes.append(len(state.jobs))
        else:
            alloc = Allocation()
        sim.step(alloc)
        state = sim.state()
    ts = sorted(times)
    p95 = ts[min(len(ts) - 1, int(0.95 * len(ts)))]
    print(f"decision time over the {len(times)} slots of reference seed {seed} (median {statistics.median(sizes):.0f}, "
          f"max {max(sizes)} concurrent jobs): median {statistics.median(ts) * 1000:.1f} ms, "
          f"p95 {p95 * 1000:.1f} ms, max {ts[-1] * 1000:.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="DL2 checkpoint (default: the shipped model)")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--eval", action="store_true", help="Also evaluate JCT ratios on held-out seeds.")
    ap.add_argument("--seeds", default="101-110")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--jobs", default="40,1000,5000",
                    help="Which of the concurrent-job cases to time (comma-separated: 40, 1000, 5000).")
    ap.add_argument("--no-slots", action="store_true", help="Skip the reference simulation's slots.")
    args = ap.parse_args()

    from dl2_mesos.policy.dl2.dl2_policy import DL2Policy

    pol = DL2Policy(model_path=args.model)
    print(f"model: {args.model or 'shipped'} (window J={pol.config.window}, arch {pol.config.arch}, "
          f"start {pol.config.start}); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
          f"(wall times follow CPU times only when the machine is not oversubscribed)")
    wanted = {int(x) for x in args.jobs.split(",") if x.strip()}
    for n_jobs, n_agents, goal in ((40, 500, 0.020), (1000, 1000, 1.0), (5000, 2000, None)):
        if n_jobs not in wanted:
            continue
        state = build_state(n_jobs, n_agents)
        t, t_min, t_cpu, n_alloc = time_decide(pol, state, args.repeat if goal else min(3, args.repeat))
        ok = "no goal" if goal is None else f"goal <= {goal * 1000:.0f} ms: {'OK' if t <= goal else 'over goal'}"
        print(f"decision time, {n_jobs} jobs on {n_agents} nodes ({int(state.capacity.gpus)} GPUs): "
              f"{t * 1000:.1f} ms ({ok}; min {t_min * 1000:.1f} ms, "
              f"CPU {t_cpu * 1000:.1f} ms); {n_alloc} jobs allocated; load average {os.getloadavg()[0]:.1f}")
    if not args.no_slots:
        typical_slots(pol, seed=101)
    if args.eval:
        from dl2_mesos.policy.simulate_cli import parse_seeds
        from dl2_mesos.policy.dl2.evaluation import evaluate, format_table

        doc = evaluate(["dl2", "drf", "optimus"], parse_seeds(args.seeds), "reference", args.model,
                       workers=args.workers)
        print(format_table(doc))
        r = doc["ratios"]["dl2"]
        print(f"DL2 / DRF avg JCT: {r['vs_drf']:.3f} (goal <= 0.50); "
              f"DL2 / Optimus avg JCT: {r['vs_optimus']:.3f} (goal <= 0.78)")


if __name__ == "__main__":
    main()
