"""Online learning on a live local cluster whose workload drifts away from training.

Executors are light (:mod:`dl2_rigs.lightexec`'s bash stand-ins served by one hub), but here a
job's progress follows the measured speed table (:mod:`dl2_mesos.speed_model`) at its current
PS/worker counts, time-compressed so that one short live slot is one simulated slot
(``time_scale`` = simulated slot seconds / live slot seconds). Progress survives rescales (as a
checkpoint-restart does) and a rescale stops progress for the type's restart cost. The
framework is a real :class:`~dl2_mesos.framework.runner.Replica` with the DL2 policy, in this
process, so a run can reach its online learner (to inject a corrupted update).

The workload: the first half of the jobs come from the trace generator the model was trained
on (all eight types, their usual lengths); the second half drift away (:data:`DRIFT`: other
types, longer jobs, arriving faster). :func:`run_drift` runs it once (online updates on or
off, optionally injecting a corrupted update) and reports per-job JCTs, the model versions
and the rollbacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from dl2_mesos.job_types import get_job_type
from dl2_mesos.messages import LaunchSpec, ProgressReport, RescaleReport, RescaleRequest, decode_b64
from dl2_mesos.speed_model import default_speed_model
from dl2_rigs.lightexec import Hub, _Executor, executor_command

logger = logging.getLogger(__name__)

SIM_SLOT_SECONDS = 1200.0  # the simulated slot the model was trained with


def live_restart_seconds(job_type: str, time_scale: float) -> float:
    """A job's restart cost on the live clock: its type's (simulated seconds) / ``time_scale``.
    The hub pauses a rescaled job for it, and the job declares it to the policy."""
    return get_job_type(job_type).restart_seconds / time_scale


@dataclass(frozen=True)
class DriftJob:
    """One submission: when (seconds after the first), what."""

    at: float
    job_type: str
    epochs: float
    late: bool  # submitted after the drift


#: The drifted half: four of the eight types (each 1/8 of the mix before), three times as long,
#: arriving 1.5 times as fast. (vgg-16 is left out: at its speed it would make a run last long.)
DRIFT = {"job_types": ("seq2seq", "inception-bn", "resnet-50", "cnn-text-classification"),
         "epochs_factor": 3.0, "rate_factor": 1.5}


def drift_trace(jobs: int, seed: int = 101, max_arrivals_per_slot: int = 3, max_epochs: float = 3000.0,
                drift: dict[str, Any] | None = None) -> Any:
    """The drift workload as a simulator trace (simulated seconds): ``jobs`` jobs, the first half
    as the trace generator draws them (all types, the Google arrival pattern; ``max_epochs`` 3000
    as the ``tiny`` preset, so that a live run takes minutes), the second half drifted
    (``drift``, default :data:`DRIFT`; job ids ``late-...``), continuing the arrival process
    faster one slot later."""
    import dataclasses as dc

    from dl2_mesos.policy.sim.settings import TraceConfig
    from dl2_mesos.policy.sim.trace import TraceJob, generate_trace, sort_trace

    drift = DRIFT if drift is None else {**DRIFT, **drift}
    half = jobs // 2
    base = generate_trace(TraceConfig(num_jobs=half, arrival="google", max_arrivals_per_slot=max_arrivals_per_slot,
                                      max_epochs=max_epochs), seed)
    drifted = generate_trace(TraceConfig(num_jobs=jobs - half, arrival="google",
                                         max_arrivals_per_slot=max_arrivals_per_slot, max_epochs=max_epochs,
                                         job_types=drift["job_types"], arrival_scale=drift["rate_factor"]), seed + 1)
    start = (base[-1].arrival_time if base else 0.0) + SIM_SLOT_SECONDS
    return sort_trace(list(base) + [
        TraceJob("late-" + j.job_id, start + j.arrival_time / drift["rate_factor"],
                 dc.replace(j.spec, epochs=round(float(j.spec.epochs) * drift["epochs_factor"], 1)))
        for j in drifted])


def model_states(trace: Any, slots: int, agents: int = 8) -> list[Any]:
    """Slot-start states of ``trace`` in the simulator under the shipped model, the first
    ``slots`` with jobs (the states the cluster shows a learner that runs beside it)."""
    from dl2_mesos.allocation import Allocation
    from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
    from dl2_mesos.policy.sim.settings import SimConfig
    from dl2_mesos.policy.sim.simulator import Simulator

    policy = DL2Policy()
    sim = Simulator(SimConfig(num_agents=agents), trace)
    out = []
    while not sim.done and len(out) < slots:
        state = sim.state()
        if state.jobs:
            out.append(state)
        sim.step(policy.decide(state) if state.jobs else Allocation())
    return out


def drifted_avg_jct_learning(policy: Any, model: Any, trace: Any, agents: int) -> float:
    """Avg JCT of the drifted jobs (``late-...``) of ``trace`` in the simulator on ``agents``
    nodes under ``policy``, with ``model`` (its online model, or None: frozen) completing and
    learning from every slot the policy decided, as the framework's loop does."""
    from dl2_mesos.allocation import Allocation
    from dl2_mesos.policy.sim.settings import SimConfig
    from dl2_mesos.policy.sim.simulator import Simulator

    sim = Simulator(SimConfig(num_agents=agents), trace)
    while not sim.done:
        state = sim.state()
        sim.step(policy.decide(state) if state.jobs else Allocation())
        if model is not None and state.jobs:
            model.complete_slot(reward=0.0)
            model.update()
    jcts = [r.jct for r in sim.metrics("dl2").jobs if r.job_id.startswith("late-")]
    return sum(jcts) / len(jcts)


