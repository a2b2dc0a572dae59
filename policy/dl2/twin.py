"""Online learning on a simulated twin of the live workload (an alternative to online imitation).

Online imitation (:mod:`~dl2_mesos.policy.dl2.online_imitation`) learns from the states the
cluster itself visits: one state per slot, a few dozen over a drift, too few to move a model
that is already close to its teacher in a reliable direction (the model card measures it: no
lower avg JCT over a drift). The twin learner keeps what the cluster has shown of its workload
instead -- the jobs that arrived (their specs and arrival times), the nodes and the slot length
-- and every few slots simulates many short futures from the cluster's current state:

* the jobs in the system now, each as a job with its remaining epochs, arriving at once;
* arrivals resampled from the most recent ones: specs drawn with replacement, the gaps between
  arrivals drawn from the recent gaps (so bursts stay bursts), for ``horizon_jobs`` arrivals.

The student drives every future and the teacher labels each state it reaches (DAgger, as the
supervised training's rounds do, :func:`~dl2_mesos.policy.dl2.supervised.collect_teacher_episode`);
the actor then takes a few epochs of cross entropy on the labels of the last rounds. So the
model is fitted to the workload the cluster is running now, from many more states than the
cluster visits, at the cost of simulation (a fraction of a second per future on a small
cluster).

The futures run at the live cluster's pace: the median ratio of the measured speeds (progress
reports) to the speed table's at the same sizes (:func:`fitted_speeds`) rescales the future's
clock (slot, restart costs, gaps between arrivals), so a cluster whose clock is compressed or
whose GPUs are faster than the table's is simulated on the clock the model and the teacher were
built for (the teacher plans with the table's speeds); a type faster or slower than the others
keeps that as a factor on the table. Each job's restart cost is the one the cluster shows.

On the cluster a round runs in a background process (``TwinConfig.background``; at low CPU
priority) on a copy of the model, and the next update after it finishes loads the new weights:
the loop thread that owns the scheduler's state never waits for the simulation. By then the
cluster may be in states the round's futures did not cover (measured live: a round begun before
a burst of arrivals, loaded during it, paused every running job slot after slot), so the weights
are loaded only if, on the states the cluster showed since the round began, they agree with the
teacher at least as well as the current ones (``TwinConfig.check_states``; a few milliseconds a
state). In the simulator (``background`` off) a
round runs inside the update, so runs are repeatable.
"""

from __future__ import annotations

import copy
import logging
import math
import multiprocessing as mp
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from dl2_mesos.cluster import ClusterState
from dl2_mesos.jobs import JobSpec
from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
from dl2_mesos.policy.dl2.learner import SlotData
from dl2_mesos.policy.dl2.network import ActorCritic, NumpyActor
from dl2_mesos.policy.dl2.online_learner import save_online_model
from dl2_mesos.policy.dl2.supervised import SLConfig, collect_teacher_episode, train_supervised
from dl2_mesos.policy.sim.settings import SimConfig
from dl2_mesos.policy.sim.simulator import Simulator
from dl2_mesos.policy.sim.trace import TraceJob
from dl2_mesos.policy_api import Policy
from dl2_mesos.speed_model import default_speed_model

logger = logging.getLogger(__name__)

#: Remaining epochs below this are treated as done (a job about to finish adds nothing to learn).
_MIN_EPOCHS = 1e-3


@dataclass(frozen=True)
class TwinConfig:
    """Settings of the twin learner.

    Attributes:
        futures: simulated futures per round.
        recent: the arrivals a future resamples from (the most recent ones).
        horizon_jobs: arrivals per future.
        max_slots: a future ends after this many slots (or when its jobs are done).
        epochs: cross-entropy epochs per round.
        lr: Adam learning rate of the actor.
        keep_rounds: the labels of this many recent rounds are trained on.
        every_slots: slots between rounds (the first round waits for ``min_arrivals``).
        min_arrivals: arrivals seen before the first round.
        background: run rounds in a background process (on the cluster); off: inside the update.
        check_states: a round's weights are loaded only if, on the states the cluster showed
            since the round began (the last this many of them), their decisions agree with the
            teacher's on at least as many jobs as the current weights' do
            (:func:`teacher_agreement`); 0: no check. A round inside the update (``background``
            off) has no such states and is always loaded.
    """

    futures: int = 48
    recent: int = 20
    horizon_jobs: int = 20
    max_slots: int = 200
    epochs: int = 2
    lr: float = 5e-4
    keep_rounds: int = 3
    every_slots: int = 5
    min_arrivals: int = 4
    background: bool = True
    check_states: int = 8

    def __post_init__(self) -> None:
        for name in ("futures", "recent", "horizon_jobs", "max_slots", "epochs", "keep_rounds", "every_slots",
                     "min_arrivals"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"twin learner: {name} must be >= 1, got {getattr(self, name)!r}")
        if not self.lr > 0:
            raise ValueError(f"twin learner: lr must be > 0, got {self.lr!r}")
        if int(self.check_states) < 0:
            raise ValueError(f"twin learner: check_states must be >= 0, got {self.check_states!r}")


