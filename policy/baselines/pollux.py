"""Pollux (Qiao et al., OSDI'21) as a baseline: adaptdl-sched's own ``PolluxPolicy``, not a copy.

The published policy (``adaptdl_sched.policy.pollux.PolluxPolicy`` from adaptdl-sched 0.2.11)
needs numpy < 1.24 and pymoo 0.5, so it runs in its own environment (``.venv-pollux``, made by
scripts/install_pollux_env.sh) as one long-lived subprocess
(:mod:`dl2_mesos.policy.baselines.pollux_worker`) that this class talks to in JSON lines. The
process stays up across slots, so Pollux's genetic algorithm starts every slot from the previous
slot's population, as it does in its own scheduler. A new simulation run (the slot number goes
back) resets that population.

How our world maps onto Pollux's inputs (Pollux section 4.2 schedules *replicas* of a job, each
with a fixed resource demand, given a speed-up function of the replica count):

* **replica** = one worker plus the parameter servers that worker count needs. The PS count for
  ``w`` workers is :func:`ps_for_workers`: the PS count ``1 <= p <= min(w, max_ps)`` (at least
  ``min_ps``) with the highest speed in the measured speed table, fewest PS on ties. Because
  ``p <= w``, a replica reserves one worker plus one PS (the reference's bundle); the PS
  resources a smaller ``p`` leaves unused stay idle for that slot. PyTorch all-reduce jobs (no
  PS) have replica = one worker. This is the mapping's main handicap: the measured speeds often
  peak with more PS than workers (resnet-50 at 1 worker: 16 PS train 3.9x faster than 1), which
  a fixed per-replica demand cannot express without reserving many PS per replica.
* **speed-up** ``speedup_fn(nodes, r)`` = epochs/s at ``(ps_for_workers(r), r)`` over epochs/s
  at one replica, from the same speed table the other baselines use (placement-blind: the table
  has no node dimension). Replica counts below the job's minimum size are worth 0 and are
  mapped to no allocation.
* **resources**: CPUs (milli-cores), GPUs, memory (MiB) and ``pods`` (one per replica), as
  integers because Pollux's problem keeps them in int64 arrays: a replica's demand is rounded
  up, an agent's available amount down, so what Pollux fits on an agent really fits there.
  ``pods`` makes every replica ask for some resource, as in adaptdl-sched's own tests; an
  agent's pod capacity is one per whole CPU (never the binding limit for our tasks).
* **restart cost** -> Pollux's re-allocation penalty (the fraction of a job's speed-up lost in
  the slot where its placement changes): the mean over the jobs of restart seconds / slot
  seconds, capped at 0.95 (one value, as in Pollux, where it is a constant of the problem).
* ``min_replicas = 0`` (Pollux's own simulator and tests; a positive value pins replicas to the
  first nodes in its mutation step), ``max_replicas = max_workers``.
* Pollux returns replicas per node; the counts are kept and placed by the one placement
  function every policy goes through.

Cost: Pollux's optimiser is far costlier than the other baselines'. Its own settings are a
population of 100 for 100 generations per scheduling cycle; here they are ``population`` and
``generations`` (defaults 20 and 10: Pollux carries its population over from slot to slot, so
the search continues across slots), and the generations are further cut, to no fewer than
``min_generations``, so that population x generations x jobs x 2 x agents (the cells the GA
touches per slot; Pollux doubles the node list for auto-scaling) stays within ``work_budget``:
a 500-node cluster with ~100 jobs gets 3 generations. Measured on this machine: Pollux's own
100 x 100 did not finish the 30-job, 13-node ``small`` preset in 20 minutes; 30 x 30 took about
0.1-0.2 CPU-seconds per slot there and 3-15 CPU-seconds per slot on 500 nodes. The worker's CPU
seconds and the generations used per decision are kept in :attr:`PolluxPolicy.cpu_seconds`
and :attr:`PolluxPolicy.generations_used`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import select
import subprocess
import tempfile
import time
import weakref
from functools import lru_cache
from pathlib import Path

import numpy as np

import dl2_mesos
from dl2_mesos.allocation import Allocation, JobAllocation
from dl2_mesos.cluster import ClusterState, JobView
from dl2_mesos.errors import Dl2Error
from dl2_mesos.jobs import JobSpec
from dl2_mesos.speed_model import default_speed_model

logger = logging.getLogger(__name__)

WORKER_SCRIPT = Path(__file__).with_name("pollux_worker.py")
MAX_RESTART_PENALTY = 0.95


class PolluxUnavailable(Dl2Error, RuntimeError):
    """The Pollux optimiser process is missing, died, hung or failed; the message says which."""


def pollux_python() -> str:
    """The interpreter of ``.venv-pollux``: ``DL2_POLLUX_PYTHON``, else ``.venv-pollux`` next to
    the installed package."""
    env = os.environ.get("DL2_POLLUX_PYTHON")
    if env:
        return env
    return str(Path(dl2_mesos.__file__).resolve().parents[1] / ".venv-pollux" / "bin" / "python")


def ps_for_workers(spec: JobSpec, workers: int, speed_model=None) -> int:
    """PS count a job runs with at ``workers`` workers (the documented replica rule).

    The count ``p`` in ``[max(1, min_ps), min(workers, max_ps)]`` with the highest speed in the
    speed table, fewest PS on ties; ``min_ps`` when that range is empty; 0 for jobs without PS.
    """
    if not spec.uses_ps or workers <= 0:
        return 0
    if speed_model is None:
        return _default_ps_rule(spec.job_type, spec.min_ps, spec.max_ps, workers)
    return _best_ps(speed_model, spec.job_type, spec.min_ps, spec.max_ps, workers)


def _best_ps(speed_model, job_type: str, min_ps: int, max_ps: int, workers: int) -> int:
    lo, hi = max(1, min_ps), min(workers, max_ps)
    if hi < lo:
        return min_ps
    best, best_speed = lo, -1.0
    for p in range(lo, hi + 1):
        s = speed_model.epochs_per_second(job_type, p, workers, True)
        if s > best_speed + 1e-12:
            best, best_speed = p, s
    return best


@lru_cache(maxsize=65536)
def _default_ps_rule(job_type: str, min_ps: int, max_ps: int, workers: int) -> int:
    return _best_ps(default_speed_model(), job_type, min_ps, max_ps, workers)


def _ceil_int(x: float) -> int:
    return int(math.ceil(x - 1e-9))


def _floor_int(x: float) -> int:
    return int(math.floor(x + 1e-9))


def _stop(proc: subprocess.Popen, stderr_file) -> None:
    """Close the worker's stdin (it exits at EOF); kill it if it does not go within 5 s."""
    try:
        if proc.poll() is None:
            try:
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
    finally:
        for f in (proc.stdout, stderr_file):
            try:
                f.close()
            except (OSError, AttributeError):
                pass