def drift_workload(jobs: int, slot_seconds: float, seed: int = 101, max_arrivals_per_slot: int = 3,
                   max_epochs: float = 3000.0) -> list[DriftJob]:
    """:func:`drift_trace` as live submissions: arrivals compressed to ``slot_seconds`` per
    simulated slot."""
    scale = slot_seconds / SIM_SLOT_SECONDS
    trace = drift_trace(jobs, seed, max_arrivals_per_slot, max_epochs)
    out = [DriftJob(round(j.arrival_time * scale, 3), j.spec.job_type, float(j.spec.epochs),
                    j.job_id.startswith("late-")) for j in trace]
    return sorted(out, key=lambda d: d.at)


# -- a light executor hub whose jobs train at the speed table's pace ----------------------------
@dataclass
class _JobRun:
    job_type: str
    epochs: float
    uses_ps: bool
    cluster: Any
    done: float = 0.0
    paused_until: float = 0.0
    finished: bool = False


class _SpeedExecutor(_Executor):
    async def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        hub: SpeedHub = self.hub  # type: ignore[assignment]
        if kind == "LAUNCH":
            spec: LaunchSpec = decode_b64(event["launch"]["task"]["data"])
            self.tasks[spec.task_id] = spec
            await self.status(spec.task_id, "TASK_RUNNING")
            hub.launched(spec, self)
        elif kind == "MESSAGE":
            msg = decode_b64(event["message"]["data"])
            if isinstance(msg, RescaleRequest):
                for tid, role, rank in msg.assignments:
                    if tid in self.tasks:
                        self.tasks[tid] = dataclasses.replace(self.tasks[tid], cluster=msg.cluster, role=role, rank=rank)
                hub.regenerated(msg.job_id, msg.cluster)
                first = next((t for t, _, _ in msg.assignments), "")
                await self.send(RescaleReport(msg.job_id, first, msg.cluster.generation, True, (("restart", 0.0),)))
        else:
            await super().on_event(event)


