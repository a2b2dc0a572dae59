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
from typing import Any

from dl2_mesos.allocation import Allocation, JobAllocation, validate_allocation
from dl2_mesos.cluster import AgentView, ClusterState, JobView, TaskView
from dl2_mesos.config import Config
from dl2_mesos.errors import Dl2Error, InvalidAllocation, MessageSchemaError
from dl2_mesos.jobs import JobPhase, JobSpec
from dl2_mesos.messages import CheckpointReport, ProgressReport, RescaleReport, ResourceUsage, decode_b64
from dl2_mesos.placement import place
from dl2_mesos.resources import Resources
from dl2_mesos.framework import events as ev
from dl2_mesos.framework.kv import StaleVersion, StoreUnavailable
from dl2_mesos.framework.history import History
from dl2_mesos.framework.launcher import Launcher
from dl2_mesos.framework.metrics import FrameworkMetrics
from dl2_mesos.framework.offers import AgentOffers, agent_id_of, decline_filters, offer_id
from dl2_mesos.framework.records import LOST_TASK_STATES, TERMINAL_TASK_STATES, JobRecord
from dl2_mesos.framework.state_store import StateStore
from dl2_mesos.framework.transitions import Transition

logger = logging.getLogger(__name__)

PROGRESS_PERSIST_SECONDS = 5.0


class UnknownJob(Dl2Error, KeyError):
    """No job with that id."""


