"""One job's processes on one agent: start, supervise, checkpoint, restart after a crash, rescale, kill.

A :class:`JobRunner` is owned by exactly one thread (the executor's event loop, or a test), which
must outlive its processes: they are SIGKILLed when the thread that started them ends (see
:func:`~dl2_mesos.executor.processes.die_with_parent`). It never talks to Mesos: it reports
through a :class:`Sink` (task status updates and framework messages). Blocking steps (stopping
processes, waiting for uploads) are bounded by timeouts.

Rescale (checkpoint-restart), for a :class:`~dl2_mesos.messages.RescaleRequest` to generation g:

1. *stop*: SIGTERM local workers (they agree on a stop batch through the kvstore/all-reduce, worker
   rank 0 writes a ``final`` checkpoint), wait for them; servers and the MXNet scheduler finish by
   themselves once the workers finalise (SIGTERM after a short wait otherwise);
2. *relaunch*: start the processes of this executor's tasks in the new generation at once, so that
   their start (Python, imports, kvstore rendezvous) overlaps steps 3 and 4; workers wait for the
   restore folder (``DL2_RESTORE_PENDING_S``) before loading it;
3. *upload*: wait for the final checkpoint's upload (here if worker 0 ran here; otherwise, when a
   worker here will restore it, wait until it appears in storage: ``wait_checkpoint``, unless the
   request says the generation crashed);
4. *download*: fill the restore folder with the newest valid checkpoint: the executor that saved it
   moves its own local copy in when it is still the newest committed one (no download), the
   others download it;
5. *first_batch*: from the restore folder being ready until a local worker reports its first batch;
   then a RescaleReport with every phase's seconds (``save`` is the program's own save time) is sent.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from dl2_mesos.errors import CheckpointError
from dl2_mesos.executor.launch_env import ProcSpec, processes_for_task
from dl2_mesos.executor.processes import GpuProbe, ManagedProcess, stop_processes, wait_exit
from dl2_mesos.executor.uploader import Uploader, UploadResult
from dl2_mesos.job_runtime import NO_CHECKPOINT
from dl2_mesos.messages import (
    CheckpointReport,
    ClusterSpec,
    LaunchSpec,
    ProgressReport,
    RescaleReport,
    RescaleRequest,
    ResourceUsage,
)
from dl2_mesos.storage import CheckpointNotFound, CheckpointStore, RetryPolicy

logger = logging.getLogger(__name__)
PENDING_RESTORE_SLACK_S = 300.0  # a worker started early waits this much beyond upload + restore timeouts


class Sink(Protocol):
    """Where a runner reports: Mesos status updates and framework messages."""

    def status(self, task_id: str, state: str, message: str = "") -> None: ...

    def send(self, msg: object) -> None: ...


@dataclass
class RunnerConfig:
    """Knobs of a job runner (defaults suit production; tests shorten them)."""

    workdir: Path
    host: str = "127.0.0.1"
    grace_s: float = 10.0  # SIGTERM -> SIGKILL, unless the task's kill policy says otherwise
    max_restarts: int = 3
    restore_wait_s: float = 60.0  # how long a new generation waits for the previous one's final checkpoint
    # (only when the framework says the previous generation stops gracefully: LaunchSpec.previous_stop)
    idle_timeout_s: float = 60.0  # peers stopped but no rescale came: restart from the checkpoint
    server_exit_wait_s: float = 5.0
    upload_timeout_s: float = 120.0
    usage_interval_s: float = 5.0
    keep_checkpoints: int = 3
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    base_env: dict[str, str] = field(default_factory=dict)
    # rescale: restore from our own copy of the final checkpoint when it is the newest committed one,
    # and start the new generation while the checkpoint is uploaded and restored (False: one step
    # after the other, every restore downloaded; for comparison in bench/rescale.py)
    fast_rescale: bool = True


@dataclass
class TaskState:
    spec: LaunchSpec
    role: str
    rank: int
    grace_s: float
    removed: bool = False  # not part of the current generation (the framework is killing it)


@dataclass
class _PendingReport:
    generation: int
    phases: list[tuple[str, float]]
    relaunched_at: float


class JobRunner:
    """Processes of one job on this agent (every task of the job here shares it)."""

    def __init__(self, first: LaunchSpec, config: RunnerConfig, sink: Sink) -> None:
        self.job_id = first.job_id
        self.runtime = first.runtime
        self.command = tuple(first.command)
        self.epochs = first.epochs
        self.extra_env = dict(first.env)
        self.progress_interval_s = max(0.0, first.progress_interval_s)
        self.cluster: ClusterSpec = first.cluster
        self.config = config
        self.sink = sink
        self.workdir = config.workdir / self.job_id
        if self.workdir.resolve().parent != config.workdir.resolve():  # decode() already refuses such ids
            raise ValueError(f"job id {self.job_id!r} would leave the executor's work folder")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.store = CheckpointStore(first.checkpoint_uri, keep=config.keep_checkpoints, retry=config.retry)
        self.uploader = Uploader(self.store, keep_final=config.fast_rescale)
        self._local_final: UploadResult | None = None  # our last final checkpoint, kept to restore from
        self.tasks: dict[str, TaskState] = {}
        self.held: dict[str, TaskState] = {}  # tasks of a generation not reached yet
        self.procs: dict[str, ManagedProcess] = {}
        self.retired: list[ManagedProcess] = []  # exited processes of earlier generations/attempts (inspection)
        self.restarts = 0
        self.finished = False
        self.closed = False
        self.idle_since: float | None = None
        self.last_checkpoint_event: dict | None = None
        self.last_report: RescaleReport | None = None
        self._pending_report: _PendingReport | None = None
        self._progress_sent: dict[str, float] = {}
        self._latest_progress: dict[str, ProgressReport] = {}
        self._usage_sent = 0.0
        self._gpu = GpuProbe()
        self.loss_history: list[tuple[int, int, float]] = []  # (generation, batch, loss) for tests/bench

    # ------------------------------------------------------------------ launching
    def launch(self, spec: LaunchSpec, grace_s: float | None = None) -> None:
        """A task of this job arrived (Mesos LAUNCH). Starts its processes unless it belongs to a later
        generation than the one running (then it waits for the RescaleRequest)."""
        if spec.job_id != self.job_id:
            raise ValueError(f"task {spec.task_id} of job {spec.job_id} sent to the executor of {self.job_id}")
        ts = TaskState(spec, spec.role, spec.rank, self.config.grace_s if grace_s is None else grace_s)
        gen, cur = spec.cluster.generation, self.cluster.generation
        if gen < cur:
            self.sink.status(spec.task_id, "TASK_FAILED", f"stale generation {gen} (job is at {cur})")
            return
        self.sink.status(spec.task_id, "TASK_STARTING", f"generation {gen}")
        if gen > cur and self._running_procs():
            logger.info("task %s of generation %d held until the rescale from %d", spec.task_id, gen, cur)
            self.held[spec.task_id] = ts
            return
        if gen > cur:
            self.cluster = spec.cluster
        self.tasks[spec.task_id] = ts
        try:
            # wait for the previous generation's final checkpoint only when the framework says it is
            # stopping gracefully; after a crash none will come: restore the newest one at once
            restore = self._restore_dir(wait_for_previous=spec.waits_for_final) if ts.role == "worker" else None
            self._start_task(spec.task_id, restore)
        except (CheckpointError, OSError, ValueError) as exc:
            self._fail_all(f"could not start task {spec.task_id}: {exc}")
            return
        self.sink.status(spec.task_id, "TASK_RUNNING", f"generation {self.cluster.generation}")

    def _specs_for(self, task_id: str) -> list[ProcSpec]:
        ts = self.tasks[task_id]
        return processes_for_task(
            job_id=self.job_id, task_id=task_id, role=ts.role, rank=ts.rank, runtime=self.runtime,
            cluster=self.cluster, command=self.command, epochs=self.epochs, host=self.config.host,
            extra_env=self.extra_env, base_env=self._base_env(),
        )

    def _base_env(self) -> dict[str, str]:
        env = dict(self.config.base_env or os.environ)
        for k in list(env):
            if k.startswith(("MESOS_", "DMLC_", "DL2_")) and k != "DL2_JOB_PYTHON":
                env.pop(k)
        return env

    def _start_task(self, task_id: str, restore: Path | None, pending: bool = False) -> None:
        """Start a task's processes; with ``pending`` the workers wait for ``restore`` to be filled."""
        for ps in self._specs_for(task_id):
            env = dict(ps.env)
            env["DL2_CHECKPOINT_DIR"] = str(self.workdir / "checkpoints")
            env["DL2_PROGRESS_EVERY_S"] = env.get("DL2_PROGRESS_EVERY_S", str(min(1.0, self.progress_interval_s or 1.0)))
            if restore is not None and ps.role == "worker":
                env["DL2_RESTORE_DIR"] = str(restore)
                if pending:  # bounded by what this runner may block for before the folder is ready
                    env["DL2_RESTORE_PENDING_S"] = str(
                        self.config.upload_timeout_s + self.config.restore_wait_s + PENDING_RESTORE_SLACK_S)
            old = self.procs.get(ps.name)
            if old is not None and old.alive():
                raise ValueError(f"process {ps.name} already runs")
            self.procs[ps.name] = ManagedProcess(ps, self.workdir, env)
        self.idle_since = None

    def _restore_dir(self, wait_for_previous: bool) -> Path | None:
        """Download the newest valid checkpoint for workers of the current generation (None: fresh)."""
        gen = self.cluster.generation
        target = self.workdir / f"restore-g{gen}"
        if (target / "MANIFEST.json").exists():
            return target
        if wait_for_previous:
            self._wait_for_final(gen - 1, self.config.restore_wait_s)
        elif gen > 0:
            logger.info("job %s generation %d: previous generation did not stop gracefully; "
                        "restoring the newest committed checkpoint without waiting", self.job_id, gen)
        if self._restore_from_local(target):
            return target
        try:
            info = self.store.restore(target)
        except CheckpointNotFound:
            logger.info("job %s: no checkpoint under %s, starting fresh", self.job_id, self.store.root_uri)
            return None
        logger.info("job %s generation %d restores %s (batch %s)", self.job_id, gen, info.uri, info.meta.get("batch"))
        return target

    def _restore_from_local(self, target: Path) -> bool:
        """Restore from the final checkpoint this executor saved and uploaded, when it is still the
        newest committed one: no download (the other agents' executors download it)."""
        lf, self._local_final = self._local_final, None
        if lf is None or lf.info is None or not lf.kept:
            return False
        try:
            latest = self.store.latest()
            if latest is None or latest.dirname != lf.info.dirname:
                logger.info("job %s: %s is newer than our local %s; downloading it", self.job_id,
                            latest.dirname if latest else "nothing", lf.info.dirname)
                return False
            self.store.adopt_local(lf.info, lf.kept, target)
            logger.info("job %s generation %d restores %s from its local copy", self.job_id,
                        self.cluster.generation, lf.info.uri)
            return True
        except (CheckpointError, OSError) as exc:
            logger.warning("job %s: local copy of %s unusable (%s); downloading it", self.job_id, lf.info.uri, exc)
            return False
        finally:
            shutil.rmtree(lf.kept, ignore_errors=True)  # moved away when adopted

    def _wait_for_final(self, generation: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            latest = self.store.latest()
            if latest is not None and latest.meta.get("final") and int(latest.meta.get("generation", -1)) >= generation:
                return True
            if time.monotonic() >= deadline:
                logger.warning("job %s: no final checkpoint of generation %d after %.0fs; using the newest one",
                               self.job_id, generation, timeout)
                return False
            time.sleep(0.5)

    # ------------------------------------------------------------------ supervision
    def _running_procs(self) -> list[ManagedProcess]:
        return [p for p in self.procs.values() if p.alive()]

    def poll(self) -> None:
        """Read progress, forward reports, collect uploads, handle exits. Call every ~0.2 s."""
        if self.closed:
            return
        for p in list(self.procs.values()):
            for ev in p.read_events():
                self._on_event(p, ev)
        self._collect_uploads()
        self._flush_progress()
        self._send_usage()
        self._check_exits()

    def _on_event(self, p: ManagedProcess, ev: dict) -> None:
        kind = ev.get("type")
        try:
            if kind == "progress":
                loss = ev.get("loss")
                report = ProgressReport(
                    job_id=self.job_id, task_id=p.spec.task_id, generation=self.cluster.generation,
                    epoch=float(ev["epoch"]), batch=int(ev["batch"]),
                    samples_per_second=float(ev["samples_per_second"]),
                    loss=None if loss is None else float(loss), timestamp=float(ev.get("ts", time.time())),
                )
                self._latest_progress[p.spec.task_id] = report
                if report.loss is not None:
                    self.loss_history.append((report.generation, report.batch, report.loss))
            elif kind == "checkpoint":
                self.last_checkpoint_event = ev
                meta = {"epoch": float(ev["epoch"]), "batch": int(ev["batch"]), "final": bool(ev.get("final")),
                        "generation": int(ev.get("generation", self.cluster.generation)),
                        "save_seconds": float(ev.get("save_seconds", 0.0))}
                path = str(ev["path"])
                if not Path(path).resolve().is_relative_to((self.workdir / "checkpoints").resolve()):
                    logger.warning("%s: checkpoint outside %s refused: %s", p.name, self.workdir, path)
                    return
                self.uploader.submit(path, "final" if meta["final"] else "", meta)
            elif kind == "first_batch" and self._pending_report is not None:
                pr = self._pending_report
                pr.phases.append(("first_batch", time.monotonic() - pr.relaunched_at))
                self._finish_report(pr)
        except (KeyError, TypeError, ValueError) as exc:
            logger.warning("%s: malformed %s event dropped (%s): %r", p.name, kind, exc, ev)

    def _collect_uploads(self) -> None:
        while not self.uploader.results.empty():
            res = self.uploader.results.get()
            if res.info is None:
                logger.error("job %s: checkpoint upload failed (%s); previous checkpoints are intact", self.job_id,
                             res.error)
                continue
            if res.kept:
                if self._local_final is not None:
                    shutil.rmtree(self._local_final.kept, ignore_errors=True)
                self._local_final = res
            self.sink.send(CheckpointReport(job_id=self.job_id, uri=res.info.uri, epoch=float(res.meta["epoch"]),
                                            batch=int(res.meta["batch"]), generation=int(res.meta["generation"])))

    def _flush_progress(self, force: bool = False) -> None:
        now = time.monotonic()
        for task_id, rep in list(self._latest_progress.items()):
            if force or now - self._progress_sent.get(task_id, 0.0) >= self.progress_interval_s:
                self.sink.send(rep)
                self._progress_sent[task_id] = now
                del self._latest_progress[task_id]

    def _send_usage(self) -> None:
        now = time.monotonic()
        if now - self._usage_sent < self.config.usage_interval_s:
            return
        self._usage_sent = now
        gpu = self._gpu.utilisation()
        per_task: dict[str, tuple[float, int]] = {}
        for p in self._running_procs():
            cpu, rss = p.usage()
            c0, r0 = per_task.get(p.spec.task_id, (0.0, 0))
            per_task[p.spec.task_id] = (c0 + cpu, r0 + rss)
        for task_id, (cpu, rss) in per_task.items():
            if task_id:
                self.sink.send(ResourceUsage(job_id=self.job_id, task_id=task_id, cpu_percent=cpu, rss_bytes=rss,
                                             gpu_util=gpu, timestamp=time.time()))

    def _check_exits(self) -> None:
        if not self.procs:
            return
        crashed = [p for p in self.procs.values()
                   if not p.alive() and p.poll() != 0 and not p.stop_requested]
        if crashed:
            self._on_crash(crashed[0])
            return
        if self._running_procs():
            return
        # Everything here has exited cleanly.
        workers = [p for p in self.procs.values() if p.spec.role == "worker"]
        if self._trained_to_the_end(workers, ended_on_their_own=True):
            self._finish()
        elif self.idle_since is None:
            self.idle_since = time.monotonic()
            logger.info("job %s: processes stopped without a request here; waiting for a rescale", self.job_id)
        elif time.monotonic() - self.idle_since > self.config.idle_timeout_s:
            self._restart("no rescale request arrived after the job's processes stopped")

    def _trained_to_the_end(self, workers: list[ManagedProcess], ended_on_their_own: bool) -> bool:
        """Whether the job's training is over: every local worker exited ``finished``; with no
        local worker (servers only), processes that all ended before any stop request and a
        final checkpoint of the last epoch in storage."""
        if workers:
            return all((p.exit_event or {}).get("status") == "finished" for p in workers)
        return ended_on_their_own and self._job_finished_in_storage()

    def _job_finished_in_storage(self) -> bool:
        try:
            latest = self.store.latest()
        except CheckpointError:
            return False
        return bool(latest and latest.meta.get("final") and latest.meta.get("epoch", 0) >= self.epochs - 1e-9)

    def _finish(self) -> None:
        self.uploader.drain(self.config.upload_timeout_s)
        self._collect_uploads()
        self._flush_progress(force=True)
        for task_id in list(self.tasks):
            self.sink.status(task_id, "TASK_FINISHED", f"trained {self.epochs:g} epochs")
        self.tasks.clear()
        self._retire()
        self.finished = True

    # ------------------------------------------------------------------ failures
    def _on_crash(self, p: ManagedProcess) -> None:
        code = p.poll()
        why = f"{p.name} (pid {p.pid}) exited with {code}" + (f": {p.log_tail(400)}" if p.log_tail(400) else "")
        logger.warning("job %s: %s", self.job_id, why)
        remote = self._remote_peers()
        if remote:
            # Peers on other agents keep talking to the dead process (ps-lite/gloo cannot re-admit a
            # node), so a restart here cannot work: fail fast and let the framework relaunch the job
            # as a new generation (fresh ports, every executor restarted from the checkpoint).
            self._fail_all(f"{why}; not restarted here: the job also runs on other agents "
                           f"({len(remote)} task(s)), so the framework relaunches it")
            return
        self._restart(why)

    def _remote_peers(self) -> list[str]:
        """Task ids of the current generation that belong to other executors."""
        c = self.cluster
        local = set(self.tasks) | set(self.held)
        # the scheduler endpoint shares PS rank 0's task id, so servers and workers cover every task
        return sorted({e.task_id for e in (*c.servers, *c.workers)} - local)

    def _restart(self, why: str) -> None:
        self.restarts += 1
        if self.restarts > self.config.max_restarts:
            self._fail_all(f"gave up after {self.config.max_restarts} restarts; last failure: {why}")
            return
        stop_processes(list(self.procs.values()), grace_s=min(5.0, self.config.grace_s))
        self._drain_events()
        self.uploader.drain(self.config.upload_timeout_s)
        self._collect_uploads()
        self._retire()
        shutil.rmtree(self.workdir / f"restore-g{self.cluster.generation}", ignore_errors=True)
        try:
            restore = self._restore_dir(wait_for_previous=False) if any(
                t.role == "worker" for t in self._current_tasks()) else None
            for task_id in self._current_ids():
                self._start_task(task_id, restore)
        except (CheckpointError, OSError, ValueError) as exc:
            self._fail_all(f"restart failed: {exc}; after: {why}")
            return
        msg = f"restart {self.restarts}/{self.config.max_restarts} from checkpoint after: {why}"[:1000]
        for task_id in self._current_ids():
            self.sink.status(task_id, "TASK_RUNNING", msg)

    def _fail_all(self, reason: str) -> None:
        stop_processes(list(self.procs.values()), grace_s=min(5.0, self.config.grace_s))
        self._retire()
        for task_id in list(self.tasks) + list(self.held):
            self.sink.status(task_id, "TASK_FAILED", reason[:2000])
        self.tasks.clear()
        self.held.clear()
        self.finished = True

    def _drain_events(self) -> None:
        for p in self.procs.values():
            for ev in p.read_events():
                self._on_event(p, ev)

    def _retire(self, names: list[str] | None = None) -> None:
        for name in list(self.procs) if names is None else names:
            p = self.procs.pop(name, None)
            if p is not None:
                self.retired.append(p)
        del self.retired[:-64]

    def _current_tasks(self) -> list[TaskState]:
        return [t for t in self.tasks.values() if not t.removed]

    def _current_ids(self) -> list[str]:
        return [k for k, t in self.tasks.items() if not t.removed]

    # ------------------------------------------------------------------ kill / shutdown
    def kill(self, task_ids: list[str]) -> None:
        """Kill tasks (workers first, so they can agree to stop and save while servers still serve)."""
        order = sorted(task_ids, key=lambda t: 0 if (self.tasks.get(t) and self.tasks[t].role == "worker") else 1)
        procs = [p for t in order for p in self.procs.values() if p.spec.task_id == t]
        procs += [p for p in self.procs.values() if p.spec.role == "scheduler" and
                  any(self.tasks.get(t) and self.tasks[t].role == "ps" and self.tasks[t].rank == 0 for t in order)]
        grace = max([self.tasks[t].grace_s for t in order if t in self.tasks] or [self.config.grace_s])
        if any(p.spec.role != "worker" and p.alive() for p in procs):
            # A server (or the scheduler) leaving while this job's workers here train on is a
            # rescale whose request has not arrived yet (the framework sends the request first,
            # but a kill and a message travel separately through Mesos and may arrive in either
            # order): the workers' generation ends with it, and they
            # can only agree to stop and save the final checkpoint while every server serves.
            # Stop them first; without that they hang on the dead server until SIGKILL and the
            # new generation restarts from an older checkpoint (or from zero).
            procs += [p for p in self.procs.values() if p.spec.role == "worker" and p.alive() and p not in procs]
        workers = [p for p in procs if p.spec.role == "worker"]
        others = [p for p in procs if p.spec.role != "worker"]
        stop_processes(workers, grace)
        self._drain_events()
        if others:
            wait_exit(others, self._server_exit_wait(workers, grace, min(grace, self.config.server_exit_wait_s)))
            stop_processes(others, grace)
        self.uploader.drain(self.config.upload_timeout_s)  # the final checkpoint is stored before we report
        self._collect_uploads()
        self._flush_progress(force=True)
        for t in task_ids:
            known = self.tasks.pop(t, None) or self.held.pop(t, None)
            self._retire([n for n, p in self.procs.items() if p.spec.task_id == t or (p.spec.role == "scheduler" and p in procs)])
            self.sink.status(t, "TASK_KILLED", "killed by the framework" if known else "unknown task")
        if not self.tasks and not self.held:
            self.finished = True

    def _server_exit_wait(self, stopped_workers: list[ManagedProcess], grace: float, short: float) -> float:
        """How long this job's servers and scheduler here get to exit by themselves (they do once
        every worker has stopped and left the kvstore) before they are stopped.

        ``short`` when the saving worker (rank 0) was among the workers just stopped here: its
        final checkpoint is written. Otherwise the saver runs on another agent, whose executor may
        get its rescale request or kill seconds after this one and then gives the worker ``grace``
        to stop and save, pulling the parameters from these servers; stopping them sooner would
        make it hang until SIGKILL and lose the checkpoint. So: its grace plus ``short`` for the
        requests' skew. It costs time only when the workers cannot finish (e.g. they crashed).
        """
        if any(p.spec.role == "worker" and p.spec.rank == 0 for p in stopped_workers):
            return short
        return grace + short

    def close(self) -> None:
        """Stop everything (executor shutdown)."""
        if self.closed:
            return
        if self.tasks or self.held:
            self.kill(list(self.tasks) + list(self.held))
        self.uploader.drain(self.config.upload_timeout_s)
        self.uploader.close()
        self._collect_uploads()
        if self._local_final is not None:
            shutil.rmtree(self._local_final.kept, ignore_errors=True)
            self._local_final = None
        self.closed = True

    # ------------------------------------------------------------------ rescale
    def rescale(self, req: RescaleRequest) -> RescaleReport | None:
        """Checkpoint, stop every role here, relaunch this executor's tasks in ``req.cluster``, restore.

        Returns the report when it is already complete (no local worker to wait for); otherwise the
        report is sent after the first batch of the new generation.
        """
        new_gen, cur = req.cluster.generation, self.cluster.generation
        if req.job_id != self.job_id:
            logger.warning("rescale for job %s sent to the executor of %s; dropped", req.job_id, self.job_id)
            return None
        if new_gen <= cur:
            if new_gen == cur and self.last_report is not None and self.last_report.generation == cur:
                self.sink.send(self.last_report)  # the framework re-sent: our report was lost
            else:
                logger.info("job %s: rescale to generation %d ignored (at %d)", self.job_id, new_gen, cur)
            return None
        phases: list[tuple[str, float]] = []
        ended_on_their_own = bool(self.procs) and not self._running_procs()
        saver_here = any(p.spec.role == "worker" and p.spec.rank == 0 for p in self._running_procs())
        had_saver_proc = any(p.spec.role == "worker" and p.spec.rank == 0 for p in self.procs.values())
        t0 = time.monotonic()
        workers = [p for p in self.procs.values() if p.spec.role == "worker"]
        others = [p for p in self.procs.values() if p.spec.role != "worker"]
        grace = max([t.grace_s for t in self.tasks.values()] or [self.config.grace_s])
        # read the workers' reports while they stop: the final checkpoint's upload starts as soon as
        # it is written, while the workers report and exit (a 1 GB model: seconds of overlap)
        stop_processes(workers, grace, tick=self._drain_events)
        self._drain_events()
        wait_exit(others, self._server_exit_wait(workers, grace, self.config.server_exit_wait_s))
        stop_processes(others, grace)
        phases.append(("stop", time.monotonic() - t0))
        if self._trained_to_the_end(workers, ended_on_their_own):
            # the job trained its last epoch while this request was on its way: a new generation
            # would restore the final checkpoint and wait forever for peers that have ended
            logger.info("job %s: training ended before the rescale to generation %d; finishing instead",
                        self.job_id, new_gen)
            self._finish()
            return None
        ck = self.last_checkpoint_event
        if (saver_here or had_saver_proc) and ck and ck.get("final"):
            phases.append(("save", float(ck.get("save_seconds", 0.0))))
        self._retire()
        # adopt the new generation and this executor's assignments
        self.cluster = req.cluster
        assigned = {tid: (role, rank) for tid, role, rank in req.assignments}
        for tid, ts in self.tasks.items():
            if tid in assigned:
                role, rank = assigned[tid]
                self.tasks[tid] = replace(ts, role=role, rank=rank, removed=False,
                                          spec=replace(ts.spec, role=role, rank=rank, cluster=req.cluster))
            else:
                ts.removed = True
        for tid, ts in list(self.held.items()):
            if ts.spec.cluster.generation == new_gen:
                self.tasks[tid] = self.held.pop(tid)
        # start the new generation now: its processes start (Python, framework imports, kvstore
        # rendezvous) while the final checkpoint is made durable and restored; workers wait for
        # the restore folder (DL2_RESTORE_PENDING_S) before they load it
        restores = any(t.role == "worker" for t in self._current_tasks())
        target = self.workdir / f"restore-g{new_gen}"
        shutil.rmtree(target, ignore_errors=True)
        if self.config.fast_rescale and (failed := self._relaunch(new_gen, phases, target if restores else None)):
            return failed
        t1 = time.monotonic()
        if had_saver_proc:
            ok = self.uploader.drain(self.config.upload_timeout_s)
            self._collect_uploads()
            phases.append(("upload", time.monotonic() - t1))
            if not ok:
                logger.error("job %s: final checkpoint upload still pending; resuming from the newest stored", self.job_id)
        elif not restores:
            pass  # servers only here: nothing restores the checkpoint, so nothing waits for it
        elif req.previous_stop == "graceful":
            self._wait_for_final(cur, self.config.restore_wait_s)
            phases.append(("wait_checkpoint", time.monotonic() - t1))
        else:  # a member of the generation crashed: its final checkpoint cannot come
            logger.info("job %s: rescale after a crash (%s); not waiting for a final checkpoint", self.job_id,
                        req.previous_stop)
        t2 = time.monotonic()
        try:
            if restores and self._restore_dir(wait_for_previous=False) is None:
                target.mkdir(parents=True, exist_ok=True)
                (target / NO_CHECKPOINT).touch()  # the waiting workers start fresh
        except (CheckpointError, OSError) as exc:
            return self._rescale_failed(new_gen, phases, f"restore failed: {exc}")
        phases.append(("download", time.monotonic() - t2))
        if not self.config.fast_rescale and (failed := self._relaunch(new_gen, phases, target if restores else None,
                                                                      pending=False)):
            return failed
        for tid in self._current_ids():
            self.sink.status(tid, "TASK_RUNNING", f"generation {new_gen}")
        pr = _PendingReport(new_gen, phases, time.monotonic())
        if any(t.role == "worker" for t in self._current_tasks()):
            self._pending_report = pr
            return None
        return self._finish_report(pr)

    def _relaunch(self, gen: int, phases: list[tuple[str, float]], restore: Path | None,
                  pending: bool = True) -> RescaleReport | None:
        """Start this executor's tasks of the new generation; the failure report if that failed."""
        t0 = time.monotonic()
        try:
            for tid in self._current_ids():
                self._start_task(tid, restore, pending=pending)
        except (OSError, ValueError) as exc:
            return self._rescale_failed(gen, phases, f"relaunch failed: {exc}")
        phases.append(("relaunch", time.monotonic() - t0))
        return None

    def _finish_report(self, pr: _PendingReport) -> RescaleReport:
        self._pending_report = None
        total = sum(s for name, s in pr.phases if name != "save")
        task_id = next(iter(self._current_ids()), next(iter(self.tasks), ""))
        rep = RescaleReport(job_id=self.job_id, task_id=task_id, generation=pr.generation, ok=True,
                            phases=tuple((n, round(s, 4)) for n, s in [*pr.phases, ("total", total)]))
        self.last_report = rep
        self.sink.send(rep)
        logger.info("job %s rescaled to generation %d: %s", self.job_id, pr.generation, rep.phases)
        return rep

    def _rescale_failed(self, gen: int, phases: list[tuple[str, float]], reason: str) -> RescaleReport:
        rep = RescaleReport(job_id=self.job_id, task_id=next(iter(self.tasks), ""), generation=gen, ok=False,
                            phases=tuple(phases), reason=reason)
        self.last_report = rep
        self.sink.send(rep)
        self._fail_all(reason)
        return rep
