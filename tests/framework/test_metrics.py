"""Prometheus metrics of the framework: job-time histograms, rescale phases, capacity and
allocation gauges, rollback and refused-submission counters, no ``_created`` twins, and a
Grafana dashboard that only asks for series the framework exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from dl2_mesos.jobs import JobPhase
from dl2_mesos.messages import RescaleReport, RescaleRequest, decode_b64, encode_b64
from dl2_mesos.framework import events as ev
from dl2_mesos.framework.api import create_app
from dl2_mesos.framework.metrics import MAX_RESCALE_PHASES, FrameworkMetrics, RefusedSubmissions

from .conftest import Harness, ScriptedPolicy, make_offer, status

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "dl2-dashboard.json"


def samples(metrics: FrameworkMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the rendered exposition, parsed back by prometheus_client's own parser."""
    out = {}
    for fam in text_string_to_metric_families(metrics.render().decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(metrics: FrameworkMetrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, tuple(sorted(labels.items()))))


def test_no_created_twins_in_the_exposition():
    m = FrameworkMetrics()
    m.decisions.inc()
    m.queue_wait.labels("resnet-50").observe(3)
    m.refused_submissions.labels("422").inc()
    text = m.render().decode()
    assert "dl2_decisions_total 1.0" in text
    assert "_created" not in text


def _run_job_to_finish(h: Harness, policy: ScriptedPolicy):
    h.register()
    job = h.submit(job_type="resnet-50")
    h.clock.advance(7)  # queue wait: offers only come 7 s after the submission
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    assert job.phase == JobPhase.RUNNING
    return job


def test_queue_wait_and_jct_are_observed_once_per_job():
    policy = ScriptedPolicy()
    h = Harness(policy)
    job = _run_job_to_finish(h, policy)
    m = h.core.metrics
    assert value(m, "dl2_job_queue_wait_seconds_count", job_type="resnet-50") == 1
    assert value(m, "dl2_job_queue_wait_seconds_sum", job_type="resnet-50") == 7
    assert value(m, "dl2_job_completion_seconds_count", job_type="resnet-50") is None  # not ended yet
    h.clock.advance(100)
    for t in job.live_tasks("worker"):
        h.core.handle(status(t.task_id, "TASK_FINISHED", t.agent_id, uuid="f"))
    assert job.phase == JobPhase.FINISHED
    assert value(m, "dl2_job_completion_seconds_count", job_type="resnet-50") == 1
    assert value(m, "dl2_job_completion_seconds_sum", job_type="resnet-50") == 107
    # later updates of the ended job (its PS being killed) observe nothing again
    for t in job.tasks.values():
        h.core.handle(status(t.task_id, "TASK_KILLED", t.agent_id, uuid="k"))
    assert value(m, "dl2_job_completion_seconds_count", job_type="resnet-50") == 1
    assert value(m, "dl2_job_queue_wait_seconds_count", job_type="resnet-50") == 1


def test_cancelled_job_has_no_jct_and_a_new_leader_does_not_observe_twice():
    policy = ScriptedPolicy()
    h = Harness(policy)
    running = _run_job_to_finish(h, policy)
    cancelled = h.submit(job_type="vgg-16")
    h.core.cancel(cancelled.job_id)
    h.core.flush()
    assert value(h.core.metrics, "dl2_job_completion_seconds_count", job_type="vgg-16") is None
    # a new leader restores the running job: its queue wait was observed by the old leader
    h2 = Harness(ScriptedPolicy(), kv=h.kv)
    m2 = h2.core.metrics
    job = h2.core.jobs[running.job_id]
    h2.register()
    h2.clock.t = h.clock.t + 30
    for t in job.live_tasks("worker"):
        h2.core.handle(status(t.task_id, "TASK_FINISHED", t.agent_id, uuid="f2"))
    assert job.phase == JobPhase.FINISHED
    assert value(m2, "dl2_job_queue_wait_seconds_count", job_type="resnet-50") is None
    assert value(m2, "dl2_job_completion_seconds_count", job_type="resnet-50") == 1  # it saw the job finish
    assert value(m2, "dl2_job_completion_seconds_sum", job_type="resnet-50") == 37


