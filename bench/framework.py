"""Benchmark: one scheduling round of the framework core for 1000 jobs against offers from 500 agents.

A round = frozen snapshot, placement of the target allocation, transitions, matching against the
held offers (ports included), TaskInfo/LaunchSpec building, the write-ahead of every changed job
to the state store (in memory here) and the driver calls (a no-op driver). The policy's own
time is excluded (its answer is precomputed). Target: <= 1 s per round.

    .venv/bin/python bench/framework.py [--jobs 1000] [--agents 500] [--repeat 3]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

from dl2_mesos.allocation import Allocation
from dl2_mesos.config import Config
from dl2_mesos.job_types import job_type_names
from dl2_mesos.jobs import JobSpec
from dl2_mesos.framework import events as ev
from dl2_mesos.framework.core import SchedulerCore
from dl2_mesos.framework.kv import MemoryKV
from dl2_mesos.framework.state_store import StateStore

_ids = itertools.count()


class NullDriver:
    framework_id = "bench"

    def __init__(self) -> None:
        self.calls = 0
        self.tasks = 0

    def launchTasks(self, offer_ids, tasks, filters=None):  # noqa: N802
        self.calls += 1
        self.tasks += len(tasks)

    def __getattr__(self, name):
        def call(*a, **k):
            self.calls += 1
        return call


class Precomputed:
    """Returns a fixed answer; its time is not what this benchmark measures."""

    name = "precomputed"

    def __init__(self) -> None:
        self.answer: Allocation | None = None

    def decide(self, state):
        return self.answer


def offer(agent: int) -> dict:
    return {
        "id": {"value": f"o{next(_ids)}"}, "agent_id": {"value": f"agent-{agent:04d}"},
        "hostname": f"host{agent}",
        "resources": [
            {"name": "cpus", "type": "SCALAR", "scalar": {"value": 32.0}, "role": "*"},
            {"name": "gpus", "type": "SCALAR", "scalar": {"value": 8.0}, "role": "*"},
            {"name": "mem", "type": "SCALAR", "scalar": {"value": 256 * 1024.0}, "role": "*"},
            {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": 31000, "end": 32000}]}, "role": "*"},
        ],
    }


def one_round(num_jobs: int, num_agents: int, counts: tuple[tuple[int, int], tuple[int, int]]) -> dict[str, float]:
    cfg = Config(slot=60.0, policy="fifo", offer_wait=0.0)
    policy = Precomputed()
    clock = [1000.0]
    core = SchedulerCore(cfg, policy, StateStore(MemoryKV()), clock=lambda: clock[0])
    core.restore()
    driver = NullDriver()
    core.handle(ev.Registered(driver, "bench", "m:5050", False))
    types = job_type_names()
    jobs = [core.submit(JobSpec(job_type=types[i % len(types)], epochs=10)) for i in range(num_jobs)]
    figures: dict[str, float] = {}
    for rnd, (ps, w) in enumerate(counts):
        core.handle(ev.Offers(tuple(offer(a) for a in range(num_agents))))
        policy.answer = Allocation({j.job_id: (ps, w) for j in jobs})
        clock[0] = core.epoch + (rnd + 1) * cfg.slot + 0.001 if rnd else clock[0]
        before = driver.tasks
        t0 = time.perf_counter()
        core.decide(core.current_slot())
        core.flush()
        total = time.perf_counter() - t0
        d = core.last_decision
        figures[f"round{rnd + 1}_s"] = total - d["policy_seconds"]
        figures[f"round{rnd + 1}_tasks_launched"] = driver.tasks - before
        figures[f"round{rnd + 1}_jobs_granted"] = len(d["granted"])
        # everything launched is running before the next slot
        for j in jobs:
            for t in j.live_tasks():
                if t.state != "TASK_RUNNING":
                    t.state = "TASK_RUNNING"
            j.rescale_waiting.clear()  # as if every executor reported its rescale
            core.lifecycle.refresh_phase(j, core.clock())
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--agents", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    runs = [one_round(args.jobs, args.agents, ((1, 1), (1, 2))) for _ in range(args.repeat)]
    print(f"framework scheduling round: {args.jobs} jobs, {args.agents} agents, policy time excluded, "
          f"{args.repeat} repeats")
    for key in runs[0]:
        vals = [r[key] for r in runs]
        if key.endswith("_s"):
            print(f"  {key:<28} median {statistics.median(vals):.3f} s   max {max(vals):.3f} s")
        else:
            print(f"  {key:<28} {int(statistics.median(vals))}")
    worst = max(r[k] for r in runs for k in r if k.endswith("_s"))
    print(f"  target <= 1.000 s per round: {'met' if worst <= 1.0 else 'NOT met'} (worst {worst:.3f} s)")


if __name__ == "__main__":
    main()
