"""The scheduler core: the one object that owns the framework's state.

Only the loop thread calls it (:meth:`SchedulerCore.handle` for events, :meth:`tick` between
them). Per slot it freezes a :class:`~dl2_mesos.cluster.ClusterState`, asks the policy for a
target :class:`~dl2_mesos.allocation.Allocation`, runs :func:`dl2_mesos.placement.place` and
turns the plan into :class:`~dl2_mesos.framework.transitions.Transition` s that are launched
against held offers (see :mod:`dl2_mesos.framework.launcher`). Status updates are persisted
before they are acknowledged.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from typing import Any

from dl2_mesos.allocation import JobAllocation
from dl2_mesos.config import Config
from dl2_mesos.errors import Dl2Error, MessageSchemaError
from dl2_mesos.jobs import JobPhase, JobSpec
from dl2_mesos.messages import CheckpointReport, ProgressReport, RescaleReport, ResourceUsage, decode_b64
from dl2_mesos.framework import events as ev
from dl2_mesos.framework.kv import StaleVersion, StoreUnavailable
from dl2_mesos.framework.history import History
from dl2_mesos.framework.launcher import Launcher
from dl2_mesos.framework.metrics import FrameworkMetrics
from dl2_mesos.framework.offers import AgentOffers, agent_id_of, decline_filters, offer_id
from dl2_mesos.framework.records import LOST_TASK_STATES, TERMINAL_TASK_STATES, JobRecord
from dl2_mesos.framework.state_store import StateStore
from dl2_mesos.restart_costs import RESTART_COSTS_FILE, RestartCostBook
from dl2_mesos.framework.slots import SlotScheduling
from dl2_mesos.framework.transitions import Transition
from dl2_mesos.framework.views import build_view

logger = logging.getLogger(__name__)

# progress is cumulative and re-reported by every executor every few seconds, so a new leader
# learns it again at once; persisting it often only costs store writes on the loop thread
# (with 1000 jobs, every 5 s was 200 writes/s and most of the loop's time)
PROGRESS_PERSIST_SECONDS = 30.0


class UnknownJob(Dl2Error, KeyError):
    """No job with that id."""


class SchedulerCore(SlotScheduling):
    """Owns jobs, tasks, held offers and the slot clock.

    Args:
        cfg: settings.
        policy: anything with ``decide(ClusterState) -> Allocation``.
        store: persistent state (the framework id and jobs are read from it by :meth:`restore`).
        clock: wall clock (tests pass a fake).
        learner: optional online learner (see :mod:`dl2_mesos.framework.online`).
        metrics: optional Prometheus metrics.
    """

    def __init__(self, cfg: Config, policy: Any, store: StateStore, *, clock=time.time,  # noqa: ANN001
                 learner: Any = None, metrics: FrameworkMetrics | None = None) -> None:
        self.cfg = cfg
        self.policy = policy
        self.store = store
        self.clock = clock
        self.learner = learner
        self.metrics = metrics or FrameworkMetrics()
        self.jobs: dict[str, JobRecord] = {}
        self.task_index: dict[str, str] = {}  # task id -> job id
        self.agents: dict[str, AgentOffers] = {}  # held offers per agent
        self.hostnames: dict[str, str] = {}
        self.transitions: dict[str, Transition] = {}
        self.intended: dict[str, JobAllocation] = {}
        self.driver: Any = None
        self.framework_id: str | None = None
        self.registered = False
        self.ever_registered = False
        self.suspended = False
        self.offer_interest: bool | None = None  # True revived, False suppressed, None unknown
        self.epoch = clock()
        self.last_slot = -1
        self.slot_wait_since: float | None = None
        self.last_decision: dict[str, Any] = {}
        self.rescale_sent: dict[str, float] = {}
        self.usage: dict[str, dict[str, Any]] = {}
        self._dirty: set[str] = set()
        self._meta_dirty = False
        self._acks: list[dict] = []
        self.replies: list[tuple[Any, Any, BaseException | None]] = []  # (future, result, error)
        self.defer_replies = False
        self._slot_epochs: dict[str, float] = {}  # epochs at the start of the current slot
        self._progress_saved: dict[str, float] = {}
        self.launcher = Launcher(self)
        # task id -> when the last kill was sent (memory only: after a failover every task
        # still marked killing gets its kill again, in case the old leader's was lost)
        self._kills_sent: dict[str, float] = {}
        self._kill_scan_at = 0.0
        self.history = History()  # bounded; what the status page and /api/v1/history show
        self.restart_costs = RestartCostBook()  # measured per type; the job views show it to the policy

    # -- lifecycle -------------------------------------------------------------------------
    def restore(self) -> None:
        """Load framework id and jobs from the store and start a new leader term (CAS-fenced)."""
        self.framework_id = self.store.framework_id()
        meta = self.store.begin_term(self.clock())
        self.epoch = float(meta["epoch"])
        self.last_slot = int(meta.get("last_slot", -1))
        self.jobs = self.store.load_jobs()
        self.task_index = {t.task_id: j.job_id for j in self.jobs.values() for t in j.tasks.values()}
        for job in self.jobs.values():
            if job.cluster is not None and not job.phase.terminal:
                self.intended[job.job_id] = JobAllocation(len(job.cluster.servers), len(job.cluster.workers))
            if not job.phase.terminal:
                self._slot_epochs[job.job_id] = job.epochs_done
        logger.info("restored %d jobs, framework id %s, term %s", len(self.jobs), self.framework_id, meta["term"])

    def handle(self, event: Any) -> None:
        """Apply one event, persist what changed, then acknowledge status updates."""
        handler = _HANDLERS.get(type(event))
        if handler is None:
            logger.warning("ignoring unknown event %r", event)
            return
        try:
            handler(self, event)
            self.flush()
        finally:
            if not self.defer_replies:
                self.resolve_replies()

    def resolve_replies(self) -> None:
        """Answer the API commands handled so far (the loop does it after publishing its view, so
        a client that got 201 also finds its job in the next read)."""
        replies, self.replies = self.replies, []
        for fut, result, exc in replies:
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)

    def flush(self) -> None:
        """Persist dirty jobs (and meta), then send the acknowledgements that waited for it."""
        for job_id in sorted(self._dirty):
            job = self.jobs.get(job_id)
            if job is not None:
                self.store.put_job(job)
        self._dirty.clear()
        if self._meta_dirty:
            meta = self.store.meta()
            meta["last_slot"] = self.last_slot
            self.store.put_meta(meta)
            self._meta_dirty = False
        acks, self._acks = self._acks, []
        for status in acks:
            if self.driver is not None:
                try:
                    self.driver.acknowledgeStatusUpdate(status)
                except Exception:  # the master may be gone; it re-sends unacknowledged updates
                    logger.warning("acknowledge failed", exc_info=True)

    def dirty(self, job: JobRecord) -> None:
        self._dirty.add(job.job_id)

    def now(self) -> float:
        return self.clock()

    def current_slot(self, now: float | None = None) -> int:
        now = self.clock() if now is None else now
        return max(0, int((now - self.epoch) // self.cfg.slot))

    # -- Mesos events ----------------------------------------------------------------------
    def _on_registered(self, e: ev.Registered) -> None:
        self.driver = e.driver
        bind = getattr(type(e.driver), "bind_metrics", None)  # an OutboundDriver (see mesos_scheduler)
        if bind is not None:
            bind(e.driver, self.metrics)
        self.registered = True
        self.ever_registered = True
        self.offer_interest = None
        if e.framework_id != self.framework_id:
            logger.info("framework id %s (was %s)", e.framework_id, self.framework_id)
            self.framework_id = e.framework_id
            self.store.set_framework_id(e.framework_id)
        logger.info("%s with master %s", "re-registered" if e.reregistered else "registered", e.master)
        self.reconcile()

    def reconcile(self) -> None:
        """Explicit reconciliation of every task we know, then implicit (finds orphans)."""
        if self.driver is None:
            return
        tasks = [
            {"task_id": {"value": t.task_id}, "agent_id": {"value": t.agent_id}}
            for j in self.jobs.values() for t in j.tasks.values() if t.state not in TERMINAL_TASK_STATES
        ]
        try:
            if tasks:
                self.driver.reconcileTasks(tasks)
            self.driver.reconcileTasks([])
        except Exception:
            logger.warning("reconcile failed", exc_info=True)

    def _on_disconnected(self, e: ev.Disconnected) -> None:
        self.registered = False
        self.agents.clear()  # offers die with the connection

    def _on_offers(self, e: ev.Offers) -> None:
        now = self.clock()
        for o in e.offers:
            self.metrics.offers.labels("received").inc()
            aid = agent_id_of(o)
            if self.suspended or not self.registered:
                self._decline([offer_id(o)], "suspended")
                continue
            self.hostnames[aid] = o.get("hostname", aid)
            ag = self.agents.setdefault(aid, AgentOffers(aid, o.get("hostname", aid)))
            ag.add(o, now)
        self.launcher.launch_ready(now)

    def _on_rescinded(self, e: ev.OfferRescinded) -> None:
        for aid, ag in list(self.agents.items()):
            if ag.remove(e.offer_id):
                self.metrics.offers.labels("rescinded").inc()
                if not ag.offers:
                    del self.agents[aid]

    def _decline(self, offer_ids: list[str], reason: str) -> None:
        if not offer_ids or self.driver is None:
            return
        self.metrics.offers.labels("declined").inc(len(offer_ids))
        try:
            self.driver.declineOffer([{"value": o} for o in offer_ids], decline_filters(reason))
        except Exception:
            logger.warning("decline failed", exc_info=True)

    def _on_status(self, e: ev.StatusUpdate) -> None:
        st = e.status
        tid = st["task_id"]["value"]
        state = st.get("state", "")
        self.metrics.status_updates.labels(state).inc()
        if "uuid" in st:
            self._acks.append(st)
        job = self.jobs.get(self.task_index.get(tid, ""))
        task = job.tasks.get(tid) if job else None
        if job is None or task is None:
            if state not in TERMINAL_TASK_STATES and self.driver is not None:
                logger.warning("killing unknown task %s (%s)", tid, state)
                self._kill(tid, st.get("agent_id", {}).get("value"))
            return
        prev, prev_message = task.state, task.message
        task.state = state
        task.message = st.get("message", "") or task.message
        if (prev, prev_message) != (task.state, task.message):
            # a re-sent update (the agent retries until acknowledged) changes nothing: the first
            # copy was stored before it was acknowledged, so no second write is needed
            self.dirty(job)
        if prev != state:
            logger.info("task %s: %s -> %s %s", tid, prev, state, st.get("message", ""))
        if job.phase.terminal:
            if state not in TERMINAL_TASK_STATES and not task.killing:
                self._kill_task(job, task)
            return
        if state == "TASK_FINISHED" and not task.killing:
            self._maybe_finish(job)
        elif state in ("TASK_FAILED", "TASK_ERROR") and not task.killing:
            self._job_task_failed(job, f"task {tid} {state}: {st.get('message', '')}".strip())
        elif state == "TASK_KILLED" and not task.killing:
            self._task_lost(job, task, "killed outside the framework")
        elif state in LOST_TASK_STATES and not task.killing:
            if state == "TASK_UNREACHABLE":
                self._kill_task(job, task)  # partition-aware: it may come back; we move on
            self._task_lost(job, task, f"{state} {st.get('reason', '')}".strip())
        self._refresh_phase(job)

    def _on_message(self, e: ev.FrameworkMessage) -> None:
        try:
            msg = decode_b64(e.data)
        except MessageSchemaError as exc:
            logger.warning("dropping malformed message from %s: %s", e.executor_id, exc)
            return
        job = self.jobs.get(getattr(msg, "job_id", ""))
        if job is None:
            return
        now = self.clock()
        if isinstance(msg, ProgressReport):
            self._progress(job, msg, now)
        elif isinstance(msg, RescaleReport):
            if msg.generation == job.generation and e.executor_id in job.rescale_waiting:
                del job.rescale_waiting[e.executor_id]
                self.history.record_rescale(job.job_id, e.executor_id, msg, now)
                self._record_restart_cost(job, msg)
                self.dirty(job)
                if not msg.ok:
                    self._job_task_failed(job, f"rescale to generation {msg.generation} failed: {msg.reason}")
                self._refresh_phase(job)
        elif isinstance(msg, CheckpointReport):
            job.last_checkpoint = {"uri": msg.uri, "epoch": msg.epoch, "batch": msg.batch,
                                   "generation": msg.generation, "at": now}
            self.dirty(job)
        elif isinstance(msg, ResourceUsage):
            self.usage[msg.task_id] = {"cpu_percent": msg.cpu_percent, "rss_bytes": msg.rss_bytes,
                                       "gpu_util": msg.gpu_util, "at": now}

    def _record_restart_cost(self, job: JobRecord, msg: RescaleReport) -> None:
        """Feed a measured rescale into its type's restart cost and export them all to
        ``<state_dir>/restart_costs.json`` when that folder exists (the file store's folder; with
        ZooKeeper create it to get the export), for ``dl2 simulate --restart-costs``."""
        self.restart_costs.record(job.spec.job_type, job.job_id, msg)
        if not Path(self.cfg.state_dir).is_dir():
            return
        try:
            self.restart_costs.export(Path(self.cfg.state_dir) / RESTART_COSTS_FILE)
        except OSError as exc:
            logger.warning("could not export restart costs to %s: %s", self.cfg.state_dir, exc)

    def _progress(self, job: JobRecord, msg: ProgressReport, now: float) -> None:
        if job.phase.terminal:
            return
        epoch = min(float(msg.epoch), float(job.spec.epochs))
        ts = msg.timestamp if msg.timestamp > 0 else now
        if job.last_progress is not None:
            t0, e0 = job.last_progress
            dt = ts - t0
            if dt >= 1.0 and epoch >= e0:
                inst = (epoch - e0) / dt
                job.measured_eps = inst if job.measured_eps is None else 0.5 * job.measured_eps + 0.5 * inst
                job.last_progress = (ts, epoch)
        else:
            job.last_progress = (ts, epoch)
        if epoch > job.epochs_done:
            job.epochs_done = epoch
        # progress is cumulative and re-reported: persist it at most every few seconds per job
        if now - self._progress_saved.get(job.job_id, 0.0) >= PROGRESS_PERSIST_SECONDS:
            self._progress_saved[job.job_id] = now
            self.dirty(job)

    def _on_agent_lost(self, e: ev.AgentLost) -> None:
        self.agents.pop(e.agent_id, None)
        hit = []
        for job in list(self.jobs.values()):
            lost = [t for t in job.tasks.values() if t.agent_id == e.agent_id and t.live]
            for t in lost:
                t.state = "TASK_LOST"
                self.dirty(job)
            if lost and not job.phase.terminal:
                logger.warning("job %s: %d tasks lost with agent %s", job.job_id, len(lost), e.agent_id)
                hit.append(job.job_id)
        hit = [j for j in hit if j in self.intended]
        if hit and self.registered:
            self.replan(hit, reason=f"agent {e.agent_id} lost")

    def _on_executor_lost(self, e: ev.ExecutorLost) -> None:
        logger.info("executor %s on %s exited with %s", e.executor_id, e.agent_id, e.status)

    def _on_error(self, e: ev.MesosError) -> None:
        logger.error("Mesos error: %s", e.message)

    # -- commands from the API ---------------------------------------------------------------
    def _on_submit(self, e: ev.SubmitJob) -> None:
        try:
            job = self.submit(e.spec)
            self.replies.append((e.reply, job.public(), None))
        except Exception as exc:  # reported to the HTTP caller
            self.replies.append((e.reply, None, exc))
            if isinstance(exc, (StaleVersion, StoreUnavailable)):
                raise

    def submit(self, spec: JobSpec) -> JobRecord:
        now = self.clock()
        job_id = f"{(spec.name or spec.job_type).lower()[:40]}-{uuid.uuid4().hex[:8]}"
        job = JobRecord(
            job_id=job_id, spec=spec, submitted_at=now, arrival_slot=self.current_slot(now),
            arrival_time=now - self.epoch,
            checkpoint_uri=f"{self.cfg.checkpoint_root.rstrip('/')}/{job_id}",
        )
        job.phase_times[JobPhase.PENDING.value] = now
        self.jobs[job_id] = job
        self.dirty(job)
        self.flush()  # the caller gets 201 only once the job is stored
        logger.info("job %s submitted (%s, %s epochs)", job_id, spec.job_type, spec.epochs)
        return job

    def _on_cancel(self, e: ev.CancelJob) -> None:
        try:
            self.replies.append((e.reply, self.cancel(e.job_id).public(), None))
        except Exception as exc:
            self.replies.append((e.reply, None, exc))

    def cancel(self, job_id: str) -> JobRecord:
        job = self.jobs.get(job_id)
        if job is None:
            raise UnknownJob(job_id)
        if not job.phase.terminal:
            self._end_job(job, JobPhase.CANCELLED, "cancelled by user")
        return job

    def _on_leadership(self, e: ev.Leadership) -> None:
        if e.change == "suspended":
            logger.warning("ZooKeeper connection suspended: not deciding until it is back")
            self.suspended = True
        elif e.change == "resumed":
            logger.info("ZooKeeper connection back: deciding again")
            self.suspended = False
            self.offer_interest = None  # REVIVE (clears the filters of offers declined meanwhile)

    def view(self) -> dict[str, Any]:
        """A JSON-able snapshot for the HTTP API (see :mod:`dl2_mesos.framework.views`)."""
        return {**build_view(self), "history": self.history.snapshot()}

    # -- job lifecycle ---------------------------------------------------------------------
    def _kill(self, task_id: str, agent_id: str | None = None) -> None:
        if self.driver is None:
            return
        try:
            self.driver.killTask({"value": task_id})
        except Exception:
            logger.warning("kill %s failed", task_id, exc_info=True)

    def _kill_task(self, job: JobRecord, task: Any) -> None:
        task.killing = True
        self.dirty(job)
        if task.state not in TERMINAL_TASK_STATES:
            self._kill(task.task_id, task.agent_id)
            self._kills_sent[task.task_id] = self.clock()

    def resend_kills(self, now: float) -> None:
        """Kill again every task we killed that still is not terminal after a generous wait.

        A kill can be lost (agent restarting, executor not yet registered, master failover); a
        parameter server of a finished job that survives it would hold its port and resources
        forever, since nothing else ever stops a PS.
        """
        if self.driver is None or now < self._kill_scan_at:
            return
        self._kill_scan_at = now + 1.0  # a scan over every task record: not on every tick
        every = 2 * self.cfg.kill_grace + 5.0
        for job in self.jobs.values():
            for t in job.tasks.values():
                if not t.killing or t.state in TERMINAL_TASK_STATES:
                    self._kills_sent.pop(t.task_id, None)
                    continue
                sent = self._kills_sent.get(t.task_id)
                if sent is None or now - sent >= every:
                    if sent is not None:
                        logger.warning("task %s still %s %.0fs after its kill; killing again",
                                       t.task_id, t.state, now - sent)
                    self._kill(t.task_id, t.agent_id)
                    self._kills_sent[t.task_id] = now

    def _end_job(self, job: JobRecord, phase: JobPhase, message: str) -> None:
        now = self.clock()
        job.set_phase(phase, now, message)
        job.rescale_waiting.clear()
        self.transitions.pop(job.job_id, None)
        self.intended.pop(job.job_id, None)
        for t in list(job.tasks.values()):
            if t.live:
                self._kill_task(job, t)
        self.dirty(job)
        logger.info("job %s %s: %s", job.job_id, phase.value, message)

    def _maybe_finish(self, job: JobRecord) -> None:
        # the training program exits 0 on every worker once the job's epochs are done
        # records of workers that failed or were lost earlier (and were replaced) do not count
        workers = [t for t in job.tasks.values() if t.role == "worker" and not t.killing
                   and (t.live or t.state == "TASK_FINISHED")]
        if workers and all(t.state == "TASK_FINISHED" for t in workers):
            job.epochs_done = max(job.epochs_done, float(job.spec.epochs))
            self._end_job(job, JobPhase.FINISHED, "workers finished")

    def _job_task_failed(self, job: JobRecord, reason: str) -> None:
        job.failures += 1
        if job.failures > self.cfg.max_task_failures:
            self._end_job(job, JobPhase.FAILED, f"{reason} (failure {job.failures}, giving up)")
            return
        # restart the whole job from its checkpoint at the next slot
        logger.warning("job %s: %s; restarting from checkpoint (failure %d)", job.job_id, reason, job.failures)
        self._preempt(job, reason)

    def _preempt(self, job: JobRecord, reason: str) -> None:
        for t in list(job.tasks.values()):
            if t.live:
                self._kill_task(job, t)
        job.rescale_waiting.clear()
        job.cluster = None
        self.transitions.pop(job.job_id, None)
        self.intended.pop(job.job_id, None)
        if job.epochs_done > 0 or job.generation > 0:
            job.restart_count += 1
        job.set_phase(JobPhase.PENDING, self.clock(), reason)
        self.dirty(job)

    def _task_lost(self, job: JobRecord, task: Any, reason: str) -> None:
        """A task vanished: re-place the job's intended counts against current offers."""
        logger.warning("job %s: task %s lost (%s); rescheduling", job.job_id, task.task_id, reason)
        members = {e.task_id for e in (*job.cluster.servers, *job.cluster.workers)} if job.cluster else set()
        if job.phase != JobPhase.RUNNING and task.task_id in members:
            # the generation being started or rescaled to counts on this task and can never come
            # up without it (ps-lite/gloo wait for every member): restart the job from its checkpoint
            self._preempt(job, f"task {task.task_id} lost while generation {job.generation} was starting")
            return
        if job.job_id in self.intended and self.registered:
            self.replan([job.job_id], reason="lost task")

    def _refresh_phase(self, job: JobRecord) -> None:
        if job.phase.terminal:
            return
        live = job.live_tasks()
        now = self.clock()
        if not live:
            if job.phase != JobPhase.PENDING and job.job_id not in self.transitions:
                job.set_phase(JobPhase.PENDING, now)
                self.dirty(job)
            return
        if all(t.state == "TASK_RUNNING" for t in live) and not job.rescale_waiting:
            if job.phase != JobPhase.RUNNING:
                job.set_phase(JobPhase.RUNNING, now)
                self.dirty(job)

_HANDLERS = {
    ev.Registered: SchedulerCore._on_registered,
    ev.Disconnected: SchedulerCore._on_disconnected,
    ev.Offers: SchedulerCore._on_offers,
    ev.OfferRescinded: SchedulerCore._on_rescinded,
    ev.StatusUpdate: SchedulerCore._on_status,
    ev.FrameworkMessage: SchedulerCore._on_message,
    ev.AgentLost: SchedulerCore._on_agent_lost,
    ev.ExecutorLost: SchedulerCore._on_executor_lost,
    ev.MesosError: SchedulerCore._on_error,
    ev.SubmitJob: SchedulerCore._on_submit,
    ev.CancelJob: SchedulerCore._on_cancel,
    ev.Leadership: SchedulerCore._on_leadership,
}
