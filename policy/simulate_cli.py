"""``dl2 simulate`` (compare policies in the simulator) and ``dl2 trace`` (make traces)."""

from __future__ import annotations

import importlib.util
import json
import logging
import math
from dataclasses import fields, replace
from pathlib import Path

import click

from dl2_mesos.errors import ConfigError, Dl2Error, TraceFormatError, UnknownPolicy
from dl2_mesos.cli_params import FiniteFloatRange, output_file, output_folder
from dl2_mesos.policy.sim.settings import MAX_NODES

logger = logging.getLogger(__name__)


# -- option parsing ---------------------------------------------------------------------------------


def parse_seeds(text: str) -> list[int]:
    """``"1-5"`` -> [1..5]; ``"1,3,9"``; ``"4"``; ranges and lists combine (``"1-3,7"``)."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part[1:]:
                lo, hi = part.split("-", 1) if not part.startswith("-") else (part, "")
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                seeds.extend(range(a, b + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise click.BadParameter(
                f"{part!r} is not a seed, list (1,2,5) or range (1-5)", param_hint="--seeds"
            ) from None
    if not seeds:
        raise click.BadParameter("no seeds given", param_hint="--seeds")
    return seeds


def plotting_available() -> bool:
    """Whether the ``plot`` extra (matplotlib) is installed."""
    return importlib.util.find_spec("matplotlib") is not None


def parse_overrides(text: str, cls) -> dict:
    """``"num_jobs=50,arrival=poisson"`` -> typed keyword arguments for dataclass ``cls``."""
    known = {f.name: f for f in fields(cls)}
    out: dict = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise click.BadParameter(f"{part!r}: expected key=value", param_hint="--generate")
        key, value = (s.strip() for s in part.split("=", 1))
        if key not in known:
            raise click.BadParameter(
                f"unknown key {key!r} (known: {', '.join(known)})", param_hint="--generate"
            )
        current = getattr(cls(), key)
        try:
            if isinstance(current, bool):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                out[key] = value.lower() in ("true", "1", "yes")
            elif isinstance(current, int):
                out[key] = int(value)
            elif isinstance(current, float):
                out[key] = float(value)
            elif isinstance(current, tuple):
                out[key] = tuple(v for v in value.split("+") if v)
            else:
                out[key] = value
        except ValueError:
            raise click.BadParameter(
                f"{key}={value!r}: not a valid {type(current).__name__}", param_hint="--generate"
            ) from None
    return out


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of the 95% Student-t confidence interval (nan for one value)."""
    import numpy as np
    from scipy import stats

    a = np.asarray(values, dtype=float)
    m = float(a.mean())
    if len(a) < 2:
        return m, float("nan")
    half = float(stats.t.ppf(0.975, len(a) - 1) * a.std(ddof=1) / math.sqrt(len(a)))
    return m, half


# -- training on trace files (used by `dl2 train sl|rl`) ---------------------------------------------


