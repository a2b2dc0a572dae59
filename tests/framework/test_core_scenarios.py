"""Scenario tests through the scheduler core with a fake driver and fake offers."""

from __future__ import annotations

from dl2_mesos.jobs import JobPhase
from dl2_mesos.messages import LaunchSpec, RescaleReport, RescaleRequest, ProgressReport, decode_b64, encode_b64
from dl2_mesos.framework import events as ev
from dl2_mesos.framework.core import SchedulerCore

from .conftest import FakeDriver, Harness, ScriptedPolicy, make_offer, status


def _specs(driver: FakeDriver) -> list[LaunchSpec]:
    return [decode_b64(t["data"]) for t in driver.launched()]


def test_slot_launches_ps_and_worker_with_ports_and_launchspec(harness: Harness):
    h = harness
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    tasks = h.driver.launched()
    assert len(tasks) == 2
    roles = {decode_b64(t["data"]).role: t for t in tasks}
    ps, worker = roles["ps"], roles["worker"]
    names = lambda t: {r["name"] for r in t["resources"]}  # noqa: E731
    assert names(ps) == {"cpus", "mem", "ports"}  # resnet-50 PS has no GPU
    assert names(worker) == {"cpus", "mem", "gpus", "ports"}
    ps_ports = [r for r in ps["resources"] if r["name"] == "ports"][0]["ranges"]["range"]
    assert len(ps_ports) == 4  # two own ports + two MXNet scheduler ports, alternating by generation
    spec = decode_b64(worker["data"])
    assert spec.job_id == job.job_id and spec.cluster.generation == 0
    assert len(spec.cluster.servers) == 1 and len(spec.cluster.workers) == 1
    assert spec.cluster.scheduler is not None and spec.cluster.scheduler.port == ps_ports[2]["begin"]
    assert spec.cluster.servers[0].port == ps_ports[0]["begin"]
    w_ports = [r for r in worker["resources"] if r["name"] == "ports"][0]["ranges"]["range"]
    assert spec.cluster.workers[0].port == w_ports[0]["begin"] and len(w_ports) == 2
    assert len({p["begin"] for p in ps_ports + w_ports}) == 6
    assert worker["executor"]["command"]["value"] == "python -m dl2_mesos.executor"
    assert worker["executor"]["executor_id"] == ps["executor"]["executor_id"]  # one executor per job per agent
    assert all(r.get("role") == "*" for r in worker["resources"])
    # the job record was persisted before the launch
    stored = h.store.load_jobs()[job.job_id]
    assert len(stored.tasks) == 2 and stored.generation == 0
    # one ACCEPT for the agent's offers, leftover declined briefly
    (offer_ids, _, filters), = h.driver.named("launchTasks")
    assert filters["refuse_seconds"] <= 5


def test_running_updates_are_persisted_before_ack_and_job_runs(harness: Harness):
    h = harness
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    assert job.phase == JobPhase.RUNNING
    assert h.driver.acked_persisted == [True, True]


def test_no_jobs_declines_with_long_filter_and_suppresses(harness: Harness):
    h = harness
    h.register()
    h.offer(make_offer("a1"))
    h.tick()
    declines = h.driver.named("declineOffer")
    assert declines and declines[-1][1]["refuse_seconds"] >= 300
    assert h.driver.named("suppressOffers")
    h.driver.clear()
    h.submit()
    h.tick()
    assert h.driver.named("reviveOffers")