class PolluxPolicy:
    """adaptdl-sched's ``PolluxPolicy`` behind the one Policy interface (see the module docstring).

    Args:
        population: NSGA-II population per slot (Pollux's own: 100).
        generations: generations per slot at most (Pollux's own: 100).
        work_budget: cap on population x generations x jobs x 2 x agents per slot.
        min_generations: generations run however large the problem.
        python: interpreter with adaptdl-sched (default :func:`pollux_python`).
        timeout: seconds one decision may take before the worker is declared hung and killed.
        seed: seeds the optimiser (per slot: seed + slot), for repeatable runs.
        speed_model: epochs/s model (default: the measured speed table).

    Raises:
        PolluxUnavailable: the interpreter is missing or the worker cannot load the policy.
    """

    name = "pollux"

    def __init__(self, population: int = 20, generations: int = 10, work_budget: float = 6e6,
                 min_generations: int = 3, python: str | None = None, timeout: float = 600.0, seed: int = 0,
                 speed_model=None) -> None:
        if population < 2 or generations < 1 or min_generations < 1 or not work_budget > 0:
            raise ValueError("population must be >= 2, generations and min_generations >= 1, work_budget > 0; got "
                             f"{population}, {generations}, {min_generations}, {work_budget}")
        self.population = int(population)
        self.generations = int(generations)
        self.work_budget = float(work_budget)
        self.min_generations = int(min_generations)
        self.python = python or pollux_python()
        self.timeout = float(timeout)
        self.seed = int(seed)
        self._speed_model_arg = speed_model
        self.speed_model = speed_model if speed_model is not None else default_speed_model()
        self.cpu_seconds: list[float] = []  # the worker's CPU seconds, one entry per decision
        self.generations_used: list[int] = []  # generations run, one entry per decision
        self._last_slot: int | None = None
        self._proc: subprocess.Popen | None = None
        self._stderr = None
        self._finalizer = None
        self._start()

    # -- the worker process -------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """Process id of the optimiser process (None when none runs)."""
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> None:
        if not os.path.exists(self.python):
            raise PolluxUnavailable(
                f"no Pollux environment: {self.python} does not exist (run scripts/install_pollux_env.sh, "
                "or set DL2_POLLUX_PYTHON)")
        env = dict(os.environ)
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(var, "1")
        self._stderr = tempfile.TemporaryFile(mode="w+", prefix="dl2-pollux-")
        try:
            self._proc = subprocess.Popen(
                [self.python, "-I", str(WORKER_SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self._stderr, text=True, bufsize=1, env=env)
        except OSError as exc:
            self._stderr.close()
            raise PolluxUnavailable(f"cannot start the Pollux worker with {self.python}: {exc}") from None
        self._finalizer = weakref.finalize(self, _stop, self._proc, self._stderr)
        self._last_slot = None
        hello = self._read(60.0, "starting")
        if not hello.get("ready"):
            err = hello.get("error", "no handshake")
            self.close()
            raise PolluxUnavailable(f"Pollux worker did not start: {err}")
        logger.info("Pollux worker %d up (numpy %s)", self._proc.pid, hello.get("numpy"))

    def close(self) -> None:
        """Stop the optimiser process (a later decision starts a new one)."""
        if self._finalizer is not None:
            self._finalizer()
        self._proc = None
        self._finalizer = None

    def _stderr_tail(self) -> str:
        try:
            self._stderr.seek(0)
            text = self._stderr.read()
        except (OSError, ValueError, AttributeError):
            return ""
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        return " | ".join(lines[-3:])

    def _dead(self, doing: str) -> PolluxUnavailable:
        proc = self._proc
        code = proc.poll() if proc is not None else None
        if proc is not None and code is None:
            proc.kill()
            proc.wait(timeout=5)
            code = proc.returncode
        tail = self._stderr_tail()
        self.close()
        why = f"exited with code {code}" if code is not None else "is gone"
        msg = f"Pollux worker {why} while {doing}"
        return PolluxUnavailable(msg + (f" (stderr: {tail})" if tail else ""))

    def _read(self, timeout: float, doing: str) -> dict:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                err = self._dead(doing)
                raise PolluxUnavailable(f"Pollux worker gave no answer within {timeout:g} s while {doing}; "
                                        f"killed it ({err})")
            ready, _, _ = select.select([proc.stdout], [], [], min(left, 1.0))
            if ready:
                line = proc.stdout.readline()
                if not line:
                    raise self._dead(doing)
                try:
                    msg = json.loads(line)
                except ValueError:
                    raise self._dead(f"{doing} (it wrote a non-JSON line {line[:80]!r})") from None
                if not isinstance(msg, dict):
                    raise self._dead(f"{doing} (it wrote {line[:80]!r})")
                return msg
            if proc.poll() is not None:
                raise self._dead(doing)

    def _call(self, req: dict, doing: str) -> dict:
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                raise self._dead(doing)  # report this death; the next decision starts a new worker
            self._start()
        try:
            self._proc.stdin.write(json.dumps(req) + "\n")
            self._proc.stdin.flush()
        except (OSError, ValueError):
            raise self._dead(doing) from None
        ans = self._read(self.timeout, doing)
        if not ans.get("ok"):
            raise PolluxUnavailable(f"Pollux optimiser failed while {doing}: {ans.get('error', 'no reason given')}")
        return ans

    # -- the mapping ------------------------------------------------------------------------------------
    def _speedups(self, job: JobView) -> list[float]:
        spec = job.spec
        smallest = max(spec.min_workers, spec.min_ps if spec.uses_ps else 1, 1)
        eps = [0.0]
        for r in range(1, spec.max_workers + 1):
            p = ps_for_workers(spec, r, self._speed_model_arg)
            eps.append(self.speed_model.epochs_per_second(spec.job_type, p, r, spec.uses_ps) if r >= smallest else 0.0)
        one = eps[smallest] if smallest < len(eps) else 0.0
        if one <= 0:
            return [0.0] * len(eps)
        return [e / one for e in eps]

    @staticmethod
    def _replica_demand(spec: JobSpec) -> dict[str, int]:
        r = spec.worker + spec.ps if spec.uses_ps else spec.worker
        return {"cpu": _ceil_int(r.cpus * 1000), "gpu": _ceil_int(r.gpus), "mem": _ceil_int(r.mem), "pods": 1}

    def request(self, state: ClusterState) -> dict:
        """The optimiser request for ``state`` (public for tests and inspection).

        A resource of which the cluster has none (GPUs on a CPU-only cluster) is left out of the
        problem: Pollux divides each job's demand by the cluster's total to get its dominant
        share, and 0 / 0 would make every job's objective NaN (no replicas for anyone). A job
        that needs such a resource cannot run anywhere and is left out too.
        """
        nodes = [{
            "key": a.agent_id,
            "resources": {"cpu": _floor_int(a.available.cpus * 1000), "gpu": _floor_int(a.available.gpus),
                          "mem": _floor_int(a.available.mem), "pods": max(1, _floor_int(a.available.cpus))},
        } for a in state.agents]
        absent = {k for k in ("cpu", "gpu", "mem") if not any(n["resources"][k] > 0 for n in nodes)}
        for n in nodes:
            for k in absent:
                del n["resources"][k]
        jobs = []
        for j in state.jobs:
            demand = self._replica_demand(j.spec)
            if any(demand[k] > 0 for k in absent):
                continue  # needs what no agent has
            jobs.append({
                "key": j.job_id,
                "resources": {k: v for k, v in demand.items() if k not in absent},
                "speedup": self._speedups(j),
                "created": j.arrival_time,
                "max_replicas": j.spec.max_workers,
            })
        base: dict[str, list[str]] = {}
        for t in state.tasks:
            if t.role == "worker" and any(j["key"] == t.job_id for j in jobs):
                base.setdefault(t.job_id, []).append(t.agent_id)
        if state.jobs:
            penalty = float(np.mean([min(j.restart_cost_seconds / state.slot_seconds, MAX_RESTART_PENALTY)
                                     for j in state.jobs]))
        else:
            penalty = 0.0
        return {"op": "optimize", "jobs": jobs, "nodes": nodes, "base": base, "restart_penalty": penalty,
                "population": self.population, "generations": self.generations_for(len(jobs), len(nodes)),
                "seed": self.seed + state.slot}

    def generations_for(self, num_jobs: int, num_agents: int) -> int:
        """Generations for a problem of this size (``generations`` cut to the work budget)."""
        cells = self.population * max(1, num_jobs) * 2 * max(1, num_agents)
        fit = int(self.work_budget // cells)
        return max(self.min_generations, min(self.generations, fit))

    def decide(self, state: ClusterState) -> Allocation:
        """Pollux's allocation for ``state`` (counts; placement is the shared placement function's).

        Raises:
            PolluxUnavailable: the worker died, hung past ``timeout`` or failed (the next call
                starts a new worker).
        """
        if self._last_slot is not None and state.slot <= self._last_slot and self._proc is not None:
            self._call({"op": "reset"}, "resetting for a new run")
        self._last_slot = state.slot
        req = self.request(state)
        ans = self._call(req, f"deciding slot {state.slot}")
        self.cpu_seconds.append(float(ans.get("cpu_seconds", 0.0)))
        self.generations_used.append(req["generations"])
        out: dict[str, JobAllocation] = {}
        for job in state.jobs:
            r = len(ans["replicas"].get(job.job_id, ()))
            spec = job.spec
            r = min(r, spec.max_workers)
            if r < max(spec.min_workers, spec.min_ps if spec.uses_ps else 1, 1):
                continue  # below the job's minimum size: not a size it can run at
            out[job.job_id] = JobAllocation(ps_for_workers(spec, r, self._speed_model_arg), r)
        return Allocation(out)
