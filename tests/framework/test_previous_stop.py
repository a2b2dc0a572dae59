"""The framework tells each new generation how its predecessor ended (``LaunchSpec.previous_stop``):
``graceful`` in a rescale (wait for the final checkpoint), ``crashed`` after a task failed or was
lost (restore the newest checkpoint at once), ``none`` when nothing of the job runs any more."""

from __future__ import annotations

from dl2_mesos.framework import events as ev
from dl2_mesos.framework.records import FrameworkJob
from dl2_mesos.framework.transitions import previous_stop
from dl2_mesos.messages import LaunchSpec, RescaleRequest, decode_b64

from .conftest import Harness, ScriptedPolicy, make_offer, status


def _specs(h: Harness) -> list[LaunchSpec]:
    return [decode_b64(t["data"]) for t in h.driver.launched()]


def _running_job(policy: ScriptedPolicy) -> tuple[Harness, object]:
    h = Harness(policy)
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    assert {s.previous_stop for s in _specs(h)} == {"none"}  # generation 0: nothing before it
    h.driver.clear()
    return h, job


def test_rescale_tells_new_and_continuing_tasks_the_predecessor_stops_gracefully():
    policy = ScriptedPolicy()
    h, job = _running_job(policy)
    policy.counts[0] = (1, 2)
    h.offer(make_offer("a1", cpus=3, gpus=1, mem=30000, ports=(32000, 32010)))
    h.next_slot()
    (new,) = _specs(h)
    assert new.cluster.generation == 1 and new.previous_stop == "graceful" and new.waits_for_final
    req = decode_b64(h.driver.named("sendFrameworkMessage")[0][2])
    assert isinstance(req, RescaleRequest) and req.previous_stop == "graceful"


def test_relaunch_after_a_failed_task_says_crashed_once():
    h, job = _running_job(ScriptedPolicy())
    w = job.live_tasks("worker")[0]
    h.core.handle(status(w.task_id, "TASK_FAILED", message="executor SIGKILLed"))
    h.offer(make_offer("a1", ports=(33000, 33010)))
    h.next_slot()
    specs = _specs(h)
    assert specs and {s.previous_stop for s in specs} == {"crashed"}
    assert not any(s.waits_for_final for s in specs)
    # the crash is noted: the next rescale of the relaunched generation is graceful again
    h.run_all(job)
    assert previous_stop(job) == "graceful"
    # and the note survives a leader failover (it is in the stored record)
    assert FrameworkJob.from_dict(job.to_dict()).previous_stop == job.previous_stop
    assert all(t.crash_noted for t in FrameworkJob.from_dict(job.to_dict()).tasks.values() if t.crashed)


def test_tasks_lost_with_their_agent_are_a_crash_for_the_replacement_generation():
    h = Harness(ScriptedPolicy())
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    h.offer(make_offer("a2"))
    h.driver.clear()
    h.core.handle(ev.AgentLost("a1"))
    specs = _specs(h)
    assert specs and {s.previous_stop for s in specs} == {"crashed"}


def test_decision_from_the_job_record():
    h, job = _running_job(ScriptedPolicy())
    assert previous_stop(job) == "graceful"  # live workers: they stop on request and save
    for t in job.tasks.values():
        t.killing, t.state = True, "TASK_KILLED"  # preempted by the framework, all ended
    assert previous_stop(job) == "none"
    old = job.to_dict()
    old.pop("previous_stop")
    for t in old["tasks"].values():
        t.pop("crash_noted")
    assert FrameworkJob.from_dict(old).previous_stop == "none"  # records written before the field still load
    t = next(iter(job.tasks.values()))
    t.killing = False  # TASK_KILLED, but not by the framework
    assert previous_stop(job) == "crashed" and previous_stop(job) == "none"
