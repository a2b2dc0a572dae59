"""One job validation (JobSpec) for the API, the state store and the simulator: PyTorch and other
workers-only jobs (max_ps 0) survive a restart and a failover; the validation quirks are closed
(issue 14, items 7, 16, 2)."""

from __future__ import annotations

import pytest

from dl2_mesos.errors import InvalidJobSpec
from dl2_mesos.framework.state_store import StateStore
from dl2_mesos.jobs import JobSpec
from dl2_mesos.resources import Resources

from ..framework.conftest import Harness, ScriptedPolicy, make_offer, status
from ..framework.test_state_store import kv_factory  # noqa: F401 - memory, file and ZooKeeper
from .api_helpers import AUTH, api

def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


PYTORCH = {"job_type": "resnet-50", "epochs": 2, "runtime": "pytorch", "name": "torch",
           "worker": {"cpus": 1, "gpus": 0, "mem": 256}, "max_workers": 2}


def test_a_pytorch_job_survives_a_restart_and_a_failover(kv_factory):  # noqa: F811
    c, first = api(Harness(ScriptedPolicy(default=(0, 1)), kv=kv_factory()), api_token="write-s3cret")
    r = c.post("/api/v1/jobs", json=PYTORCH, headers=AUTH)
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    assert r.json()["spec"]["max_ps"] == 0
    first.register()
    first.offer(make_offer("a1"))
    first.next_slot()
    job = first.core.jobs[job_id]
    first.run_all(job)
    assert job.phase.value == "running" and job.num_ps == 0 and job.num_workers >= 1
    # a new leader on the same store (a restart, or a failover to another replica): it used to
    # refuse the record ("max_ps must be between max(min_ps, 1) and 1000"), kill the task as
    # unknown and answer 404
    c2, second = api(Harness(kv=kv_factory()), api_token="write-s3cret")
    assert job_id in second.core.jobs and not second.store.quarantined
    second.register()
    for t in job.tasks.values():
        second.core.handle(status(t.task_id, "TASK_RUNNING", t.agent_id))
    assert not second.driver.named("killTask")
    got = c2.get(f"/api/v1/jobs/{job_id}", headers=AUTH)
    assert got.status_code == 200 and got.json()["phase"] == "running" and got.json()["spec"]["runtime"] == "pytorch"


def test_workers_only_jobs_are_valid_everywhere_and_round_trip():
    from dl2_mesos.framework.records import FrameworkJob
    from dl2_mesos.policy.sim.trace import TraceJob, parse_trace, trace_to_csv

    specs = [JobSpec(job_type="vgg-16", epochs=3, runtime="pytorch"),
             JobSpec(job_type="vgg-16", epochs=3, min_ps=0, max_ps=0),
             JobSpec(job_type="vgg-16", epochs=3, min_ps=0, max_ps=0, ps=Resources())]
    for spec in specs:
        assert not spec.uses_ps and spec.max_ps == 0
        assert JobSpec.from_dict(spec.to_dict()) == spec  # API form
        h = Harness()
        job = h.core.submit(spec)
        assert StateStore(h.kv).load_jobs()[job.job_id].spec == spec  # store form
        assert FrameworkJob.from_dict(job.to_dict()).spec == spec
    trace = [TraceJob(f"job-{i}", float(i), s) for i, s in enumerate(specs)]  # simulator form
    assert [j.spec for j in parse_trace(trace_to_csv(trace))] == specs


@pytest.mark.parametrize("kw,field", [
    ({"job_type": "3"}, "job_type"),
    ({"job_type": 3}, "job_type"),
    ({"job_type": "Resnet-50"}, "job_type"),
    ({"priority": int("9" * 4000)}, "priority"),
    ({"priority": -10 ** 7}, "priority"),
    ({"epochs": 10 ** 400}, "epochs"),
    ({"epochs": 1e7}, "epochs"),
    ({"restart_seconds": 10 ** 400}, "restart_seconds"),
    ({"max_workers": 10 ** 30}, "max_workers"),
    ({"ps": Resources(0, 0, 0)}, "ps"),
    ({"ps": Resources(1e300, 0, 0)}, "ps.cpus"),
    ({"worker": Resources(1, 0, 1e12)}, "worker.mem"),
    ({"min_ps": 0, "max_ps": 4}, "min_ps"),
    ({"min_ps": 2, "max_ps": 0}, "max_ps"),
    ({"min_workers": 5, "max_workers": 4}, "max_workers"),
    ({"extra": {"a": _nested(40)}}, "extra"),
    ({"extra": {"x": "y" * 20000}}, "extra"),
    ({"extra": {"x": float("nan")}}, "extra"),
    ({"extra": {"x": {1, 2}}}, "extra"),
    ({"command": ["ok", "\ud800"]}, "command"),
    ({"command": ["a"] * 1001}, "command"),
    ({"name": "caf\u00e9"}, "name"),
])
def test_validation_quirks_are_refused(kw, field):
    with pytest.raises(InvalidJobSpec) as ei:
        JobSpec(**{"job_type": "vgg-16", "epochs": 3, **kw})
    assert ei.value.field == field, ei.value
    assert len(str(ei.value)) < 400  # a 4000-digit number is not echoed back


def test_the_api_refuses_the_quirks_too():
    c, h = api()
    cases = [({"job_type": "3", "epochs": 1}, 422, "job_type"),
             ({"job_type": "resnet-50", "epochs": 1, "ps": {"cpus": 0, "gpus": 0, "mem": 0}}, 422, "ps")]
    for body, code, field in cases:
        r = c.post("/api/v1/jobs", json=body)
        assert r.status_code == code and r.json()["field"] == field, r.text
    r = c.post("/api/v1/jobs", content=b'{"job_type": "resnet-50", "job_type": "vgg-16", "epochs": 1}',
               headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "duplicate" in r.json()["error"]
    r = c.post("/api/v1/jobs", content=b'{"job_type": "resnet-50", "epochs": 1, "priority": ' + b"7" * 4000 + b"}",
               headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["field"] == "priority"
    assert not h.core.jobs
    # a PyTorch job may leave its (unused) PS demand at zero
    ok = c.post("/api/v1/jobs", json={**PYTORCH, "ps": {"cpus": 0, "gpus": 0, "mem": 0}})
    assert ok.status_code == 201, ok.text
