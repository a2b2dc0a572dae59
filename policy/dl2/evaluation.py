"""Held-out evaluation of DL2 against the baselines (the ``dl2 evaluate`` engine).

Every policy runs once per seed on the same generated traces; the result has the same JSON
shape as ``dl2 simulate --json`` (``{"policies": {name: {"avg_jct", "makespan", ..., "runs":
[...]}}, "config": {...}}``, times in seconds), plus ``ratios``: each policy's mean average JCT
divided by DRF's and by Optimus's (when those ran), and by ``bound``: the no-queueing lower
bound on average JCT per seed (:mod:`dl2_mesos.policy.sim.bounds`; no policy can go below it),
and ``load``: the offered load rho per seed (:mod:`dl2_mesos.policy.sim.load`).
"""

from __future__ import annotations

import math
import multiprocessing as mp
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

KEYS = ("avg_jct", "median_jct", "p95_jct", "makespan", "cpu_util", "gpu_util", "rescales")


def _mean_ci(values: list[float]) -> tuple[float, float | None]:
    a = np.asarray(values, dtype=float)
    if len(a) == 0:
        return float("nan"), None
    if len(a) == 1:
        return float(a[0]), None
    from scipy import stats

    half = float(stats.t.ppf(0.975, len(a) - 1) * a.std(ddof=1) / math.sqrt(len(a)))
    return float(a.mean()), half


def _one(task: tuple[str, str | None, str, int, int | None]) -> tuple[str, int, dict[str, Any]]:
    from dl2_mesos.policy.sim.matrix import run_one

    name, model_path, preset_name, seed, max_slots = task
    _, _, _, d = run_one((name, model_path, preset_name, seed, max_slots, True))
    return name, seed, d


def evaluate(
    policies: Sequence[str],
    seeds: Sequence[int],
    preset_name: str = "reference",
    model_path: str | None = None,
    workers: int = 2,
    max_slots: int | None = None,
    progress=None,
    by_size: int | None = None,
) -> dict[str, Any]:
    """Run ``policies`` on ``seeds``; returns the ``dl2 simulate``-shaped document (+ ratios).

    ``by_size``: also break each policy's jobs down into that many classes by their no-queueing
    run time (:mod:`~dl2_mesos.policy.sim.size_classes`), under ``size_classes`` (dicts).
    """
    from dl2_mesos.policy.sim.settings import preset

    sc, tc = preset(preset_name)
    if max_slots is not None:
        sc = replace(sc, max_slots=max_slots)
    tasks = [(p, model_path, preset_name, int(s), max_slots) for p in policies for s in seeds]
    runs: dict[str, dict[int, dict]] = {p: {} for p in policies}
    if workers > 1 and len(tasks) > 1:
        with mp.get_context("spawn").Pool(min(workers, len(tasks))) as pool:
            for name, seed, d in pool.imap_unordered(_one, tasks):
                runs[name][seed] = d
                if progress:
                    progress(name, seed)
    else:
        for t in tasks:
            name, seed, d = _one(t)
            runs[name][seed] = d
            if progress:
                progress(name, seed)
    from dl2_mesos.policy.sim.bounds import job_bounds
    from dl2_mesos.policy.sim.load import mean_load, offered_load
    from dl2_mesos.policy.sim.trace import generate_trace

    traces = {int(s): generate_trace(tc, int(s)) for s in seeds}
    job_bound = {s: job_bounds(sc, tr) for s, tr in traces.items()}
    per_seed = {s: sum(b.jct for b in bs) / len(bs) if bs else 0.0 for s, bs in job_bound.items()}
    loads = {s: offered_load(sc, tr) for s, tr in traces.items()}
    rho, bottleneck = mean_load(list(loads.values()))
    load = {"rho": rho, "bottleneck": bottleneck, "per_seed": {str(s): x.rho for s, x in loads.items()}}
    b_mean, b_half = _mean_ci(list(per_seed.values()))
    bound = {"avg_jct": b_mean, "avg_jct_ci95": b_half, "per_seed": {str(s): v for s, v in per_seed.items()}}
    results: dict[str, dict[str, Any]] = {}
    for p in policies:
        ordered = [runs[p][int(s)] for s in seeds]
        r: dict[str, Any] = {"runs": ordered}
        for key in KEYS:
            m, half = _mean_ci([float(x[key]) for x in ordered])
            r[key] = m
            r[f"{key}_ci95"] = half
        results[p] = r
    ratios: dict[str, dict[str, float]] = {}
    for p in policies:
        ratios[p] = {}
        for base in ("drf", "optimus"):
            if base in results and results[base]["avg_jct"] > 0:
                ratios[p][f"vs_{base}"] = results[p]["avg_jct"] / results[base]["avg_jct"]
        if b_mean > 0:
            ratios[p]["vs_bound"] = results[p]["avg_jct"] / b_mean
    extra: dict[str, Any] = {}
    if by_size:
        from dl2_mesos.policy.sim.size_classes import size_classes

        run_s = {(s, b.job_id): b.run_s for s, bs in job_bound.items() for b in bs}
        rows = size_classes({p: results[p]["runs"] for p in policies}, [int(s) for s in seeds], run_s, by_size)
        extra["size_classes"] = [r.to_dict() for r in rows]
    return {
        **extra,
        "policies": results,
        "ratios": ratios,
        "bound": bound,
        "load": load,
        "config": {
            "preset": preset_name,
            "trace_file": None,
            "seeds": [int(s) for s in seeds],
            "sim": sc.to_dict(),
            "trace": tc.to_dict(),
            "model": model_path or "shipped",
            "units": {"time": "seconds", "util": "fraction"},
        },
    }


