"""Simulator and trace-generator settings, and the named presets.

Presets (the paper's settings leave the scale of a "small" and a "large" run open, and in the
prototype's 48-node configuration most baselines never finish; these are the two setups used):

``reference``
    The paper's large simulation: 500 nodes of 8 CPUs / 2 GPUs / 48 GiB, 200 jobs, 20-minute
    slots, at most 10 arrivals per slot following the prototype's Google-trace pattern (the
    real "Ali" pattern is missing from the public code, and the Google pattern is the only
    *trace-shaped* arrival process that ships; Poisson with a cap would fill almost every
    slot to the cap), ``MAX_NUM_EPOCHS`` 30000, at most 16 PS and 16 workers per job, all 8 job
    types uniformly, fixed per-type lengths.
``small``
    Testbed-like: 13 nodes (the paper's testbed), 30 jobs (the paper's testbed run), at most
    3 arrivals per slot (Google pattern), same job lengths as ``reference`` so the numbers are
    comparable.
``tiny``
    3 nodes, 6 short jobs (``MAX_NUM_EPOCHS`` 3000), 2 arrivals per slot: for fast tests.

Contended presets (offered load rho as defined in :mod:`dl2_mesos.policy.sim.load`; the
figures are the mean over seeds 101-110, CPUs the bottleneck). ``reference`` is idle
(rho ~0.25): every sensible policy is near the bound there, so it cannot separate schedulers.

``paper-rho1``, ``paper-rho2``
    Paper scale (500 reference nodes, the reference job mix and lengths) with the arrivals
    scaled: the Google pattern for cap 40 (4x ``reference``'s cap), 800 jobs -> rho ~0.98;
    the same pattern with ``arrival_scale`` 2, 1600 jobs -> rho ~1.99.
``testbed-rho2``
    Testbed scale (13 nodes), ``small``'s arrivals, 33 jobs -> rho ~2.0 (1.6-2.9 per seed).
``sweep-rho0.25`` ... ``sweep-rho4``
    The load sweep: ``reference``'s trace (200 jobs, same seed -> same trace at every point)
    on 500, 240, 120, 60 and 30 nodes -> rho ~0.25, 0.52, 1.03, 2.06, 4.1 (rho scales as
    1 / nodes). :data:`SWEEP` lists them in load order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from dl2_mesos.errors import ConfigError
from dl2_mesos.job_types import get_job_type, job_type_names
from dl2_mesos.jobs import MAX_EPOCHS, MAX_TASKS_PER_ROLE
from dl2_mesos.policy.sim.augment import AugmentConfig
from dl2_mesos.resources import Resources

#: The reference node: 8 CPU cores, 2 GPUs, 48 GiB (the simulator's node in the authors'
#: prototype; the testbed servers of DL2 §6.2 differ).
REFERENCE_AGENT = Resources(cpus=8.0, gpus=2.0, mem=48 * 1024.0)
ARRIVAL_PROCESSES = ("poisson", "google", "uniform")


#: Far above any cluster or trace studied (the paper's: 500 nodes, 1600 jobs), below what would
#: hang a run before its first slot (a node list or a trace built in memory, element by element).
MAX_NODES = 100_000
MAX_TRACE_JOBS = 1_000_000
#: the longest generated job is its type's fraction x max_epochs x 1.09 (``fixed_length`` False)
_MAX_LENGTH_FACTOR = 1.09


@dataclass(frozen=True)
class SimConfig:
    """Cluster and simulation settings.

    Attributes:
        num_agents: number of identical nodes (ignored when ``agents`` is given).
        agent: resources of each node.
        slot_seconds: length of one scheduling slot.
        max_slots: the run stops after this many slots; jobs still running are reported as
            unfinished (their JCT is censored at the stop time).
        charge_restart_cost: charge a restart cost in a slot where a job's counts change.
        restart_seconds: per job type override of the restart cost (type name -> seconds);
            types not named keep ``JobType.restart_seconds``. A job spec's own
            ``restart_seconds`` wins over both.
        speed_noise: multiplicative training-speed noise ``1 + speed_noise * U(-1, 1)``, drawn
            per job and slot (the reference's ``TRAIN_SPEED_ERROR``).
        agents: optional explicit (possibly mixed) node list; overrides ``num_agents``/``agent``.
        restart_charge_scale: multiplies the restart cost charged but not the one shown to the
            policy (``JobView.restart_cost_seconds``): a training curriculum only; evaluation
            keeps 1.
    """

    num_agents: int = 500
    agent: Resources = REFERENCE_AGENT
    slot_seconds: float = 1200.0
    max_slots: int = 1000
    charge_restart_cost: bool = True
    restart_seconds: Mapping[str, float] | None = None
    speed_noise: float = 0.0
    agents: tuple[Resources, ...] | None = None
    restart_charge_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.agents is not None:
            object.__setattr__(self, "agents", tuple(self.agents))
            if not self.agents:
                raise ConfigError("SimConfig.agents: must list at least one node")
        elif not 1 <= self.num_agents <= MAX_NODES:
            raise ConfigError(f"SimConfig.num_agents: must be between 1 and {MAX_NODES}, got {self.num_agents}")
        if not self.slot_seconds > 0:
            raise ConfigError(f"SimConfig.slot_seconds: must be > 0, got {self.slot_seconds}")
        if self.max_slots < 1:
            raise ConfigError(f"SimConfig.max_slots: must be >= 1, got {self.max_slots}")
        if not 0.0 <= self.restart_charge_scale <= 1.0:
            raise ConfigError(f"SimConfig.restart_charge_scale: must be in [0, 1], got {self.restart_charge_scale}")
        if not 0.0 <= self.speed_noise < 1.0:
            raise ConfigError(f"SimConfig.speed_noise: must be in [0, 1), got {self.speed_noise}")
        if self.restart_seconds is not None:
            for name, secs in self.restart_seconds.items():
                try:
                    get_job_type(name)
                except KeyError as exc:
                    raise ConfigError(f"SimConfig.restart_seconds: {exc.args[0]}") from None
                if not secs >= 0:
                    raise ConfigError(f"SimConfig.restart_seconds[{name}]: must be >= 0, got {secs}")

    def agent_resources(self) -> tuple[Resources, ...]:
        """The nodes' resources, in agent-id order."""
        if self.agents is not None:
            return self.agents
        return (self.agent,) * self.num_agents

    def restart_seconds_for(self, job_type: str) -> float:
        """Restart cost of a job of ``job_type`` under this config (0 when not charged)."""
        if not self.charge_restart_cost:
            return 0.0
        jt = get_job_type(job_type)
        if self.restart_seconds and jt.name in self.restart_seconds:
            return float(self.restart_seconds[jt.name])
        return jt.restart_seconds

    def to_dict(self) -> dict:
        d = {
            "num_agents": len(self.agent_resources()),
            "agent": self.agent.to_dict(),
            "agents": None if self.agents is None else [a.to_dict() for a in self.agents],
            "slot_seconds": self.slot_seconds,
            "max_slots": self.max_slots,
            "charge_restart_cost": self.charge_restart_cost,
            "restart_seconds": None if self.restart_seconds is None else dict(self.restart_seconds),
            "speed_noise": self.speed_noise,
        }
        if self.restart_charge_scale != 1.0:  # only when set: older records keep their shape
            d["restart_charge_scale"] = self.restart_charge_scale
        return d


@dataclass(frozen=True)
class TraceConfig:
    """How to generate a job trace (the reference's ``trace.py`` knobs).

    Attributes:
        num_jobs: total jobs (``TOT_NUM_JOBS``).
        arrival: "poisson" (per slot min(cap, Poisson(cap))), "google" (the prototype's 75-slot
            Google pattern for the cap, random start offset 0..4) or "uniform" (cap every slot).
        max_arrivals_per_slot: the cap (``MAX_ARRVS_PER_TS``); "google" needs one of the caps
            with a shipped pattern (1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50).
        max_epochs: ``MAX_NUM_EPOCHS``; a job's length is its type's fraction of it.
        job_types: the types drawn from, uniformly (default: all 8).
        fixed_length: True -> exactly fraction x max_epochs; False -> times U{0.90, ..., 1.09}.
        max_ps, max_workers: per-job caps written into each job spec.
        slot_seconds: slot length used to turn arrival slots into arrival times.
        arrival_scale: multiplies the arrivals of every slot (after the cap), carrying the
            fractional part to the next slot, so 2.0 gives twice the arrival rate with the
            same pattern shape (how the contended presets raise the offered load); 1.0 leaves
            the process unchanged.
        files: CSV trace files to draw episodes from instead of generating (a ``trace:``
            preset); the seed picks one file and drives ``augment``; the generator fields
            above are then unused.
        augment: how each episode is drawn from a file (:mod:`dl2_mesos.policy.sim.augment`).
    """

    num_jobs: int = 200
    arrival: str = "google"
    max_arrivals_per_slot: int = 10
    max_epochs: float = 30000.0
    job_types: tuple[str, ...] = field(default_factory=job_type_names)
    fixed_length: bool = True
    max_ps: int = 16
    max_workers: int = 16
    slot_seconds: float = 1200.0
    arrival_scale: float = 1.0
    files: tuple[str, ...] = ()
    augment: AugmentConfig | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "job_types", tuple(self.job_types))
        object.__setattr__(self, "files", tuple(str(f) for f in self.files))
        if self.augment is not None and not isinstance(self.augment, AugmentConfig):
            raise ConfigError("TraceConfig.augment: must be an AugmentConfig")
        if not 1 <= self.num_jobs <= MAX_TRACE_JOBS:
            raise ConfigError(f"TraceConfig.num_jobs: must be between 1 and {MAX_TRACE_JOBS}, got {self.num_jobs}")
        if self.arrival not in ARRIVAL_PROCESSES:
            raise ConfigError(
                f"TraceConfig.arrival: must be one of {', '.join(ARRIVAL_PROCESSES)}, got {self.arrival!r}"
            )
        if self.max_arrivals_per_slot < 1:
            raise ConfigError(
                f"TraceConfig.max_arrivals_per_slot: must be >= 1, got {self.max_arrivals_per_slot}"
            )
        if not (math.isfinite(self.max_epochs) and self.max_epochs > 0):
            raise ConfigError(f"TraceConfig.max_epochs: must be a finite number > 0, got {self.max_epochs}")
        if not self.job_types:
            raise ConfigError("TraceConfig.job_types: must name at least one job type")
        names = []
        for t in self.job_types:
            try:
                names.append(get_job_type(t).name)
            except KeyError as exc:
                raise ConfigError(f"TraceConfig.job_types: {exc.args[0]}") from None
        object.__setattr__(self, "job_types", tuple(names))
        longest = max(get_job_type(t).num_epochs_fraction for t in names) * self.max_epochs
        longest *= 1.0 if self.fixed_length else _MAX_LENGTH_FACTOR
        if longest > MAX_EPOCHS:
            raise ConfigError(
                f"TraceConfig.max_epochs: {self.max_epochs:g} gives jobs of up to {longest:g} epochs, "
                f"above a job's limit of {MAX_EPOCHS:g}"
            )
        if not (1 <= self.max_ps <= MAX_TASKS_PER_ROLE and 1 <= self.max_workers <= MAX_TASKS_PER_ROLE):
            raise ConfigError(f"TraceConfig.max_ps / max_workers: must be between 1 and {MAX_TASKS_PER_ROLE}")
        if not self.slot_seconds > 0:
            raise ConfigError(f"TraceConfig.slot_seconds: must be > 0, got {self.slot_seconds}")
        if not (math.isfinite(self.arrival_scale) and self.arrival_scale > 0):
            raise ConfigError(f"TraceConfig.arrival_scale: must be > 0, got {self.arrival_scale}")

    def to_dict(self) -> dict:
        return {
            "num_jobs": self.num_jobs,
            "arrival": self.arrival,
            "max_arrivals_per_slot": self.max_arrivals_per_slot,
            "max_epochs": self.max_epochs,
            "job_types": list(self.job_types),
            "fixed_length": self.fixed_length,
            "max_ps": self.max_ps,
            "max_workers": self.max_workers,
            "slot_seconds": self.slot_seconds,
            "arrival_scale": self.arrival_scale,
            "files": list(self.files),
            "augment": None if self.augment is None else self.augment.to_dict(),
        }