def trace_source_options(f):
    """Click options that train on trace files: ``--trace FILE...`` plus the augmentation flags."""
    opts = [
        click.option(
            "--trace", "trace_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
            help="Train on this trace file (repeatable; replaces --preset): your cluster's history.",
        ),
        click.option(
            "--trace-format", type=click.Choice(["csv", "philly"]), default="csv", show_default=True,
            help="csv: the simulator's trace format; philly: a Philly-style log (submit, duration, GPUs).",
        ),
        click.option(
            "--trace-base", default="small", show_default=True,
            help="Preset whose cluster (nodes, slot length) the trace runs on.",
        ),
        click.option("--trace-agents", type=click.IntRange(1, MAX_NODES), help="Number of nodes for the trace."),
        click.option(
            "--augment-window", type=FiniteFloatRange(min=0, min_open=True), metavar="SECONDS",
            help="Each episode: a random window of this many seconds of the trace.",
        ),
        click.option(
            "--augment-rate", type=FiniteFloatRange(min=0, min_open=True), default=1.0, show_default=True,
            help="Scale the arrival rate (2: the same jobs arrive twice as fast).",
        ),
        click.option(
            "--augment-jitter", type=FiniteFloatRange(min=0), default=0.0, show_default=True,
            metavar="SECONDS", help="Shift each arrival by up to this many seconds.",
        ),
        click.option(
            "--augment-resample", is_flag=True,
            help="Resample each job's type and length from the trace's jobs.",
        ),
        click.option(
            "--augment-length-jitter", type=FiniteFloatRange(0, 1, max_open=True), default=0.0,
            show_default=True, help="Scale each job's epochs by U(1-a, 1+a).",
        ),
        click.option(
            "--augment-max-jobs", type=click.IntRange(min=1), help="At most this many jobs per episode."
        ),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def trace_source_preset(preset: str, opts: dict) -> str:
    """``preset``, or the ``trace:`` preset the :func:`trace_source_options` in ``opts`` name.

    Philly-style logs are converted once to the CSV format under ``runs/traces/``.

    Raises:
        click.ClickException: an unreadable trace or a bad option.
    """
    files = list(opts.get("trace_files") or ())
    if not files:
        defaults = {
            "augment_window": None, "augment_max_jobs": None, "trace_agents": None, "augment_resample": False,
            "augment_rate": 1.0, "augment_jitter": 0.0, "augment_length_jitter": 0.0,
        }
        used = [k for k, d in defaults.items() if opts.get(k, d) is not None and opts.get(k, d) != d]
        if used:
            raise click.UsageError(f"--{used[0].replace('_', '-')} needs --trace")
        return preset
    from dl2_mesos.policy.sim.augment import AugmentConfig
    from dl2_mesos.policy.sim.settings import trace_preset_name
    from dl2_mesos.policy.sim.settings import preset as get_preset
    from dl2_mesos.policy.sim.trace import read_trace, write_trace

    paths = []
    for f in files:
        try:
            if opts.get("trace_format") == "philly":
                import hashlib

                from dl2_mesos.policy.sim.philly import import_philly

                tr = import_philly(f, seed=0)
                digest = hashlib.sha256(Path(f).read_bytes()).hexdigest()[:10]
                out = Path("runs/traces") / f"{Path(f).stem}-{digest}.csv"
                out.parent.mkdir(parents=True, exist_ok=True)
                write_trace(tr, out)
                f = str(out)
            if not read_trace(f):
                raise click.ClickException(f"trace {f} has no jobs")
        except (OSError, TraceFormatError) as exc:
            raise click.ClickException(f"cannot read trace: {exc}") from None
        paths.append(str(Path(f).resolve()))
    try:
        aug = AugmentConfig(
            window_seconds=opts.get("augment_window"),
            rate=opts.get("augment_rate", 1.0),
            jitter_seconds=opts.get("augment_jitter", 0.0),
            resample=bool(opts.get("augment_resample")),
            length_jitter=opts.get("augment_length_jitter", 0.0),
            max_jobs=opts.get("augment_max_jobs"),
        )
        name = trace_preset_name(
            paths, base=opts.get("trace_base") or "small", agents=opts.get("trace_agents"), augment=aug
        )
        get_preset(name)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    return name


# -- simulate ------------------------------------------------------------------------------------------


def _fmt(m: float, half: float, digits: int = 2) -> str:
    if math.isnan(half):
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} ± {half:.{digits}f}"


def _table(results: dict, slot_seconds: float) -> str:
    headers = [
        "policy",
        "avg JCT (slots)",
        "makespan (slots)",
        "CPU util",
        "GPU util",
        "rescales",
        "unfinished",
    ]
    rows = []
    for name, r in results.items():
        runs = r["runs"]
        jct = mean_ci([x["avg_jct"] / slot_seconds for x in runs])
        mk = mean_ci([x["makespan"] / slot_seconds for x in runs])
        cpu = mean_ci([x["cpu_util"] for x in runs])
        gpu = mean_ci([x["gpu_util"] for x in runs])
        resc = mean_ci([float(x["rescales"]) for x in runs])
        unf = sum(x["num_jobs"] - x["num_finished"] for x in runs)
        rows.append([name, _fmt(*jct), _fmt(*mk), _fmt(*cpu), _fmt(*gpu), _fmt(*resc, digits=1), str(unf)])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(out)