def format_table(doc: dict[str, Any]) -> str:
    """A plain-text table of the evaluation (JCT in slots and seconds, ratios to DRF/Optimus)."""
    slot_s = float(doc["config"]["sim"]["slot_seconds"])
    lines = []
    load = doc.get("load")
    if load:
        each = ", ".join(f"{s}: {v:.2f}" for s, v in load["per_seed"].items())
        lines.append(f"offered load rho {load['rho']:.2f} (bottleneck {load['bottleneck']}; per seed {each})")
    lines += [f"{'policy':<9} {'avg JCT (s)':>16} {'avg JCT (slots)':>16} {'makespan (slots)':>17} "
             f"{'rescales':>9} {'gpu util':>9} {'vs DRF':>7} {'vs Optimus':>10} {'vs bound':>9}"]
    for name, r in doc["policies"].items():
        ci = r.get("avg_jct_ci95")
        jct = f"{r['avg_jct']:.0f}" + (f" ±{ci:.0f}" if ci is not None else "")
        rat = doc.get("ratios", {}).get(name, {})
        vd = f"{rat['vs_drf']:.3f}" if "vs_drf" in rat else "-"
        vo = f"{rat['vs_optimus']:.3f}" if "vs_optimus" in rat else "-"
        vb = f"{rat['vs_bound']:.3f}" if "vs_bound" in rat else "-"
        lines.append(f"{name:<9} {jct:>16} {r['avg_jct'] / slot_s:>16.2f} {r['makespan'] / slot_s:>17.2f} "
                     f"{r['rescales']:>9.1f} {r['gpu_util']:>9.3f} {vd:>7} {vo:>10} {vb:>9}")
    b = doc.get("bound")
    if b:
        ci = b.get("avg_jct_ci95")
        jct = f"{b['avg_jct']:.0f}" + (f" ±{ci:.0f}" if ci is not None else "")
        lines.append(f"{'bound':<9} {jct:>16} {b['avg_jct'] / slot_s:>16.2f}   (no-queueing lower bound: "
                     f"every job alone at its fastest size from arrival)")
    return "\n".join(lines)


def format_per_seed(doc: dict[str, Any]) -> str:
    """Average JCT (s) per seed: the lower bound, then every policy, and each over the bound."""
    seeds = doc["config"]["seeds"]
    names = list(doc["policies"])
    per_bound = doc.get("bound", {}).get("per_seed", {})
    head = f"{'seed':>5} {'bound':>8}" + "".join(f" {n:>10} {'/bound':>6}" for n in names)
    lines = [head]
    for k, s in enumerate(seeds):
        b = per_bound.get(str(s))
        row = f"{s:>5} {b:>8.0f}" if b is not None else f"{s:>5} {'-':>8}"
        for n in names:
            v = float(doc["policies"][n]["runs"][k]["avg_jct"])
            row += f" {v:>10.0f} {v / b:>6.3f}" if b else f" {v:>10.0f} {'-':>6}"
        lines.append(row)
    return "\n".join(lines)
