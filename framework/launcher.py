"""Turn transitions into Mesos operations against held offers.

A plan's new tasks must land on the agents placement chose; they are launched only when
those agents' offers are in hand (a transition waits at most ``launch_timeout``, then the job
is re-planned against the offers held then). Each agent's offers are accepted at most once per
round, with every task going there. Stops are kills; continuing executors get a
RescaleRequest, re-sent until their RescaleReport arrives.

The launcher changes job records through the :class:`~dl2_mesos.framework.job_book.JobBook`
and returns what Mesos must be told as :mod:`~dl2_mesos.framework.driver_commands`; it never
calls the driver.
"""

from __future__ import annotations

import logging
from typing import Any

from dl2_mesos.config import Config
from dl2_mesos.jobs import JobPhase
from dl2_mesos.messages import encode_b64
from dl2_mesos.placement import PlannedTask
from dl2_mesos.resources import Resources
from dl2_mesos.framework.driver_commands import Command, KillTask, LaunchTasks, Replan, SendMessage
from dl2_mesos.framework.job_book import JobBook
from dl2_mesos.framework.metrics import FrameworkMetrics
from dl2_mesos.framework.offer_book import OfferBook, OfferClaim
from dl2_mesos.framework.records import FrameworkJob
from dl2_mesos.framework.task_info import task_info
from dl2_mesos.framework.transitions import (
    PORTS_PER_ROLE, Transition, build_generation, launch_spec, rescale_request,
)

logger = logging.getLogger(__name__)

_Matched = list[tuple[PlannedTask, str, list[int]]]  # (planned task, hostname, ports)


