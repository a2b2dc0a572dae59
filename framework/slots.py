"""The slot half of the scheduler core: when to decide, the frozen snapshot, the policy call,
placement, re-planning and offer interest (REVIVE/SUPPRESS).

:class:`SlotScheduling` is mixed into :class:`~dl2_mesos.framework.core.SchedulerCore`; it uses the
core's state (jobs, held offers, transitions) and runs only on the loop thread.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from dl2_mesos.allocation import Allocation, JobAllocation, validate_allocation
from dl2_mesos.cluster import AgentView, ClusterState, JobView, TaskView
from dl2_mesos.errors import InvalidAllocation
from dl2_mesos.jobs import JobPhase
from dl2_mesos.placement import place
from dl2_mesos.resources import Resources
from dl2_mesos.framework.records import JobRecord

logger = logging.getLogger("dl2_mesos.framework.core")


class SlotScheduling:
    """Slot decisions (mixin of SchedulerCore; see that class for the attributes used)."""

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
        self.resend_kills(now)
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
                measured_restart_seconds=self.restart_costs.seconds(j.spec.job_type),
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