def _plot(results: dict, slot_seconds: float, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, r in results.items():
        jcts = np.sort([j["jct"] / 3600.0 for run in r["runs"] for j in run["jobs"]])
        if len(jcts):
            ax1.step(jcts, np.arange(1, len(jcts) + 1) / len(jcts), where="post", label=name)
        first = r["runs"][0]
        t = [s["time"] / 3600.0 for s in first["slot_records"]]
        (line,) = ax2.step(
            t, [s["gpu_util"] for s in first["slot_records"]], where="post", label=f"{name} GPU"
        )
        ax2.step(
            t,
            [s["cpu_util"] for s in first["slot_records"]],
            where="post",
            linestyle=":",
            color=line.get_color(),
            alpha=0.7,
            label=f"{name} CPU",
        )
    ax1.set_xlabel("job completion time (hours)")
    ax1.set_ylabel("fraction of jobs")
    ax1.set_title("JCT CDF (all seeds)")
    ax1.grid(alpha=0.3)
    ax1.legend()
    ax2.set_xlabel("time (hours)")
    ax2.set_ylabel("utilisation")
    ax2.set_title(f"per-slot utilisation (seed {results[next(iter(results))]['runs'][0]['seed']})")
    ax2.set_ylim(0, 1.05)
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize="small", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@click.command()
@click.option(
    "--policies",
    "-p",
    default="drf,tetris,optimus,fifo,srtf",
    show_default=True,
    help="Comma-separated policy names.",
)
@click.option(
    "--preset",
    default="small",
    show_default=True,
    help="Cluster and trace preset: reference, small, tiny, paper-rho1, paper-rho2, testbed-rho2, "
    "sweep-rho0.25 .. sweep-rho4 (see README \"Simulator\").",
)
@click.option(
    "--trace",
    "trace_file",
    type=click.Path(dir_okay=False),
    help="Replay this CSV trace instead of generating.",
)
@click.option(
    "--generate",
    "generate",
    default="",
    metavar="KEY=VAL,...",
    help="Trace-generator overrides of the preset, e.g. num_jobs=50,arrival=poisson,max_arrivals_per_slot=3.",
)
@click.option("--seeds", default="1-5", show_default=True, help="Seeds: range 1-5, list 1,4,9, or one.")
@click.option("--agents", type=click.IntRange(1, MAX_NODES), help="Number of nodes (overrides the preset).")
@click.option(
    "--slot-seconds", type=FiniteFloatRange(min=1.0), help="Slot length in seconds (overrides the preset)."
)
@click.option("--max-slots", type=click.IntRange(min=1), help="Stop after this many slots.")
@click.option(
    "--restart-cost/--no-restart-cost",
    default=True,
    show_default=True,
    help="Charge the rescale restart cost.",
)
@click.option(
    "--restart-costs",
    "restart_costs_file",
    type=click.Path(dir_okay=False),
    help="Per-type restart costs measured by the framework (its restart_costs.json) instead of the defaults.",
)
@click.option(
    "--speed-noise", type=FiniteFloatRange(0.0, 0.99), default=0.0, help="Training-speed noise amplitude."
)
@click.option("--model-path", type=click.Path(dir_okay=False), help="Model file for the dl2 policy.")
@click.option(
    "--json", "json_out", type=click.Path(dir_okay=False), callback=output_file, help="Write all results as JSON here."
)
@click.option(
    "--plot",
    "plot_out",
    type=click.Path(dir_okay=False),
    callback=output_file,
    help="Write the JCT CDF and utilisation plot (PNG).",
)
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal).")
def simulate(
    policies,
    preset,
    trace_file,
    generate,
    seeds,
    agents,
    slot_seconds,
    max_slots,
    restart_cost,
    restart_costs_file,
    speed_noise,
    model_path,
    json_out,
    plot_out,
    progress,
):
    """Compare scheduling policies in the cluster simulator.

    Each policy runs once per seed on the same traces (generated from the preset with the seed,
    or the --trace file with the seed driving only speed noise). Prints mean and 95% CI over
    seeds.
    """
    from tqdm import tqdm

    from dl2_mesos.policy.registry import make_policy, policy_names
    from dl2_mesos.policy.sim.settings import TraceConfig
    from dl2_mesos.policy.sim.settings import preset as get_preset
    from dl2_mesos.policy.sim.load import format_loads, offered_load
    from dl2_mesos.policy.sim.simulator import run
    from dl2_mesos.policy.sim.trace import generate_trace, read_trace

    names = [n.strip().lower() for n in policies.split(",") if n.strip()]
    if not names:
        raise click.BadParameter("no policy given", param_hint="--policies")
    unknown = [n for n in names if n not in policy_names()]
    if unknown:
        raise click.BadParameter(
            f"unknown policy {unknown[0]!r}; known: {', '.join(policy_names())}", param_hint="--policies"
        )
    if trace_file and generate:
        raise click.UsageError("give --trace or --generate, not both")
    if plot_out and not plotting_available():
        raise click.BadParameter("needs matplotlib: pip install 'dl2-mesos[plot]'", param_hint="--plot")
    seed_list = parse_seeds(seeds)
    try:
        sim_cfg, trace_cfg = get_preset(preset)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--preset") from None
    try:
        if generate:
            trace_cfg = replace(trace_cfg, **parse_overrides(generate, TraceConfig))
        sim_kw: dict = {"charge_restart_cost": restart_cost, "speed_noise": speed_noise}
        if agents:
            sim_kw["num_agents"] = agents
        if slot_seconds:
            sim_kw["slot_seconds"] = slot_seconds
            trace_cfg = replace(trace_cfg, slot_seconds=slot_seconds)
        if max_slots:
            sim_kw["max_slots"] = max_slots
        sim_cfg = replace(sim_cfg, **sim_kw)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None

    fixed_trace = None
    if trace_file:
        try:
            fixed_trace = read_trace(trace_file)
        except (OSError, TraceFormatError) as exc:
            raise click.ClickException(f"cannot read trace: {exc}") from None
        if not fixed_trace:
            raise click.ClickException(f"trace {trace_file} has no jobs")

    made = {}
    for n in names:
        kwargs = {"model_path": model_path} if (n == "dl2" and model_path) else {}
        try:
            made[n] = make_policy(n, **kwargs)
        except UnknownPolicy as exc:  # pragma: no cover - checked above
            raise click.BadParameter(str(exc), param_hint="--policies") from None
        except (Dl2Error, OSError, ImportError) as exc:
            raise click.ClickException(f"cannot create policy {n!r}: {exc}") from None

    measured = {}
    if restart_costs_file:
        from dl2_mesos.job_types import job_type_names
        from dl2_mesos.restart_costs import RestartCostsError, load_restart_costs

        try:
            measured = load_restart_costs(restart_costs_file, job_type_names())
        except RestartCostsError as exc:
            raise click.BadParameter(str(exc), param_hint="--restart-costs") from None
    traces = {}
    for s in seed_list:
        try:
            traces[s] = fixed_trace if fixed_trace is not None else generate_trace(trace_cfg, s)
        except ConfigError as exc:
            raise click.UsageError(str(exc)) from None
        if measured:
            from dl2_mesos.restart_costs import apply_restart_costs

            specs = apply_restart_costs([j.spec for j in traces[s]], measured)
            traces[s] = tuple(replace(j, spec=sp) for j, sp in zip(traces[s], specs))

    results: dict[str, dict] = {n: {"runs": []} for n in names}
    total = len(names) * len(seed_list)
    with tqdm(
        total=total, desc="simulating", unit="run", disable=(not progress) if progress is not None else None
    ) as bar:
        for n in names:
            for s in seed_list:
                bar.set_postfix_str(f"{n} seed {s}")
                m = run(made[n], sim_cfg, traces[s], seed=s)
                results[n]["runs"].append(m.to_dict())
                bar.update(1)
    for r in results.values():
        runs = r["runs"]
        for key in ("avg_jct", "median_jct", "p95_jct", "makespan", "cpu_util", "gpu_util", "rescales"):
            m, half = mean_ci([float(x[key]) for x in runs])
            r[key] = m
            r[f"{key}_ci95"] = None if math.isnan(half) else half

    src = (
        f"trace {trace_file}"
        if trace_file
        else f"preset {preset}" + (f" with {generate}" if generate else "")
    )
    click.echo(
        f"{src}; {len(sim_cfg.agent_resources())} nodes; {sim_cfg.slot_seconds:g} s slots; seeds {seeds}"
    )
    load_seeds = seed_list[:1] if fixed_trace is not None else seed_list
    loads = [offered_load(sim_cfg, traces[s]) for s in load_seeds]
    click.echo(
        format_loads(load_seeds, loads) if fixed_trace is None else f"offered load {loads[0].describe()}"
    )
    click.echo(_table(results, sim_cfg.slot_seconds))
    if json_out:
        doc = {
            "policies": {n: {k: v for k, v in r.items()} for n, r in results.items()},
            "config": {
                "preset": preset,
                "trace_file": trace_file,
                "seeds": seed_list,
                "sim": sim_cfg.to_dict(),
                "trace": None if trace_file else trace_cfg.to_dict(),
                "units": {"time": "seconds", "util": "fraction"},
            },
            "load": {str(s): x.to_dict() for s, x in zip(load_seeds, loads)},
        }
        Path(json_out).write_text(json.dumps(doc, indent=1))
        click.echo(f"wrote {json_out}")
    if plot_out:
        _plot(results, sim_cfg.slot_seconds, plot_out)
        click.echo(f"wrote {plot_out}")


