"""The evaluation matrix: every policy on the load sweep and the contended presets (``dl2 matrix``).

Each *point* is a preset (:mod:`dl2_mesos.policy.sim.settings`): by default the load sweep
``sweep-rho0.25`` ... ``sweep-rho4`` and the contended presets ``paper-rho1``, ``paper-rho2``,
``testbed-rho2``. Every policy runs once per held-out seed on the same generated trace (the seed
draws the trace and the speed noise), restart cost charged as the preset says. Per point the
matrix reports:

* ``rho``: the mean offered load over the seeds (:mod:`dl2_mesos.policy.sim.load`);
* every policy's average JCT (mean over seeds of each run's average JCT);
* ratios of those means: to DRF, to Optimus, to the *best heuristic* (the baseline --
  ``dl2_mesos.policy.registry.BASELINES`` -- with the lowest mean among those run at that point)
  and to the no-queueing lower bound (:mod:`dl2_mesos.policy.sim.bounds`);
* ``wins``: on how many seeds the policy's average JCT is below the best heuristic's;
* ``ms/slot``: the CPU milliseconds one decision took, over all its runs' slots (the deciding
  process, plus the optimiser process of a policy that has one: Pollux).

Runs are spread over worker processes (``spawn``; one thread each), longest first. With a
:class:`RunCache` (``dl2 matrix --cache FILE``) finished runs are kept in a JSON-lines file and
reused: a costly baseline (Pollux) runs once, and a new DL2 model re-runs only the DL2 rows.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from dl2_mesos.errors import ConfigError
from dl2_mesos.policy.sim.settings import CONTENDED, SWEEP

logger = logging.getLogger(__name__)

#: The default points: the sweep in load order, then the contended presets.
DEFAULT_POINTS: tuple[str, ...] = tuple(name for name, _ in SWEEP) + CONTENDED
#: ``--quick``: fewer points (no 500-node presets) and seeds.
QUICK_POINTS: tuple[str, ...] = ("sweep-rho0.25", "sweep-rho1", "sweep-rho4", "testbed-rho2")
DEFAULT_SEEDS: tuple[int, ...] = tuple(range(101, 111))
QUICK_SEEDS: tuple[int, ...] = (101, 102)
#: Registered baselines left out of the default policy list: they are weaker than DRF, Optimus
#: and srtf-gain on every point, so they never are the best heuristic (name them to include them).
NOT_BY_DEFAULT: tuple[str, ...] = ("tetris", "fifo", "srtf")

# rough relative cost of one run, to start the longest first
_POINT_COST = {"paper-rho2": 40.0, "paper-rho1": 8.0}
_POLICY_COST = {"pollux": 50.0, "srtf-gain": 3.0, "dl2": 2.0, "optimus": 2.0}


def default_policies() -> list[str]:
    """``dl2`` and every registered baseline except :data:`NOT_BY_DEFAULT`."""
    from dl2_mesos.policy.registry import BASELINES

    return ["dl2"] + [b for b in BASELINES if b not in NOT_BY_DEFAULT]


def _worker_init() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:  # pragma: no cover - a declared dependency
        pass


def run_one(task: tuple[str, str | None, str, int, int | None, bool]) -> tuple[str, str, int, dict[str, Any]]:
    """Run policy ``name`` on preset ``point`` with ``seed``; returns (point, name, seed, metrics dict).

    ``task`` is ``(name, model_path, point, seed, max_slots, full)``; ``full`` keeps the per-job
    and per-slot records (else only the summary).
    """
    name, model_path, point, seed, max_slots, full = task
    from dl2_mesos.policy.registry import make_policy
    from dl2_mesos.policy.sim.settings import preset
    from dl2_mesos.policy.sim.simulator import run
    from dl2_mesos.policy.sim.trace import generate_trace

    if name == "dl2":
        import torch

        torch.set_num_threads(1)
    sc, tc = preset(point)
    if max_slots is not None:
        sc = replace(sc, max_slots=max_slots)
    kwargs = {"model_path": model_path} if (name == "dl2" and model_path) else {}
    policy = _TimedPolicy(make_policy(name, **kwargs))
    try:
        m = run(policy, sc, generate_trace(tc, seed), seed=seed)
    finally:
        close = getattr(policy.inner, "close", None)
        if callable(close):
            close()  # e.g. Pollux's optimiser process
    out = m.to_dict() if full else m.summary()
    out.update(policy.cost())
    return point, name, seed, out


class _TimedPolicy:
    """Wraps a policy to count the CPU its decisions take (the matrix's decision-cost column).

    Per ``decide``: the CPU seconds of this process during the call, plus, for a policy that
    decides in a process of its own (Pollux), that process's CPU seconds for the decision, which
    the policy reports in its ``cpu_seconds`` list.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)
        self._own_cpu = 0.0
        self._decisions = 0

    def decide(self, state: Any) -> Any:
        t0 = time.process_time()
        try:
            return self.inner.decide(state)
        finally:
            self._own_cpu += time.process_time() - t0
            self._decisions += 1

    def cost(self) -> dict[str, float | int]:
        """``decisions`` and ``decision_cpu_s`` (total, this process plus a policy's own process)."""
        external = sum(getattr(self.inner, "cpu_seconds", None) or ())
        return {"decisions": self._decisions, "decision_cpu_s": self._own_cpu + float(external)}