class SpeedHub(Hub):
    """The light hub, with progress per job from the speed table (see the module docstring)."""

    def __init__(self, time_scale: float, interval: float) -> None:
        super().__init__(eps=0.0, interval=interval)
        self.time_scale = time_scale
        self.speed = default_speed_model()
        self.jobs: dict[str, _JobRun] = {}
        self.executors_by_job: dict[str, set[_SpeedExecutor]] = {}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = (await reader.readline()).decode().split()
        if len(line) != 3:
            writer.close()
            return
        self.executors += 1
        await _SpeedExecutor(self, *line, writer).run()

    def _restart_pause(self, job_type: str) -> float:
        return live_restart_seconds(job_type, self.time_scale)

    def launched(self, spec: LaunchSpec, ex: _SpeedExecutor) -> None:
        self.executors_by_job.setdefault(spec.job_id, set()).add(ex)
        run = self.jobs.get(spec.job_id)
        if run is None:
            run = self.jobs[spec.job_id] = _JobRun(spec.job_type, spec.epochs, spec.runtime != "pytorch", spec.cluster)
            self.spawn(self._train(spec.job_id))
        elif run.finished:
            # like the real executor, which finds the final checkpoint and reports the job done
            self.spawn(self._finish_again(spec, ex))
        else:
            self.regenerated(spec.job_id, spec.cluster)

    async def _finish_again(self, spec: LaunchSpec, ex: _SpeedExecutor) -> None:
        run = self.jobs[spec.job_id]
        await ex.send(ProgressReport(spec.job_id, spec.task_id, spec.cluster.generation, run.done,
                                     int(run.done * 100), 100.0, timestamp=time.time()))
        if ex.tasks.pop(spec.task_id, None) is not None:
            await ex.status(spec.task_id, "TASK_FINISHED", "speed hub: epochs reached (final checkpoint)")
        if not ex.tasks:
            ex.done.set()

    def regenerated(self, job_id: str, cluster: Any) -> None:
        run = self.jobs.get(job_id)
        if run is not None and cluster.generation > run.cluster.generation:
            run.cluster = cluster
            run.paused_until = time.monotonic() + self._restart_pause(run.job_type)

    def _reporter(self, job_id: str) -> tuple[_SpeedExecutor, LaunchSpec] | None:
        """A live worker task of the job's current generation (rank 0 preferred)."""
        run = self.jobs[job_id]
        best = None
        for ex in list(self.executors_by_job.get(job_id, ())):
            for spec in ex.tasks.values():
                if spec.job_id == job_id and spec.role == "worker" and spec.cluster.generation == run.cluster.generation:
                    if best is None or spec.rank < best[1].rank:
                        best = (ex, spec)
        return best

    async def _train(self, job_id: str) -> None:
        run = self.jobs[job_id]
        last = time.monotonic()
        while not run.finished:
            await asyncio.sleep(self.interval)
            now = time.monotonic()
            dt, last = now - max(last, run.paused_until), now
            rep = self._reporter(job_id)
            if rep is None:
                if not self.executors_by_job.get(job_id) or not any(
                        ex.tasks for ex in self.executors_by_job[job_id]):
                    run.paused_until = now  # paused or between generations: nothing trains
                continue
            ex, spec = rep
            n_ps, n_w = len(run.cluster.servers), len(run.cluster.workers)
            if dt > 0 and n_w > 0:
                eps = self.speed.epochs_per_second(run.job_type, n_ps, n_w, run.uses_ps) * self.time_scale
                run.done = min(run.epochs, run.done + eps * dt)
            self.reports += 1
            await ex.send(ProgressReport(job_id, spec.task_id, run.cluster.generation, run.done,
                                         int(run.done * 100), 100.0, timestamp=time.time()))
            if run.done >= run.epochs:
                run.finished = True
                for e in list(self.executors_by_job.get(job_id, ())):
                    for tid in [t for t, s in e.tasks.items() if s.job_id == job_id]:
                        await e.status(tid, "TASK_FINISHED", "speed hub: epochs reached")
                        e.tasks.pop(tid, None)
                    if not e.tasks:
                        e.done.set()


@contextlib.contextmanager
def speed_hub(port: int, time_scale: float, interval: float):  # noqa: ANN201
    """Serve a :class:`SpeedHub` on ``port`` from a thread of this process."""
    hub = SpeedHub(time_scale, interval)
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def main() -> None:
        server = await asyncio.start_server(hub.handle, "127.0.0.1", port, backlog=1024)
        ready.set()
        async with server:
            with contextlib.suppress(asyncio.CancelledError):
                await server.serve_forever()

    thread = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True, name="speed-hub")
    thread.start()
    if not ready.wait(10):
        raise RuntimeError("the speed hub did not start")
    try:
        yield hub
    finally:
        for task in asyncio.all_tasks(loop):
            loop.call_soon_threadsafe(task.cancel)
        thread.join(5)


# -- one live run --------------------------------------------------------------------------------
@dataclass(frozen=True)
class DriftRun:
    """What one live run measured."""

    online: bool
    jobs: tuple[dict[str, Any], ...]  # job_type, epochs, late, at, jct (None: unfinished)
    versions: int  # model versions created (online updates)
    rollbacks: tuple[dict[str, Any], ...]
    injected_version: int | None
    slots: int
    wall_seconds: float
    learning: dict[str, Any] = dataclasses.field(default_factory=dict)  # the learner's describe() at the end

    def avg_jct(self, late: bool | None = None) -> float | None:
        """Average JCT (seconds) of finished jobs; ``late`` picks the drifted half (or the first)."""
        jcts = [j["jct"] for j in self.jobs if j["jct"] is not None and (late is None or j["late"] == late)]
        return statistics.fmean(jcts) if jcts else None

    def finished(self, late: bool | None = None) -> int:
        return sum(1 for j in self.jobs if j["jct"] is not None and (late is None or j["late"] == late))