class SchedulerCore:
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
        self.history = History()  # bounded; what the status page and /api/v1/history show

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
        prev = task.state
        task.state = state
        task.message = st.get("message", "") or task.message
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

    # -- slots ---------------------------------------------------------------------------------
    def tick(self) -> None:
        """Called by the loop between events: slot decisions, timeouts, offer interest."""
        if not self.registered or self.suspended or self.driver is None:
            return
        now = self.clock()
        slot = self.current_slot(now)
        if slot > self.last_slot:
            if self._ready_to_decide(now):
                self.decide(slot)
        self.launcher.expire(now)
        self.launcher.resend_rescales(now)
        self.update_offer_interest(now)
        self.flush()

    def _ready_to_decide(self, now: float) -> bool:
        """At a slot boundary, wait (at most ``offer_wait``) for offers when jobs want resources."""
        wanting = any(j.phase == JobPhase.PENDING for j in self.jobs.values())
        if not wanting or self.agents:
            self.slot_wait_since = None
            return True
        if self.slot_wait_since is None:
            self.slot_wait_since = now
            self.update_offer_interest(now, force=True)
        return now - self.slot_wait_since >= self.cfg.offer_wait

    def active_jobs(self) -> list[JobRecord]:
        jobs = [j for j in self.jobs.values() if not j.phase.terminal]
        return sorted(jobs, key=lambda j: (j.arrival_time, j.job_id))

    def snapshot(self, slot: int, now: float) -> ClusterState:
        """The frozen state a policy decides on: agents from held offers plus our tasks."""
        jobs = []
        tasks = []
        ours: dict[str, Resources] = {}
        for j in self.active_jobs():
            live = j.live_tasks()
            jobs.append(JobView(
                job_id=j.job_id, spec=j.spec, arrival_slot=j.arrival_slot, arrival_time=j.arrival_time,
                epochs_done=j.epochs_done, num_ps=sum(t.role == "ps" for t in live),
                num_workers=sum(t.role == "worker" for t in live), slots_run=max(0, slot - j.arrival_slot),
                slots_since_rescale=j.slots_since_rescale, rescales=j.rescales,
                measured_epochs_per_second=j.measured_eps,
            ))
            for t in live:
                tasks.append(TaskView(t.task_id, j.job_id, t.role, t.agent_id, t.resources))
                ours[t.agent_id] = ours.get(t.agent_id, Resources()) + t.resources
        agents = []
        for aid in sorted(set(self.agents) | set(ours)):
            ag = self.agents.get(aid)
            free = ag.free if ag else Resources()
            mine = ours.get(aid, Resources())
            agents.append(AgentView(aid, self.hostnames.get(aid, aid), free + mine, free + mine,
                                    ag.attributes if ag else ()))
        return ClusterState(slot=slot, slot_seconds=self.cfg.slot, now=now - self.epoch, jobs=tuple(jobs),
                            agents=tuple(agents), tasks=tuple(tasks),
                            info={"framework_id": self.framework_id})

    def decide(self, slot: int) -> Allocation:
        """One slot: snapshot -> policy -> placement -> transitions -> launches."""
        now = self.clock()
        self.slot_wait_since = None
        self.launcher.drop_all()  # anything still waiting is re-planned from scratch now
        state = self.snapshot(slot, now)
        reward = self._slot_reward()
        if self.learner is not None:
            # close the last slot's experience before the policy records the next one
            try:
                self.learner.end_slot(reward, self.policy)
            except Exception:
                logger.exception("online learning step failed; continuing with the current model")
        t0 = time.perf_counter()
        try:
            allocation = self.policy.decide(state)
            validate_allocation(allocation, state)
        except (InvalidAllocation, Exception) as exc:  # a broken policy must not stop the cluster
            self.metrics.decision_errors.inc()
            logger.error("policy %s failed at slot %d (%s); keeping current counts",
                         getattr(self.policy, "name", "?"), slot, exc)
            allocation = Allocation({j.job_id: (j.num_ps, j.num_workers) for j in state.jobs
                                     if j.num_ps or j.num_workers})
        policy_s = time.perf_counter() - t0
        self.metrics.decision_latency.observe(policy_s)
        self.metrics.decisions.inc()
        t1 = time.perf_counter()
        plan = self.apply(allocation, state, now)
        round_s = time.perf_counter() - t1
        self.metrics.round_latency.observe(round_s)
        if self.learner is not None:
            self.learner.begin_slot(state, allocation)
            self.metrics.model_version.set(self.learner.version or 0)
        self.last_slot = slot
        self._meta_dirty = True
        self.metrics.slot.set(slot)
        self.last_decision = {
            "slot": slot, "at": now, "policy_seconds": round(policy_s, 6), "round_seconds": round(round_s, 6),
            "allocation": {k: [v.num_ps, v.num_workers] for k, v in allocation.items()},
            "granted": {k: [v.num_ps, v.num_workers] for k, v in plan.granted.items()},
            "reward": reward,
        }
        self.history.record_slot(state, self.last_decision)
        logger.info("slot %d: %s (policy %.3fs, round %.3fs)", slot, allocation, policy_s, round_s)
        return allocation

    def _slot_reward(self) -> float | None:
        """DL2's reward of the slot that just ended: sum over the jobs that were active at its
        start of epochs trained / total epochs. None when no job was active (an idle cluster says
        nothing about the policy, so it must not count towards a rollback)."""
        before, self._slot_epochs = self._slot_epochs, {
            j.job_id: j.epochs_done for j in self.jobs.values() if not j.phase.terminal}
        if self.last_slot < 0 or not before:
            return None
        r = 0.0
        for job_id, done in before.items():
            j = self.jobs.get(job_id)
            if j is not None:
                r += max(0.0, j.epochs_done - done) / j.spec.epochs
        return r

    def apply(self, allocation: Allocation, state: ClusterState, now: float) -> Any:
        """Place ``allocation`` and start the transitions it implies.

        A job still starting or rescaling keeps its counts this slot (unless it is stopped):
        rescaling a job whose processes have not come up yet only costs another restart.
        """
        frozen = {}
        for j in state.jobs:
            job = self.jobs[j.job_id]
            settling = job.phase == JobPhase.RESCALING or (job.phase == JobPhase.PENDING and job.live_tasks())
            want = allocation.get_counts(j.job_id)
            if settling and not want.is_zero and (want.num_ps, want.num_workers) != (j.num_ps, j.num_workers):
                logger.info("job %s is still %s; keeping %d PS, %d workers this slot", j.job_id,
                            "rescaling" if job.phase == JobPhase.RESCALING else "starting", j.num_ps, j.num_workers)
                frozen[j.job_id] = JobAllocation(j.num_ps, j.num_workers)
        if frozen:
            allocation = Allocation({**{k: v for k, v in allocation.items()}, **frozen})
        plan = place(allocation, state)
        changed = plan.changed_jobs()
        for j in state.jobs:
            job = self.jobs[j.job_id]
            job.slots_run = state.slot - job.arrival_slot
            if j.job_id not in changed and (j.num_ps or j.num_workers):
                job.slots_since_rescale += 1
                self.dirty(job)
            granted = plan.granted.get_counts(j.job_id)
            if granted.is_zero:
                self.intended.pop(j.job_id, None)
            else:
                self.intended[j.job_id] = granted
        self.launcher.plan_transitions(plan, now, reason=f"slot {state.slot}")
        return plan

    def replan(self, job_ids: list[str], reason: str) -> None:
        """Re-place the intended counts of ``job_ids`` (others keep theirs) against held offers."""
        now = self.clock()
        for jid in job_ids:
            self.launcher.drop(jid)
        state = self.snapshot(self.current_slot(now), now)
        target = {}
        for j in state.jobs:
            if j.job_id in job_ids:
                want = self.intended.get(j.job_id)
                if want is not None:
                    target[j.job_id] = want
            elif j.num_ps or j.num_workers:
                target[j.job_id] = JobAllocation(j.num_ps, j.num_workers)
        plan = place(Allocation(target), state)
        self.launcher.plan_transitions(plan, now, reason=reason, only=set(job_ids))

    def update_offer_interest(self, now: float, force: bool = False) -> None:
        """REVIVE while something is pending (or a slot boundary is near), else SUPPRESS."""
        next_slot_at = self.epoch + (self.current_slot(now) + 1) * self.cfg.slot
        lead = max(self.cfg.offer_wait, min(10.0, 0.25 * self.cfg.slot))
        active = any(not j.phase.terminal for j in self.jobs.values())
        want = (
            force
            or bool(self.transitions)
            or any(j.phase == JobPhase.PENDING for j in self.jobs.values())
            or (active and next_slot_at - now <= lead)
        )
        if not want and self.agents:
            ids = [o for ag in self.agents.values() for o in ag.offers]
            self.agents.clear()
            self._decline(ids, "idle")
        if want != self.offer_interest and self.driver is not None:
            try:
                if want:
                    self.driver.reviveOffers()
                else:
                    self.driver.suppressOffers()
                self.offer_interest = want
            except Exception:
                logger.warning("revive/suppress failed", exc_info=True)

    # -- read-only views ---------------------------------------------------------------------
    def view(self) -> dict[str, Any]:
        """A JSON-able snapshot for the HTTP API (built in the loop thread, read elsewhere)."""
        now = self.clock()
        live = [t for j in self.jobs.values() for t in j.live_tasks()]
        counts = {p.value: 0 for p in JobPhase}
        for j in self.jobs.values():
            counts[j.phase.value] += 1
        for p, n in counts.items():
            self.metrics.jobs.labels(p).set(n)
        for role in ("ps", "worker"):
            self.metrics.tasks.labels(role).set(sum(t.role == role for t in live))
        tot = Resources()
        for t in live:
            tot = tot + t.resources
        for k, v in tot.to_dict().items():
            self.metrics.allocated.labels(k).set(v)
        per_agent: dict[str, dict[str, Any]] = {}
        for aid in sorted(set(self.agents) | {t.agent_id for t in live}):
            ag = self.agents.get(aid)
            used = Resources()
            for t in live:
                if t.agent_id == aid:
                    used = used + t.resources
            per_agent[aid] = {"agent_id": aid, "hostname": self.hostnames.get(aid, aid),
                              "offered": ag.free.to_dict() if ag else None, "used_by_dl2": used.to_dict(),
                              "tasks": sorted(t.task_id for t in live if t.agent_id == aid)}
        return {
            "jobs": {j.job_id: j.public() for j in self.jobs.values()},
            "cluster": {
                "framework_id": self.framework_id, "registered": self.registered, "suspended": self.suspended,
                "slot": self.current_slot(now), "slot_seconds": self.cfg.slot,
                "policy": getattr(self.policy, "name", type(self.policy).__name__),
                "agents": list(per_agent.values()),
                "allocations": {j.job_id: {"num_ps": j.num_ps, "num_workers": j.num_workers}
                                for j in self.jobs.values() if not j.phase.terminal},
                "jobs_by_phase": counts, "last_decision": self.last_decision,
                "pending_transitions": sorted(self.transitions),
            },
            "policy": self.learner.describe() if self.learner is not None else {
                "name": getattr(self.policy, "name", "?"), "online_learning": False},
            "history": self.history.snapshot(),
        }


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
