"""Benchmark: DL2 against the heuristics on Philly-like workloads it was never trained on.

The presets the shipped model is trained and evaluated on draw job lengths from a fixed
fraction of ``max_epochs`` per type (+-10%) and arrivals from the prototype's patterns. Real
clusters look different: the Philly trace (Jeon et al., USENIX ATC'19) has heavy-tailed
run times (minutes to days), mostly 1-GPU jobs with a tail of 8-GPU ones, and bursty
submissions. This script synthesises logs of that shape, runs them through the same importer
an operator uses (``dl2 trace import-philly``: a log's duration becomes the job's length on one
worker), and simulates every policy on the identical trace, restart cost charged.

Each case: a seed, a number of jobs (160-320), a mean gap between submissions, Poisson or
bursty (groups of 5-30 jobs within about a minute) arrivals, and a cluster of 8-32 nodes of
the ``small`` preset. Durations are log-normal (median 1 h, sigma 1.4, clipped to 2 min - 40 h);
GPU counts 0/1/2/4/8 with probabilities 0.10/0.60/0.12/0.10/0.08. Printed per case: the offered
load rho, every policy's avg JCT (slots) and DL2's ratio to the best heuristic; then DL2's wins
and the geometric mean and worst of that ratio.

    .venv/bin/python bench/philly_like.py [--cases 12] [--policies drf,optimus,srtf-gain,tiresias]
        [--model FILE] [--workers 2] [--duration-scale 1]
"""

from __future__ import annotations

import argparse
import csv
import math
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

GPU_CHOICES = (0, 1, 2, 4, 8)
GPU_PROBS = (0.10, 0.60, 0.12, 0.10, 0.08)

#: (seed, jobs, mean gap s, arrivals, nodes): loads from about 1 to 4
CASES = (
    (2, 160, 400, "poisson", 8), (3, 160, 300, "bursty", 8), (4, 240, 250, "poisson", 16),
    (5, 240, 200, "bursty", 16), (6, 320, 150, "poisson", 32), (7, 320, 120, "bursty", 32),
    (8, 200, 150, "poisson", 16), (9, 200, 100, "bursty", 16), (10, 320, 100, "poisson", 16),
    (11, 160, 200, "poisson", 8), (12, 240, 80, "bursty", 32), (13, 320, 60, "poisson", 32),
)


@dataclass(frozen=True)
class Case:
    """One synthetic workload."""

    seed: int
    jobs: int
    mean_gap_s: float
    arrivals: str
    nodes: int

    @property
    def name(self) -> str:
        return f"s{self.seed}-{self.jobs}j-{self.arrivals}-{self.nodes}n"


def write_log(case: Case, path: Path, duration_scale: float = 1.0) -> None:
    """A Philly-style CSV log (submit time, duration, GPUs) for ``case``; ``duration_scale``
    multiplies every duration (and the clipping range) after it is drawn."""
    rng = np.random.default_rng(case.seed)
    n = case.jobs
    duration = duration_scale * np.clip(rng.lognormal(math.log(3600), 1.4, n), 120, 40 * 3600)
    gpus = rng.choice(GPU_CHOICES, size=n, p=GPU_PROBS)
    if case.arrivals == "poisson":
        submit = np.cumsum(rng.exponential(case.mean_gap_s, n))
    else:  # bursts of 5-30 jobs, the bursts spaced so the mean gap per job is about the same
        times: list[float] = []
        now = 0.0
        while len(times) < n:
            now += rng.exponential(case.mean_gap_s * 12)
            times.extend(now + rng.exponential(60, int(rng.integers(5, 30))))
        submit = np.sort(np.array(times[:n]))
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["job_id", "submit_time", "duration", "num_gpus"])
        for i in range(n):
            w.writerow([f"j{i}", f"{submit[i]:.0f}", f"{duration[i]:.0f}", int(gpus[i])])


def run_case(task: tuple[Case, tuple[str, ...], str | None, float]) -> tuple[Case, float, dict[str, float]]:
    """Import the case's log and simulate every policy on it; returns (case, rho, avg JCT in slots)."""
    import torch

    from dl2_mesos.policy.registry import make_policy
    from dl2_mesos.policy.sim.load import offered_load
    from dl2_mesos.policy.sim.philly import import_philly
    from dl2_mesos.policy.sim.settings import preset
    from dl2_mesos.policy.sim.simulator import run

    torch.set_num_threads(1)
    case, policies, model, duration_scale = task
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.csv"
        write_log(case, log, duration_scale)
        trace = import_philly(log, seed=case.seed)
    sc, _ = preset("small")
    sc = replace(sc, num_agents=case.nodes)
    rho = offered_load(sc, trace).rho
    out = {}
    for name in ("dl2", *policies):
        pol = make_policy(name, model_path=model) if (name == "dl2" and model) else make_policy(name)
        m = run(pol, sc, trace, seed=1)
        out[name] = m.avg_jct / sc.slot_seconds
    return case, rho, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=len(CASES), help="how many of the cases to run (in order)")
    ap.add_argument("--policies", default="drf,optimus,srtf-gain,tiresias", help="the heuristics to compare with")
    ap.add_argument("--model", default=None, help="DL2 weights (default: the shipped model)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--duration-scale", type=float, default=1.0,
                    help="multiply every job's duration (2: the same submissions, jobs twice as long)")
    args = ap.parse_args()
    if not 0.01 <= args.duration_scale <= 100:
        ap.error("--duration-scale: must be from 0.01 to 100")
    policies = tuple(p.strip() for p in args.policies.split(",") if p.strip())
    cases = [Case(*c) for c in CASES[: args.cases]]
    head = f"{'case':28s} {'rho':>5s} " + " ".join(f"{p:>9s}" for p in ("dl2", *policies)) + f" {'dl2/best':>9s}"
    scale = f"; durations x {args.duration_scale:g}" if args.duration_scale != 1.0 else ""
    print(f"avg JCT in slots (1200 s); restart cost charged; the same trace for every policy{scale}")
    print(head)
    print("-" * len(head))
    ratios = []
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        for case, rho, jct in pool.map(run_case, [(c, policies, args.model, args.duration_scale) for c in cases]):
            best = min(jct[p] for p in policies)
            ratios.append(jct["dl2"] / best)
            print(f"{case.name:28s} {rho:5.2f} " + " ".join(f"{jct[p]:9.2f}" for p in ("dl2", *policies))
                  + f" {ratios[-1]:9.3f}", flush=True)
    wins = sum(r < 1 for r in ratios)
    gmean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"DL2 below the best heuristic on {wins} of {len(ratios)} cases; DL2 / best heuristic: "
          f"geometric mean {gmean:.3f}, worst {max(ratios):.3f}")


if __name__ == "__main__":
    main()