def run_tasks(
    tasks: list[tuple],
    workers: int,
    progress: Callable[[str, str, int], None] | None = None,
    on_result: Callable[[str, str, int, dict[str, Any]], None] | None = None,
) -> list[tuple[str, str, int, dict[str, Any]]]:
    """Run :func:`run_one` over ``tasks`` (in ``workers`` processes when > 1), longest first.

    ``progress(point, name, seed)`` and ``on_result(point, name, seed, summary)`` are called in
    this process as each run finishes.
    """
    order = sorted(tasks, key=lambda t: -_POINT_COST.get(t[2], 1.0) * _POLICY_COST.get(t[0], 1.0))
    out = []

    def done(r: tuple[str, str, int, dict[str, Any]]) -> None:
        out.append(r)
        if on_result:
            on_result(*r)
        if progress:
            progress(r[0], r[1], r[2])

    if workers > 1 and len(order) > 1:
        with mp.get_context("spawn").Pool(min(workers, len(order)), initializer=_worker_init) as pool:
            for r in pool.imap_unordered(run_one, order, chunksize=1):
                done(r)
    else:
        for t in order:
            done(run_one(t))
    return out


#: The first field of every line of a run cache (:class:`RunCache`).
CACHE_FORMAT = "dl2-matrix-run/1"


def run_identity(name: str, model_path: str | None = None) -> str:
    """What, besides point, seed and slot cap, decides a run's result: the policy name, and for
    ``dl2`` the sha256 of the weights file (the shipped one when ``model_path`` is None).

    A cached ``dl2`` run is so reused only for the very same model: when a new model is shipped,
    the DL2 rows are run again and every baseline row still comes from the cache.
    """
    if name != "dl2":
        return name
    from dl2_mesos.policy.dl2.checkpoint import shipped_model_path

    path = Path(model_path) if model_path else shipped_model_path()
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise ConfigError(f"cannot read the DL2 model {path}: {exc}") from None
    return f"dl2@sha256:{digest[:16]}"


