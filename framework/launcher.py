"""Turn placement plans into Mesos operations against held offers.

A plan's new tasks must land on the agents placement chose; they are launched only when
those agents' offers are in hand (a transition waits at most ``launch_timeout``, then the job
is re-planned against the offers held then). Each agent's offers are accepted at most once per
round, with every task going there. Stops are kills; continuing executors get a
RescaleRequest, re-sent until their RescaleReport arrives.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from dl2_mesos.jobs import JobPhase
from dl2_mesos.messages import encode_b64
from dl2_mesos.placement import PlacementPlan, PlannedTask
from dl2_mesos.resources import Resources
from dl2_mesos.framework.offers import OfferClaim, decline_filters
from dl2_mesos.framework.task_info import task_info
from dl2_mesos.framework.transitions import (
    PORTS_PER_ROLE, Transition, build_generation, launch_spec, rescale_request,
)

if TYPE_CHECKING:
    from dl2_mesos.framework.core import SchedulerCore

logger = logging.getLogger(__name__)


class Launcher:
    """The launching half of the core (kept apart to keep both modules small)."""

    def __init__(self, core: SchedulerCore) -> None:
        self.core = core

    # -- planning ------------------------------------------------------------------------------
    def plan_transitions(self, plan: PlacementPlan, now: float, reason: str, only: set[str] | None = None) -> None:
        """Record a transition for every job the plan changes, then launch what offers allow."""
        stops: dict[str, list[str]] = {}
        starts: dict[str, list[PlannedTask]] = {}
        for t in plan.stop:
            stops.setdefault(t.job_id, []).append(t.task_id)
        for p in plan.start:
            starts.setdefault(p.job_id, []).append(p)
        for job_id in sorted(set(stops) | set(starts)):
            if only is not None and job_id not in only:
                continue
            self.core.transitions[job_id] = Transition(
                job_id=job_id, stop=tuple(stops.get(job_id, ())), start=tuple(starts.get(job_id, ())),
                granted=plan.granted.get_counts(job_id), created=now, reason=reason,
            )
        self.launch_ready(now)

    def drop(self, job_id: str) -> None:
        self.core.transitions.pop(job_id, None)

    def drop_all(self) -> None:
        if self.core.transitions:
            logger.info("re-planning %d transitions still waiting for offers", len(self.core.transitions))
        self.core.transitions.clear()

    # -- launching -----------------------------------------------------------------------------
    def launch_ready(self, now: float) -> int:
        """Execute every transition whose new tasks fit the held offers; returns how many ran."""
        core = self.core
        if not core.transitions or core.driver is None:
            return 0
        claims: dict[str, OfferClaim] = {}
        executors_here: set[tuple[str, str]] = {
            (j.job_id, t.agent_id) for j in core.jobs.values() for t in j.live_tasks()
        }
        launches: dict[str, list[dict[str, Any]]] = {}
        ready = 0
        order = sorted(core.transitions.values(), key=lambda tr: (core.jobs[tr.job_id].arrival_time, tr.job_id))
        for tr in order:
            job = core.jobs.get(tr.job_id)
            if job is None or job.phase.terminal:
                core.transitions.pop(tr.job_id, None)
                continue
            matched = self._match(tr, claims, executors_here)
            if matched is None:
                continue
            del core.transitions[tr.job_id]
            self._execute(tr, matched, launches)
            ready += 1
        core.flush()  # write-ahead: the new tasks are in the store before Mesos hears of them
        for agent_id, infos in launches.items():
            ag = core.agents.pop(agent_id)
            try:
                core.driver.launchTasks([{"value": o} for o in ag.offers], infos, decline_filters("leftover"))
                core.metrics.offers.labels("accepted").inc(len(ag.offers))
            except Exception:
                # the tasks stay LAUNCHING; reconciliation reports them lost and they get re-placed
                logger.exception("launch on %s failed", agent_id)
        return ready

    def _match(self, tr: Transition, claims: dict[str, OfferClaim],
               executors_here: set[tuple[str, str]]) -> list[tuple[PlannedTask, str, list[int]]] | None:
        """Claim offer resources for every new task of ``tr``, all or nothing."""
        core = self.core
        saved: dict[str, tuple[Resources, list[list[int]]] | None] = {}  # agent -> claim state before this tr
        new_exec: set[tuple[str, str]] = set()
        out: list[tuple[PlannedTask, str, list[int]]] = []
        extra = Resources(core.cfg.executor_cpus, 0.0, core.cfg.executor_mem)
        for p in tr.start:
            ag = core.agents.get(p.agent_id)
            if ag is None:
                break
            claim = claims.get(p.agent_id)
            if p.agent_id not in saved:
                saved[p.agent_id] = None if claim is None else (claim.free, [list(r) for r in claim._ports])
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
        # roll back this transition's claims
        for aid, before in saved.items():
            if before is None:
                claims.pop(aid, None)
            else:
                claims[aid].free, claims[aid]._ports = before
        return None

    def _execute(self, tr: Transition, matched: list[tuple[PlannedTask, str, list[int]]],
                 launches: dict[str, list[dict[str, Any]]]) -> None:
        core = self.core
        job = core.jobs[tr.job_id]
        now = core.clock()
        stop = set(tr.stop)
        had_tasks = bool(job.live_tasks())
        gen = build_generation(job, stop, matched)
        for tid in tr.stop:
            t = job.tasks.get(tid)
            if t is not None and t.live:
                core._kill_task(job, t)
        job.generation = gen.generation
        job.cluster = gen.cluster
        job.rescale_waiting = {}
        if gen.cluster is None:
            # no worker left: the job is preempted (it restarts from its checkpoint later)
            for t in gen.continuing:
                core._kill_task(job, t)
            if had_tasks:
                job.restart_count += 1
            job.set_phase(JobPhase.PENDING, now, f"preempted at {tr.reason}")
            core.dirty(job)
            return
        for t in gen.new_tasks:
            job.tasks[t.task_id] = t
            core.task_index[t.task_id] = job.job_id
            spec = launch_spec(job, t, gen.cluster, core.cfg.progress_interval, dict(core.cfg.task_env))
            meta = core.agents[t.agent_id].meta
            launches.setdefault(t.agent_id, []).append(task_info(core.cfg, t, spec, meta))
            core.metrics.launched.labels(t.role).inc()
        if gen.continuing:
            job.rescales += 1
            job.slots_since_rescale = 0
            core.metrics.rescales.inc()
            job.set_phase(JobPhase.RESCALING, now, f"rescaling to generation {gen.generation} ({tr.reason})")
            for ex_id, assignments in gen.assignments.items():
                agent = next(t.agent_id for t in gen.continuing if t.executor_id == ex_id)
                job.rescale_waiting[ex_id] = agent
                self._send_rescale(job, ex_id, agent, assignments)
            core.rescale_sent[job.job_id] = now
        else:
            job.slots_since_rescale = 0
            job.set_phase(JobPhase.PENDING, now, f"launching generation {gen.generation}")
        logger.info("job %s -> generation %d: %d PS, %d workers (%d new, %d stopped)", job.job_id,
                    gen.generation, len(gen.cluster.servers), len(gen.cluster.workers), len(gen.new_tasks), len(stop))
        core.dirty(job)

    def _send_rescale(self, job: Any, executor_id: str, agent_id: str, assignments: list[tuple[str, str, int]]) -> None:
        core = self.core
        msg = rescale_request(job, job.cluster, assignments)
        try:
            core.driver.sendFrameworkMessage({"value": executor_id}, {"value": agent_id}, encode_b64(msg))
        except Exception:
            logger.warning("rescale message to %s failed; will re-send", executor_id, exc_info=True)

    # -- timers --------------------------------------------------------------------------------
    def resend_rescales(self, now: float) -> None:
        """Framework messages are best effort: re-send RescaleRequests until reported."""
        core = self.core
        for job in core.jobs.values():
            if not job.rescale_waiting or job.cluster is None or job.phase.terminal:
                continue
            if now - core.rescale_sent.get(job.job_id, 0.0) < core.cfg.rescale_resend:
                continue
            core.rescale_sent[job.job_id] = now
            live = {t.task_id: t for t in job.live_tasks()}
            ranks = {ep.task_id: ("ps", i) for i, ep in enumerate(job.cluster.servers)}
            ranks.update({ep.task_id: ("worker", i) for i, ep in enumerate(job.cluster.workers)})
            for ex_id, agent in job.rescale_waiting.items():
                assignments = [(tid, *ranks[tid]) for tid, t in live.items() if t.executor_id == ex_id and tid in ranks]
                self._send_rescale(job, ex_id, agent, assignments)

    def expire(self, now: float) -> None:
        """Re-plan transitions that waited too long; decline offers held too long."""
        core = self.core
        late = [jid for jid, tr in core.transitions.items() if now - tr.created >= core.cfg.launch_timeout]
        if late:
            logger.warning("offers for %s did not arrive within %.0fs; re-planning", late, core.cfg.launch_timeout)
            core.replan(late, reason="launch timeout")
        stale = []
        for aid, ag in list(core.agents.items()):
            for oid, since in list(ag.received.items()):
                if now - since >= core.cfg.offer_hold:
                    ag.remove(oid)
                    stale.append(oid)
            if not ag.offers:
                del core.agents[aid]
        core._decline(stale, "expired")