def test_rescale_grow_sends_request_to_continuing_executor_and_launches_new_worker():
    policy = ScriptedPolicy()
    h = Harness(policy)
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    h.driver.clear()
    policy.counts[0] = (1, 2)
    h.offer(make_offer("a1", cpus=3, gpus=1, mem=30000, ports=(32000, 32010)))
    h.next_slot()
    new = _specs(h.driver)
    assert [s.role for s in new] == ["worker"] and new[0].cluster.generation == 1 and new[0].rank == 1
    msgs = h.driver.named("sendFrameworkMessage")
    assert len(msgs) == 1
    req = decode_b64(msgs[0][2])
    assert isinstance(req, RescaleRequest) and req.cluster.generation == 1
    # continuing processes move to their other port: a restart never reuses the previous generation's
    old = job.tasks[req.cluster.servers[0].task_id]
    assert req.cluster.servers[0].port == old.ports[1] and req.cluster.scheduler.port == old.ports[3]
    assert {a[1] for a in req.assignments} == {"ps", "worker"}
    assert job.phase == JobPhase.RESCALING and job.rescales == 1
    # no report yet: re-sent after rescale_resend seconds
    h.driver.clear()
    h.tick(h.cfg.rescale_resend + 0.1)
    assert len(h.driver.named("sendFrameworkMessage")) == 1
    # report + new task running -> RUNNING
    ex_id, agent = msgs[0][0]["value"], msgs[0][1]["value"]
    rep = RescaleReport(job.job_id, "t", 1, True, (("stop", 0.1),))
    h.core.handle(ev.FrameworkMessage(ex_id, agent, encode_b64(rep)))
    h.run_all(job)
    assert job.phase == JobPhase.RUNNING and job.num_workers == 2
    h.driver.clear()
    h.tick(h.cfg.rescale_resend + 0.1)
    assert not h.driver.named("sendFrameworkMessage")


def test_rescale_shrink_kills_removed_task():
    policy = ScriptedPolicy(default=(1, 2))
    h = Harness(policy)
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    assert job.num_workers == 2
    h.driver.clear()
    policy.default = (1, 1)
    h.next_slot()
    kills = h.driver.named("killTask")
    assert len(kills) == 1
    killed = kills[0][0]["value"]
    assert job.tasks[killed].role == "worker" and job.tasks[killed].killing
    # the continuing executor hears of the rescale before the kill (it stops its workers, which
    # save the final checkpoint, while every server of the generation still serves)
    order = [n for n, _ in h.driver.calls if n in ("killTask", "sendFrameworkMessage")]
    assert order == ["sendFrameworkMessage", "killTask"]
    assert job.num_workers == 1 and job.phase == JobPhase.RESCALING
    h.core.handle(status(killed, "TASK_KILLED"))
    assert job.phase == JobPhase.RESCALING  # still waiting for the RescaleReport


def test_workers_finished_finishes_job_and_kills_ps(harness: Harness):
    h = harness
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    worker = job.live_tasks("worker")[0]
    ps = job.live_tasks("ps")[0]
    h.driver.clear()
    h.core.handle(status(worker.task_id, "TASK_FINISHED"))
    assert job.phase == JobPhase.FINISHED and job.epochs_done == job.spec.epochs
    assert [k[0]["value"] for k in h.driver.named("killTask")] == [ps.task_id]
    assert h.store.load_jobs()[job.job_id].phase == JobPhase.FINISHED


def _running_job(policy: ScriptedPolicy, epochs: float = 10):
    """A harness with one job of ``epochs`` placed and running on one agent."""
    h = Harness(policy)
    h.register()
    job = h.submit(epochs=epochs)
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    return h, job


def _two_workers_one_finished(finished_rank: int):
    h, job = _running_job(ScriptedPolicy(default=(1, 2)))
    by_rank = {t.rank: t for t in job.live_tasks("worker")}
    assert job.cluster.workers[0].task_id == by_rank[0].task_id  # rank 0 saves the checkpoints
    done, other = by_rank[finished_rank], by_rank[1 - finished_rank]
    ps = job.live_tasks("ps")[0]
    msg = ProgressReport(job.job_id, done.task_id, 0, 6.0, 100, 100.0, timestamp=h.clock.t)
    h.core.handle(ev.FrameworkMessage(done.executor_id, done.agent_id, encode_b64(msg)))
    h.driver.clear()
    h.core.handle(status(done.task_id, "TASK_FINISHED"))
    return h, job, done, other, ps