PRESETS: dict[str, tuple[SimConfig, TraceConfig]] = {
    "reference": (
        SimConfig(num_agents=500),
        TraceConfig(num_jobs=200, arrival="google", max_arrivals_per_slot=10, max_epochs=30000.0),
    ),
    "small": (
        SimConfig(num_agents=13),
        TraceConfig(num_jobs=30, arrival="google", max_arrivals_per_slot=3, max_epochs=30000.0),
    ),
    "tiny": (
        SimConfig(num_agents=3),
        TraceConfig(num_jobs=6, arrival="uniform", max_arrivals_per_slot=2, max_epochs=3000.0),
    ),
    "paper-rho1": (
        SimConfig(num_agents=500),
        TraceConfig(num_jobs=800, arrival="google", max_arrivals_per_slot=40, max_epochs=30000.0),
    ),
    "paper-rho2": (
        SimConfig(num_agents=500),
        TraceConfig(
            num_jobs=1600, arrival="google", max_arrivals_per_slot=40, max_epochs=30000.0, arrival_scale=2.0
        ),
    ),
    "testbed-rho2": (
        SimConfig(num_agents=13),
        TraceConfig(num_jobs=33, arrival="google", max_arrivals_per_slot=3, max_epochs=30000.0),
    ),
}

#: The load sweep, in load order: (preset name, nodes); the trace is ``reference``'s.
SWEEP: tuple[tuple[str, int], ...] = (
    ("sweep-rho0.25", 500),
    ("sweep-rho0.5", 240),
    ("sweep-rho1", 120),
    ("sweep-rho2", 60),
    ("sweep-rho4", 30),
)
PRESETS.update({name: (SimConfig(num_agents=nodes), PRESETS["reference"][1]) for name, nodes in SWEEP})

