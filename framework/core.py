"""The scheduler core: dispatches events to the parts that own the framework's state.

Only the loop thread calls it (:meth:`SchedulerCore.handle` for events, :meth:`tick` between
them). The state is owned by

* a :class:`~dl2_mesos.framework.job_book.JobBook` (jobs, tasks, what to persist, acknowledgements),
* an :class:`~dl2_mesos.framework.offer_book.OfferBook` (held offers),
* a :class:`~dl2_mesos.framework.launcher.Launcher` (transitions waiting for offers),

and changed by the :class:`~dl2_mesos.framework.job_lifecycle.JobLifecycle` rules and the pure
:mod:`~dl2_mesos.framework.slot_planner`. Per slot the core freezes a
:class:`~dl2_mesos.cluster.ClusterState`, asks the policy for an
:class:`~dl2_mesos.allocation.Allocation`, and hands the planned transitions to the launcher.
Whatever must reach Mesos comes back as :mod:`~dl2_mesos.framework.driver_commands`, which the
core sends after persisting; status updates are persisted before they are acknowledged.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

from dl2_mesos.allocation import Allocation, JobAllocation, validate_allocation
from dl2_mesos.cluster import ClusterState
from dl2_mesos.config import Config
from dl2_mesos.errors import Dl2Error, MessageSchemaError
from dl2_mesos.jobs import JobPhase, JobSpec
from dl2_mesos.messages import CheckpointReport, ProgressReport, RescaleReport, ResourceUsage, decode_b64
from dl2_mesos.policy_api import Policy
from dl2_mesos.resources import Resources
from dl2_mesos.framework import events as ev
from dl2_mesos.framework import slot_planner
from dl2_mesos.framework.cluster_capacity import CapacityBook
from dl2_mesos.framework.driver_commands import Command, Replan, SchedulerDriver
from dl2_mesos.framework.history import History
from dl2_mesos.framework.job_book import JobBook
from dl2_mesos.framework.job_lifecycle import JobLifecycle
from dl2_mesos.framework.kv import StaleVersion, StoreUnavailable
from dl2_mesos.framework.launcher import Launcher
from dl2_mesos.framework.metrics import FrameworkMetrics
from dl2_mesos.framework.mesos_outbox import MesosOutbox
from dl2_mesos.framework.offer_book import OfferBook, agent_id_of, offer_id, parse_resources
from dl2_mesos.framework.pending_reasons import explain_slot
from dl2_mesos.framework.records import (TERMINAL_TASK_STATES, FrameworkJob, IdempotencyConflict, job_id_of_task,
                                         spec_digest)
from dl2_mesos.framework.state_store import StateStore
from dl2_mesos.restart_costs import RESTART_COSTS_FILE, RestartCostBook
from dl2_mesos.slot_accounting import RescaleLedger, account_counts
from dl2_mesos.framework.transitions import Transition
from dl2_mesos.framework.views import build_view, patch_view

logger = logging.getLogger(__name__)


class UnknownJob(Dl2Error, KeyError):
    """No job with that id."""


class SlotLearner(Protocol):
    """Online learning as the core drives it (see :mod:`dl2_mesos.framework.online_learning`)."""

    @property
    def version(self) -> int | None: ...

    def end_slot(self, reward: float | None, policy: Any = None) -> None:
        """Account the reward of the slot that just ended (None: no job was active)."""
        ...

    def begin_slot(self, state: ClusterState, allocation: Allocation) -> None:
        """Called after each decision."""
        ...

    def describe(self) -> dict[str, Any]: ...


class SchedulerCore:
    """Dispatches Mesos events, API commands and the slot clock to the owners of the state.

    Args:
        cfg: settings.
        policy: decides the counts per slot.
        store: persistent state (the framework id and jobs are read from it by :meth:`restore`).
        clock: wall clock (tests pass a fake).
        learner: optional online learner.
        metrics: optional Prometheus metrics.
    """

    def __init__(self, cfg: Config, policy: Policy, store: StateStore, *, clock: Callable[[], float] = time.time,
                 learner: SlotLearner | None = None, metrics: FrameworkMetrics | None = None) -> None:
        self.cfg = cfg
        self.policy = policy
        self.store = store
        self.clock = clock
        self.learner = learner
        self.metrics = metrics or FrameworkMetrics()
        self.book = JobBook(store)
        self.offers = OfferBook()
        self.capacity = CapacityBook()  # agents' totals (master's list, else seen in offers)
        self.launcher = Launcher(cfg, self.metrics)
        self.lifecycle = JobLifecycle(self.book, self.launcher, cfg.max_task_failures)
        self.history = History()  # bounded; what the status page and /api/v1/history show
        self.restart_costs = RestartCostBook()  # measured per type; the job views show it to the policy
        self.outbox = MesosOutbox(self.metrics, clock, cfg.kill_grace)
        self.framework_id: str | None = None
        self.registered = False
        self.ever_registered = False
        self.suspended = False
        self.epoch = clock()
        self.last_slot = -1
        self.slot_wait_since: float | None = None
        self.last_decision: dict[str, Any] = {}
        self.usage: dict[str, dict[str, Any]] = {}
        self.replies: list[tuple[Future, Any, BaseException | None]] = []  # (future, result, error)
        self.defer_replies = False
        # the loop sets this and flushes once per batch of events: the jobs changed by a batch are
        # written once each, and its acknowledgements still go out only after that write
        self.defer_flush = False
        self._meta_dirty = False
        self._slot_epochs: dict[str, float] = {}  # epochs at the start of the current slot

    # -- read access to the owned state ------------------------------------------------------
    @property
    def driver(self) -> SchedulerDriver | None:
        return self.outbox.driver

    @property
    def jobs(self) -> dict[str, FrameworkJob]:
        return self.book.jobs

    @property
    def intended(self) -> dict[str, JobAllocation]:
        return self.book.intended

    @property
    def transitions(self) -> dict[str, Transition]:
        return self.launcher.pending

    # -- lifecycle -------------------------------------------------------------------------
    def restore(self) -> None:
        """Load framework id and jobs from the store and start a new leader term (CAS-fenced)."""
        self.framework_id = self.store.framework_id()
        meta = self.store.begin_term(self.clock())
        self.epoch = float(meta["epoch"])
        self.last_slot = int(meta.get("last_slot", -1))
        self.book.restore()
        self.metrics.start_term(self.book.jobs.values())  # baseline: queue waits/JCTs observed once
        store = self.store  # counted when scraped (the online learner may quarantine a model record later)
        self.metrics.quarantined_records.set_function(lambda: len(store.quarantined) + bool(store.quarantined_meta))
        self._slot_epochs = {j.job_id: j.epochs_done for j in self.book.active()}
        logger.info("restored %d jobs, framework id %s, term %s", len(self.jobs), self.framework_id, meta["term"])

    def handle(self, event: Any) -> None:
        """Apply one event, persist what changed, then acknowledge status updates (with
        ``defer_flush``, the caller persists and acknowledges later with :meth:`flush`)."""
        handler = _HANDLERS.get(type(event))
        if handler is None:
            logger.warning("ignoring unknown event %r", event)
            return
        try:
            handler(self, event)
            if not self.defer_flush:
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
        """Persist changed jobs (and meta), then send the acknowledgements that waited for it."""
        self.metrics.observe_jobs(self.book.dirty_jobs())
        acks = self.book.flush()
        if self._meta_dirty:
            meta = self.store.meta()
            meta["last_slot"] = self.last_slot
            self.store.put_meta(meta)
            self._meta_dirty = False
        self.outbox.acknowledge(acks)

    def dirty(self, job: FrameworkJob) -> None:
        """Persist ``job`` at the next flush."""
        self.book.mark_dirty(job)

    def now(self) -> float:
        return self.clock()

    def current_slot(self, now: float | None = None) -> int:
        now = self.clock() if now is None else now
        return max(0, int((now - self.epoch) // self.cfg.slot))

    # -- sending commands ----------------------------------------------------------------------
    def _send(self, commands: list[Command]) -> None:
        """Carry out commands in order: re-plans here, the rest through the outbox."""
        for c in commands:
            if isinstance(c, Replan):
                if c.job_ids and self.registered:
                    self.replan(list(c.job_ids), reason=c.reason)
            else:
                self.outbox.send((c,))

    def _launch_ready(self, now: float) -> None:
        """Launch what held offers allow; the new tasks are stored before Mesos hears of them."""
        if not self.outbox.connected or not self.launcher.pending:
            return
        commands = self.launcher.launch_ready(self.book, self.offers, now)
        self.flush()
        self._send(commands)

    # -- Mesos events ----------------------------------------------------------------------
    def _on_registered(self, e: ev.Registered) -> None:
        self.outbox.driver = e.driver
        bind = getattr(type(e.driver), "bind_metrics", None)  # an OutboundDriver (see mesos_scheduler)
        if bind is not None:
            bind(e.driver, self.metrics)
        self.registered = True
        self.ever_registered = True
        self.outbox.offer_interest = None
        if e.framework_id != self.framework_id:
            logger.info("framework id %s (was %s)", e.framework_id, self.framework_id)
            self.framework_id = e.framework_id
            self.store.set_framework_id(e.framework_id)
        logger.info("%s with master %s", "re-registered" if e.reregistered else "registered", e.master)
        self.reconcile()

    def reconcile(self) -> None:
        """Explicit reconciliation of every task we know, then implicit (finds orphans)."""
        self.outbox.reconcile([{"task_id": {"value": t.task_id}, "agent_id": {"value": t.agent_id}}
                               for t in self.book.unfinished_tasks()])

    def _on_disconnected(self, e: ev.Disconnected) -> None:
        self.registered = False
        self.offers.release_all()  # offers die with the connection

    def _on_offers(self, e: ev.Offers) -> None:
        now = self.clock()
        for o in e.offers:
            self.metrics.offers.labels("received").inc()
            if self.suspended or not self.registered:
                self.outbox.decline([offer_id(o)], "suspended")
                continue
            self.offers.add(o, now)
            self.capacity.observe(agent_id_of(o), o.get("hostname", ""), parse_resources(o.get("resources", []))[0],
                                  Resources())
        self._launch_ready(now)

    def _on_rescinded(self, e: ev.OfferRescinded) -> None:
        if self.offers.rescind(e.offer_id):
            self.metrics.offers.labels("rescinded").inc()

    def _on_status(self, e: ev.StatusUpdate) -> None:
        st = e.status
        tid = st["task_id"]["value"]
        state = st.get("state", "")
        self.metrics.status_updates.labels(state).inc()
        if "uuid" in st:
            self.book.await_ack(st)
        job, task = self.book.find_task(tid)
        if job is None or task is None:
            if job is None and job_id_of_task(tid) in self.store.quarantined:
                # its job's record could not be read: an unknown job, not an unwanted task
                logger.error("task %s (%s) belongs to quarantined job %s: left running", tid, state,
                             job_id_of_task(tid))
                return
            if state not in TERMINAL_TASK_STATES and self.outbox.connected:
                logger.warning("killing unknown task %s (%s)", tid, state)
                self.outbox.kill(tid)
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
        terminal_before = job.phase.terminal
        self._send(self.lifecycle.task_state(job, task, st, self.clock()))
        if not terminal_before:
            self.lifecycle.refresh_phase(job, self.clock())

    def _on_message(self, e: ev.FrameworkMessage) -> None:
        try:
            msg = decode_b64(e.data)
        except MessageSchemaError as exc:
            logger.warning("dropping malformed message from %s: %s", e.executor_id, exc)
            return
        job = self.book.get(getattr(msg, "job_id", ""))
        if job is None:
            return
        now = self.clock()
        if isinstance(msg, ProgressReport):
            self.lifecycle.progress(job, msg, now)
        elif isinstance(msg, RescaleReport):
            if msg.generation == job.generation and e.executor_id in job.rescale_waiting:
                del job.rescale_waiting[e.executor_id]
                self.history.record_rescale(job.job_id, e.executor_id, msg, now)
                self.metrics.observe_rescale(msg)
                self._record_restart_cost(job, msg)
                self.dirty(job)
                if not msg.ok:
                    reason = f"rescale to generation {msg.generation} failed: {msg.reason}"
                    self._send(self.lifecycle.task_failed(job, reason, now))
                self.lifecycle.refresh_phase(job, self.clock())
        elif isinstance(msg, CheckpointReport):
            job.last_checkpoint = {"uri": msg.uri, "epoch": msg.epoch, "batch": msg.batch,
                                   "generation": msg.generation, "at": now}
            self.dirty(job)
        elif isinstance(msg, ResourceUsage):
            self.usage[msg.task_id] = {"cpu_percent": msg.cpu_percent, "rss_bytes": msg.rss_bytes,
                                       "gpu_util": msg.gpu_util, "at": now}

    def _on_agent_lost(self, e: ev.AgentLost) -> None:
        hit = [j.job_id for j in self.book.active() if any(t.agent_id == e.agent_id for t in j.live_tasks())]
        self.capacity.agent_lost(e.agent_id, self.offers.hostname(e.agent_id), self.clock(), hit)
        self.offers.forget_agent(e.agent_id)
        self.metrics.forget_agent(e.agent_id)
        self._send(self.lifecycle.agent_lost(e.agent_id))

    def _on_inventory(self, e: ev.AgentInventory) -> None:
        if e.agents is None:
            self.capacity.master_failed(e.master, e.error)
        else:
            self.capacity.master_agents(e.agents, e.master, self.clock())

    def _on_executor_lost(self, e: ev.ExecutorLost) -> None:
        logger.info("executor %s on %s exited with %s", e.executor_id, e.agent_id, e.status)

    def _on_error(self, e: ev.MesosError) -> None:
        logger.error("Mesos error: %s", e.message)

    # -- commands from the API ---------------------------------------------------------------
    def _on_submit(self, e: ev.SubmitJob) -> None:
        if not _take(e.reply):
            return
        try:
            job = self.submit(e.spec, e.idempotency_key, store_now=not self.defer_flush)
            self.replies.append((e.reply, job.public(), None))
        except Exception as exc:  # reported to the HTTP caller
            self.replies.append((e.reply, None, exc))
            if isinstance(exc, (StaleVersion, StoreUnavailable)):
                raise

    def submit(self, spec: JobSpec, idempotency_key: str = "", *, store_now: bool = True) -> FrameworkJob:
        """Add a job; it is stored before this returns (with ``store_now`` False: at the next
        :meth:`flush`, which the loop makes before it answers the command). A repeated
        ``idempotency_key`` with the same spec answers the job stored first.

        Raises:
            IdempotencyConflict: the key was used for another spec.
        """
        digest = spec_digest(spec) if idempotency_key else ""
        if idempotency_key:
            for known in self.jobs.values():
                if known.idempotency_key == idempotency_key:
                    if known.request_digest != digest:
                        raise IdempotencyConflict(idempotency_key, known.job_id)
                    return known
        now = self.clock()
        job_id = f"{(spec.name or spec.job_type).lower()[:40]}-{uuid.uuid4().hex[:8]}"
        # the first slot whose decision sees the job, as in the simulator (a job submitted after
        # this slot's decision waits for the next): ``slots_run`` (the paper's d) counts from it
        arrival_slot = max(self.current_slot(now), self.last_slot + 1)
        job = FrameworkJob(
            job_id=job_id, spec=spec, submitted_at=now, arrival_slot=arrival_slot,
            arrival_time=now - self.epoch,
            checkpoint_uri=f"{self.cfg.checkpoint_root.rstrip('/')}/{job_id}",
            idempotency_key=idempotency_key, request_digest=digest, ledger=RescaleLedger(arrival_slot),
        )
        job.phase_times[JobPhase.PENDING.value] = now
        self.book.add(job)
        if store_now:
            self.flush()  # the caller gets 201 only once the job is stored
        logger.info("job %s submitted (%s, %s epochs)", job_id, spec.job_type, spec.epochs)
        return job

    def _on_cancel(self, e: ev.CancelJob) -> None:
        if not _take(e.reply):
            return
        try:
            self.replies.append((e.reply, self.cancel(e.job_id).public(), None))
        except Exception as exc:
            self.replies.append((e.reply, None, exc))

    def cancel(self, job_id: str) -> FrameworkJob:
        """Cancel a job (its tasks are killed); an ended job is left as it is.

        Raises:
            UnknownJob: no job has that id.
        """
        job = self.book.get(job_id)
        if job is None:
            raise UnknownJob(job_id)
        if not job.phase.terminal:
            self._send(self.lifecycle.end(job, JobPhase.CANCELLED, "cancelled by user", self.clock()))
        return job

    def _on_leadership(self, e: ev.Leadership) -> None:
        if e.change == "suspended":
            logger.warning("ZooKeeper connection suspended: not deciding until it is back")
            self.suspended = True
        elif e.change == "resumed":
            logger.info("ZooKeeper connection back: deciding again")
            self.suspended = False
            self.outbox.offer_interest = None  # REVIVE (clears the filters of offers declined meanwhile)

    def view(self) -> dict[str, Any]:
        """A JSON-able snapshot for the HTTP API (see :mod:`dl2_mesos.framework.views`)."""
        self.book.take_touched()  # all of them are rebuilt now
        cluster = self._cluster_fields()
        policy_name = cluster["policy"]
        self.metrics.observe_cluster(self.offers, self.jobs.values(), policy_name)
        return {**build_view(self.book, self.offers, self.launcher.pending, self.metrics, cluster, self._policy_view(),
                             capacity=self.capacity, now=self.clock()),
                "history": self.history.snapshot()}

    def view_patch(self, previous: dict[str, Any]) -> dict[str, Any]:
        """``previous`` (a :meth:`view`) with the jobs changed since then rebuilt: cheap, for
        answering API commands between full views (see :func:`~dl2_mesos.framework.views.patch_view`)."""
        return {**patch_view(previous, self.book, self.book.take_touched(), self.launcher.pending,
                             self._cluster_fields(), self._policy_view(), capacity=self.capacity, now=self.clock()),
                "history": self.history.snapshot()}

    def _cluster_fields(self) -> dict[str, Any]:
        """The core's own fields of the view's ``cluster`` section."""
        policy_name = getattr(self.policy, "name", type(self.policy).__name__)
        return {
            "framework_id": self.framework_id, "registered": self.registered, "suspended": self.suspended,
            "slot": self.current_slot(), "slot_seconds": self.cfg.slot, "policy": policy_name,
            "last_decision": self.last_decision,
            "executor_overhead": {"cpus": self.cfg.executor_cpus, "gpus": 0.0, "mem": self.cfg.executor_mem},
        }

    def _policy_view(self) -> dict[str, Any]:
        return self.learner.describe() if self.learner is not None else {
            "name": getattr(self.policy, "name", "?"), "online_learning": False}

    # -- slots ---------------------------------------------------------------------------------
    def tick(self) -> None:
        """Called by the loop between events: slot decisions, timeouts, offer interest."""
        if not self.registered or self.suspended or not self.outbox.connected:
            return
        now = self.clock()
        slot = self.current_slot(now)
        if slot > self.last_slot:
            if self._ready_to_decide(now):
                self.decide(slot)
        self._send(self.launcher.expire(now))
        self.outbox.decline(self.offers.expire(now, self.cfg.offer_hold), "expired")
        self._send(self.launcher.resend_rescales(self.book, now))
        self.outbox.resend_kills(self.jobs.values(), now)
        self.update_offer_interest(now)
        self.flush()

    def _ready_to_decide(self, now: float) -> bool:
        """At a slot boundary, wait (at most ``offer_wait``) for offers when jobs want resources."""
        wanting = any(j.phase == JobPhase.PENDING for j in self.jobs.values())
        if not wanting or self.offers:
            self.slot_wait_since = None
            return True
        if self.slot_wait_since is None:
            self.slot_wait_since = now
            self.update_offer_interest(now, force=True)
        return now - self.slot_wait_since >= self.cfg.offer_wait

    def snapshot(self, slot: int, now: float) -> ClusterState:
        """The frozen state a policy decides on: agents from held offers plus our tasks."""
        # a job whose training ended waits only for its workers' last statuses: nothing to decide
        jobs = [j for j in self.book.active() if not j.training_ended()]
        return slot_planner.snapshot(jobs, self.offers, slot=slot, now=now - self.epoch,
                                     slot_seconds=self.cfg.slot, framework_id=self.framework_id,
                                     measured_restart=self.restart_costs.seconds)

    def _record_restart_cost(self, job: FrameworkJob, msg: RescaleReport) -> None:
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

    def _end_slot_reward(self) -> float | None:
        """The reward of the slot that just ended; starts counting the next one."""
        before, self._slot_epochs = self._slot_epochs, {j.job_id: j.epochs_done for j in self.book.active()}
        if self.last_slot < 0:
            return None
        return slot_planner.reward_since(before, self.jobs)

    def decide(self, slot: int) -> Allocation:
        """One slot: snapshot -> policy -> placement -> transitions -> launches."""
        now = self.clock()
        self.slot_wait_since = None
        self.launcher.drop_all()  # anything still waiting is re-planned from scratch now
        state = self.snapshot(slot, now)
        reward = self._end_slot_reward()
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
        except Exception as exc:  # a broken policy (or an invalid allocation) must not stop the cluster
            self.metrics.decision_errors.inc()
            logger.error("policy %s failed at slot %d (%s); keeping current counts",
                         getattr(self.policy, "name", "?"), slot, exc)
            allocation = slot_planner.current_counts(state)
        policy_s = time.perf_counter() - t0
        self.metrics.decision_latency.observe(policy_s)
        self.metrics.decisions.inc()
        t1 = time.perf_counter()
        plan = self._apply(allocation, state, now)
        round_s = time.perf_counter() - t1
        self.metrics.round_latency.observe(round_s)
        if self.learner is not None:
            self.learner.begin_slot(state, allocation)
            self.metrics.observe_learner(self.learner)  # model version, rollbacks
        self.last_slot = slot
        self._meta_dirty = True
        self.metrics.slot.set(slot)
        self.last_decision = {
            "slot": slot, "at": now, "policy_seconds": round(policy_s, 6), "round_seconds": round(round_s, 6),
            "allocation": {k: [v.num_ps, v.num_workers] for k, v in allocation.items()},
            "granted": {k: [v.num_ps, v.num_workers] for k, v in plan.placement.granted.items()},
            "reward": reward,
            "waiting": explain_slot(state, allocation, plan.placement),  # why jobs got nothing
            "capacity": self.capacity.snapshot()["total"],
        }
        self.history.record_slot(state, self.last_decision)
        logger.info("slot %d: %s (policy %.3fs, round %.3fs)", slot, allocation, policy_s, round_s)
        return allocation

    def _apply(self, allocation: Allocation, state: ClusterState, now: float) -> slot_planner.SlotPlan:
        """Plan the slot, note it on the jobs, and launch what held offers allow."""
        plan = slot_planner.plan_slot(allocation, state, self.jobs, now)
        for j in state.jobs:
            job = self.jobs[j.job_id]
            job.slots_run = state.slot - job.arrival_slot
            granted = plan.placement.granted.get_counts(j.job_id)
            # the rescale bookkeeping of the simulator, booked at the decision as there
            booked = account_counts(job.ledger, state.slot, (j.num_ps, j.num_workers),
                                    (granted.num_ps, granted.num_workers), j.restart_cost_seconds, state.slot_seconds)
            if booked.ledger != job.ledger:
                job.ledger = booked.ledger
                self.dirty(job)
            if granted.is_zero:
                self.intended.pop(j.job_id, None)
            else:
                self.intended[j.job_id] = granted
        self.launcher.add(plan.transitions)
        self._launch_ready(now)
        return plan

    def replan(self, job_ids: list[str], reason: str) -> None:
        """Re-place the intended counts of ``job_ids`` (others keep theirs) against held offers."""
        now = self.clock()
        for jid in job_ids:
            self.launcher.drop(jid)
        state = self.snapshot(self.current_slot(now), now)
        self.launcher.add(slot_planner.replan(state, self.intended, job_ids, now, reason))
        self._launch_ready(now)

    def update_offer_interest(self, now: float, force: bool = False) -> None:
        """REVIVE while something is pending (or a slot boundary is near), else SUPPRESS."""
        next_slot_at = self.epoch + (self.current_slot(now) + 1) * self.cfg.slot
        lead = max(self.cfg.offer_wait, min(10.0, 0.25 * self.cfg.slot))
        active = any(not j.phase.terminal for j in self.jobs.values())
        want = (
            force
            or bool(self.launcher.pending)
            or any(j.phase == JobPhase.PENDING for j in self.jobs.values())
            or (active and next_slot_at - now <= lead)
        )
        if not want and self.offers:
            self.outbox.decline(self.offers.release_all(), "idle")
        self.outbox.want_offers(want)


def _take(reply: Future) -> bool:
    """Mark an API command's reply as being worked on; False when its caller withdrew it (the
    wait timed out and the API answered 503 "retry"): then the command must do nothing."""
    if reply.set_running_or_notify_cancel():
        return True
    logger.info("an API command was withdrawn by its caller before the loop reached it; not carried out")
    return False


_HANDLERS: dict[type, Callable[[SchedulerCore, Any], None]] = {
    ev.Registered: SchedulerCore._on_registered,
    ev.Disconnected: SchedulerCore._on_disconnected,
    ev.Offers: SchedulerCore._on_offers,
    ev.OfferRescinded: SchedulerCore._on_rescinded,
    ev.StatusUpdate: SchedulerCore._on_status,
    ev.FrameworkMessage: SchedulerCore._on_message,
    ev.AgentLost: SchedulerCore._on_agent_lost,
    ev.ExecutorLost: SchedulerCore._on_executor_lost,
    ev.AgentInventory: SchedulerCore._on_inventory,
    ev.MesosError: SchedulerCore._on_error,
    ev.SubmitJob: SchedulerCore._on_submit,
    ev.CancelJob: SchedulerCore._on_cancel,
    ev.Leadership: SchedulerCore._on_leadership,
}
