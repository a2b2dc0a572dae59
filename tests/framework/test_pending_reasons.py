"""Why a job is pending (per case, through the scheduler core), the cluster's capacity from the
master's agent list, and the 422 for a job no known agent could ever hold one task of (hostile and
odd input too)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from dl2_mesos.framework import events as ev
from dl2_mesos.framework.api import create_app
from dl2_mesos.framework.cluster_capacity import AgentCapacity, CapacityBook, unfit_reason
from dl2_mesos.framework.master_inventory import MasterInventory, parse_agents
from dl2_mesos.framework.pending_reasons import pending_reason
from dl2_mesos.framework.transitions import Transition
from dl2_mesos.jobs import JobSpec
from dl2_mesos.placement import PlannedTask
from dl2_mesos.allocation import JobAllocation
from dl2_mesos.resources import Resources

from .conftest import Harness, ScriptedPolicy, make_offer, status

TINY = {"worker": Resources(1, 0, 256), "ps": Resources(1, 0, 256)}


def _reason(h: Harness, job_id: str) -> dict:
    return h.core.view()["jobs"][job_id]["pending_reason"]


# -- per case, through the core ---------------------------------------------------------------
def test_not_registered_then_no_agent_known():
    h = Harness()
    job = h.submit()
    assert _reason(h, job.job_id)["code"] == "not_registered"
    h.register()
    r = _reason(h, job.job_id)
    assert r["code"] == "no_agents" and "no agent" in r["message"]


def test_held_back_by_the_policy_names_the_slot():
    policy = ScriptedPolicy()
    policy.counts[1] = (0, 0)
    h = Harness(policy)
    h.register()
    a = h.submit(**TINY)
    h.clock.advance(1)  # arrival order decides which job is the policy's second
    b = h.submit(**TINY)
    h.offer(make_offer("a1"))
    h.next_slot()
    assert h.core.view()["jobs"][a.job_id]["pending_reason"]["code"] == "starting"  # launched, not running yet
    h.run_all(a)
    view = h.core.view()
    assert view["jobs"][a.job_id]["pending_reason"] is None  # running
    r = view["jobs"][b.job_id]["pending_reason"]
    assert r["code"] == "held_by_policy"
    assert f"slot {h.core.last_slot}" in r["message"] and "1 other job" in r["message"]


def test_waiting_for_capacity_says_what_it_needs_and_what_is_free():
    h = Harness(ScriptedPolicy(default=(1, 1)))
    h.register()
    a = h.submit()  # resnet-50: a worker needs 2 cpus, 1 gpu, 8 GiB; a PS 2 cpus, 4 GiB
    h.clock.advance(1)
    b = h.submit()
    # 8 cpus and 2 gpus in all (the allocation is valid), but after a's PS and worker on a1 no agent
    # has both a cpu and a gpu free for b's worker
    h.offer(make_offer("a1", cpus=4, gpus=2, mem=40000), make_offer("a2", cpus=4, gpus=0, mem=40000))
    h.next_slot()
    h.run_all(a)
    r = _reason(h, b.job_id)
    assert r["code"] == "waiting_for_capacity", r
    assert "a worker needs 2 cpus, 1 gpu, 8 GiB" in r["message"] and "free at once" in r["message"]
    assert "most free on one agent: 4 cpus, 1 gpu" in r["message"], r["message"]


def test_cannot_reach_its_minimum_workers():
    h = Harness(ScriptedPolicy(default=(1, 2)))
    h.register()
    job = h.submit(min_workers=2, max_workers=2, worker=Resources(1, 1, 256), ps=Resources(1, 0, 256))
    # 4 cpus and 2 gpus in all; a PS and one worker fit on a1, the second worker fits nowhere
    h.offer(make_offer("a1", cpus=2, gpus=2, mem=8000), make_offer("a2", cpus=2, gpus=0, mem=8000))
    h.next_slot()
    r = _reason(h, job.job_id)
    assert r["code"] == "below_minimum", r
    assert "only 1 worker of" in r["message"] and "at least 2" in r["message"]


def test_its_agent_was_lost():
    h = Harness(ScriptedPolicy(default=(1, 1)))
    h.register()
    job = h.submit(**TINY)
    h.offer(make_offer("a1", hostname="gpu-box-7"))
    h.next_slot()
    h.run_all(job)
    tasks = [t.task_id for t in job.live_tasks()]
    h.clock.advance(2)
    h.core.handle(ev.AgentLost("a1"))
    for tid in tasks:
        h.core.handle(status(tid, "TASK_LOST", "a1", uuid=f"u-{tid}"))
    view = h.core.view()
    assert view["jobs"][job.job_id]["phase"] == "pending"
    r = view["jobs"][job.job_id]["pending_reason"]
    assert r["code"] == "agent_lost" and "gpu-box-7" in r["message"], r
    lost = view["cluster"]["capacity"]["lost_agents"]
    assert lost and lost[0]["hostname"] == "gpu-box-7" and lost[0]["jobs"] == [job.job_id]


def test_a_job_no_known_agent_can_hold_waits_with_that_reason():
    h = Harness()
    h.register()
    h.offer(make_offer("a1", cpus=8, gpus=0))
    job = h.submit()  # accepted through the core (the API refuses it, see below): a worker needs a GPU
    r = _reason(h, job.job_id)
    assert r["code"] == "fits_no_agent" and r["short"] == "fits no agent (gpus)"
    assert "as far as offers show" in r["message"]  # only seen in offers: a lower bound
    h.core.handle(ev.AgentInventory("m:5050", (AgentCapacity("a1", "a1.host", Resources(8, 0, 49152)),), ""))
    r = _reason(h, job.job_id)
    assert r["code"] == "fits_no_agent" and "as far as offers show" not in r["message"]


def test_submitted_after_the_decision_waits_for_the_next_slot():
    h = Harness(ScriptedPolicy(default=(1, 1)))
    h.register()
    h.offer(make_offer("a1"))
    h.next_slot()
    job = h.submit(**TINY)
    assert _reason(h, job.job_id)["code"] == "waiting_for_slot"


def _job(**kw) -> dict:
    out = {"id": "j1", "phase": "pending", "tasks": [], "submitted_at": 100.0, "phase_times": {"pending": 100.0},
           "message": "", "generation": 0}
    out.update(kw)
    return out


def test_starting_placed_requeued_reasons():
    cluster = {"registered": True, "last_decision": {"at": 200.0, "waiting": {}}, "slot_seconds": 10}
    kw = {"cluster": cluster, "unfit": None, "agents_known": True, "lost": {}, "now": 210.0}
    tasks = [{"task_id": "j1.ps.1", "state": "TASK_RUNNING"}, {"task_id": "j1.worker.2", "state": "TASK_STAGING"}]
    r = pending_reason(_job(tasks=tasks), transition=None, **kw)
    assert r["code"] == "starting" and r["short"] == "starting: 1/2 tasks running"
    tr = Transition("j1", (), (PlannedTask("j1", "worker", "a9", Resources(1, 0, 1)),), JobAllocation(0, 1), 205.0,
                    reason="slot 3")
    r = pending_reason(_job(), transition=tr, **kw)
    assert r["code"] == "waiting_for_offers" and "a9" in r["message"]
    r = pending_reason(_job(phase_times={"pending": 205.0}, message="task j1.worker.2 TASK_FAILED: oom"),
                       transition=None, **kw)
    assert r["code"] == "requeued" and "TASK_FAILED: oom" in r["message"]
    assert pending_reason(_job(phase="running"), transition=None, **kw) is None
    assert pending_reason(_job(), transition=None, **{**kw, "cluster": {**cluster, "suspended": True}})["code"] == "suspended"


# -- capacity from the master -------------------------------------------------------------------
SLAVES = {"slaves": [
    {"id": "s1", "hostname": "h1", "resources": {"cpus": 8, "gpus": 2, "mem": 49152, "disk": 1, "ports": "[1-2]"},
     "used_resources": {"cpus": 3, "mem": 100}, "offered_resources": {"cpus": 5}, "active": True},
    {"id": "s2", "hostname": "h2", "resources": {"cpus": 16, "gpus": 0, "mem": 65536}, "active": True},
    {"id": "s3", "hostname": "gone", "resources": {"cpus": 99}, "active": False},
    {"id": 5, "hostname": "bad id"}, "not an object",
    {"id": "s4", "hostname": "odd", "resources": {"cpus": "lots", "gpus": -3, "mem": True}},
]}


def test_master_agent_list_is_parsed_and_is_the_capacity():
    agents = parse_agents(SLAVES)
    assert [a.agent_id for a in agents] == ["s1", "s2", "s3", "s4"]
    assert agents[0].total == Resources(8, 2, 49152) and agents[0].used == Resources(3, 0, 100)
    assert agents[3].total == Resources()  # nonsense numbers count as nothing
    with pytest.raises(ValueError):
        parse_agents({"frameworks": []})
    book = CapacityBook()
    book.observe("s1", "h1", Resources(2, 0, 10), Resources(1, 0, 10))  # seen in offers: a lower bound
    assert book.snapshot()["source"] == "offers" and book.snapshot()["total"]["cpus"] == 3
    book.master_agents(agents, "m:5050", 123.0)
    snap = book.snapshot()
    assert snap["source"] == "master" and snap["total"]["cpus"] == 24  # s3 is inactive
    assert snap["used_all_frameworks"]["cpus"] == 3


def test_inventory_thread_reports_failures_as_events():
    got = []
    inv = MasterInventory(lambda: "127.0.0.1:9", got.append, interval=0.1)  # nothing listens on port 9
    inv.poll_once()
    assert got and got[0].agents is None and got[0].error
    h = Harness()
    h.core.handle(got[0])
    assert h.core.view()["cluster"]["capacity"]["master_error"]
    h.core.handle(ev.AgentInventory("m:5050", tuple(parse_agents(SLAVES)), ""))
    assert h.core.view()["cluster"]["capacity"]["total"]["cpus"] == 24


# -- 422 at submit --------------------------------------------------------------------------------
class _Backend:
    def __init__(self, agents: list[AgentCapacity] | None, overhead: float = 0.0) -> None:
        book = CapacityBook()
        if agents:
            book.master_agents(agents, "m:5050", 1.0)
        self.cluster = {"capacity": book.snapshot(), "executor_overhead": {"cpus": overhead, "mem": 0}}
        self.submitted: list[JobSpec] = []

    def view(self):
        return {"jobs": {}, "cluster": self.cluster, "policy": {}}

    def is_leader(self):
        return True

    def leader_url(self):
        return None

    def submit(self, spec, idempotency_key=""):
        self.submitted.append(spec)
        return {"id": f"j{len(self.submitted)}", "phase": "pending"}

    def health(self):
        return {"role": "leader"}


CPU_ONLY = [AgentCapacity("a1", "small", Resources(8, 0, 16384)), AgentCapacity("a2", "big", Resources(24, 0, 65536))]


def test_submit_refuses_a_job_no_known_agent_could_hold():
    backend = _Backend(CPU_ONLY)
    c = TestClient(create_app(backend))
    r = c.post("/api/v1/jobs", json={"job_type": "cnn-text-classification", "epochs": 1,
                                     "worker": {"cpus": 2, "gpus": 99, "mem": 1024}})
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["field"] == "worker.gpus" and body["resource"] == "gpus" and body["rule"] == "fits no agent"
    assert "99 gpus" in body["error"] and "largest agent" in body["error"] and "0 gpus" in body["error"]
    # resnet-50 on CPU-only agents (what dl2 local-cluster had by default): refused, naming the GPU
    r = c.post("/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 1})
    assert r.status_code == 422 and r.json()["resource"] == "gpus"
    # too many cpus: the largest agent is named
    r = c.post("/api/v1/jobs", json={"job_type": "dssm", "epochs": 1, "worker": {"cpus": 32, "mem": 10}})
    assert r.status_code == 422 and "big has 24 cpus" in r.json()["error"]
    assert r.json()["largest_agent"]["hostname"] == "big"
    # its minimum cannot fit the whole cluster
    r = c.post("/api/v1/jobs", json={"job_type": "dssm", "epochs": 1, "min_workers": 20, "max_workers": 20,
                                     "worker": {"cpus": 2, "mem": 10}})
    assert r.status_code == 422 and r.json()["rule"] == "fits no cluster" and r.json()["field"] == "min_workers"
    assert backend.submitted == []  # nothing was stored
    ok = c.post("/api/v1/jobs", json={"job_type": "dssm", "epochs": 1})
    assert ok.status_code == 201 and len(backend.submitted) == 1


def test_executor_overhead_counts_and_no_agent_known_accepts():
    exact = [AgentCapacity("a1", "h", Resources(2, 0, 8192))]
    job = {"job_type": "dssm", "epochs": 1, "worker": {"cpus": 2, "mem": 1024}, "ps": {"cpus": 0, "mem": 1}}
    assert TestClient(create_app(_Backend(exact))).post("/api/v1/jobs", json=job).status_code == 201
    r = TestClient(create_app(_Backend(exact, overhead=0.1))).post("/api/v1/jobs", json=job)
    assert r.status_code == 422 and "for the executor" in r.json()["error"]
    # agents seen only in offers are lower bounds: they never refuse a job
    estimated = _Backend(None)
    book = CapacityBook()
    book.observe("a1", "h", Resources(2, 0, 100), Resources())
    estimated.cluster["capacity"] = book.snapshot()
    assert TestClient(create_app(estimated)).post(
        "/api/v1/jobs", json={"job_type": "dssm", "epochs": 1, "worker": {"cpus": 4, "mem": 1}}).status_code == 201
    # a framework that knows no agent yet accepts (agents may still register)
    assert TestClient(create_app(_Backend(None))).post(
        "/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 1, "worker": {"cpus": 1, "gpus": 99, "mem": 1}}
    ).status_code == 201


@pytest.mark.parametrize("body", [
    {"job_type": "dssm", "epochs": 1, "worker": {"cpus": 1e308, "mem": 1}},
    {"job_type": "dssm", "epochs": 1, "worker": {"cpus": -1, "mem": 1}},
    {"job_type": "dssm", "epochs": 1, "worker": {"gpus": 0.5, "cpus": 1}},
    {"job_type": "dssm", "epochs": 1, "worker": {"cpus": "8", "mem": 1}},
    {"job_type": "dssm", "epochs": 1, "worker": {"cpus": 1, "mem": 1, "disk": 5}},
    {"job_type": "<script>", "epochs": 1},
    {"job_type": "dssm", "epochs": 1, "name": "<img src=x onerror=alert(1)>"},
])
def test_hostile_and_odd_specs_get_a_clear_422_and_store_nothing(body):
    backend = _Backend(CPU_ONLY)
    r = TestClient(create_app(backend)).post("/api/v1/jobs", json=body)
    assert r.status_code == 422 and r.json()["error"], r.text
    assert backend.submitted == []


def test_odd_capacity_entries_never_break_a_submission():
    backend = _Backend(None)
    backend.cluster["capacity"] = {"source": "master", "agents": [None, "x", {"agent_id": 3, "total": {"cpus": "many"}},
                                                                  {"agent_id": "a", "total": None}]}
    r = TestClient(create_app(backend)).post("/api/v1/jobs", json={"job_type": "dssm", "epochs": 1})
    assert r.status_code == 422 and "fits no agent" == r.json()["rule"]  # the known agents hold nothing


def test_unfit_reason_names_a_ps_that_fits_nowhere():
    spec = JobSpec(job_type="dssm", epochs=1, worker=Resources(1, 0, 1), ps=Resources(1, 0, 99999))
    why = unfit_reason(spec, [("a", "h", Resources(8, 0, 1000))], Resources())
    assert why["field"] == "ps.mem" and "one ps" in why["error"]
    assert unfit_reason(spec, [], Resources()) is None


def test_cli_reason_column_prints_no_control_sequences(monkeypatch):
    from click.testing import CliRunner

    from dl2_mesos.framework import client_cli

    job = {"id": "j1", "job_type": "dssm", "phase": "pending", "epochs": 1, "epochs_done": 0, "num_ps": 0,
           "num_workers": 0, "submitted_at": 1.0, "phase_times": {},
           "pending_reason": {"code": "requeued", "short": "requeued: \x1b[2J\x1b]0;pwned\x07 oom", "message": ""}}
    monkeypatch.setattr(client_cli, "_call", lambda *a, **k: {"jobs": [job], "next_cursor": None})
    out = CliRunner().invoke(client_cli.jobs, []).output
    assert "\x1b" not in out and "\x07" not in out and out.rstrip().endswith("requeued: ?[2J?]0;pwned? oom")