def test_a_job_whose_first_worker_finished_is_not_replaced_while_the_checkpoint_writer_reports():
    """After a master restart the finished statuses of a job's workers come one by one, and the
    outage dropped the last progress reports. The first one means training is over: no slot may
    re-place the finished worker as missing (one did, and the job ran again from its final
    checkpoint), and the job finishes when worker rank 0 has reported (its executor reports only
    once the final checkpoint is stored)."""
    h, job, done, writer, ps = _two_workers_one_finished(finished_rank=1)
    assert job.epochs_done == job.spec.epochs and job.phase == JobPhase.RUNNING
    assert not h.driver.named("killTask")
    h.offer(make_offer("a1"))
    h.next_slot()
    assert not h.driver.launched() and not h.driver.named("killTask") and job.phase == JobPhase.RUNNING
    h.core.handle(status(writer.task_id, "TASK_FINISHED"))
    assert job.phase == JobPhase.FINISHED
    assert [k[0]["value"] for k in h.driver.named("killTask")] == [ps.task_id]


def test_the_checkpoint_writers_finished_status_ends_the_job_at_once():
    """Rank 0 finished: the final checkpoint is stored. Another worker may never report (one
    launched by a grow whose request came after training ended waits for ended peers)."""
    h, job, writer, other, ps = _two_workers_one_finished(finished_rank=0)
    assert job.phase == JobPhase.FINISHED and job.epochs_done == job.spec.epochs
    assert sorted(k[0]["value"] for k in h.driver.named("killTask")) == sorted([other.task_id, ps.task_id])


def test_a_worker_lost_after_another_finished_restarts_the_job_instead_of_waiting_for_ever():
    h, job, done, writer, ps = _two_workers_one_finished(finished_rank=1)
    h.core.handle(status(writer.task_id, "TASK_LOST"))
    assert job.phase == JobPhase.PENDING and job.cluster is None
    assert [k[0]["value"] for k in h.driver.named("killTask")] == [ps.task_id]
    h.offer(make_offer("a1"))
    h.next_slot()
    assert len(h.driver.launched()) == 3  # relaunched from its checkpoint, then it finishes


def test_lost_kill_of_finished_jobs_ps_is_sent_again(harness: Harness):
    """A PS whose kill got lost would outlive its finished job (holding its port): the kill is
    re-sent after a grace period until the task reports a terminal state, and then no more."""
    h = harness
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    worker = job.live_tasks("worker")[0]
    ps = job.live_tasks("ps")[0]
    h.core.handle(status(worker.task_id, "TASK_FINISHED"))
    h.driver.clear()
    h.core.handle(status(ps.task_id, "TASK_RUNNING"))  # still running after the kill
    h.tick(1.5)
    assert h.driver.named("killTask") == []  # within the grace: no second kill yet
    h.tick(2 * h.cfg.kill_grace + 5.0)
    assert [k[0]["value"] for k in h.driver.named("killTask")] == [ps.task_id]
    h.core.handle(status(ps.task_id, "TASK_KILLED"))
    h.driver.clear()
    h.tick(2 * h.cfg.kill_grace + 5.0)
    assert h.driver.named("killTask") == []


def test_progress_reports_feed_the_next_snapshot(harness: Harness):
    h = harness
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    w = job.live_tasks("worker")[0]
    t0 = h.clock.t
    for k, e in enumerate((1.0, 2.0, 3.0)):
        msg = ProgressReport(job.job_id, w.task_id, 1, e, 10 * (k + 1), 50.0, timestamp=t0 + 10 * k)
        h.core.handle(ev.FrameworkMessage(w.executor_id, w.agent_id, encode_b64(msg)))
    h.core.handle(ev.FrameworkMessage(w.executor_id, w.agent_id, "bm90IGpzb24="))  # garbage is dropped
    assert job.epochs_done == 3.0
    assert abs(job.measured_eps - 0.1) < 1e-9
    h.next_slot()
    view = h.policy.states[-1].job(job.job_id)
    assert view.epochs_done == 3.0 and abs(view.measured_epochs_per_second - 0.1) < 1e-9