class RunCache:
    """Finished matrix runs kept in a JSON-lines file, so a matrix can be resumed or extended.

    One line per run: ``{"format", "point", "policy", "seed", "max_slots", "identity", "summary"}``
    (``identity`` from :func:`run_identity`). Every run is appended (and flushed to disk) as soon as
    it finishes, so an interrupted matrix keeps what it ran (a torn last line, left by a writer
    killed mid-line, is dropped on reading); when a run appears twice, the later line wins. The cache trusts its rows: after changing a policy's code or the simulator, name
    that policy in ``rerun`` (``dl2 matrix --rerun``) or start a new file.

    Raises:
        ConfigError: the file cannot be read, or a line other than a torn last one (what a
            killed writer leaves) is not a run record of this format; the message names the line.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._rows: dict[tuple[str, str, int, int | None, str], dict[str, Any]] = {}
        if self.path.exists():
            self._load()

    @staticmethod
    def _key(point: str, identity: str, seed: int, max_slots: int | None) -> tuple:
        return (point, identity, int(seed), None if max_slots is None else int(max_slots))

    def _load(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read the run cache {self.path}: {exc}") from None
        lines = text.split("\n")
        torn_tail = not text.endswith("\n")  # the last line was being written when the writer died
        for i, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict) or rec.get("format") != CACHE_FORMAT:
                    raise ValueError(f"not a {CACHE_FORMAT} record")
                key = self._key(rec["point"], rec["identity"], rec["seed"], rec["max_slots"])
                summary = rec["summary"]
                if not isinstance(summary, dict) or not isinstance(rec["policy"], str):
                    raise ValueError("no run summary")
                float(summary["avg_jct"]), int(summary["num_jobs"]), int(summary["num_finished"])
            except (ValueError, KeyError, TypeError) as exc:
                if torn_tail and i == len(lines):
                    logger.warning("run cache %s: dropping the torn last line %d (%s)", self.path, i, exc)
                    continue
                raise ConfigError(f"run cache {self.path}, line {i}: {exc}") from None
            self._rows[key] = summary
        if torn_tail and text:
            # drop the torn record (a killed writer's partial line), so that the next record starts
            # on a line of its own and the file reads cleanly again
            keep = len(text[: text.rfind("\n") + 1].encode("utf-8"))
            try:
                os.truncate(self.path, keep)
            except OSError as exc:
                raise ConfigError(f"cannot repair the run cache {self.path}: {exc}") from None

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, point: str, identity: str, seed: int, max_slots: int | None) -> dict[str, Any] | None:
        """The cached summary of that run, or None."""
        return self._rows.get(self._key(point, identity, seed, max_slots))

    def put(self, point: str, policy: str, identity: str, seed: int, max_slots: int | None,
            summary: dict[str, Any]) -> None:
        """Record a finished run (appended to the file at once)."""
        rec = {"format": CACHE_FORMAT, "point": point, "policy": policy, "seed": int(seed),
               "max_slots": max_slots, "identity": identity, "summary": summary}
        self._append_text(json.dumps(rec, sort_keys=True) + "\n")
        self._rows[self._key(point, identity, seed, max_slots)] = summary

    def _append_text(self, text: str) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise ConfigError(f"cannot write the run cache {self.path}: {exc}") from None


def point_reference(point: str, seeds: Sequence[int]) -> dict[str, Any]:
    """The trace-only figures of a point: nodes, jobs, offered load and bound per seed."""
    from dl2_mesos.policy.sim.bounds import avg_jct_lower_bound
    from dl2_mesos.policy.sim.settings import preset
    from dl2_mesos.policy.sim.load import mean_load, offered_load
    from dl2_mesos.policy.sim.trace import generate_trace

    sc, tc = preset(point)
    loads, bounds = {}, {}
    for s in seeds:
        tr = generate_trace(tc, int(s))
        loads[int(s)] = offered_load(sc, tr)
        bounds[int(s)] = avg_jct_lower_bound(sc, tr)
    rho, bottleneck = mean_load(list(loads.values()))
    return {
        "point": point,
        "nodes": len(sc.agent_resources()),
        "num_jobs": tc.num_jobs,
        "rho": rho,
        "bottleneck": bottleneck,
        "rho_per_seed": {str(s): x.rho for s, x in loads.items()},
        "bound": {
            "avg_jct": sum(bounds.values()) / len(bounds),
            "per_seed": {str(s): v for s, v in bounds.items()},
        },
    }


def summarise_point(
    ref: dict[str, Any], runs: dict[str, dict[int, dict]], seeds: Sequence[int]
) -> dict[str, Any]:
    """One point of the matrix document from its trace figures and its runs (policy -> seed -> summary)."""
    from dl2_mesos.policy.registry import BASELINES

    pols: dict[str, dict[str, Any]] = {}
    for name, by_seed in runs.items():
        jcts = [float(by_seed[int(s)]["avg_jct"]) for s in seeds]
        pols[name] = {
            "avg_jct": sum(jcts) / len(jcts),
            "per_seed": {str(s): v for s, v in zip(seeds, jcts)},
            "unfinished": sum(
                int(by_seed[int(s)]["num_jobs"]) - int(by_seed[int(s)]["num_finished"]) for s in seeds
            ),
            "rescales": sum(float(by_seed[int(s)]["rescales"]) for s in seeds) / len(seeds),
        }
        decisions = [by_seed[int(s)].get("decisions") for s in seeds]
        cpu = [by_seed[int(s)].get("decision_cpu_s") for s in seeds]
        if all(d is not None for d in decisions) and all(c is not None for c in cpu) and sum(decisions) > 0:
            # CPU milliseconds per decision over all seeds' slots (runs cached without it: absent)
            pols[name]["decision_cpu_ms"] = 1000.0 * sum(cpu) / sum(decisions)
    heuristics = [n for n in pols if n in BASELINES]
    best = min(heuristics, key=lambda n: pols[n]["avg_jct"]) if heuristics else None
    bound = ref["bound"]["avg_jct"]
    ratios: dict[str, dict[str, float]] = {}
    for name, r in pols.items():
        rat: dict[str, float] = {}
        for key, base in (("vs_drf", "drf"), ("vs_optimus", "optimus"), ("vs_best_heuristic", best)):
            if base in pols and pols[base]["avg_jct"] > 0:
                rat[key] = r["avg_jct"] / pols[base]["avg_jct"]
        if bound > 0:
            rat["vs_bound"] = r["avg_jct"] / bound
        if best is not None:
            rat["wins_vs_best_heuristic"] = sum(
                1 for s in seeds if r["per_seed"][str(s)] < pols[best]["per_seed"][str(s)]
            )
        ratios[name] = rat
    return {**ref, "policies": pols, "ratios": ratios, "best_heuristic": best}


def evaluate_matrix(
    policies: Sequence[str],
    seeds: Sequence[int],
    points: Sequence[str] = DEFAULT_POINTS,
    model_path: str | None = None,
    workers: int = 2,
    max_slots: int | None = None,
    progress: Callable[[str, str, int], None] | None = None,
    cache: RunCache | None = None,
    rerun: Sequence[str] = (),
) -> dict[str, Any]:
    """Run every policy on every point and seed; returns the matrix document (JSON-ready).

    With a ``cache``, runs found there are reused (``progress`` is called for them too) and every
    new run is appended to it as it finishes; the policies named in ``rerun`` run again anyway.

    Raises:
        ConfigError: an unknown point (preset) name; an unreadable DL2 model or run cache.
    """
    from dl2_mesos.policy.sim.settings import preset

    for p in points:
        preset(p)  # fail before any run
    refs = {p: point_reference(p, seeds) for p in points}  # the trace-only figures, also before any run
    identity = {n: run_identity(n, model_path) for n in policies}
    runs: dict[str, dict[str, dict[int, dict]]] = {p: {n: {} for n in policies} for p in points}
    tasks = []
    for p in points:
        for n in policies:
            for s in seeds:
                hit = cache.get(p, identity[n], int(s), max_slots) if cache is not None and n not in rerun else None
                if hit is None:
                    tasks.append((n, model_path, p, int(s), max_slots, False))
                else:
                    runs[p][n][int(s)] = hit
                    if progress:
                        progress(p, n, int(s))
    reused = sum(len(by_seed) for by_pol in runs.values() for by_seed in by_pol.values())

    def finished(point: str, name: str, seed: int, summary: dict[str, Any]) -> None:
        if cache is not None:
            cache.put(point, name, identity[name], seed, max_slots, summary)
        if progress:
            progress(point, name, seed)

    for point, name, seed, summary in run_tasks(tasks, workers, None, on_result=finished):
        runs[point][name][seed] = summary
    out = [summarise_point(refs[p], runs[p], seeds) for p in points]
    return {
        "points": out,
        "config": {
            "policies": list(policies),
            "seeds": [int(s) for s in seeds],
            "model": model_path or "shipped",
            "model_identity": identity.get("dl2"),
            "max_slots": max_slots,
            "cache": None if cache is None else {"path": str(cache.path), "reused": reused, "ran": len(tasks)},
            "units": {"time": "seconds"},
            "rho": "CPU-, GPU- and memory-seconds every job uses at its fastest size / (cluster total x "
            "the no-queueing bound's makespan); the largest (the bottleneck) is shown",
        },
    }


def _ratio(rat: dict[str, float], key: str) -> str:
    return f"{rat[key]:.3f}" if key in rat else "-"


def format_matrix(doc: dict[str, Any]) -> str:
    """The matrix as one plain-text table (avg JCT in seconds; ratios of the means over seeds)."""
    seeds = doc["config"]["seeds"]
    head = (
        f"{'point':<14} {'nodes':>5} {'jobs':>5} {'rho':>5} {'policy':<11} {'avg JCT (s)':>11} "
        f"{'vs DRF':>7} {'vs Optimus':>10} {'vs best':>7} {'vs bound':>8} {'wins':>6} {'unfin':>5}"
        f" {'ms/slot':>8}"
    )
    lines = [head, "-" * len(head)]
    for pt in doc["points"]:
        first = True
        for name, r in pt["policies"].items():
            rat = pt["ratios"][name]
            label = name + ("*" if name == pt["best_heuristic"] else "")
            has_wins = "wins_vs_best_heuristic" in rat and name != pt["best_heuristic"]
            wins = f"{rat['wins_vs_best_heuristic']}/{len(seeds)}" if has_wins else "-"
            lead = (
                f"{pt['point']:<14} {pt['nodes']:>5} {pt['num_jobs']:>5} {pt['rho']:>5.2f}"
                if first
                else " " * 32
            )
            lines.append(
                f"{lead} {label:<11} {r['avg_jct']:>11.0f} {_ratio(rat, 'vs_drf'):>7} "
                f"{_ratio(rat, 'vs_optimus'):>10} {_ratio(rat, 'vs_best_heuristic'):>7} "
                f"{_ratio(rat, 'vs_bound'):>8} {wins:>6} {r['unfinished']:>5} {_cost(r):>8}"
            )
            first = False
        lines.append(f"{'':32} {'(bound)':<11} {pt['bound']['avg_jct']:>11.0f}")
    bottlenecks = sorted({pt["bottleneck"] for pt in doc["points"]})
    lines.append(
        f"seeds {_seed_text(seeds)}; model {doc['config']['model']}; rho = offered load, bottleneck "
        f"{'/'.join(bottlenecks)} (policy/sim/load.py); * = best heuristic at the point; vs best = avg JCT / "
        f"best heuristic's; wins = seeds where the policy's avg JCT is below the best heuristic's; "
        f"unfin = jobs unfinished at max_slots (all seeds); ms/slot = CPU milliseconds per decision "
        f"(the deciding process plus a policy's own optimiser process)"
    )
    return "\n".join(lines)


def format_versus(doc: dict[str, Any], policy: str, other: str) -> str:
    """``policy``'s avg JCT over ``other``'s at every point: the ratio of the means over the
    seeds, then per seed (below 1: ``policy`` is better).

    Raises:
        ConfigError: either policy was not run.
    """
    for name in (policy, other):
        if name not in doc["config"]["policies"]:
            raise ConfigError(f"{name!r} is not among the policies run")
    lines = [f"{policy} vs {other} (avg JCT ratio of the means; per seed):"]
    for pt in doc["points"]:
        a, b = pt["policies"][policy], pt["policies"][other]
        per_seed = ", ".join(
            f"{s}: {a['per_seed'][s] / b['per_seed'][s]:.3f}" for s in a["per_seed"] if b["per_seed"][s] > 0
        )
        mean = f"{a['avg_jct'] / b['avg_jct']:.3f}" if b["avg_jct"] > 0 else "-"
        lines.append(f"  {pt['point']:<14} rho {pt['rho']:.2f}: {mean}  {per_seed}")
    return "\n".join(lines)


def _cost(r: dict[str, Any]) -> str:
    ms = r.get("decision_cpu_ms")
    if ms is None:
        return "-"
    return f"{ms:.1f}" if ms < 1000 else f"{ms:.0f}"


def _seed_text(seeds: Sequence[int]) -> str:
    s = list(seeds)
    if len(s) > 2 and s == list(range(s[0], s[0] + len(s))):
        return f"{s[0]}-{s[-1]}"
    return ",".join(str(x) for x in s)


def plot_matrix(doc: dict[str, Any], path: str) -> None:
    """Avg JCT / best heuristic and / bound against rho (log scale), one line per policy (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep_names = {name for name, _ in SWEEP}
    sweep = sorted((pt for pt in doc["points"] if pt["point"] in sweep_names), key=lambda p: p["rho"])
    others = [pt for pt in doc["points"] if pt["point"] not in sweep_names]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    markers = "osD^vP*X"
    for ax, key, title in (
        (axes[0], "vs_best_heuristic", "avg JCT / best heuristic"),
        (axes[1], "vs_bound", "avg JCT / no-queueing bound"),
    ):
        for name in doc["config"]["policies"]:
            xs = [pt["rho"] for pt in sweep if key in pt["ratios"].get(name, {})]
            ys = [pt["ratios"][name][key] for pt in sweep if key in pt["ratios"].get(name, {})]
            (line,) = ax.plot(xs, ys, marker="o", label=name) if xs else ax.plot([], [], label=name)
            for j, pt in enumerate(others):
                rat = pt["ratios"].get(name, {})
                if key in rat:
                    ax.scatter(
                        [pt["rho"]], [rat[key]], marker=markers[(j + 1) % len(markers)], s=60,
                        color=line.get_color(), edgecolors="black", linewidths=0.5, zorder=3,
                    )
        for j, pt in enumerate(others):
            ax.scatter([], [], marker=markers[(j + 1) % len(markers)], color="grey", label=pt["point"])
        if key == "vs_best_heuristic":
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.axhline(0.85, color="black", linewidth=0.8, linestyle=":")
        ax.set_xscale("log", base=2)
        ax.set_xticks([0.25, 0.5, 1, 2, 4], ["0.25", "0.5", "1", "2", "4"])
        ax.set_xlabel("offered load rho (log scale)")
        ax.set_ylabel(title)
        ax.set_title(f"{title} (sweep: lines; contended presets: markers)", fontsize="medium")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize="small")
    cfg = doc["config"]
    fig.suptitle(f"evaluation matrix, seeds {_seed_text(cfg['seeds'])}, model {cfg['model']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = [
    "CACHE_FORMAT",
    "DEFAULT_POINTS",
    "DEFAULT_SEEDS",
    "QUICK_POINTS",
    "QUICK_SEEDS",
    "RunCache",
    "default_policies",
    "evaluate_matrix",
    "format_matrix",
    "format_versus",
    "plot_matrix",
    "run_identity",
    "run_one",
    "run_tasks",
]