def test_a_replica_leading_again_does_not_observe_what_another_leader_saw():
    from dl2_mesos.framework.core import SchedulerCore
    from dl2_mesos.framework.state_store import StateStore

    h = Harness(ScriptedPolicy())
    m = h.core.metrics  # the replica's metrics outlive its leader terms
    h.register()
    job = h.submit(job_type="resnet-50")  # pending while this replica leads
    # another replica leads meanwhile and runs the job (it observes the queue wait)
    other = Harness(ScriptedPolicy(), kv=h.kv)
    other.register()
    other.offer(make_offer("a1"))
    other.tick()
    other.run_all(other.core.jobs[job.job_id])
    assert value(other.core.metrics, "dl2_job_queue_wait_seconds_count", job_type="resnet-50") == 1
    # this replica leads again: restores the running job; it sees it finish (JCT), not start
    core = SchedulerCore(h.cfg, ScriptedPolicy(), StateStore(h.kv), clock=h.clock, metrics=m)
    core.restore()
    core.handle(ev.Registered(h.driver, "fw-1", "m:5050", False))
    for t in core.jobs[job.job_id].live_tasks("worker"):
        core.handle(status(t.task_id, "TASK_FINISHED", t.agent_id, uuid="f3"))
    assert core.jobs[job.job_id].phase == JobPhase.FINISHED
    assert value(m, "dl2_job_queue_wait_seconds_count", job_type="resnet-50") is None
    assert value(m, "dl2_job_completion_seconds_count", job_type="resnet-50") == 1


def test_rescale_phases_from_the_executors_report():
    policy = ScriptedPolicy()
    h = Harness(policy)
    job = _run_job_to_finish(h, policy)
    h.driver.clear()
    policy.counts[0] = (1, 2)
    h.offer(make_offer("a1", cpus=3, gpus=1, mem=30000, ports=(32000, 32010)))
    h.next_slot()
    (ex, agent, data), = h.driver.named("sendFrameworkMessage")
    req = decode_b64(data)
    assert isinstance(req, RescaleRequest)
    rep = RescaleReport(job.job_id, "t", req.cluster.generation, True,
                        (("stop", 1.5), ("save", 0.25), ("upload", 0.5), ("download", 0.75), ("relaunch", 2.0),
                         ("total", 4.75)))
    h.core.handle(ev.FrameworkMessage(ex["value"], agent["value"], encode_b64(rep)))
    m = h.core.metrics
    for phase, secs in rep.phases:
        assert value(m, "dl2_rescale_phase_seconds_count", phase=phase) == 1, phase
        assert value(m, "dl2_rescale_phase_seconds_sum", phase=phase) == secs
    # a repeated report of the same generation (the executor re-sends) is not observed again
    h.core.handle(ev.FrameworkMessage(ex["value"], agent["value"], encode_b64(rep)))
    assert value(m, "dl2_rescale_phase_seconds_count", phase="total") == 1


def test_rescale_phase_labels_stay_bounded_for_hostile_reports():
    m = FrameworkMetrics()
    names = [f"p{i}" for i in range(40)] + ["Robert'); DROP", "x" * 500, ""]
    m.observe_rescale(RescaleReport("j", "t", 1, True, tuple((n, 1.0) for n in names)))
    m.observe_rescale(RescaleReport("j", "t", 2, True, (("stop", float("nan")), ("save", -1.0), ("upload", "x"))))
    phases = {dict(k[1]).get("phase") for k in samples(m) if k[0] == "dl2_rescale_phase_seconds_count"}
    assert len(phases) <= MAX_RESCALE_PHASES + 1 and "other" in phases
    assert "stop" not in phases and "save" not in phases  # NaN / negative / non-numbers are dropped
    assert value(m, "dl2_rescale_phase_seconds_count", phase="other") == len(names) - MAX_RESCALE_PHASES