#: The contended presets of the evaluation matrix (after the sweep).
CONTENDED: tuple[str, ...] = ("paper-rho1", "paper-rho2", "testbed-rho2")


TRACE_PREFIX = "trace:"
# trace-preset option -> (AugmentConfig field or None for the cluster options, parser)
_TRACE_OPTIONS = {
    "base": (None, str),
    "agents": (None, int),
    "window": ("window_seconds", float),
    "rate": ("rate", float),
    "jitter": ("jitter_seconds", float),
    "resample": ("resample", lambda v: {"1": True, "true": True, "0": False, "false": False}[v.lower()]),
    "length_jitter": ("length_jitter", float),
    "max_jobs": ("max_jobs", int),
}


def trace_preset_name(
    files: list[str], base: str = "small", agents: int | None = None, augment: AugmentConfig | None = None
) -> str:
    """The ``trace:`` preset name that draws episodes from ``files`` (see :func:`preset`).

    Raises:
        ConfigError: no file, or a path with a character the name reserves (``|``, ``;``, ``,``).
    """
    if not files:
        raise ConfigError("a trace preset needs at least one trace file")
    for f in files:
        if any(c in str(f) for c in "|;,"):
            raise ConfigError(f"trace file path {str(f)!r}: must not contain '|', ';' or ','")
    parts = ["|".join(str(f) for f in files), f"base={base}"]
    if agents is not None:
        parts.append(f"agents={agents}")
    aug = augment or AugmentConfig()
    for key, (field_name, _) in _TRACE_OPTIONS.items():
        if field_name is not None and getattr(aug, field_name) != getattr(AugmentConfig(), field_name):
            v = getattr(aug, field_name)
            parts.append(f"{key}={int(v) if isinstance(v, bool) else v}")
    return TRACE_PREFIX + ";".join(parts)