def test_lost_task_is_rescheduled(harness: Harness):
    h = harness
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"), make_offer("a2"))
    h.tick()
    h.run_all(job)
    worker = job.live_tasks("worker")[0]
    h.driver.clear()
    h.offer(make_offer("a2"))
    h.core.handle(status(worker.task_id, "TASK_LOST", worker.agent_id))
    launched = _specs(h.driver)
    assert [s.role for s in launched] == ["worker"] and launched[0].cluster.generation == 1
    assert job.num_workers == 1 and job.phase == JobPhase.RESCALING


def test_agent_lost_reschedules_its_tasks():
    h = Harness(ScriptedPolicy())
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    h.driver.clear()
    h.offer(make_offer("a2"))
    h.core.handle(ev.AgentLost("a1"))
    assert {s.role for s in _specs(h.driver)} == {"ps", "worker"}
    assert all(t.agent_id == "a2" for t in job.live_tasks())


def test_repeated_failures_fail_the_job():
    h = Harness(ScriptedPolicy())
    h.register()
    job = h.submit()
    for _ in range(h.cfg.max_task_failures + 1):
        h.offer(make_offer("a1"))
        h.next_slot()
        w = job.live_tasks("worker")[0]
        h.core.handle(status(w.task_id, "TASK_FAILED", message="exit 1"))
    assert job.phase == JobPhase.FAILED
    assert job.restart_count >= 1


def test_waits_for_missing_offer_then_replans_after_timeout():
    policy = ScriptedPolicy()
    h = Harness(policy)
    h.register()
    h.submit()
    h.offer(make_offer("a1", cpus=1, gpus=0, mem=8000))  # fits only the PS
    h.tick(h.cfg.offer_wait)
    # placement could only grant a job with a worker nowhere: nothing launched
    assert not h.driver.launched()
    h.offer(make_offer("a2"))
    h.next_slot()
    assert len(h.driver.launched()) == 2


def test_transition_waiting_for_offer_launches_when_it_arrives():
    policy = ScriptedPolicy()
    h = Harness(policy)
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    # a2 offers, slot decides to grow onto it, but the offer is rescinded before launch
    policy.counts[0] = (2, 4)
    o = make_offer("a2")
    h.offer(o)
    h.core.handle(ev.OfferRescinded(o["id"]["value"]))
    h.driver.clear()
    h.next_slot()
    # only a1's resources are known now (no a1 offer either): nothing to place
    assert not h.driver.launched()
    # a plan waiting for an agent whose offer is gone: launches when one arrives
    from dl2_mesos.placement import PlannedTask
    from dl2_mesos.framework.transitions import Transition
    from dl2_mesos.allocation import JobAllocation
    h.core.transitions[job.job_id] = Transition(job.job_id, (), (PlannedTask(job.job_id, "worker", "a3", job.spec.worker),),
                                                JobAllocation(1, 2), h.clock.t)
    h.offer(make_offer("a4"))
    assert not h.driver.launched()
    h.offer(make_offer("a3"))
    assert [t["agent_id"]["value"] for t in h.driver.launched()] == ["a3"]
    # and a transition that never gets its offer is re-planned after launch_timeout
    h.core.transitions[job.job_id] = Transition(job.job_id, (), (PlannedTask(job.job_id, "worker", "a9", job.spec.worker),),
                                                JobAllocation(1, 3), h.clock.t)
    h.core.intended[job.job_id] = JobAllocation(1, 3)
    h.driver.clear()
    h.offer(make_offer("a4"))
    h.tick(h.cfg.launch_timeout + 0.1)
    # re-planned against the offer in hand (a4) instead of the one that never came (a9)
    assert [t["agent_id"]["value"] for t in h.driver.launched()] == ["a4"]
    assert job.num_workers == 3 and job.job_id not in h.core.transitions


def test_cancel_kills_tasks(harness: Harness):
    h = harness
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    h.core.handle(ev.CancelJob(job.job_id))
    assert job.phase == JobPhase.CANCELLED
    assert len(h.driver.named("killTask")) == 2