def test_capacity_and_allocation_by_policy():
    h = Harness(ScriptedPolicy())
    h.register()
    job = h.submit(job_type="resnet-50")
    h.offer(make_offer("a1"))
    h.core.view()  # the loop publishes a view after each event: a1's whole offer is seen
    h.tick()
    h.run_all(job)
    h.offer(make_offer("a2", cpus=16, gpus=4, mem=65536))
    h.core.metrics.observe_cluster(h.core.offers, h.core.jobs.values(), "scripted", force=True)
    m = h.core.metrics
    held = sum((t.resources for t in job.live_tasks()), start=type(job.live_tasks()[0].resources)())
    assert value(m, "dl2_policy_allocation", policy="scripted", resource="cpus") == held.cpus
    assert value(m, "dl2_policy_allocation", policy="scripted", resource="gpus") == held.gpus
    assert value(m, "dl2_policy_allocation_tasks", policy="scripted", role="worker") == 1
    assert value(m, "dl2_policy_allocation_tasks", policy="scripted", role="ps") == 1
    # a1 offered 8 cpus / 2 gpus in full before the job took some: its capacity stays 8 / 2
    assert value(m, "dl2_cluster_capacity", resource="cpus") == 8 + 16
    assert value(m, "dl2_cluster_capacity", resource="gpus") == 2 + 4
    assert value(m, "dl2_cluster_capacity", resource="mem") == 49152 + 65536
    # the published view refreshes the gauges too
    h.core.handle(ev.AgentLost("a2"))
    h.core.view()
    assert value(m, "dl2_cluster_capacity", resource="cpus") == 8


class _Learner:
    def __init__(self) -> None:
        self.info: dict = {"rollbacks": [{"from": 3, "to": 2, "reason": "old leader's"}]}
        self.version: int | None = 3

    def describe(self) -> dict:
        return {"rollbacks": self.info["rollbacks"][-10:]}


def test_rollbacks_counted_from_the_learner_once():
    m = FrameworkMetrics()
    learner = _Learner()
    m.observe_learner(learner)  # baseline: the rollback a previous leader made is not counted here
    assert value(m, "dl2_model_rollbacks_total") == 0
    learner.info["rollbacks"].append({"from": 4, "to": 3, "reason": "reward dropped"})
    learner.version = 3
    m.observe_learner(learner)
    m.observe_learner(learner)
    assert value(m, "dl2_model_rollbacks_total") == 1
    assert value(m, "dl2_model_version") == 3


def test_rollbacks_of_the_real_online_learner_are_counted():
    from dl2_mesos.framework.kv import MemoryKV
    from dl2_mesos.framework.online_learning import OnlineLearning
    from dl2_mesos.framework.state_store import StateStore

    from .test_online_learning import FakeAdapter

    m = FrameworkMetrics()
    adapter = FakeAdapter()
    learner = OnlineLearning(StateStore(MemoryKV()), adapter, "fake", window=2, margin=0.2, keep=4)
    learner.start()
    m.observe_learner(learner)
    for reward in (1.0,) * 4 + (0.1,) * 12:  # good windows, then far worse ones
        adapter.record()
        learner.end_slot(reward)
        m.observe_learner(learner)
    assert learner.info["rollbacks"]
    assert value(m, "dl2_model_rollbacks_total") == len(learner.info["rollbacks"])


def test_rollbacks_are_counted_beyond_what_describe_lists():
    m = FrameworkMetrics()
    learner = _Learner()
    m.observe_learner(learner)
    for i in range(25):
        learner.info["rollbacks"].append({"from": i + 2, "to": i + 1, "reason": "reward dropped"})
        m.observe_learner(learner)
    assert len(learner.describe()["rollbacks"]) == 10
    assert value(m, "dl2_model_rollbacks_total") == 25


class _Backend:
    def __init__(self) -> None:
        self.submitted = []

    def view(self):
        return {"jobs": {}, "cluster": {}, "policy": {}}

    def is_leader(self):
        return True

    def leader_url(self):
        return None

    def submit(self, spec, idempotency_key=""):
        self.submitted.append(spec)
        return {"id": "j-1", **spec.to_dict(), "phase": "pending"}

    def cancel(self, job_id):
        raise KeyError(job_id)

    def metrics(self):
        return b""

    def health(self):
        return {"status": "ok"}