class Launcher:
    """Transitions waiting for offers, and the RescaleRequests waiting for their reports.

    Args:
        cfg: settings (executor overhead, timeouts, task environment).
        metrics: counters of launched tasks and rescales.
    """

    def __init__(self, cfg: Config, metrics: FrameworkMetrics) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.pending: dict[str, Transition] = {}  # job id -> transition waiting for offers
        self.rescale_sent: dict[str, float] = {}  # job id -> when its RescaleRequests were last sent

    # -- planning ------------------------------------------------------------------------------
    def add(self, transitions: dict[str, Transition]) -> None:
        self.pending.update(transitions)

    def drop(self, job_id: str) -> None:
        self.pending.pop(job_id, None)

    def drop_all(self) -> None:
        if self.pending:
            logger.info("re-planning %d transitions still waiting for offers", len(self.pending))
        self.pending.clear()

    # -- launching -----------------------------------------------------------------------------
    def launch_ready(self, book: JobBook, offers: OfferBook, now: float) -> list[Command]:
        """Execute every transition whose new tasks fit the held offers.

        Returns the commands for Mesos: kills of stopped tasks, rescale messages, then one
        launch per agent. The caller persists the book before sending them (write-ahead).
        """
        if not self.pending:
            return []
        claims: dict[str, OfferClaim] = {}
        executors_here = book.executors_in_use()
        launches: dict[str, list[dict[str, Any]]] = {}
        out: list[Command] = []
        order = sorted(self.pending.values(), key=lambda tr: (book.jobs[tr.job_id].arrival_time, tr.job_id))
        for tr in order:
            job = book.get(tr.job_id)
            if job is None or job.phase.terminal:
                self.pending.pop(tr.job_id, None)
                continue
            matched = self._match(tr, offers, claims, executors_here)
            if matched is None:
                continue
            del self.pending[tr.job_id]
            out += self._execute(book, offers, job, tr, matched, launches, now)
        for agent_id, infos in launches.items():
            out.append(LaunchTasks(agent_id, tuple(offers.take(agent_id)), tuple(infos)))
        return out

    def _match(self, tr: Transition, offers: OfferBook, claims: dict[str, OfferClaim],
               executors_here: set[tuple[str, str]]) -> _Matched | None:
        """Claim offer resources for every new task of ``tr``, all or nothing."""
        saved: dict[str, Any] = {}  # agent -> claim checkpoint before this transition (None: no claim)
        new_exec: set[tuple[str, str]] = set()
        out: _Matched = []
        extra = Resources(self.cfg.executor_cpus, 0.0, self.cfg.executor_mem)
        for p in tr.start:
            ag = offers.get(p.agent_id)
            if ag is None:
                break
            claim = claims.get(p.agent_id)
            if p.agent_id not in saved:
                saved[p.agent_id] = None if claim is None else claim.checkpoint()
            if claim is None:
                claim = claims[p.agent_id] = OfferClaim(ag)
            demand = p.resources
            key = (tr.job_id, p.agent_id)
            if key not in executors_here and key not in new_exec and not extra.is_zero():
                demand = demand + extra
            ports = claim.take(demand, PORTS_PER_ROLE[p.role])
            if ports is None:
                break
            new_exec.add(key)
            out.append((p, ag.hostname, ports))
        else:
            executors_here |= new_exec
            return out
        for aid, before in saved.items():  # roll back this transition's claims
            if before is None:
                claims.pop(aid, None)
            else:
                claims[aid].rollback(before)
        return None

    def _execute(self, book: JobBook, offers: OfferBook, job: FrameworkJob, tr: Transition, matched: _Matched,
                 launches: dict[str, list[dict[str, Any]]], now: float) -> list[Command]:
        out: list[Command] = []
        stop = set(tr.stop)
        had_tasks = bool(job.live_tasks())
        gen = build_generation(job, stop, matched)
        # the kills go out after the rescale requests: an executor that gets both (a removed server
        # beside a continuing worker) should stop its workers, which save the final checkpoint,
        # before the server goes (the executor also copes with the other order)
        kills: list[Command] = []
        for tid in tr.stop:
            t = job.tasks.get(tid)
            if t is not None and t.live and book.mark_killing(job, t):
                kills.append(KillTask(t.task_id, t.agent_id))
        job.generation = gen.generation
        job.cluster = gen.cluster
        job.rescale_waiting = {}
        if gen.cluster is None:
            # no worker left: the job is preempted (it restarts from its checkpoint later)
            for t in gen.continuing:
                if book.mark_killing(job, t):
                    out.append(KillTask(t.task_id, t.agent_id))
            if had_tasks:
                job.restart_count += 1
            job.set_phase(JobPhase.PENDING, now, f"preempted at {tr.reason}")
            book.mark_dirty(job)
            return kills + out
        for t in gen.new_tasks:
            book.add_task(job, t)
            spec = launch_spec(job, t, gen.cluster, self.cfg.progress_interval, dict(self.cfg.task_env))
            ag = offers.get(t.agent_id)
            meta = ag.meta if ag is not None else {}
            launches.setdefault(t.agent_id, []).append(task_info(self.cfg, t, spec, meta))
            self.metrics.launched.labels(t.role).inc()
        if gen.continuing:
            self.metrics.rescales.inc()
            job.set_phase(JobPhase.RESCALING, now, f"rescaling to generation {gen.generation} ({tr.reason})")
            for ex_id, assignments in gen.assignments.items():
                agent = next(t.agent_id for t in gen.continuing if t.executor_id == ex_id)
                job.rescale_waiting[ex_id] = agent
                out.append(self._rescale(job, ex_id, agent, assignments))
            self.rescale_sent[job.job_id] = now
        else:
            job.set_phase(JobPhase.PENDING, now, f"launching generation {gen.generation}")
        logger.info("job %s -> generation %d: %d PS, %d workers (%d new, %d stopped)", job.job_id,
                    gen.generation, len(gen.cluster.servers), len(gen.cluster.workers), len(gen.new_tasks), len(stop))
        book.mark_dirty(job)
        return out + kills

    @staticmethod
    def _rescale(job: FrameworkJob, executor_id: str, agent_id: str,
                 assignments: list[tuple[str, str, int]]) -> SendMessage:
        assert job.cluster is not None
        return SendMessage(executor_id, agent_id, encode_b64(rescale_request(job, job.cluster, assignments)))

    # -- timers --------------------------------------------------------------------------------
    def resend_rescales(self, book: JobBook, now: float) -> list[Command]:
        """Framework messages are best effort: re-send RescaleRequests until reported."""
        out: list[Command] = []
        for job in book.jobs.values():
            if not job.rescale_waiting or job.cluster is None or job.phase.terminal:
                continue
            if now - self.rescale_sent.get(job.job_id, 0.0) < self.cfg.rescale_resend:
                continue
            self.rescale_sent[job.job_id] = now
            live = {t.task_id: t for t in job.live_tasks()}
            ranks = {ep.task_id: ("ps", i) for i, ep in enumerate(job.cluster.servers)}
            ranks.update({ep.task_id: ("worker", i) for i, ep in enumerate(job.cluster.workers)})
            for ex_id, agent in job.rescale_waiting.items():
                assignments = [(tid, *ranks[tid]) for tid, t in live.items() if t.executor_id == ex_id and tid in ranks]
                out.append(self._rescale(job, ex_id, agent, assignments))
        return out

    def expire(self, now: float) -> list[Command]:
        """Transitions that waited ``launch_timeout`` for their offers are to be re-planned."""
        late = [jid for jid, tr in self.pending.items() if now - tr.created >= self.cfg.launch_timeout]
        if not late:
            return []
        logger.warning("offers for %s did not arrive within %.0fs; re-planning", late, self.cfg.launch_timeout)
        return [Replan(tuple(late), "launch timeout")]