class ArrivalLog:
    """The jobs the cluster has shown, once each, in order of arrival (the last ``keep`` kept)."""

    def __init__(self, keep: int) -> None:
        self._seen: set[str] = set()
        self._arrivals: deque[tuple[float, JobSpec]] = deque(maxlen=keep)

    def observe(self, state: ClusterState) -> int:
        """Record the jobs of ``state`` not seen before; returns how many were new. A job stays
        in the states from its arrival to its end, so only the ids of the jobs in ``state`` need
        remembering (the memory stays bounded on a long-running cluster)."""
        new = sorted((j for j in state.jobs if j.job_id not in self._seen), key=lambda j: (j.arrival_time, j.job_id))
        for j in new:
            self._arrivals.append((float(j.arrival_time), j.spec))
        self._seen = {j.job_id for j in state.jobs}
        return len(new)

    def __len__(self) -> int:
        return len(self._arrivals)

    @property
    def arrivals(self) -> tuple[tuple[float, JobSpec], ...]:
        return tuple(self._arrivals)


class FittedSpeeds:
    """The speed table with each job type's speeds multiplied by a factor (``default`` for a
    type without one)."""

    def __init__(self, factors: Mapping[str, float], default: float = 1.0) -> None:
        self.factors = dict(factors)
        self.default = default
        self.table = default_speed_model()

    def epochs_per_second(self, job_type: str, num_ps: int, num_workers: int, uses_ps: bool = True) -> float:
        return self.table.epochs_per_second(job_type, num_ps, num_workers, uses_ps) * self.factors.get(
            job_type, self.default)


#: A job's measured speed counts once its size has held this many slots (the first slot after a
#: change mixes the restart and the old size's reports).
STEADY_SLOTS = 2


def fitted_speeds(state: ClusterState) -> FittedSpeeds:
    """The cluster's pace against the speed table, from the running jobs' measured speeds: per
    type the median of measured / table speed at the job's current size, over the jobs whose
    size held :data:`STEADY_SLOTS` slots (all measured jobs when none did); the median over all
    of them for the other types (``default``); the table itself when nothing was measured."""
    table = default_speed_model()
    ratios: dict[str, list[float]] = {}
    steady: dict[str, list[float]] = {}
    for j in state.jobs:
        measured = j.measured_epochs_per_second
        if not measured or measured <= 0 or j.num_workers < 1:
            continue
        expected = table.epochs_per_second(j.spec.job_type, j.num_ps, j.num_workers, j.spec.uses_ps)
        if expected > 0:
            ratios.setdefault(j.spec.job_type, []).append(measured / expected)
            if j.slots_since_rescale >= STEADY_SLOTS:
                steady.setdefault(j.spec.job_type, []).append(measured / expected)
    use = steady or ratios
    factors = {t: float(np.median(r)) for t, r in use.items()}
    everything = [x for r in use.values() for x in r]
    return FittedSpeeds(factors, float(np.median(everything)) if everything else 1.0)


def restart_costs(state: ClusterState) -> dict[str, float]:
    """Each job type's restart cost as the cluster shows it (its jobs' median)."""
    costs: dict[str, list[float]] = {}
    for j in state.jobs:
        costs.setdefault(j.spec.job_type, []).append(float(j.restart_cost_seconds))
    return {t: float(np.median(c)) for t, c in costs.items()}


def future_trace(state: ClusterState, arrivals: Sequence[tuple[float, JobSpec]], rng: np.random.Generator,
                 horizon_jobs: int, time_scale: float = 1.0) -> list[TraceJob]:
    """One simulated future from ``state``: its jobs with their remaining epochs at time 0, then
    ``horizon_jobs`` arrivals resampled from ``arrivals`` (specs with replacement, gaps from the
    gaps between them; one slot apart when fewer than two arrivals are known). Every job's
    restart cost is its type's as the cluster shows it; gaps and restart costs are multiplied
    by ``time_scale`` (the cluster's pace: the future then runs on the speed table's clock)."""
    restart = restart_costs(state)

    def shown(spec: JobSpec, secs: float | None = None) -> JobSpec:
        """``spec`` with its restart cost: ``secs``, its own, or its type's as shown, on the
        future's clock."""
        if secs is None:
            secs = spec.restart_seconds if spec.restart_seconds is not None else restart.get(spec.job_type)
        return spec if secs is None else replace(spec, restart_seconds=float(secs) * time_scale)

    jobs = [
        TraceJob(f"now-{k}", 0.0, shown(replace(j.spec, epochs=round(j.remaining_epochs, 6)), j.restart_cost_seconds))
        for k, j in enumerate(sorted(state.jobs, key=lambda j: (j.arrival_time, j.job_id)))
        if j.remaining_epochs > _MIN_EPOCHS
    ]
    if not arrivals:
        return jobs
    times = np.asarray([t for t, _ in arrivals], dtype=float) * time_scale
    gaps = np.diff(np.sort(times))
    if len(gaps) == 0:
        gaps = np.asarray([state.slot_seconds * time_scale])
    t = 0.0
    for k in range(horizon_jobs):
        t += float(gaps[rng.integers(len(gaps))])
        spec = arrivals[int(rng.integers(len(arrivals)))][1]
        jobs.append(TraceJob(f"twin-{k}", t, shown(spec)))
    return jobs