def test_refused_submissions_are_counted_by_status():
    m = FrameworkMetrics()
    backend = _Backend()
    client = TestClient(RefusedSubmissions(create_app(backend, api_token="tok"), m))
    auth = {"Authorization": "Bearer tok"}
    assert client.post("/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 3}).status_code == 401
    assert client.post("/api/v1/jobs", json={"job_type": "nosuch", "epochs": 3}, headers=auth).status_code == 422
    assert client.post("/api/v1/jobs", content=b"{nope", headers={**auth, "Content-Type": "application/json"}
                       ).status_code == 400
    assert client.post("/api/v1/jobs", content=b"x", headers={**auth, "Content-Type": "text/plain"}).status_code == 415
    ok = client.post("/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 3}, headers=auth)
    assert ok.status_code == 201, ok.text
    assert client.post("/api/v1/jobs/x/cancel", headers=auth).status_code in (404, 405)  # not a submission
    for code in ("401", "422", "400", "415"):
        assert value(m, "dl2_submissions_refused_total", code=code) == 1, code
    assert value(m, "dl2_submissions_refused_total", code="201") is None
    assert sum(v for (n, _), v in samples(m).items() if n == "dl2_submissions_refused_total") == 4
    assert len(backend.submitted) == 1


# -- the Grafana dashboard --------------------------------------------------------------------
SCRAPE_LABELS = ("job", "instance")  # Prometheus adds these to every scraped series


def exported_series() -> dict[str, tuple[str, ...]]:
    """Every series name the framework can export, with its label names (and the scrape's)."""
    out: dict[str, tuple[str, ...]] = {}
    for obj in vars(FrameworkMetrics()).values():
        if not isinstance(obj, MetricWrapperBase):
            continue
        name, kind, labels = obj._name, obj._type, tuple(obj._labelnames) + SCRAPE_LABELS  # noqa: SLF001
        if kind == "counter":
            out[name + "_total"] = labels
        elif kind == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                out[name + suffix] = labels + (("le",) if suffix == "_bucket" else ())
        else:
            out[name] = labels
    return out


def _queries(node) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        return found + [q for v in node.values() for q in _queries(v)]
    if isinstance(node, list):
        return [q for v in node for q in _queries(v)]
    return []


_SELECTOR = re.compile(r"\b(dl2_[a-z0-9_]+)\s*(\{[^}]*\})?")
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


def test_dashboard_queries_name_only_exported_metrics_and_labels():
    doc = json.loads(DASHBOARD.read_text())
    assert doc["title"] and doc["panels"]
    queries = _queries(doc)
    assert len(queries) >= 8
    series = exported_series()
    used: set[str] = set()
    for q in queries:
        names = _SELECTOR.findall(q)
        assert names, f"query names no dl2 metric: {q}"
        labels_here: set[str] = set()
        for name, selector in names:
            assert name in series, f"{name} (in {q!r}) is not exported by the framework"
            used.add(name)
            for label in re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", selector or ""):
                assert label in series[name], f"{name} has no label {label} (in {q!r})"
            labels_here |= set(series[name])
        for group in _GROUPING.findall(q):
            for label in filter(None, (x.strip() for x in group.split(","))):
                assert label in labels_here, f"grouping by {label}, which {q!r} does not have"
    # the series issue #15 asks for are on the dashboard
    for wanted in ("dl2_job_queue_wait_seconds_bucket", "dl2_job_completion_seconds_bucket",
                   "dl2_rescale_phase_seconds_bucket", "dl2_cluster_capacity", "dl2_policy_allocation",
                   "dl2_model_rollbacks_total", "dl2_submissions_refused_total"):
        assert wanted in used, wanted


def test_dashboard_check_catches_a_missing_metric():
    # the check above can fail: a made-up series is not in the exported set
    series = exported_series()
    assert "dl2_jobs" in series and "dl2_job_completion_seconds_bucket" in series
    assert "dl2_job_completion_seconds_created" not in series
    assert "dl2_queue_wait_seconds_bucket" not in series
