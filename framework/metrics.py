"""Prometheus metrics of the framework (one registry per process, served at ``/metrics``).

Besides the counters the scheduler bumps as it goes, :class:`FrameworkMetrics` derives a few
series from the loop thread's own state, so that no caller has to compute them:

* :meth:`~FrameworkMetrics.observe_jobs` (called with the jobs about to be persisted) observes a
  job's queue wait (submission -> first time all its tasks run) and its completion time (JCT,
  submission -> finished) once each, on the replica that saw it happen;
* :meth:`~FrameworkMetrics.observe_rescale` splits an executor's ``RescaleReport`` into phases;
* :meth:`~FrameworkMetrics.observe_cluster` refreshes cluster capacity and the allocation of
  the policy in charge;
* :meth:`~FrameworkMetrics.observe_learner` counts online-learning rollbacks;
* :class:`RefusedSubmissions` wraps the API app and counts refused ``POST /api/v1/jobs``.

``*_created`` samples are turned off for the whole process (they double every counter and
histogram and carry no information a dashboard uses).
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, Protocol

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from dl2_mesos.jobs import JobPhase

prometheus_client.disable_created_metrics()

RESOURCES = ("cpus", "gpus", "mem")
QUEUE_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 3600, 7200, 14400, 43200, 86400)
JCT_BUCKETS = (10, 30, 60, 300, 600, 1800, 3600, 7200, 14400, 28800, 43200, 86400, 172800, 604800)
RESCALE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
# Executors name their rescale phases (stop, save, upload, download, relaunch, first_batch, total...);
# the label stays bounded even if an executor sends something else.
_PHASE_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
MAX_RESCALE_PHASES = 16
CLUSTER_REFRESH_SECONDS = 1.0
SUBMIT_PATH = "/api/v1/jobs"


class _Learner(Protocol):
    @property
    def version(self) -> int | None: ...

    def describe(self) -> dict[str, Any]: ...


class FrameworkMetrics:
    """The framework's counters, gauges and histograms, in their own registry (tests create many)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.jobs = Gauge("dl2_jobs", "Jobs by phase.", ["phase"], registry=r)
        self.tasks = Gauge("dl2_tasks", "Live tasks by role.", ["role"], registry=r)
        self.allocated = Gauge("dl2_allocated_resources", "Resources held by live tasks.", ["resource"], registry=r)
        self.decisions = Counter("dl2_decisions", "Scheduling decisions (one per slot).", registry=r)
        self.decision_errors = Counter("dl2_decision_errors", "Policy calls that failed or were invalid.", registry=r)
        self.decision_latency = Histogram(
            "dl2_decision_latency_seconds", "Time spent in policy.decide.",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30), registry=r,
        )
        self.round_latency = Histogram(
            "dl2_round_latency_seconds", "A scheduling round without the policy (snapshot, place, launch).",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5), registry=r,
        )
        self.offers = Counter("dl2_offers", "Offers by what happened to them.", ["action"], registry=r)
        self.launched = Counter("dl2_tasks_launched", "Tasks launched.", ["role"], registry=r)
        self.rescales = Counter("dl2_rescales", "Job rescales started.", registry=r)
        self.status_updates = Counter("dl2_status_updates", "Task status updates.", ["state"], registry=r)
        self.slot = Gauge("dl2_slot", "Current slot index.", registry=r)
        self.leader = Gauge("dl2_is_leader", "1 on the leading replica.", registry=r)
        self.outbound_queue = Gauge("dl2_outbound_queue", "Calls to the master waiting to be sent.", registry=r)
        self.outbound_calls = Counter("dl2_outbound_calls", "Calls to the master by method and result.",
                                      ["call", "result"], registry=r)
        self.outbound_lag = Histogram(
            "dl2_outbound_lag_seconds", "Time a call to the master waited in the outbound queue.",
            buckets=(0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 30), registry=r,
        )
        self.outbound_call_latency = Histogram(
            "dl2_outbound_call_seconds", "Time one call to the master took (HTTP round trip).",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5), registry=r,
        )
        self.loop_errors = Counter("dl2_loop_errors", "Exceptions the scheduling loop caught and survived, by stage.",
                                   ["stage"], registry=r)
        self.quarantined_records = Gauge("dl2_quarantined_records",
                                         "State store records that could not be read (moved to quarantine/).",
                                         registry=r)
        self.jobs_expired = Counter("dl2_jobs_expired", "Ended jobs deleted by the retention rule.", registry=r)
        self.model_version = Gauge("dl2_model_version", "Version of the online-learned policy model.", registry=r)
        # -- job times, rescale phases --------------------------------------------------------
        self.queue_wait = Histogram(
            "dl2_job_queue_wait_seconds", "Submission to the first time all of a job's tasks ran, by job type.",
            ["job_type"], buckets=QUEUE_WAIT_BUCKETS, registry=r,
        )
        self.completion_time = Histogram(
            "dl2_job_completion_seconds", "Job completion time (JCT): submission to finished, by job type.",
            ["job_type"], buckets=JCT_BUCKETS, registry=r,
        )
        self.rescale_phase = Histogram(
            "dl2_rescale_phase_seconds",
            "Rescale time per phase as each executor reports it (stop, save, upload, download, relaunch, "
            "first_batch; total = the executor's whole rescale).",
            ["phase"], buckets=RESCALE_BUCKETS, registry=r,
        )
        # -- capacity and allocation ----------------------------------------------------------
        self.capacity = Gauge(
            "dl2_cluster_capacity",
            "Resources of the agents dl2 knows (per agent the most it saw offered plus held by its own tasks; "
            "an agent leaves when Mesos reports it lost).", ["resource"], registry=r,
        )
        self.policy_allocation = Gauge(
            "dl2_policy_allocation", "Resources held by live tasks, by the policy that allocated them.",
            ["policy", "resource"], registry=r,
        )
        self.policy_tasks = Gauge(
            "dl2_policy_allocation_tasks", "Live tasks by role, by the policy that allocated them.",
            ["policy", "role"], registry=r,
        )
        # -- counters of things an operator must look at ----------------------------------------
        self.rollbacks = Counter("dl2_model_rollbacks",
                                 "Online-learning rollbacks to the previous model version (reward dropped).",
                                 registry=r)
        self.refused_submissions = Counter(
            "dl2_submissions_refused", "Job submissions the API refused, by HTTP status "
            "(400 malformed, 401 no token, 409 idempotency conflict, 413 too large, 415 not JSON, 422 invalid).",
            ["code"], registry=r,
        )
        for p in JobPhase:
            self.jobs.labels(p.value).set(0)
        self._waiting: set[str] = set()  # jobs seen before they first ran (queue wait not observed yet)
        self._unfinished: set[str] = set()  # jobs seen before they ended (JCT not observed yet)
        self._phases: set[str] = set()
        self._agent_capacity: dict[str, tuple[float, float, float]] = {}
        self._cluster_at = float("-inf")
        self._rollbacks_seen: int | None = None

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # -- derived series -------------------------------------------------------------------------
    def start_term(self, jobs: Iterable[Any]) -> None:
        """A leader term begins with ``jobs`` restored: they are the baseline (what another leader
        saw meanwhile is not observed again here), and so is the learner's rollback record."""
        self._waiting.clear()
        self._unfinished.clear()
        for job in jobs:
            if not job.phase.terminal:
                self._unfinished.add(job.job_id)
                if JobPhase.RUNNING.value not in job.phase_times:
                    self._waiting.add(job.job_id)
        self._rollbacks_seen = None

    def observe_jobs(self, jobs: Iterable[Any]) -> None:
        """Look at jobs that changed (call before they are persisted, on the loop thread).

        Each queue wait and JCT is observed once: a job first seen here (a submission, or a job
        restored by :meth:`start_term`) is observed when it first runs (queue wait, unless it ran
        before) and when it finishes (JCT).
        """
        for job in jobs:
            jid = job.job_id
            started = JobPhase.RUNNING.value in job.phase_times
            if job.phase.terminal:  # only jobs not yet ended stay tracked
                if jid in self._unfinished and job.phase == JobPhase.FINISHED:
                    end = job.phase_times.get(JobPhase.FINISHED.value, job.submitted_at)
                    self.completion_time.labels(job.spec.job_type).observe(max(0.0, end - job.submitted_at))
                self._unfinished.discard(jid)
                self._waiting.discard(jid)
                continue
            if jid not in self._unfinished:
                self._unfinished.add(jid)
                if not started:
                    self._waiting.add(jid)
            if jid in self._waiting and started:
                self._waiting.discard(jid)
                wait = job.phase_times[JobPhase.RUNNING.value] - job.submitted_at
                self.queue_wait.labels(job.spec.job_type).observe(max(0.0, wait))

    def observe_rescale(self, report: Any) -> None:
        """One executor's ``RescaleReport``: each (phase, seconds) into ``dl2_rescale_phase_seconds``."""
        for name, seconds in report.phases:
            try:
                value = float(seconds)
            except (TypeError, ValueError):
                continue
            if not value >= 0 or value == float("inf"):
                continue
            label = str(name) if _PHASE_NAME.fullmatch(str(name)) else "other"
            if label not in self._phases:
                if len(self._phases) >= MAX_RESCALE_PHASES:
                    label = "other"
                self._phases.add(label)
            self.rescale_phase.labels(label).observe(value)

    def observe_cluster(self, offers: Any, jobs: Iterable[Any], policy: str, *, force: bool = False) -> None:
        """Refresh capacity and allocation gauges (at most once a second unless ``force``).

        Args:
            offers: the held offers (:class:`~dl2_mesos.framework.offer_book.OfferBook`).
            jobs: every job (live tasks count).
            policy: the name of the policy in charge.
        """
        now = time.monotonic()
        if not force and now - self._cluster_at < CLUSTER_REFRESH_SECONDS:
            return
        self._cluster_at = now
        mine: dict[str, list[float]] = {}
        held = [0.0, 0.0, 0.0]
        roles = {"ps": 0, "worker": 0}
        for job in jobs:
            for t in job.live_tasks():
                vec = (t.resources.cpus, t.resources.gpus, t.resources.mem)
                acc = mine.setdefault(t.agent_id, [0.0, 0.0, 0.0])
                for i, v in enumerate(vec):
                    acc[i] += v
                    held[i] += v
                roles[t.role] = roles.get(t.role, 0) + 1
        for aid in set(offers.agents) | set(mine):
            ag = offers.get(aid)
            free = (ag.free.cpus, ag.free.gpus, ag.free.mem) if ag is not None else (0.0, 0.0, 0.0)
            used = mine.get(aid, (0.0, 0.0, 0.0))
            seen = tuple(f + u for f, u in zip(free, used))
            known = self._agent_capacity.get(aid, (0.0, 0.0, 0.0))
            self._agent_capacity[aid] = tuple(max(a, b) for a, b in zip(known, seen))  # type: ignore[assignment]
        for i, name in enumerate(RESOURCES):
            self.capacity.labels(name).set(sum(c[i] for c in self._agent_capacity.values()))
            self.policy_allocation.labels(policy, name).set(held[i])
        for role, n in roles.items():
            self.policy_tasks.labels(policy, role).set(n)

    def forget_agent(self, agent_id: str) -> None:
        """Mesos reported the agent lost: it no longer counts towards capacity (next refresh)."""
        self._agent_capacity.pop(agent_id, None)
        self._cluster_at = float("-inf")

    def observe_learner(self, learner: _Learner) -> None:
        """The online learner after a slot: its model version, and rollbacks since the last call
        (the first call is the baseline, so a new leader does not count its predecessor's)."""
        self.model_version.set(learner.version or 0)
        # the learner's full record (its describe() shows the last few rollbacks only)
        record = getattr(learner, "info", None)
        n = len((record if isinstance(record, dict) else learner.describe()).get("rollbacks") or [])
        if self._rollbacks_seen is not None and n > self._rollbacks_seen:
            self.rollbacks.inc(n - self._rollbacks_seen)
        self._rollbacks_seen = n


ASGIApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
                   Awaitable[None]]


class RefusedSubmissions:
    """ASGI wrapper: counts ``POST /api/v1/jobs`` answered 4xx in ``dl2_submissions_refused_total``.

    Redirects to the leader (307) and 503s are not refusals (the client retries elsewhere).
    """

    def __init__(self, app: ASGIApp, metrics: FrameworkMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST" or scope.get("path") != SUBMIT_PATH:
            await self.app(scope, receive, send)
            return

        async def counting_send(message: Any) -> None:
            if message.get("type") == "http.response.start":
                code = int(message.get("status", 0))
                if 400 <= code < 500:
                    self.metrics.refused_submissions.labels(str(code)).inc()
            await send(message)

        await self.app(scope, receive, counting_send)