# -- trace -------------------------------------------------------------------------------------------------


@click.group()
def trace() -> None:
    """Generate job traces or import them from cluster logs (CSV trace format: see README "Simulator")."""


@trace.command("generate")
@click.option("--preset", default="small", show_default=True, help="Trace preset: reference, small, tiny.")
@click.option(
    "--set",
    "overrides",
    default="",
    metavar="KEY=VAL,...",
    help="Overrides, e.g. num_jobs=50,arrival=poisson.",
)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False), required=True, callback=output_file, help="CSV file to write."
)
def trace_generate(preset, overrides, seed, output):
    """Generate a trace with the reference's arrival processes and job mix."""
    from dl2_mesos.policy.sim.settings import TraceConfig
    from dl2_mesos.policy.sim.settings import preset as get_preset
    from dl2_mesos.policy.sim.trace import generate_trace, write_trace

    try:
        _, cfg = get_preset(preset)
        if overrides:
            cfg = replace(cfg, **parse_overrides(overrides, TraceConfig))
        tr = generate_trace(cfg, seed)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    write_trace(tr, output)
    click.echo(f"wrote {len(tr)} jobs to {output}")


@trace.command("import-philly")
@click.argument("log", type=click.Path(exists=True, dir_okay=False))
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the job-type draw.")
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False), required=True, callback=output_file, help="CSV trace to write."
)
def trace_import_philly(log, seed, output):
    """Convert a Philly-style job log (submit time, duration, GPUs) into a trace."""
    from dl2_mesos.policy.sim.philly import import_philly
    from dl2_mesos.policy.sim.trace import write_trace

    try:
        tr = import_philly(log, seed=seed)
    except TraceFormatError as exc:
        raise click.ClickException(str(exc)) from None
    write_trace(tr, output)
    click.echo(f"wrote {len(tr)} jobs to {output}")