def test_unknown_task_update_is_killed_and_acked(harness: Harness):
    h = harness
    h.register()
    h.core.handle(status("stranger", "TASK_RUNNING"))
    assert h.driver.named("killTask")[0][0]["value"] == "stranger"
    assert h.driver.named("acknowledgeStatusUpdate")


def test_failover_restores_jobs_framework_id_and_reconciles(harness: Harness):
    h = harness
    h.register("fw-42")
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    # a new leader on the same store
    core2 = SchedulerCore(h.cfg, ScriptedPolicy(), h.store.__class__(h.kv), clock=h.clock)
    core2.restore()
    assert core2.framework_id == "fw-42"
    assert core2.jobs[job.job_id].phase == JobPhase.RUNNING and core2.jobs[job.job_id].num_workers == 1
    d2 = FakeDriver()
    core2.handle(ev.Registered(d2, "fw-42", "m:5050", True))
    explicit = [a[0] for a in d2.named("reconcileTasks") if a[0]]
    assert {t["task_id"]["value"] for t in explicit[0]} == set(job.tasks)
    assert [] in [a[0] for a in d2.named("reconcileTasks")]
    # the old leader is fenced: its next write fails
    import pytest
    from dl2_mesos.framework.kv import StaleVersion
    h.core.dirty(job)
    with pytest.raises(StaleVersion):
        h.core.flush()


def test_policy_failure_keeps_current_counts():
    class Broken:
        name = "broken"

        def decide(self, state):
            raise RuntimeError("boom")

    h = Harness(Broken())
    h.register()
    h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    assert h.core.metrics.decision_errors._value.get() == 1
    assert not h.driver.launched()


def test_preempted_job_goes_back_to_pending():
    policy = ScriptedPolicy()
    h = Harness(policy)
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    policy.counts[0] = (0, 0)
    h.next_slot()
    assert job.phase == JobPhase.PENDING and job.num_workers == 0
    assert len(h.driver.named("killTask")) == 2


def _pause_after_progress(epochs_reported: float):
    policy = ScriptedPolicy()
    h, job = _running_job(policy)
    w = job.live_tasks("worker")[0]
    msg = ProgressReport(job.job_id, w.task_id, 0, epochs_reported, 100, 100.0, timestamp=h.clock.t)
    h.core.handle(ev.FrameworkMessage(w.executor_id, w.agent_id, encode_b64(msg)))
    policy.counts[0] = (0, 0)  # the policy pauses the job while its last epoch ends
    h.next_slot()
    assert w.killing
    return h, job, w


def test_worker_that_finished_its_last_epoch_while_being_paused_finishes_the_job():
    h, job, w = _pause_after_progress(10.0)
    h.core.handle(status(w.task_id, "TASK_FINISHED"))
    assert job.phase == JobPhase.FINISHED and job.epochs_done == job.spec.epochs
    assert h.store.load_jobs()[job.job_id].phase == JobPhase.FINISHED


def test_finished_status_of_a_stopped_worker_short_of_its_epochs_does_not_finish_the_job():
    h, job, w = _pause_after_progress(4.0)
    h.core.handle(status(w.task_id, "TASK_FINISHED"))
    assert job.phase == JobPhase.PENDING and job.epochs_done == 4.0


def test_suspended_zookeeper_stops_deciding_and_declines():
    h = Harness(ScriptedPolicy())
    h.register()
    h.submit()
    h.core.handle(ev.Leadership("suspended"))
    h.offer(make_offer("a1"))
    h.tick(5)
    assert not h.driver.launched() and h.core.last_slot == -1
    assert h.driver.named("declineOffer")[-1][1]["refuse_seconds"] <= 5
    h.driver.clear()
    h.core.handle(ev.Leadership("resumed"))
    h.tick()
    assert h.driver.named("reviveOffers")
    h.offer(make_offer("a1"))
    h.tick()
    assert len(h.driver.launched()) == 2