def _trace_preset(name: str) -> tuple[SimConfig, TraceConfig]:
    head, *opts = name[len(TRACE_PREFIX) :].split(";")
    files = tuple(f for f in head.split("|") if f)
    if not files:
        raise ConfigError(f"preset {name!r}: names no trace file (trace:FILE[|FILE...][;key=value...])")
    cluster: dict = {"base": "small", "agents": None}
    aug: dict = {}
    for opt in opts:
        key, sep, value = opt.partition("=")
        if not sep or key not in _TRACE_OPTIONS:
            raise ConfigError(f"preset {name!r}: bad option {opt!r}; known: {', '.join(_TRACE_OPTIONS)}")
        field_name, parse = _TRACE_OPTIONS[key]
        try:
            v = parse(value)
        except (ValueError, KeyError):
            raise ConfigError(f"preset {name!r}: option {key}={value!r} is not valid") from None
        if field_name is None:
            cluster[key] = v
        else:
            aug[field_name] = v
    if cluster["base"].startswith(TRACE_PREFIX):
        raise ConfigError(f"preset {name!r}: base must be a named preset")
    sim, _ = preset(cluster["base"])
    if cluster["agents"] is not None:
        if cluster["agents"] < 1:
            raise ConfigError(f"preset {name!r}: agents must be >= 1")
        sim = replace(sim, num_agents=cluster["agents"], agents=None)
    for f in files:
        if not Path(f).is_file():
            raise ConfigError(f"preset {name!r}: no trace file {f!r}")
    augment = AugmentConfig(**aug) if aug else None
    return sim, TraceConfig(slot_seconds=sim.slot_seconds, files=files, augment=augment)