def corrupt(policy: Any) -> None:
    """A deliberately bad 'update' that changes every job every slot.

    Growing dominates every other action and, where a grow does not fit, pausing comes next
    (elastic models): each slot every running job is grown (a restart) or paused, and a paused
    job is started again the next slot, so every job pays its restart cost every slot. (Growing
    alone, or pausing alone, can be nearly harmless on some workloads: a full cluster masks the
    grows, and with pauses alone the no-stall rule restarts every job at its minimum size, which
    on a light workload costs little.) Add-only models get the growing part only."""
    import torch

    from dl2_mesos.policy.dl2.slot import BUNDLE, PAUSE, PS, WORKER

    actor = policy.net.actor
    cfg = actor.cfg
    boost = {WORKER: 100.0, PS: 100.0, BUNDLE: 100.0}
    if cfg.per_job > PAUSE:
        boost[PAUSE] = 50.0
    with torch.no_grad():
        if cfg.arch == "flat":
            bias = actor.head.bias.view(-1)
            bias[-1] -= 100.0  # void
            for i in range(cfg.window):
                for a, b in boost.items():
                    bias[cfg.per_job * i + a] += b
        else:
            for a, b in boost.items():
                actor.job_head.bias[a] += b
            actor.void_head[-1].bias -= 100.0
    policy.reload_weights()


def injection_slot(window: int) -> int:
    """The slot after which to inject a corrupted update so that rollback judges it against a
    full reference of steady slots: after :data:`REFERENCE_WINDOWS` + 3 windows, when the
    warm-up (every job of the drift workload arrives within its first four slots: launches,
    first restarts, the policy sorting the queue out) has left the reference.

    Injected after two windows, the warm-up's slots (ratios 137-519 against 373-500 after it,
    in one run with the v6 model) made the reference's standard error so large that a
    corrupted model earning 0.6x of it stayed within 3 standard errors (drop 2.8 of them) in
    about half the runs. With the v7 model the warm-up lasts three windows (slots 5-12 earned
    100-200 against 600 after them): injected after four windows, 2 of 3 runs went uncaught
    (drops of 0.7-2.9 standard errors against a reference still holding the warm-up); after
    six, 3 of 3 runs dropped 7.3-12.3 standard errors."""
    from dl2_mesos.framework.online_learning import REFERENCE_WINDOWS

    return (REFERENCE_WINDOWS + 3) * window


