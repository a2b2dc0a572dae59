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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from dl2_mesos.errors import ConfigError
from dl2_mesos.job_types import get_job_type, job_type_names
from dl2_mesos.resources import Resources

#: The reference node: 8 CPU cores, 2 GPUs, 48 GiB (the simulator's node in the authors'
#: prototype; the testbed servers of DL2 §6.2 differ).
REFERENCE_AGENT = Resources(cpus=8.0, gpus=2.0, mem=48 * 1024.0)
ARRIVAL_PROCESSES = ("poisson", "google", "uniform")


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
    """

    num_agents: int = 500
    agent: Resources = REFERENCE_AGENT
    slot_seconds: float = 1200.0
    max_slots: int = 1000
    charge_restart_cost: bool = True
    restart_seconds: Mapping[str, float] | None = None
    speed_noise: float = 0.0
    agents: tuple[Resources, ...] | None = None

    def __post_init__(self) -> None:
        if self.agents is not None:
            object.__setattr__(self, "agents", tuple(self.agents))
            if not self.agents:
                raise ConfigError("SimConfig.agents: must list at least one node")
        elif self.num_agents < 1:
            raise ConfigError(f"SimConfig.num_agents: must be >= 1, got {self.num_agents}")
        if not self.slot_seconds > 0:
            raise ConfigError(f"SimConfig.slot_seconds: must be > 0, got {self.slot_seconds}")
        if self.max_slots < 1:
            raise ConfigError(f"SimConfig.max_slots: must be >= 1, got {self.max_slots}")
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
        return {
            "num_agents": len(self.agent_resources()),
            "agent": self.agent.to_dict(),
            "agents": None if self.agents is None else [a.to_dict() for a in self.agents],
            "slot_seconds": self.slot_seconds,
            "max_slots": self.max_slots,
            "charge_restart_cost": self.charge_restart_cost,
            "restart_seconds": None if self.restart_seconds is None else dict(self.restart_seconds),
            "speed_noise": self.speed_noise,
        }


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "job_types", tuple(self.job_types))
        if self.num_jobs < 1:
            raise ConfigError(f"TraceConfig.num_jobs: must be >= 1, got {self.num_jobs}")
        if self.arrival not in ARRIVAL_PROCESSES:
            raise ConfigError(
                f"TraceConfig.arrival: must be one of {', '.join(ARRIVAL_PROCESSES)}, got {self.arrival!r}"
            )
        if self.max_arrivals_per_slot < 1:
            raise ConfigError(
                f"TraceConfig.max_arrivals_per_slot: must be >= 1, got {self.max_arrivals_per_slot}"
            )
        if not self.max_epochs > 0:
            raise ConfigError(f"TraceConfig.max_epochs: must be > 0, got {self.max_epochs}")
        if not self.job_types:
            raise ConfigError("TraceConfig.job_types: must name at least one job type")
        names = []
        for t in self.job_types:
            try:
                names.append(get_job_type(t).name)
            except KeyError as exc:
                raise ConfigError(f"TraceConfig.job_types: {exc.args[0]}") from None
        object.__setattr__(self, "job_types", tuple(names))
        if self.max_ps < 1 or self.max_workers < 1:
            raise ConfigError("TraceConfig.max_ps / max_workers: must be >= 1")
        if not self.slot_seconds > 0:
            raise ConfigError(f"TraceConfig.slot_seconds: must be > 0, got {self.slot_seconds}")

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
}


def preset(name: str) -> tuple[SimConfig, TraceConfig]:
    """The named preset.

    Raises:
        ConfigError: unknown name (the message lists the known ones).
    """
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None


def with_slot_seconds(
    sim: SimConfig, trace: TraceConfig, slot_seconds: float
) -> tuple[SimConfig, TraceConfig]:
    """Both configs with one slot length (they must agree)."""
    return replace(sim, slot_seconds=slot_seconds), replace(trace, slot_seconds=slot_seconds)