def twin_config(state: ClusterState, max_slots: int, time_scale: float = 1.0) -> SimConfig:
    """The simulated cluster: the live nodes' total resources and slot length (times
    ``time_scale``, as :func:`future_trace`)."""
    return SimConfig(agents=tuple(a.total for a in state.agents), slot_seconds=float(state.slot_seconds) * time_scale,
                     max_slots=max_slots)


#: Each trainer's kept rounds, in the process that runs its rounds (a background worker keeps
#: them across rounds, so only weights and stats cross the process boundary).
_KEPT: dict[str, deque[list[list[SlotData]]]] = {}


def teacher_agreement(policy: Policy, teacher: Policy, states: Sequence[ClusterState]) -> float:
    """The fraction of the jobs of ``states`` (all of them together) that ``policy`` gives the
    same PS and worker counts as ``teacher`` does (1.0 when there are none)."""
    same = total = 0
    for state in states:
        mine, theirs = policy.decide(state), teacher.decide(state)
        for j in state.jobs:
            a, b = mine.get_counts(j.job_id), theirs.get_counts(j.job_id)
            same += (a.num_ps, a.num_workers) == (b.num_ps, b.num_workers)
            total += 1
    return same / total if total else 1.0


def _init_background_worker() -> None:
    """Initialiser of the background process: low CPU priority (the scheduler and the jobs come
    first) and one torch thread."""
    import os

    import torch

    try:
        os.nice(10)
    except OSError:  # not permitted: run at the same priority
        pass
    torch.set_num_threads(1)


def run_round(net: ActorCritic, teacher: Policy, config: TwinConfig, key: str, state: ClusterState,
              arrivals: Sequence[tuple[float, JobSpec]], future_seed: int, train_seed: int):
    """One round on ``net`` (a copy): ``config.futures`` futures from ``state``, labelled by
    ``teacher``, then training on them and the kept rounds (kept under ``key`` in this process).
    Returns the trained actor's weights (None: nothing to learn) and the stats."""
    rng = np.random.default_rng(future_seed)
    student = NumpyActor(net.actor)
    fitted = fitted_speeds(state)
    # the futures run on the table's clock: a cluster at 600x the table's pace with 2 s slots is
    # simulated with 1200 s slots (restarts and gaps scaled alike), as the model and the teacher
    # were built for; what differs between types stays as a factor on the table
    pace = fitted.default
    speeds = FittedSpeeds({t: f / pace for t, f in fitted.factors.items()}, 1.0)
    sim_cfg = twin_config(state, config.max_slots, pace)
    episodes: list[list[SlotData]] = []
    for k in range(config.futures):
        trace = future_trace(state, arrivals, rng, config.horizon_jobs, pace)
        if trace:
            sim = Simulator(sim_cfg, trace, speed_model=speeds, seed=k)
            episodes.append(collect_teacher_episode(sim, net.cfg, teacher, within_slot=student))
    stats: dict[str, float] = {"futures": float(len(episodes))}
    samples = sum(len(s) for ep in episodes for s in ep)
    if not samples:
        return None, stats
    kept = _KEPT.setdefault(key, deque(maxlen=config.keep_rounds))
    kept.append(episodes)
    history = train_supervised(net, [ep for rnd in kept for ep in rnd],
                               SLConfig(lr=config.lr, epochs=config.epochs, train_critic=False, seed=train_seed))
    last = history[-1] if history else {}
    stats.update(samples=float(samples), loss=float(last.get("loss", math.nan)),
                 accuracy=float(last.get("accuracy", math.nan)))
    return {k: v.detach().clone() for k, v in net.actor.state_dict().items()}, stats