def run_drift(workload: list[DriftJob], *, online: bool, agents: int = 13, slot_seconds: float = 2.0,
              window: int = 10, inject_after_slot: int | None = None, stop_after_rollback: bool = False,
              timeout: float = 600.0, workdir: str | None = None, echo: Any = None, policy: str = "dl2",
              online_teacher: str | None = None, online_twin: bool = False, model: str | None = None) -> DriftRun:
    """Run ``workload`` live under DL2 (online updates on or off) and measure it.

    ``online_teacher``: the framework's ``online_teacher`` setting (None: its default, online
    imitation of ``srpt-elastic-min``; "none": reinforcement from the rewards); ``online_twin``:
    that teacher's labels on simulated futures of the workload (the framework's setting).
    ``model``: the DL2 model file to start from (None: the shipped one).

    ``inject_after_slot``: at the first window boundary after that slot, the online update is
    replaced by :func:`corrupt` (a regression rollback must catch); ``stop_after_rollback``
    ends the run at the first rollback after that.
    """
    from dl2_mesos.config import load_config
    from dl2_mesos.framework.runner import Replica
    from dl2_mesos.services.localcluster import LocalCluster
    from dl2_mesos.services.zookeeper import free_port

    import torch

    torch.set_num_threads(1)  # the loop's online updates share 2 cores with the cluster and the hub
    say = echo or (lambda s: None)
    work = Path(workdir or tempfile.mkdtemp(prefix="dl2-drift-"))
    time_scale = SIM_SLOT_SECONDS / slot_seconds
    hub_port = free_port()
    cluster = LocalCluster(agents=0, in_subprocess=True, cpus=8, gpus=2, mem="48GiB", work_dir=str(work / "cluster"),
                           executor_registration_timeout=60.0, status_update_retry_interval=2.0)
    replica = runner = None
    injected: dict[str, Any] = {}
    t_start = time.monotonic()
    with speed_hub(hub_port, time_scale, interval=min(0.25, slot_seconds / 8)):
        try:
            cluster.start(timeout=60)
            for i in range(agents):
                cluster.add_agent(cpus=8, gpus=2, mem="48GiB", ports=(21000 + i * 100, 21000 + i * 100 + 99))
            api_port = free_port()
            cfg = load_config(env={}, overrides={
                "master": cluster.master, "zk": "none", "state_dir": str(work / "state"), "policy": policy,
                "slot": f"{slot_seconds:g}s", "offer_wait": f"{slot_seconds / 4:g}s", "api": f"127.0.0.1:{api_port}",
                "launch_timeout": "30s", "executor_command": executor_command(hub_port),
                "checkpoint_root": f"file://{work}/ckpt", "online_learning": online, "online_window": window,
                **({} if online_teacher is None else {"online_teacher": online_teacher}),
                **({"online_twin": True} if online_twin else {}),
                **({"policy_args": {"model_path": str(model)}} if model else {}),
                "progress_interval": min(0.25, slot_seconds / 8),
            })
            replica = Replica(cfg)
            runner = threading.Thread(target=replica.run, daemon=True, name="drift-framework")
            runner.start()
            deadline = time.monotonic() + 60
            while not (replica.core is not None and replica.core.registered and replica.core.learner is not None):
                if time.monotonic() > deadline:
                    raise RuntimeError("the framework did not register")
                time.sleep(0.2)
            learner = replica.core.learner
            if inject_after_slot is not None:
                _arm_injection(replica, learner, inject_after_slot, injected, say)
            api = f"http://127.0.0.1:{api_port}"
            submitted: dict[str, DriftJob] = {}
            pending = list(workload)
            t0 = time.monotonic()
            while True:
                now = time.monotonic() - t0
                while pending and pending[0].at <= now:
                    d = pending.pop(0)
                    submitted[_submit(api, d, time_scale)] = d
                jobs = replica.view()["jobs"]
                ended = [j for j in submitted if jobs.get(j, {}).get("phase") in ("finished", "failed", "cancelled")]
                if not pending and len(ended) == len(submitted):
                    break
                if stop_after_rollback and injected.get("version") and learner.info.get("rollbacks"):
                    break
                if now > timeout:
                    say(f"timeout: {len(ended)}/{len(submitted)} jobs ended")
                    break
                time.sleep(min(0.5, max(0.05, pending[0].at - now)) if pending else 0.5)
            jobs = replica.view()["jobs"]
            rows = []
            for jid, d in submitted.items():
                j = jobs.get(jid, {})
                fin = (j.get("phase_times") or {}).get("finished") if j.get("phase") == "finished" else None
                rows.append({"id": jid, "job_type": d.job_type, "epochs": d.epochs, "late": d.late, "at": d.at,
                             "jct": None if fin is None else round(fin - j["submitted_at"], 3)})
            info = learner.info
            versions = max(replica.store.model_versions() + [int(info.get("current") or 1)]) - 1
            return DriftRun(online, tuple(rows), versions, tuple(info.get("rollbacks", [])),
                            injected.get("version"), replica.core.last_slot + 1, round(time.monotonic() - t_start, 1),
                            learner.describe())
        finally:
            if replica is not None:
                replica.stop()
            if runner is not None:
                runner.join(30)
            cluster.stop(timeout=60)


def _submit(api: str, d: DriftJob, time_scale: float) -> str:
    """Submit one job (the loop may be busy with a model update: wait, retry with the same key).

    The job declares its restart cost on the live clock (its type's / ``time_scale``, what the
    speed hub pauses it for): left to the type's default (360 s) in 2 s slots, the policy would
    see restarts of 180 slots and hold every rescaled job for 360 of them."""
    key = f"drift-{d.at}-{d.job_type}-{d.epochs}-{id(d)}"
    body = {"job_type": d.job_type, "epochs": d.epochs,
            "restart_seconds": live_restart_seconds(d.job_type, time_scale)}
    for attempt in range(3):
        try:
            r = requests.post(f"{api}/api/v1/jobs", json=body,
                              headers={"Idempotency-Key": key}, timeout=30)
            r.raise_for_status()
            return str(r.json()["id"])
        except requests.Timeout:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _arm_injection(replica: Any, learner: Any, after_slot: int, injected: dict[str, Any], say: Any) -> None:
    """Replace one online update, at a window boundary after ``after_slot``, by :func:`corrupt`."""
    adapter = learner.adapter
    update = adapter.update

    def update_or_corrupt() -> bool:
        if (not injected and replica.core.last_slot >= after_slot and learner._since_check == 0
                and not learner.info.get("probation")):
            adapter.recorder.drain()
            corrupt(adapter.policy)
            injected["slot"] = replica.core.last_slot
            return True
        return update()

    new_version = learner._new_version

    def note_version(reason: str) -> None:
        new_version(reason)
        if "slot" in injected and "version" not in injected:
            injected["version"] = int(learner.info["current"])
            say(f"slot {injected['slot']}: injected a corrupted update as model version {injected['version']}")

    adapter.update = update_or_corrupt
    learner._new_version = note_version