def preset(name: str) -> tuple[SimConfig, TraceConfig]:
    """The named preset, or a trace preset ``trace:FILE[|FILE...][;key=value...]``.

    A named preset takes two optional suffixes, in this order: ``@N`` runs its trace on N nodes
    (``small@8``: the ``small`` trace on a more contended cluster) and ``*K`` makes every job K
    times as long (``max_epochs`` x K, arrivals unchanged; ``sweep-rho2*2``, ``sweep-rho2@30*2``):
    a workload of longer or shorter jobs than the preset's, to train a policy on or to probe one.

    A trace preset draws every episode from CSV trace files (your cluster's history): the seed
    picks a file and drives the augmentation. Options: ``base`` (the preset whose cluster and
    slot length are used, default ``small``), ``agents`` (node count), and the augmentation of
    :class:`~dl2_mesos.policy.sim.augment.AugmentConfig`: ``window`` (seconds), ``rate``,
    ``jitter`` (seconds), ``resample`` (0/1), ``length_jitter``, ``max_jobs``. Build one with
    :func:`trace_preset_name`. Being a plain name, it works wherever a preset does (training,
    evaluation, worker processes).

    Raises:
        ConfigError: unknown name (the message lists the known ones), bad option, missing file.
    """
    if isinstance(name, str) and name.startswith(TRACE_PREFIX):
        return _trace_preset(name)
    head, star, scale_text = str(name).partition("*")
    base, at, nodes = head.partition("@")
    try:
        sim, trace = PRESETS[base]
    except KeyError:
        raise ConfigError(
            f"unknown preset {base!r}; known: {', '.join(PRESETS)} (each with optional @NODES and "
            "*LENGTH_SCALE suffixes), or trace:FILE"
        ) from None
    if at:
        if not nodes.isdigit() or int(nodes) < 1:
            raise ConfigError(f"preset {name!r}: the node count after '@' must be a positive integer")
        sim = replace(sim, num_agents=int(nodes), agents=None)
    if star:
        try:
            scale = float(scale_text)
        except ValueError:
            scale = math.nan
        if not 0.01 <= scale <= 100.0:
            raise ConfigError(f"preset {name!r}: the job-length scale after '*' must be a number from 0.01 to 100")
        trace = replace(trace, max_epochs=trace.max_epochs * scale)
    return sim, trace


def with_slot_seconds(
    sim: SimConfig, trace: TraceConfig, slot_seconds: float
) -> tuple[SimConfig, TraceConfig]:
    """Both configs with one slot length (they must agree)."""
    return replace(sim, slot_seconds=slot_seconds), replace(trace, slot_seconds=slot_seconds)