# -- matrix ------------------------------------------------------------------------------------------------


@click.command()
@click.option(
    "--policies",
    "-p",
    default=None,
    help="Comma-separated registered policy names "
    "[default: dl2 and every baseline except tetris, fifo, srtf].",
)
@click.option(
    "--seeds", default=None, help="Held-out seeds: range or list [default: 101-110; --quick: 101,102]."
)
@click.option(
    "--points",
    default=None,
    metavar="PRESET,...",
    help="Presets to evaluate [default: sweep-rho0.25..sweep-rho4, paper-rho1, paper-rho2, testbed-rho2; "
    "--quick: sweep-rho0.25, sweep-rho1, sweep-rho4, testbed-rho2].",
)
@click.option("--quick", is_flag=True, help="Fewer seeds and points (no 500-node presets).")
@click.option(
    "--model", "model_path", type=click.Path(dir_okay=False), help="DL2 weights (default: shipped)."
)
@click.option(
    "--workers", type=click.IntRange(min=1), default=2, show_default=True, help="Parallel processes."
)
@click.option("--max-slots", type=click.IntRange(min=1), help="Stop each run after this many slots.")
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    callback=output_folder,
    default="runs/matrix",
    show_default=True,
    help="Folder for matrix.json and matrix.png.",
)
@click.option(
    "--cache",
    "cache_path",
    type=click.Path(dir_okay=False),
    callback=output_file,
    help="JSON-lines file of finished runs: runs found there are reused, new ones appended as they "
    "finish (DL2 runs are keyed by the model file's sha256, so a new model re-runs only them).",
)
@click.option("--rerun", default=None, metavar="POLICY,...", help="With --cache: run these policies again.")
@click.option(
    "--versus",
    default=None,
    metavar="A:B",
    help="Also print A's avg JCT over B's per point and seed (e.g. dl2:pollux).",
)
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal).")
def matrix(policies, seeds, points, quick, model_path, workers, max_slots, out, cache_path, rerun, versus,
           progress):
    """Evaluate policies on the load sweep and the contended presets: one table and one plot.

    Per point: offered load rho, every policy's average JCT over the seeds, and its ratio to DRF,
    Optimus, the best heuristic at that point and the no-queueing lower bound.
    """
    from tqdm import tqdm

    from dl2_mesos.policy.registry import policy_names
    from dl2_mesos.policy.sim import matrix as mx
    from dl2_mesos.policy.sim.settings import PRESETS
    from dl2_mesos.policy.sim.settings import preset as get_preset

    names = (
        [n.strip().lower() for n in policies.split(",") if n.strip()] if policies else mx.default_policies()
    )
    unknown = [n for n in names if n not in policy_names()]
    if not names or unknown:
        raise click.BadParameter(
            f"unknown policy {unknown[0] if unknown else ''!r}; known: {', '.join(policy_names())}",
            param_hint="--policies",
        )
    if len(set(names)) != len(names):
        raise click.BadParameter("a policy is named twice", param_hint="--policies")
    seed_list = parse_seeds(seeds) if seeds else list(mx.QUICK_SEEDS if quick else mx.DEFAULT_SEEDS)
    point_list = (
        [p.strip() for p in points.split(",") if p.strip()]
        if points
        else list(mx.QUICK_POINTS if quick else mx.DEFAULT_POINTS)
    )
    if not point_list:
        raise click.BadParameter(f"no preset given; known: {', '.join(PRESETS)}", param_hint="--points")
    for point in point_list:
        try:
            get_preset(point)  # named presets with their @NODES / *LENGTH_SCALE suffixes
        except ConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="--points") from None
    if "dl2" in names:
        from dl2_mesos.errors import CheckpointError
        from dl2_mesos.policy.dl2.checkpoint import load_checkpoint

        try:
            load_checkpoint(model_path)  # fail fast, before any simulation
        except CheckpointError as exc:
            raise click.ClickException(str(exc)) from None
    pair = [n.strip().lower() for n in versus.split(":")] if versus else []
    if versus and (len(pair) != 2 or any(n not in names for n in pair)):
        raise click.BadParameter(f"{versus!r}: want A:B, two of the policies run", param_hint="--versus")
    rerun_names = [n.strip().lower() for n in rerun.split(",") if n.strip()] if rerun else []
    if rerun_names and not cache_path:
        raise click.BadParameter("--rerun needs --cache", param_hint="--rerun")
    not_run = [n for n in rerun_names if n not in names]
    if not_run:
        raise click.BadParameter(f"{not_run[0]!r} is not among the policies run", param_hint="--rerun")
    cache = None
    if cache_path:
        try:
            cache = mx.RunCache(cache_path)
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
    out_dir = Path(out)  # made and checked writable when the command line was read (output_folder)
    total = len(names) * len(seed_list) * len(point_list)
    with tqdm(
        total=total, desc="matrix", unit="run", disable=(not progress) if progress is not None else None
    ) as bar:

        def tick(point: str, name: str, seed: int) -> None:
            bar.set_postfix_str(f"{point} {name} {seed}")
            bar.update(1)

        try:
            doc = mx.evaluate_matrix(
                names, seed_list, point_list, model_path=model_path, workers=workers, max_slots=max_slots,
                progress=tick, cache=cache, rerun=rerun_names,
            )
        except Dl2Error as exc:  # e.g. a policy's invalid allocation: name it, no traceback
            raise click.ClickException(f"matrix run failed: {type(exc).__name__}: {exc}") from None
    click.echo(mx.format_matrix(doc))
    if pair:
        click.echo("\n" + mx.format_versus(doc, pair[0], pair[1]))
    if cache is not None:
        used = doc["config"]["cache"]
        click.echo(f"run cache {cache_path}: {used['reused']} runs reused, {used['ran']} run")
    json_path, png_path = out_dir / "matrix.json", out_dir / "matrix.png"
    json_path.write_text(json.dumps(doc, indent=1))
    if not plotting_available():
        # The runs may have taken hours: keep the table and the JSON, skip only the picture.
        click.echo(f"wrote {json_path}; no plot: needs matplotlib: pip install 'dl2-mesos[plot]'")
        return
    mx.plot_matrix(doc, str(png_path))
    click.echo(f"wrote {json_path} and {png_path}")