class TwinTrainer:
    """Fits a live DL2 actor to the current workload by DAgger on simulated futures.

    Args:
        net: the model to update in place (e.g. ``DL2Policy.net``).
        teacher: the policy whose decisions are the labels.
        config: see :class:`TwinConfig`.
        version: the model's current version; each round that trains bumps it.
        seed: seeds the futures' resampling and the minibatch order.
    """

    def __init__(self, net: ActorCritic, teacher: Policy, config: TwinConfig | None = None, *,
                 version: int = 0, seed: int = 0) -> None:
        self.net = net
        self.teacher = teacher
        self.config = config or TwinConfig()
        self.version = version
        self.log = ArrivalLog(self.config.recent)
        self._rng = np.random.default_rng(seed)
        self._seed = seed
        self._key = uuid.uuid4().hex
        self._latest: ClusterState | None = None
        self._since_round = 0
        self._pool: ProcessPoolExecutor | None = None
        self._pending: Future | None = None
        # the states observed since the pending round began (the last check_states of them)
        self._since_start: deque[ClusterState] = deque(maxlen=max(1, self.config.check_states))
        self.rounds_done = 0
        self.rounds_rejected = 0

    def update(self, states: Sequence[ClusterState]) -> dict[str, float]:
        """Observe ``states`` (slots DL2 decided in); every ``every_slots`` of them, once
        ``min_arrivals`` jobs were seen, run a round (in the background: start one, and load
        its weights at the first update after it finished). Returns ``samples`` (labels the
        weights loaded now were trained on; 0: unchanged), ``version`` and, with new weights,
        ``loss`` and ``accuracy`` of the round's last epoch and ``futures``."""
        stats: dict[str, float] = {"samples": 0.0, "version": float(self.version)}
        for s in states:
            if s.jobs:
                self.log.observe(s)
                self._latest = s
                self._since_start.append(s)
                self._since_round += 1
        if self._pending is not None:
            if not self._pending.done():
                return stats
            pending, self._pending = self._pending, None
            try:
                return self._apply(*pending.result(), checked_on=tuple(self._since_start))
            except Exception:  # a failed round must not stop the scheduler: keep the weights
                logger.exception("twin learner: a round failed; the model is unchanged")
                return stats
        cfg = self.config
        if self._latest is None or len(self.log) < cfg.min_arrivals or self._since_round < cfg.every_slots:
            return stats
        self._since_round = 0
        args = (copy.deepcopy(self.net), self.teacher, cfg, self._key, self._latest, self.log.arrivals,
                int(self._rng.integers(2**31)), self._seed + self.rounds_done + 1)
        if not cfg.background:
            return self._apply(*run_round(*args), checked_on=())
        if self._pool is None:
            # a process, not a thread: the simulation is Python and would hold the GIL against
            # the loop thread (and every socket it serves) for seconds at a time
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"),
                                             initializer=_init_background_worker)
        try:
            self._pending = self._pool.submit(run_round, *args)
            self._since_start.clear()
        except Exception:  # a broken pool (its process died): start a new one next round
            logger.exception("twin learner: could not start a round")
            self._pool = None
        return stats

    def _apply(self, weights, stats: dict[str, float], checked_on: Sequence[ClusterState]) -> dict[str, float]:
        """Load a round's ``weights`` unless they do worse than the current ones on
        ``checked_on`` (the states observed since the round began; none for a round run inside
        the update)."""
        out = {"samples": 0.0, "version": float(self.version), **stats}
        if weights is None:
            return out
        if self.config.check_states and not self._accepts(weights, out, checked_on):
            out["samples"] = 0.0
            return out
        self.net.actor.load_state_dict(weights)
        self.rounds_done += 1
        self.version += 1
        out["version"] = float(self.version)
        return out

    def _accepts(self, weights, out: dict[str, float], states: Sequence[ClusterState]) -> bool:
        """Whether ``weights`` agree with the teacher on ``states`` at least as well as the
        current weights (a round's futures start from the state it began in; by the time it is
        done the cluster may show states they did not cover, e.g. a burst of arrivals). True when
        there are none. Adds both agreements to ``out``."""
        if not states:
            return True
        candidate = copy.deepcopy(self.net)
        candidate.actor.load_state_dict(weights)
        now = teacher_agreement(DL2Policy(net=self.net), self.teacher, states)
        new = teacher_agreement(DL2Policy(net=candidate), self.teacher, states)
        out.update(agreement_current=now, agreement_new=new)
        if new >= now:
            return True
        self.rounds_rejected += 1
        logger.info("twin learner: a round's weights agree with the teacher on %.0f%% of the jobs of the %d "
                    "states since it began, the current ones on %.0f%%: kept the current weights", 100 * new, len(states), 100 * now)
        return False

    def close(self) -> None:
        """Stop the background process (a round in progress is finished and dropped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._pending = None
        _KEPT.pop(self._key, None)

    def save(self, path: str | Path, meta: Mapping[str, Any] | None = None) -> Path:
        """Write the updated model (with its version) to ``path``."""
        return save_online_model(self.net, self.version, path, dict(meta or {}, twin=True))