def test_unreachable_task_is_killed_and_replaced():
    h = Harness(ScriptedPolicy())
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"), make_offer("a2"))
    h.tick()
    h.run_all(job)
    w = job.live_tasks("worker")[0]
    h.driver.clear()
    h.offer(make_offer("a2"))
    h.core.handle(status(w.task_id, "TASK_UNREACHABLE", w.agent_id))
    assert h.driver.named("killTask")[0][0]["value"] == w.task_id
    assert [decode_b64(t["data"]).role for t in h.driver.launched()] == ["worker"]
    assert job.num_workers == 1


def test_rescale_report_failure_restarts_job():
    policy = ScriptedPolicy()
    h = Harness(policy)
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    policy.counts[0] = (1, 2)
    h.offer(make_offer("a1"))
    h.next_slot()
    (ex, agent, _), = h.driver.named("sendFrameworkMessage")
    rep = RescaleReport(job.job_id, "t", job.generation, False, (), "checkpoint upload failed")
    h.core.handle(ev.FrameworkMessage(ex["value"], agent["value"], encode_b64(rep)))
    assert job.phase == JobPhase.PENDING and job.failures == 1 and job.num_workers == 0
    assert "checkpoint upload failed" in job.message


def test_view_and_snapshot_are_consistent(harness: Harness):
    h = harness
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    v = h.core.view()
    assert v["jobs"][job.job_id]["num_workers"] == 1
    assert v["cluster"]["allocations"][job.job_id] == {"num_ps": 1, "num_workers": 1}
    assert v["cluster"]["last_decision"]["granted"][job.job_id] == [1, 1]
    state = h.core.snapshot(5, h.clock.t)
    assert {t.job_id for t in state.tasks} == {job.job_id} and len(state.tasks) == 2


def test_job_still_starting_is_not_rescaled():
    policy = ScriptedPolicy()
    h = Harness(policy)
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    policy.counts[0] = (1, 2)
    h.offer(make_offer("a1"))
    h.next_slot()  # tasks not running yet: counts kept
    assert job.generation == 0 and job.num_workers == 1
    h.run_all(job)
    h.offer(make_offer("a1"))
    h.next_slot()
    assert job.generation == 1 and job.num_workers == 2


def test_rescale_bookkeeping_follows_the_simulators_rule():
    """slots_since_rescale and rescales are booked at each decision by the simulator's rule
    (dl2_mesos.slot_accounting.account_counts), not when the launch happens."""
    policy = ScriptedPolicy()
    h = Harness(policy)
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()  # slot 0: launched (free)
    h.run_all(job)
    for _ in range(2):  # slots 1 and 2: unchanged
        h.offer(make_offer("a1", cpus=3, gpus=1, mem=30000, ports=(32000, 32010)))
        h.next_slot()
    seen = [(s.slot, s.jobs[0].slots_since_rescale, s.jobs[0].rescales) for s in policy.states]
    assert seen == [(0, 0, 0), (1, 1, 0), (2, 2, 0)]
    policy.counts[0] = (1, 2)
    h.offer(make_offer("a1", cpus=3, gpus=1, mem=30000, ports=(32000, 32010)))
    h.next_slot()  # slot 3: grown -> one rescale, the clock restarts
    assert job.rescales == 1 and job.ledger.last_change_slot == 3
    h.next_slot()
    assert (policy.states[-1].jobs[0].slots_since_rescale, policy.states[-1].jobs[0].rescales) == (1, 1)
    # the ledger is stored with the job
    assert h.store.load_jobs()[job.job_id].ledger == job.ledger


def test_a_job_submitted_after_the_slots_decision_arrives_in_the_next_slot():
    policy = ScriptedPolicy()
    h = Harness(policy)
    h.register()
    h.offer(make_offer("a1"))
    h.tick()  # slot 0 decided (no job)
    h.clock.advance(h.cfg.slot / 2)
    job = h.submit()
    assert job.arrival_slot == 1  # as the simulator: first seen by slot 1's decision
    h.offer(make_offer("a1"))
    h.next_slot()
    assert policy.states[-1].slot == 1 and policy.states[-1].jobs[0].slots_run == 0
